//! The tool registry: registration, definitions, and running the model's tool calls.

#![allow(clippy::unwrap_used)]

use std::{
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_tools::{
    DEFAULT_MAX_CONCURRENCY, ExecuteOptions, RegistryError, Tool, ToolError, ToolProvider,
    ToolRegistry,
};
use futures::{StreamExt, future::BoxFuture};
use serde_json::{Value, json};
use tokio::sync::{Barrier, Notify, Semaphore, oneshot, watch};

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

/// A hand-written tool whose body is a closure.
struct TestTool {
    name: String,
    parameters: Value,
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
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        (self.body)(arguments).await
    }
}

fn tool<F, Fut>(name: &str, parameters: Value, body: F) -> TestTool
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    TestTool {
        name: name.to_owned(),
        parameters,
        body: Arc::new(move |arguments| Box::pin(body(arguments))),
    }
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

/// Returns its arguments.
fn echo(name: &str) -> TestTool {
    tool(name, json!({"type": "object"}), |arguments| async move {
        Ok(arguments)
    })
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

fn registry_of(tools: impl IntoIterator<Item = TestTool>) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for t in tools {
        registry.register(t).unwrap();
    }
    registry
}

async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLOCK, future)
        .await
        .expect("deadlocked")
}

fn ids(results: &[ToolResult]) -> Vec<&str> {
    results.iter().map(|r| r.tool_call_id.as_str()).collect()
}

fn error_message(result: &ToolResult) -> String {
    let content: Value = serde_json::from_str(&result.content()).unwrap();
    content["error"]["message"].as_str().unwrap().to_owned()
}

mod definitions;
mod failures;
mod registration;

/// A weather tool with a schema worth validating against; returns its arguments.
fn weather() -> TestTool {
    tool(
        "get_weather",
        json!({
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "days": {"type": "integer", "minimum": 1},
                "address": {
                    "type": "object",
                    "properties": {"zip": {"type": "string"}},
                    "required": ["zip"]
                }
            },
            "required": ["location"]
        }),
        |arguments| async move { Ok(json!({"forecast": "sunny", "arguments": arguments})) },
    )
}

mod running;
mod strict;
