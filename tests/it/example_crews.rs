//! The example crews driven through the real server by the platform client, with a scripted
//! conversation, asserting what reaches the platform.

use crate::common;

use std::sync::Arc;

use crewline::{SessionSetup, llm::LlmClient};
use crewline_examples::call_control;
use crewline_server::CrewServer;
use crewline_testkit::platform::{Handoff, PlatformError};

use common::connect;

async fn call_control_server() -> String {
    let llm: Arc<dyn LlmClient> = Arc::new(call_control::scripted_support_model());
    common::serve(CrewServer::new(move |setup: SessionSetup| {
        let crew = call_control::support_crew(&setup, llm.clone());
        async move { crew }
    }))
    .await
}

#[tokio::test]
async fn asking_for_a_person_transfers_the_call_after_the_last_words() {
    let url = call_control_server().await;
    let mut client = connect(&url).await;

    let summary = client
        .user_turn("Can I talk to a person, please?")
        .expect("turn")
        .finish()
        .await
        .expect("turn finished");

    assert!(
        summary.text.contains("connecting you with a colleague"),
        "{}",
        summary.text
    );
    assert_eq!(summary.tool_events(), ["tool_call_start", "tool_call_end"]);
    let types = summary.wire_types();
    let transfer = types
        .iter()
        .position(|t| *t == "agent.transfer_call")
        .expect("agent.transfer_call sent");
    assert_eq!(
        types[transfer + 1],
        "agent.llm.response.end",
        "sent right before end"
    );
    assert!(
        matches!(&summary.handoff, Some(Handoff::Transfer(number)) if number == call_control::SUPPORT_DESK),
        "{:?}",
        summary.handoff
    );
    assert!(matches!(
        client.user_turn("hello?"),
        Err(PlatformError::HandedOff)
    ));
}

#[tokio::test]
async fn the_model_is_not_asked_again_after_a_transfer() {
    let llm = Arc::new(call_control::scripted_support_model());
    let model: Arc<dyn LlmClient> = llm.clone();
    let url = common::serve(CrewServer::new(move |setup: SessionSetup| {
        let crew = call_control::support_crew(&setup, model.clone());
        async move { crew }
    }))
    .await;
    let mut client = connect(&url).await;

    let summary = client
        .user_turn("Put me through to a human")
        .expect("turn")
        .finish()
        .await
        .expect("turn finished");

    assert!(summary.handoff.is_some(), "{:?}", summary.handoff);
    // One request for the turn: the tool round that transferred the call is the last one,
    // so no reply can be spoken over the hand-off.
    assert_eq!(llm.requests().len(), 1);
}

#[tokio::test]
async fn saying_goodbye_ends_the_call() {
    let url = call_control_server().await;
    let mut client = connect(&url).await;

    let summary = client
        .user_turn("That's all, bye!")
        .expect("turn")
        .finish()
        .await
        .expect("turn finished");

    assert!(
        summary.text.starts_with("Thanks for calling, goodbye!"),
        "{}",
        summary.text
    );
    let types = summary.wire_types();
    assert!(types.contains(&"agent.end_call"), "{types:?}");
    assert!(summary.errors.is_empty());
}

#[tokio::test]
async fn other_questions_are_answered_without_a_hand_off() {
    let url = call_control_server().await;
    let mut client = connect(&url).await;

    let summary = client
        .user_turn("What can you do?")
        .expect("turn")
        .finish()
        .await
        .expect("turn finished");

    assert!(summary.handoff.is_none());
    assert!(
        summary.text.contains("put you through to a colleague"),
        "{}",
        summary.text
    );
    assert!(summary.tools.is_empty());
}
