//! A barge-in that drops a turn while a cancellable tool runs: the model reads what the tool
//! said being cut short means (`CutShort`: an unknown outcome once its effect may happen
//! elsewhere), not `Cancelled`, through the tool loop's own drop.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use async_trait::async_trait;
use crewline::{
    ToolLoop,
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    tool::{CutShort, Tool, ToolRegistry},
    types::{Context, Message},
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Sends a request elsewhere, then waits forever for its answer; once sent, being cut short
/// means it may have run.
struct Remote {
    sent: Arc<Notify>,
}

#[async_trait]
impl Tool for Remote {
    fn name(&self) -> &str {
        "pay"
    }
    fn description(&self) -> &str {
        "Pays a bill."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        if let Some(cut) = CutShort::current() {
            cut.reads(Err(ToolError::outcome_unknown("it may have run")));
        }
        self.sent.notify_one();
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_barge_in_while_a_sent_call_waits_reads_its_unknown_outcome() {
    let sent = Arc::new(Notify::new());
    let mut registry = ToolRegistry::new();
    registry.register(Remote { sent: sent.clone() }).unwrap();
    let model: Arc<dyn LlmClient> = Arc::new(ScriptedLlm::from_fn(|_: &ChatRequest| {
        Reply::tool_call("pay", json!({}))
    }));
    let tool_loop = ToolLoop::new(model, Arc::new(registry));
    let mut context = Context::with_system("You pay bills.");
    context.add(Message::user("Pay the gas bill."));
    {
        let mut turn = tool_loop.run(&mut context);
        tokio::select! {
            () = sent.notified() => {}
            _ = async { while turn.next().await.is_some() {} } => panic!("the turn ended"),
        }
    } // barge-in while the call waits
    let told: Value = context
        .messages()
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(serde_json::from_str(content).unwrap()),
            _ => None,
        })
        .unwrap();
    assert_eq!(told["error"]["kind"], "OutcomeUnknown", "{told}");
    assert_eq!(told["error"]["message"], "it may have run", "{told}");
}
