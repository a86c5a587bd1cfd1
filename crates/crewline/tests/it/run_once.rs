//! A tool that moves money runs once, through the tool loop: a timeout or a barge-in while a
//! non-cancellable transfer runs tells the model it still runs (not `Cancelled` or `Timeout`,
//! which invite a retry), and the model's retry joins the transfer and reads its real outcome.
//! What the executor keeps (cached results) stays with the loop's session.

#![allow(clippy::unwrap_used)]

use crewline::{
    ToolLoop, TurnEvent,
    llm::{ChatRequest, Reply, ScriptedLlm},
    tool::{Tool, ToolRegistry},
    types::{Context, Message},
};
use futures::StreamExt;
use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline::{
    prelude::*,
    tool::{Executor, SessionScope, ToolPolicy},
};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A transfer that waits for `gate` (or `delay`), counting its runs.
struct Transfer {
    runs: Arc<AtomicUsize>,
    gate: Option<Arc<Notify>>,
    delay: Duration,
    started: Arc<Notify>,
    policy: ToolPolicy,
}

#[async_trait]
impl Tool for Transfer {
    fn name(&self) -> &str {
        "transfer_money"
    }
    fn description(&self) -> &str {
        "Sends money."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"amount": {"type": "number"}}})
    }
    fn policy(&self) -> ToolPolicy {
        self.policy
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        self.started.notify_one();
        match &self.gate {
            Some(gate) => gate.notified().await,
            None => tokio::time::sleep(self.delay).await,
        }
        Ok(json!({"status": "completed", "amount": arguments["amount"], "transfer": run}))
    }
}

/// The model: asks for the transfer when the caller's last words ask for it, and reads back
/// the last tool result as its answer.
fn model() -> Arc<dyn LlmClient> {
    Arc::new(ScriptedLlm::from_fn(
        |request: &ChatRequest| match request.messages.last() {
            Some(Message::Tool { content, .. }) => Reply::text(content.clone()),
            _ => Reply::tool_call("transfer_money", json!({"amount": 50})),
        },
    ))
}

fn tools(transfer: Transfer) -> Arc<ToolRegistry> {
    let mut registry = ToolRegistry::new().with_executor(Arc::new(Executor::builder().build()));
    registry.register(transfer).unwrap();
    Arc::new(registry)
}

async fn drive(tool_loop: &ToolLoop, context: &mut Context) -> String {
    let mut turn = tool_loop.run(context);
    let mut text = String::new();
    while let Some(event) = turn.next().await {
        if let TurnEvent::Text(piece) = event.unwrap() {
            text.push_str(&piece);
        }
    }
    text
}

fn last_tool_result(context: &Context) -> Value {
    context
        .messages()
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(serde_json::from_str(content).unwrap()),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn after_a_barge_in_the_model_hears_still_running_and_its_retry_gets_the_real_outcome() {
    let (runs, gate, started) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
    );
    let tool_loop = ToolLoop::new(
        model(),
        tools(Transfer {
            runs: runs.clone(),
            gate: Some(gate.clone()),
            delay: Duration::ZERO,
            started: started.clone(),
            policy: ToolPolicy::new().cancellable(false),
        }),
    );
    let mut context = Context::with_system("You are a bank.");
    context.add(Message::user("Send $50 to Alice."));
    {
        let mut turn = tool_loop.run(&mut context);
        tokio::select! {
            () = started.notified() => {}
            _ = async { while turn.next().await.is_some() {} } => panic!("the turn ended"),
        }
    } // barge-in while the transfer runs
    let told = last_tool_result(&context);
    assert_eq!(told["error"]["kind"], "StillRunning", "{told}");

    // The transfer goes through meanwhile; the caller asks again and the model retries.
    gate.notify_one();
    tokio::time::sleep(Duration::from_millis(50)).await;
    context.add(Message::user("Did it go through? Send $50 to Alice."));
    let answer = drive(&tool_loop, &mut context).await;
    let told = last_tool_result(&context);
    assert_eq!(
        told,
        json!({"status": "completed", "amount": 50, "transfer": 1})
    );
    assert!(answer.contains("completed"), "{answer}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the money moved once");
}

#[tokio::test(start_paused = true)]
async fn after_a_timeout_the_models_retry_joins_the_transfer_instead_of_running_it_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool_loop = ToolLoop::new(
        model(),
        tools(Transfer {
            runs: runs.clone(),
            gate: None,
            delay: Duration::from_millis(1500),
            started: Arc::new(Notify::new()),
            policy: ToolPolicy::new()
                .cancellable(false)
                .timeout(Duration::from_secs(1)),
        }),
    );
    let mut context = Context::with_system("You are a bank.");
    context.add(Message::user("Send $50 to Alice."));
    let first = drive(&tool_loop, &mut context).await;
    assert!(first.contains("StillRunning"), "{first}");
    assert!(first.contains("must not be retried"), "{first}");

    context.add(Message::user("Please try again."));
    drive(&tool_loop, &mut context).await;
    assert_eq!(
        last_tool_result(&context),
        json!({"status": "completed", "amount": 50, "transfer": 1})
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Counts its runs; its result is cached for a minute.
struct Balance(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Balance {
    fn name(&self) -> &str {
        "get_balance"
    }
    fn description(&self) -> &str {
        "The caller's balance."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().cache_ttl(Duration::from_secs(60))
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        let run = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(json!({"balance": run}))
    }
}

#[tokio::test]
async fn two_calls_over_one_registry_never_share_a_cached_result() {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut registry = ToolRegistry::new();
    registry.register(Balance(runs.clone())).unwrap();
    let registry = Arc::new(registry);
    let llm: Arc<dyn LlmClient> =
        Arc::new(ScriptedLlm::from_fn(
            |request: &ChatRequest| match request.messages.last() {
                Some(Message::Tool { content, .. }) => Reply::text(content.clone()),
                _ => Reply::tool_call("get_balance", json!({})),
            },
        ));
    // One loop per call, each in its call's scope (what `LoopAgent` does at start).
    let alice = ToolLoop::new(llm.clone(), registry.clone()).with_scope(SessionScope::new());
    let bob = ToolLoop::new(llm, registry).with_scope(SessionScope::new());
    let mut alice_context = Context::with_system("Bank.");
    let mut bob_context = Context::with_system("Bank.");
    alice_context.add(Message::user("Balance?"));
    bob_context.add(Message::user("Balance?"));
    assert_eq!(drive(&alice, &mut alice_context).await, r#"{"balance":1}"#);
    assert_eq!(drive(&bob, &mut bob_context).await, r#"{"balance":2}"#);
    // Within one call, the next turn is served from the cache.
    alice_context.add(Message::user("Balance again?"));
    assert_eq!(drive(&alice, &mut alice_context).await, r#"{"balance":1}"#);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
