//! Registry overhead per tool call: parsing, schema validation, dispatch and result encoding.
//!
//! Side by side: `ToolRegistry::execute` (and the model's text of its result) on one call versus calling the same tool body
//! directly with already-parsed arguments, so the ratio is the registry's cost. The `executor`
//! group puts one call through the executor with every optional stage off, then with all of
//! them on (hooks, guardrails, run limits, a cache miss, a memory ledger).

use std::{hint::black_box, sync::Arc, time::Duration};

use async_trait::async_trait;
use crewline::prelude::*;
use crewline::tool::{
    ExecuteOptions, Executor, ToolPolicy, ToolRun,
    executor::{
        guardrails::{Guardrail, Verdict},
        hooks::{FnAfterHook, FnBeforeHook, HookAction},
        ledger::MemoryLedger,
        limits::RunLimits,
    },
};
use crewline::tool::{Tool, ToolRegistry};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

struct Lookup;

/// The model's text of each run: a call ends as that text, so the cost of making it is part of
/// the registry's cost (the results stay structured until then).
fn contents(runs: Vec<ToolRun>) -> Vec<String> {
    runs.into_iter().map(|run| run.result.content()).collect()
}

#[tools]
impl Lookup {
    /// Look up an order's status.
    ///
    /// # Arguments
    /// * `order_id` - The order number
    /// * `include_items` - Whether to list the items
    #[function_tool]
    async fn order_status(&self, order_id: String, include_items: Option<bool>) -> String {
        if include_items.unwrap_or(false) {
            format!("Order {order_id}: shipped (2 items)")
        } else {
            format!("Order {order_id}: shipped")
        }
    }
}

/// The same tool with a cache TTL so short that every lookup misses (and the result is still
/// stored): the cost of a miss, with eviction of expired entries amortised.
struct CachedLookup(Arc<dyn Tool>);

#[async_trait]
impl Tool for CachedLookup {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn description(&self) -> &str {
        self.0.description()
    }
    fn parameters(&self) -> Value {
        self.0.parameters()
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().cache_ttl(Duration::from_nanos(1))
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.0.call(arguments).await
    }
}

/// A guardrail that inspects both sides and allows.
struct Allow;

#[async_trait]
impl Guardrail for Allow {
    fn name(&self) -> &str {
        "allow"
    }
    async fn check_input(&self, _call: &ToolCall, arguments: &Value) -> Verdict {
        black_box(arguments);
        Verdict::Allow
    }
    async fn check_output(&self, _call: &ToolCall, output: &Value) -> Verdict {
        black_box(output);
        Verdict::Allow
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let agent = Arc::new(Lookup);
    let mut registry = ToolRegistry::new();
    registry.discover(&agent).expect("register");
    let one = vec![ToolCall::new(
        "call_1",
        "order_status",
        r#"{"order_id":"A-1234","include_items":true}"#,
    )];
    let four: Vec<ToolCall> = (0..4)
        .map(|i| ToolCall::new(format!("call_{i}"), "order_status", r#"{"order_id":"A-1"}"#))
        .collect();

    let mut group = c.benchmark_group("registry");
    group.bench_function("direct_call", |b| {
        b.to_async(&runtime).iter(|| async {
            let args = json!({"order_id": "A-1234", "include_items": true});
            let out = agent
                .order_status(
                    args["order_id"].as_str().unwrap_or_default().to_owned(),
                    args["include_items"].as_bool(),
                )
                .await;
            black_box(out)
        })
    });
    group.bench_function("execute_1_call", |b| {
        b.to_async(&runtime).iter(|| async {
            black_box(contents(
                registry.execute(&one, ExecuteOptions::new()).await,
            ))
        })
    });
    group.bench_function("execute_4_calls_parallel", |b| {
        b.to_async(&runtime).iter(|| async {
            black_box(contents(
                registry.execute(&four, ExecuteOptions::new()).await,
            ))
        })
    });
    group.bench_function("execute_4_calls_sequential", |b| {
        b.to_async(&runtime).iter(|| async {
            black_box(contents(
                registry
                    .execute(&four, ExecuteOptions::new().sequential())
                    .await,
            ))
        })
    });
    group.finish();

    let tool = registry
        .get("order_status")
        .map(Arc::clone)
        .expect("registered");
    let all_off = ToolRegistry::new()
        .with_executor(Arc::new(Executor::builder().no_cache().build()))
        .register_arc(Arc::clone(&tool))
        .expect("register")
        .clone();
    let ledger = Arc::new(MemoryLedger::new());
    let all_on_executor = Executor::builder()
        .before_hook(FnBeforeHook(|_: &ToolCall, arguments: &mut Value| {
            black_box(arguments);
            HookAction::Continue
        }))
        .after_hook(FnAfterHook(
            |_: &ToolCall, outcome: &mut Result<Value, crewline::tool::ToolCallError>| {
                black_box(outcome);
            },
        ))
        .guardrail(Allow)
        .run_limits(RunLimits {
            max_calls: Some(1_000),
            max_calls_per_tool: Some(1_000),
            max_tool_time: Some(Duration::from_secs(3_600)),
        })
        .ledger(ledger.clone())
        .build();
    let all_on = ToolRegistry::new()
        .with_executor(Arc::new(all_on_executor))
        .register(CachedLookup(tool))
        .expect("register")
        .clone();

    let mut group = c.benchmark_group("executor");
    group.bench_function("1_call_stages_off", |b| {
        b.to_async(&runtime).iter(|| async {
            black_box(contents(all_off.execute(&one, ExecuteOptions::new()).await))
        })
    });
    group.bench_function("1_call_stages_on", |b| {
        b.to_async(&runtime).iter(|| async {
            let out = contents(all_on.execute(&one, ExecuteOptions::new()).await);
            // Keeps the ledger from growing over millions of iterations.
            black_box(ledger.take());
            black_box(out)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
