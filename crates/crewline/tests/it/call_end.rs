//! `AgentBuilder::on_call_end`: once per call, with the call's final conversation, after the
//! call ends; never for the server's dry run; a panicking hook does not take the call down.

use crate::common;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use crewline::{
    Session,
    llm::{Reply, ScriptedLlm},
    prelude::*,
    protocol::{ConversationType, EventBody, SessionContext, SystemInit},
    types::{Context, Message},
};
use serde_json::Map;
use tokio::sync::mpsc;

/// The texts of the assistant messages each run of the hook saw, one entry per run.
type Seen = Arc<Mutex<Vec<Vec<String>>>>;

fn agent(seen: &Seen) -> Agent {
    let seen = Arc::clone(seen);
    Agent::builder(ScriptedLlm::new([
        Reply::text("Hello, how can I help?"),
        Reply::text("Goodbye!"),
    ]))
    .prompt("You are a test agent.")
    .on_call_end(move |context: &Context| {
        let replies = context
            .messages()
            .iter()
            .filter_map(|message| match message {
                Message::Assistant {
                    content: Some(text),
                    ..
                } => Some(text.clone()),
                _ => None,
            })
            .collect();
        seen.lock().expect("lock").push(replies);
    })
    .build()
    .expect("agent")
}

fn setup() -> (SessionSetup, mpsc::Receiver<Box<crewline::protocol::Event>>) {
    let init = SystemInit {
        version: "1.0".into(),
        session_context: SessionContext {
            initial_variables: Map::new(),
            conversation_type: ConversationType::Webcall,
            caller: None,
        },
        output_agent_settings: None,
    };
    let (outbound, frames) = mpsc::channel(256);
    (SessionSetup::new(init, outbound), frames)
}

/// A call of `agent`, past `agent.ready`.
async fn call(agent: &Agent) -> common::Line {
    let (setup, frames) = setup();
    let crew = agent.crew_for(&setup);
    let mut line = common::Line {
        session: Session::start(crew, setup).await.expect("starts"),
        frames,
    };
    assert_eq!(line.next().await.body, EventBody::AgentReady);
    line
}

async fn wait_for_runs(seen: &Seen, runs: usize) {
    for _ in 0..500 {
        if seen.lock().expect("lock").len() >= runs {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the hook ran {} times, not {runs}",
        seen.lock().expect("lock").len()
    );
}

#[tokio::test]
async fn the_hook_sees_the_whole_conversation_once_when_the_call_ends() {
    let seen: Seen = Arc::default();
    let agent = agent(&seen);
    let mut line = call(&agent).await;
    line.user_turn("hi");
    line.until("agent.llm.response.end").await;
    line.user_turn("bye");
    line.until("agent.llm.response.end").await;
    assert!(
        seen.lock().expect("lock").is_empty(),
        "the call has not ended yet"
    );

    line.session.shutdown().await;
    wait_for_runs(&seen, 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        *seen.lock().expect("lock"),
        [vec![
            "Hello, how can I help?".to_owned(),
            "Goodbye!".to_owned()
        ]],
        "once, with every reply"
    );
}

#[tokio::test]
async fn a_dry_run_is_not_a_call_and_runs_no_hook() {
    let seen: Seen = Arc::default();
    let agent = agent(&seen);
    drop(agent.crew_for(&SessionSetup::dry_run()));
    // A crew built for a real call and dropped unstarted still ran a call's setup.
    let (setup, _frames) = setup();
    drop(agent.crew_for(&setup));
    assert_eq!(seen.lock().expect("lock").len(), 1);
}

#[tokio::test]
async fn a_panicking_hook_is_logged_and_the_session_still_shuts_down() {
    let agent = Agent::builder(ScriptedLlm::new([Reply::text("Hi.")]))
        .on_call_end(|_: &Context| panic!("the CRM is down"))
        .build()
        .expect("agent");
    let mut line = call(&agent).await;
    line.user_turn("hi");
    line.until("agent.llm.response.end").await;
    tokio::time::timeout(Duration::from_secs(10), line.session.shutdown())
        .await
        .expect("shutdown is prompt despite the hook's panic");
}
