//! `TestCrew::in_process`: the same calls and records as a crew served on a socket, with no
//! socket. Each conversation here runs both ways and must come out the same.

#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use crewline::{
    CallControl, ToolLoop,
    agent::LoopAgent,
    llm::ChatRequest,
    prelude::*,
    tool::{RegistryError, ToolRegistry},
    types::Message,
};
use crewline_testkit::{
    ScriptedLlm, ScriptedReply as Reply, TestCrew, TestkitError, platform::PlatformError,
};
use serde_json::{Value, json};

/// A bound on each whole test, far above what it needs, so a hang fails instead of stalling.
async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("the test took longer than its bound")
}

/// A crew's setup, as both modes take it.
type Setup = fn(&SessionSetup) -> Result<Crew, RegistryError>;

/// The crew `setup` builds, served on a socket and run in process.
async fn both_ways(setup: Setup) -> [TestCrew; 2] {
    [
        TestCrew::serve(setup).await.unwrap(),
        TestCrew::in_process(setup),
    ]
}

/// A shop's order desk: finds order 1042, fails for any other.
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

/// Looks orders up, tells stories slowly (to barge in on) and ends the call on goodbye.
fn shop_crew(setup: &SessionSetup) -> Result<Crew, RegistryError> {
    let llm = ScriptedLlm::from_fn(|request: &ChatRequest| match request.messages.last() {
        Some(Message::Tool { content, .. }) if content.contains("shipped") => {
            Reply::text("Your order 1042 has shipped.")
        }
        Some(Message::Tool { content, .. }) if content.contains("ending") => Reply::text(""),
        Some(Message::Tool { .. }) => Reply::text("I can't find that order."),
        Some(Message::User { content }) if content.contains("story") => Reply::text(
            "Once upon a time there was a shop whose assistant talked and talked and talked \
             and talked and talked and talked until a customer barged in.",
        ),
        Some(Message::User { content }) if content.contains("Bye") => {
            Reply::tool_call("end_call", json!({})).with_text("Goodbye!")
        }
        Some(Message::User { content }) => {
            let order: String = content
                .split('#')
                .nth(1)
                .unwrap_or_default()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            Reply::tool_call("order_status", json!({"order_id": order}))
        }
        _ => Reply::text("Hello!"),
    })
    .with_chunk_delay(Duration::from_millis(10));
    let mut tools = ToolRegistry::new();
    tools.discover(&Arc::new(OrderDesk))?;
    tools.discover(&Arc::new(Goodbye {
        call: setup.call().clone(),
    }))?;
    let agent = LoopAgent::new(
        "You are a shop's assistant.",
        ToolLoop::new(Arc::new(llm), Arc::new(tools)),
    );
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new("assistant", agent));
    Ok(crew)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_in_process_has_the_records_it_has_through_a_socket() {
    bounded(async {
        let mut transcripts = Vec::new();
        for crew in both_ways(shop_crew).await {
            let mut call = crew.call().await.unwrap();
            let found = call.say("Where is #1042?").await.unwrap();
            found
                .assert_tool_call("order_status", json!({"order_id": "1042"}))
                .returned(json!({"order_id": "1042", "status": "shipped"}));
            found.assert_text("Your order 1042 has shipped.");
            let missing = call.say("And #7?").await.unwrap();
            missing
                .assert_tool_call("order_status", json!({"order_id": "7"}))
                .failed_with("there is no order 7");
            let bye = call.say("Bye!").await.unwrap();
            bye.assert_ended_call().assert_text_contains("Goodbye!");
            // After the hand-off the platform sends no more turns, either way.
            assert!(matches!(
                call.say("Hello?").await,
                Err(TestkitError::Platform(PlatformError::HandedOff))
            ));
            transcripts.push((
                [found, missing, bye].map(|turn| turn.to_string()),
                call.conversation().to_vec(),
            ));
            call.hang_up().await.unwrap();
        }
        // The same turns: words, tool calls and outcomes, hand-off, and the frames in order.
        assert_eq!(transcripts[0], transcripts[1]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barge_in_reaches_a_crew_in_process() {
    bounded(async {
        let crew = TestCrew::in_process(shop_crew);
        assert!(crew.is_in_process() && crew.url().is_none() && crew.addr().is_none());
        let mut call = crew.call().await.unwrap();

        let turn = call.say_and_barge_in("Tell me a story.", 2).await.unwrap();
        turn.assert_interrupted().assert_no_tool_calls();
        assert!(!turn.text().contains("barged in"), "not cut: {turn}");
        call.say("Where is #1042?")
            .await
            .unwrap()
            .assert_text("Your order 1042 has shipped.");
    })
    .await;
}

/// A setup that refuses every call.
fn refusing(_setup: &SessionSetup) -> Result<Crew, RegistryError> {
    Err(RegistryError::DuplicateName("order_status".to_owned()))
}

/// A setup that panics.
fn panicking(_setup: &SessionSetup) -> Result<Crew, RegistryError> {
    panic!("the crew's tools are not configured")
}

/// The message the crew rejects the handshake with.
async fn rejection(crew: &TestCrew) -> String {
    match crew.call().await {
        Err(TestkitError::Platform(PlatformError::Rejected { message })) => message,
        other => panic!("the call was not rejected: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_setup_rejects_the_call_with_the_servers_message_in_process_too() {
    bounded(async {
        for setup in [refusing as Setup, panicking] {
            let [served, in_process] = both_ways(setup).await;
            let message = rejection(&in_process).await;
            assert_eq!(message, rejection(&served).await);
            assert!(message.starts_with("crew setup"), "{message}");
        }
    })
    .await;
}
