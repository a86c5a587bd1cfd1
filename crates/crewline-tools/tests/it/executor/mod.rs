//! The executor: every stage of the pipeline and every error kind.

#![allow(clippy::unwrap_used)]

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_tools::{
    CallArguments, CallContext, ExecuteOptions, Executor, Tool, ToolCallError, ToolError,
    ToolPolicy, ToolRegistry,
    executor::{
        approval::{
            ApprovalDecision, ApprovalRecord, ApprovalRequest, CallbackApproval, DeferredApproval,
        },
        guardrails::{Guardrail, Verdict},
        hooks::{FnAfterHook, FnBeforeHook, HookAction},
        ledger::{JsonlLedger, LedgerSink, MemoryLedger, Outcome},
        limits::{Run, RunLimits},
    },
    run_sync,
};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The results of `calls` run by `registry`, in call order (`parallel`: concurrently).
async fn results(registry: &ToolRegistry, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
    registry
        .execute(calls, ExecuteOptions::new().parallel(parallel))
        .await
        .into_iter()
        .map(|run| run.result)
        .collect()
}

/// Generous: only reached when a test is about to fail (a deadlock), never on the happy path.
const DEADLOCK: Duration = Duration::from_secs(20);

type Body = Arc<dyn Fn(Value) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync>;

struct TestTool {
    name: String,
    parameters: Value,
    policy: ToolPolicy,
    body: Body,
}

#[async_trait]
impl Tool for TestTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "A test tool."
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    fn policy(&self) -> ToolPolicy {
        self.policy
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        (self.body)(arguments).await
    }
}

fn tool<F, Fut>(name: &str, policy: ToolPolicy, body: F) -> TestTool
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    TestTool {
        name: name.to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}
        }),
        policy,
        body: Arc::new(move |arguments| Box::pin(body(arguments))),
    }
}

/// Returns its arguments, counting its calls.
fn counting_echo(name: &str, policy: ToolPolicy) -> (TestTool, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let t = tool(name, policy, move |arguments| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move { Ok(arguments) }
    });
    (t, count)
}

fn registry(executor: Executor, tools: impl IntoIterator<Item = TestTool>) -> ToolRegistry {
    let mut registry = ToolRegistry::new().with_executor(Arc::new(executor));
    for t in tools {
        registry.register(t).unwrap();
    }
    registry
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLOCK, future)
        .await
        .expect("deadlocked")
}

async fn run_one(registry: &ToolRegistry, call: &ToolCall, context: &CallContext) -> ToolResult {
    registry.execute_one(call, context).await.result
}

fn kind(result: &ToolResult) -> Option<ToolErrorKind> {
    result.error_kind()
}

fn message(result: &ToolResult) -> String {
    let content: Value = serde_json::from_str(&result.content()).unwrap();
    content["error"]["message"].as_str().unwrap().to_owned()
}

/// Sets a flag when dropped: proves a tool's future was dropped, not left running.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A tool that signals it started, then never finishes; its drop flag shows it was stopped.
fn hanging(name: &str, policy: ToolPolicy) -> (TestTool, Arc<AtomicBool>, Arc<Notify>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Notify::new());
    let (flag, signal) = (Arc::clone(&dropped), Arc::clone(&started));
    let t = tool(name, policy, move |_| {
        let guard = DropFlag(Arc::clone(&flag));
        let signal = Arc::clone(&signal);
        async move {
            let _guard = guard;
            signal.notify_one();
            std::future::pending::<()>().await;
            Ok(Value::Null)
        }
    });
    (t, dropped, started)
}

mod approval;
mod cache;
mod cancellation;
mod cut_short;
mod defaults;
mod detached_tasks;
mod hooks;
mod ledger;
mod limits;
mod validation;
