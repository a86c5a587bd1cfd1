//! Registry overhead per tool call: parsing, schema validation, dispatch and result encoding.
//!
//! Side by side: `ToolRegistry::execute` on one call versus calling the same tool body
//! directly with already-parsed arguments, so the ratio is the registry's cost.

use std::{hint::black_box, sync::Arc};

use crewline::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

struct Lookup;

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

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
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
        b.to_async(&runtime)
            .iter(|| async { black_box(registry.execute(&one, true).await) })
    });
    group.bench_function("execute_4_calls_parallel", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(registry.execute(&four, true).await) })
    });
    group.bench_function("execute_4_calls_sequential", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(registry.execute(&four, false).await) })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
