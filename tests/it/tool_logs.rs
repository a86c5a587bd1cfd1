//! What the platform's tool logs say a tool returned: the tool's own value, as it returned it,
//! through the real server.

#![allow(clippy::unwrap_used)]

use crewline::{ToolLoop, agent::LoopAgent, llm::ChatRequest, tool::ToolRegistry, types::Message};
use std::{sync::Arc, time::Duration};

use crewline::{prelude::*, tool::RegistryError};
use crewline_testkit::{ScriptedLlm, ScriptedReply as Reply, TestCrew};
use serde_json::json;

/// Tools whose results look like something else once they are the model's text.
struct Lookalikes;

#[tools]
impl Lookalikes {
    /// A number, as text.
    #[function_tool]
    async fn number_as_text(&self) -> String {
        "42".to_owned()
    }

    /// An object, as text.
    #[function_tool]
    async fn object_as_text(&self) -> String {
        r#"{"status":"shipped"}"#.to_owned()
    }

    /// A real object.
    #[function_tool]
    async fn object(&self) -> serde_json::Value {
        json!({"status": "shipped"})
    }
}

fn crew(_setup: &SessionSetup) -> Result<Crew, RegistryError> {
    let llm = ScriptedLlm::from_fn(|request: &ChatRequest| match request.messages.last() {
        Some(Message::User { .. }) => Reply::tool_calls([
            ("number_as_text", json!({})),
            ("object_as_text", json!({})),
            ("object", json!({})),
        ]),
        _ => Reply::text("Done."),
    });
    let mut tools = ToolRegistry::new();
    tools.discover(&Arc::new(Lookalikes))?;
    let agent = LoopAgent::new(
        "You test tool logs.",
        ToolLoop::new(Arc::new(llm), Arc::new(tools)),
    );
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new("assistant", agent));
    Ok(crew)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_end_carries_the_value_the_tool_returned_not_its_text_parsed_back() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let crew = TestCrew::serve(crew).await.unwrap();
        let mut call = crew.call().await.unwrap();
        let turn = call.say("Run them all.").await.unwrap();
        // A string stays a string, even when its text would parse as JSON.
        turn.assert_tool_call("number_as_text", json!({}))
            .returned(json!("42"));
        turn.assert_tool_call("object_as_text", json!({}))
            .returned(json!(r#"{"status":"shipped"}"#));
        turn.assert_tool_call("object", json!({}))
            .returned(json!({"status": "shipped"}));
        turn.assert_text("Done.").assert_no_errors();
    })
    .await
    .expect("the test took longer than its bound");
}

// The model's arguments are read once on a call's way: the start log prints `{}` for ones that
// are not a JSON object (as the reference), and the executor's answer is a structured
// `ToolArgsInvalid` the model reads; the turn goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_are_not_an_object_log_as_empty_and_fail_the_call_not_the_turn() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let crew = TestCrew::serve(|_setup: &SessionSetup| {
            let llm = ScriptedLlm::from_fn(|request: &ChatRequest| match request.messages.last() {
                Some(Message::User { .. }) => {
                    Reply::tool_call("object", json!(["not", "an object"]))
                }
                _ => Reply::text("Done."),
            });
            let mut tools = ToolRegistry::new();
            tools.discover(&Arc::new(Lookalikes))?;
            let agent = LoopAgent::new(
                "You test tool logs.",
                ToolLoop::new(Arc::new(llm), Arc::new(tools)),
            );
            let mut crew = Crew::new();
            crew.add_node(OutputNode::new("assistant", agent));
            Ok::<_, RegistryError>(crew)
        })
        .await
        .unwrap();
        let mut call = crew.call().await.unwrap();
        let turn = call.say("Run it.").await.unwrap();
        turn.assert_tool_call("object", json!({}))
            .failed_with("must be a JSON object");
        turn.assert_text("Done.").assert_no_errors();
    })
    .await
    .expect("the test took longer than its bound");
}
