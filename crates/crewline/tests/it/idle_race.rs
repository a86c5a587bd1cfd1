//! A nudge racing the caller: when the silence ends while the caller's `started_speaking` is
//! already waiting for the agent's node, the caller's event wins and no nudge is said. Pinned
//! here on a `Session`, where the test holds the node back (a full outbound queue) until
//! both the deadline has passed and the event is queued; the server-level idle tests live in
//! crewline-testkit's tests/idle.rs.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crewline::{
    Session,
    idle::IdlePolicy,
    llm::ScriptedLlm,
    prelude::*,
    protocol::{ConversationType, Event, EventBody, SessionContext, SystemInit},
};
use serde_json::Map;
use tokio::sync::mpsc;

fn handshake() -> SystemInit {
    SystemInit {
        version: "1.0".into(),
        session_context: SessionContext {
            initial_variables: Map::new(),
            conversation_type: ConversationType::TelephonyInbound,
            caller: None,
        },
        output_agent_settings: None,
    }
}

/// Everything the crew has sent so far, by wire type.
fn drain(from_crew: &mut mpsc::Receiver<Box<Event>>) -> Vec<&'static str> {
    let mut sent = Vec::new();
    while let Ok(event) = from_crew.try_recv() {
        sent.push(event.body.type_name());
    }
    sent
}

#[tokio::test(start_paused = true)]
async fn a_started_speaking_queued_when_the_silence_ends_wins_over_the_nudge() {
    let agent = Agent::builder(ScriptedLlm::new([]))
        .idle(IdlePolicy::phone_call())
        .build()
        .unwrap();
    // Room for one event: `agent.ready`, then one echo; the node's second echo waits for the
    // test to read.
    let (to_platform, mut from_crew) = mpsc::channel(1);
    let setup = SessionSetup::new(handshake(), to_platform);
    let session = Session::start(agent.crew_for(&setup), setup).await.unwrap();
    assert_eq!(drain(&mut from_crew), ["agent.ready"]);

    // The caller stops speaking (the silence starts), then joins again: the node echoes the
    // first, and waits to echo the second.
    session
        .dispatch(Event::now(EventBody::UserStoppedSpeaking))
        .unwrap();
    session.dispatch(Event::now(EventBody::UserJoined)).unwrap();
    tokio::task::yield_now().await;
    // While the node waits, the silence ends and the caller starts speaking.
    tokio::time::advance(Duration::from_secs(11)).await;
    session
        .dispatch(Event::now(EventBody::UserStartedSpeaking))
        .unwrap();

    // The node goes on: the caller's event is taken before the silence, and nothing is said.
    let mut sent = Vec::new();
    for _ in 0..3 {
        sent.push(from_crew.recv().await.unwrap().body.type_name());
    }
    assert_eq!(
        sent,
        [
            "system.user.stopped_speaking",
            "system.user.joined",
            "system.user.started_speaking"
        ]
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(drain(&mut from_crew), Vec::<&str>::new());

    // And once the caller stops, the nudge comes after a silence of its own.
    session
        .dispatch(Event::now(EventBody::UserStoppedSpeaking))
        .unwrap();
    let mut sent = Vec::new();
    for _ in 0..3 {
        sent.push(from_crew.recv().await.unwrap().body.type_name());
    }
    assert_eq!(
        sent,
        ["system.user.stopped_speaking", "agent.log", "agent.speak"]
    );
    session.shutdown().await;
}
