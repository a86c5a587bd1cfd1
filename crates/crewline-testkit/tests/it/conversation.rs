//! The testkit as a crew author uses it: small crews built here, driven by scripted
//! conversations, asserted on their spoken text, tool calls, barge-in and hand-offs; and the
//! failure messages a wrong expectation produces.

#![allow(clippy::unwrap_used)]

use crewline::{
    CallControl, ToolLoop, agent::LoopAgent, llm::ChatRequest, tool::ToolRegistry, types::Message,
};
use std::{panic::AssertUnwindSafe, sync::Arc, time::Duration};

use crewline::{prelude::*, tool::RegistryError};
use crewline_testkit::{ScriptedLlm, ScriptedReply as Reply, TestCrew, TurnRecord};
use serde_json::{Value, json};

/// A bound on each whole test, far above what it needs, so a hang fails instead of stalling.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_TIMEOUT, test)
        .await
        .expect("the test took longer than its bound")
}

/// A shop's order desk: one tool that finds orders, and fails for unknown ones.
struct OrderDesk;

#[tools]
impl OrderDesk {
    /// An order's status.
    ///
    /// # Arguments
    /// * `order_id` - The order number
    #[function_tool]
    async fn order_status(&self, order_id: String) -> Result<Value, ToolError> {
        match order_id.as_str() {
            "1042" => Ok(json!({"order_id": "1042", "status": "shipped"})),
            _ => Err(ToolError::new(format!("there is no order {order_id}"))),
        }
    }
}

/// A one-node crew answering with `llm` over `tools`.
fn crew_of(llm: ScriptedLlm, tools: ToolRegistry) -> Crew {
    let agent = LoopAgent::new(
        "You are a shop's assistant.",
        ToolLoop::new(Arc::new(llm), Arc::new(tools)),
    );
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new("assistant", agent));
    crew
}

/// The order crew: looks the order up, then answers from the tool's result.
fn order_crew(_setup: &SessionSetup) -> Result<Crew, RegistryError> {
    let llm = ScriptedLlm::from_fn(|request: &ChatRequest| match request.messages.last() {
        Some(Message::Tool { content, .. }) if content.contains("shipped") => {
            Reply::text("Your order 1042 has shipped.")
        }
        Some(Message::Tool { .. }) => Reply::text("I can't find that order."),
        Some(Message::User { content }) if content.contains("1042") => {
            Reply::tool_call("order_status", json!({"order_id": "1042"}))
        }
        Some(Message::User { .. }) => Reply::tool_call("order_status", json!({"order_id": "7"})),
        _ => Reply::text("Hello!"),
    });
    let mut tools = ToolRegistry::new();
    tools.discover(&Arc::new(OrderDesk))?;
    Ok(crew_of(llm, tools))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_seen_with_its_arguments_and_result_and_the_answer_uses_it() {
    bounded(async {
        let crew = TestCrew::serve(order_crew).await.unwrap();
        let mut call = crew.call().await.unwrap();

        let turn = call.say("Where is my order 1042?").await.unwrap();
        turn.assert_tool_call("order_status", json!({"order_id": "1042"}))
            .returned(json!({"order_id": "1042", "status": "shipped"}));
        turn.assert_tools_called(&["order_status"])
            .assert_text("Your order 1042 has shipped.")
            .assert_no_errors()
            .assert_no_handoff();
        assert_eq!(turn.wire_types().first(), Some(&"agent.llm.response.start"));
        assert_eq!(turn.wire_types().last(), Some(&"agent.llm.response.end"));

        // A failing tool is logged as an error, and the crew answers anyway.
        let turn = call.say("And order 7?").await.unwrap();
        let error = turn
            .assert_tool_call("order_status", json!({"order_id": "7"}))
            .failed_with("there is no order 7");
        assert!(error.contains("no order 7"), "{error}");
        turn.assert_text("I can't find that order.");

        // The platform's conversation holds both turns.
        assert_eq!(call.conversation().len(), 4);
        call.hang_up().await.unwrap();
    })
    .await;
}

/// The story crew: one long answer streamed slowly, so a barge-in lands in the middle.
fn story_crew(_setup: &SessionSetup) -> Result<Crew, RegistryError> {
    let story = "Once upon a time there was a crew that talked and talked and talked and \
                 talked and talked and talked and talked and talked until someone barged in.";
    let llm = ScriptedLlm::from_fn(move |request: &ChatRequest| match request.messages.last() {
        Some(Message::User { content }) if content.contains("story") => Reply::text(story),
        _ => Reply::text("Sure, what else?"),
    })
    .with_chunk_delay(Duration::from_millis(30));
    Ok(crew_of(llm, ToolRegistry::new()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barge_in_silences_the_crew_and_the_call_goes_on() {
    bounded(async {
        let crew = TestCrew::serve(story_crew).await.unwrap();
        let mut call = crew.call().await.unwrap();

        let turn = call.say_and_barge_in("Tell me a story.", 2).await.unwrap();
        turn.assert_interrupted().assert_no_tool_calls();
        assert!(turn.text().starts_with("Once"), "{turn}");
        assert!(
            !turn.text().contains("barged in"),
            "the story should have been cut: {turn}"
        );
        // What was heard before the barge-in is the assistant's turn in the conversation.
        assert_eq!(
            call.conversation()[1],
            json!({"role": "assistant", "content": turn.text()})
        );

        call.say("Never mind.")
            .await
            .unwrap()
            .assert_text("Sure, what else?");
    })
    .await;
}

/// Tools that end the call, bound to each call's controls.
struct Goodbye {
    call: CallControl,
}

#[tools]
impl Goodbye {
    /// End the call.
    #[function_tool]
    async fn end_call(&self) -> Result<&'static str, ToolError> {
        self.call.end_call().await.map_err(ToolError::from)?;
        Ok("ending")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_is_seen_as_the_end_of_the_call() {
    bounded(async {
        let crew = TestCrew::serve(|setup: &SessionSetup| {
            let llm = ScriptedLlm::new([
                Reply::tool_call("end_call", json!({})).with_text("Goodbye!"),
                Reply::text(""),
            ]);
            let mut tools = ToolRegistry::new();
            tools.discover(&Arc::new(Goodbye {
                call: setup.call().clone(),
            }))?;
            Ok::<_, RegistryError>(crew_of(llm, tools))
        })
        .await
        .unwrap();
        let mut call = crew.call().await.unwrap();
        call.say("Bye!")
            .await
            .unwrap()
            .assert_text_contains("Goodbye!")
            .assert_ended_call();
    })
    .await;
}

/// The panic message of a failed assertion.
fn failure(assertion: impl FnOnce()) -> String {
    let panic = std::panic::catch_unwind(AssertUnwindSafe(assertion)).unwrap_err();
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_assertion_shows_what_was_expected_and_the_whole_turn() {
    bounded(async {
        let crew = TestCrew::serve(order_crew).await.unwrap();
        let mut call = crew.call().await.unwrap();
        let turn: TurnRecord = call.say("Where is my order 1042?").await.unwrap();

        let message = failure(|| {
            turn.assert_text("It's lost.");
        });
        assert!(message.contains(r#"expected the crew to say "It's lost.""#), "{message}");
        assert!(message.contains(r#"user:  "Where is my order 1042?""#), "{message}");
        assert!(message.contains(r#"crew:  "Your order 1042 has shipped.""#), "{message}");
        assert!(
            message.contains(r#"tool:  order_status({"order_id":"1042"}) -> {"order_id":"1042","status":"shipped"}"#),
            "{message}"
        );
        assert!(message.contains("agent.llm.response.chunk x"), "{message}");

        let message = failure(|| {
            turn.assert_tool_call("order_status", json!({"order_id": "9"}));
        });
        assert!(
            message.contains(r#"expected a call of `order_status` with {"order_id":"9"}"#),
            "{message}"
        );
        let message = failure(|| {
            turn.assert_ended_call();
        });
        assert!(message.contains("handoff: none"), "{message}");
    })
    .await;
}
