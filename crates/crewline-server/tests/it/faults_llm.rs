//! LLM faults through a whole call: server, session, tool loop and the real `OpenAiClient`
//! against a fake OpenAI-compatible server that answers 500, 429, stalls, cuts the stream or
//! sends an error event or an endless line. Each faulty turn gets `start`, `agent.error`
//! (fatal) and `end`; the call goes on; healthy calls running at the same time get their
//! answers; retries happen before the first byte only; and afterwards no session, task or
//! connection is left. A model that finishes but holds its connection open still gets its
//! tool calls run.

use crate::common;
use crate::fake_llm;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use common::*;
use crewline::{
    Crew, SessionSetup, ToolLoop, agent::LoopAgent, crew::OutputNode, llm::OpenAiClient,
    prelude::function_tool, session::TurnOutcome, tool::ToolRegistry,
};
use crewline_server::CrewServer;
use fake_llm::{FLOOD_LIMIT, FakeLlm, PARTIAL, echo_answer, spawn_healthy_calls};
use serde_json::Value;

/// The client's limits: short, so stalls fail fast, yet far above what a healthy answer from
/// the local fake takes on a loaded CI machine.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_millis(2000);
const IDLE_TIMEOUT: Duration = Duration::from_millis(2000);
const MAX_RETRIES: usize = 2;
/// Healthy calls running beside each faulty one.
const HEALTHY_CALLS: usize = 5;

fn openai_client(llm: &FakeLlm) -> OpenAiClient {
    llm.client_builder()
        .first_byte_timeout(FIRST_BYTE_TIMEOUT)
        .idle_timeout(IDLE_TIMEOUT)
        .max_retries(MAX_RETRIES)
        .build()
        .expect("client")
}

/// Look up the caller's account.
#[function_tool]
fn lookup() -> String {
    "account 42 is open".to_owned()
}

/// A server whose crew answers with the tool loop on the real client, with one tool.
fn crew_server(client: OpenAiClient) -> CrewServer {
    let mut registry = ToolRegistry::new();
    registry.register(LookupTool).expect("lookup");
    let tool_loop = ToolLoop::new(Arc::new(client), Arc::new(registry));
    CrewServer::new(move |_setup: SessionSetup| {
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "agent",
            LoopAgent::new("You answer.", tool_loop.clone()),
        ));
        async move { Ok::<_, std::convert::Infallible>(crew) }
    })
}

struct Rig {
    server: TestServer,
    llm: FakeLlm,
    baseline_tasks: usize,
}

async fn rig() -> Rig {
    let llm = FakeLlm::start().await;
    let server = TestServer::ready(crew_server(openai_client(&llm))).await;
    Rig {
        server,
        llm,
        baseline_tasks: alive_tasks(),
    }
}

/// Runs one turn saying `words` on a fresh call beside [`HEALTHY_CALLS`] healthy calls (two
/// turns each, checked), then a healthy turn on the same call; returns the first turn's
/// frames from `start` to `end`.
async fn faulty_turn_beside_healthy_calls(rig: &Rig, words: &str) -> Vec<Value> {
    let url = rig.server.ws_url();
    let healthy = spawn_healthy_calls(&url, HEALTHY_CALLS);

    let mut client = rig.server.call("faulty").await;
    let (frames, _) = client.turn(words).await;
    let start = frames
        .iter()
        .position(|f| f["type"] == "agent.llm.response.start")
        .expect("a start frame");
    let turn = frames[start..].to_vec();
    // The call survives: the next turn is answered normally.
    let (after, text) = client.turn("are you still there").await;
    assert_eq!(text, echo_answer("are you still there"), "{after:?}");
    client.close().await;

    for call in healthy {
        call.await.expect("a healthy call failed");
    }
    turn
}

/// No session, task or LLM connection is left once every call has hung up.
async fn assert_nothing_left(rig: &Rig) {
    rig.server.wait_for_active(0).await;
    eventually("the fake LLM's connections to close", || async {
        rig.llm.open_connections() == 0
    })
    .await;
    let baseline = rig.baseline_tasks;
    eventually(&format!("alive tasks back to {baseline}"), || async {
        alive_tasks() <= baseline
    })
    .await;
}

/// Asserts `frames` is `start`, the `chunks`, one fatal `agent.error` whose message contains
/// `error_text`, then `end`; returns the error frame.
fn assert_failed_turn(frames: &[Value], chunks: &[&str], error_text: &str) -> Value {
    let mut expected = vec!["agent.llm.response.start".to_owned()];
    expected.extend(chunks.iter().map(|_| "agent.llm.response.chunk".to_owned()));
    expected.push("agent.error".to_owned());
    expected.push("agent.llm.response.end".to_owned());
    assert_eq!(types(frames), expected, "{frames:#?}");
    assert_eq!(spoken(frames), chunks.concat());
    let error = frames[frames.len() - 2].clone();
    assert_eq!(error["severity"], "fatal", "{error}");
    let message = error["message"].as_str().expect("a message");
    assert!(message.contains(error_text), "{message}");
    assert_eq!(error["payload"]["node_name"], "agent", "{error}");
    assert_eq!(error["payload"]["error_class"], "LlmError", "{error}");
    error
}

fn failed_turns(rig: &Rig) -> u64 {
    rig.server.handle.metrics().turns(TurnOutcome::Failed)
}

#[tokio::test]
async fn http_500_is_retried_before_the_first_byte_then_ends_the_turn_with_an_error() {
    let rig = rig().await;
    let words = "fault:500 what is the weather";
    let frames = faulty_turn_beside_healthy_calls(&rig, words).await;
    assert_failed_turn(&frames, &[], "HTTP 500");
    // The first attempt and MAX_RETRIES retries.
    assert_eq!(rig.llm.attempts(words), MAX_RETRIES + 1);
    assert_eq!(failed_turns(&rig), 1);
    assert_nothing_left(&rig).await;
}

#[tokio::test]
async fn http_429_is_retried_and_the_turn_is_answered() {
    let rig = rig().await;
    let words = "fault:429-once please answer";
    let frames = faulty_turn_beside_healthy_calls(&rig, words).await;
    assert!(
        !types(&frames).contains(&"agent.error".to_owned()),
        "{frames:?}"
    );
    assert_eq!(spoken(&frames), echo_answer(words));
    assert_eq!(rig.llm.attempts(words), 2);
    assert_eq!(failed_turns(&rig), 0);
    assert_nothing_left(&rig).await;
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_with_an_error_and_is_let_go() {
    let rig = rig().await;
    let words = "fault:stall say something";
    let frames = faulty_turn_beside_healthy_calls(&rig, words).await;
    assert_failed_turn(&frames, &[], "did not answer within");
    // A stall is not retried: the first-byte limit covers retries too.
    assert_eq!(rig.llm.attempts(words), 1);
    assert_eq!(failed_turns(&rig), 1);
    assert_nothing_left(&rig).await;
}

#[tokio::test]
async fn a_stream_that_stalls_mid_way_keeps_its_chunks_then_ends_with_an_error() {
    let rig = rig().await;
    let words = "fault:stall-mid say something";
    let frames = faulty_turn_beside_healthy_calls(&rig, words).await;
    assert_failed_turn(&frames, &PARTIAL, "did not answer within");
    // Never retried after the first byte: the text is already spoken.
    assert_eq!(rig.llm.attempts(words), 1);
    assert_nothing_left(&rig).await;
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_not_replayed_and_ends_with_an_error() {
    let rig = rig().await;
    let words = "fault:cut say something";
    let frames = faulty_turn_beside_healthy_calls(&rig, words).await;
    assert_failed_turn(&frames, &PARTIAL, "broke off mid-way");
    assert_eq!(rig.llm.attempts(words), 1);
    assert_eq!(failed_turns(&rig), 1);
    assert_nothing_left(&rig).await;
}

#[tokio::test]
async fn an_error_event_mid_stream_is_not_replayed_and_ends_with_an_error() {
    let rig = rig().await;
    let words = "fault:error-event say something";
    let frames = faulty_turn_beside_healthy_calls(&rig, words).await;
    assert_failed_turn(&frames, &PARTIAL, "the server had an error (scripted)");
    assert_eq!(rig.llm.attempts(words), 1);
    assert_nothing_left(&rig).await;
}

#[tokio::test]
async fn every_fault_at_once_beside_healthy_calls() {
    // All the faults in flight together on one server: each call gets its own outcome.
    let rig = rig().await;
    let faults = [
        ("fault:500 a", "HTTP 500", 0),
        ("fault:stall b", "did not answer within", 0),
        ("fault:stall-mid c", "did not answer within", 2),
        ("fault:cut d", "broke off mid-way", 2),
        ("fault:error-event e", "(scripted)", 2),
    ];
    let runs: Vec<_> = faults
        .iter()
        .map(|(words, _, _)| faulty_turn_beside_healthy_calls(&rig, words))
        .collect();
    let results = futures::future::join_all(runs).await;
    for ((words, error, chunks), frames) in faults.iter().zip(results) {
        assert_failed_turn(&frames, &PARTIAL[..*chunks], error);
        let retried = if words.starts_with("fault:500") {
            MAX_RETRIES + 1
        } else {
            1
        };
        assert_eq!(rig.llm.attempts(words), retried, "{words}");
    }
    assert_eq!(failed_turns(&rig), faults.len() as u64);
    // Each faulty call's second turn, and each healthy call's two turns, completed.
    assert_eq!(
        rig.server.handle.metrics().turns(TurnOutcome::Completed),
        (faults.len() * (1 + 2 * HEALTHY_CALLS)) as u64
    );
    assert_nothing_left(&rig).await;
}

#[tokio::test]
async fn a_model_that_finishes_but_holds_the_connection_open_still_gets_its_tools_run() {
    // The answer with the tool call ends at `finish_reason: "tool_calls"`: no `[DONE]`, no
    // end of body. The tool runs, the model is asked again, and the turn completes, well
    // before the idle limit would have failed it.
    let rig = rig().await;
    let words = "tool-hold:lookup my account";
    let frames = faulty_turn_beside_healthy_calls(&rig, words).await;
    let kinds = types(&frames);
    assert!(!kinds.contains(&"agent.error".to_owned()), "{frames:#?}");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("agent.llm.response.end")
    );
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "agent.log" && f["name"] == "tool_call_end"),
        "{frames:#?}"
    );
    assert_eq!(spoken(&frames), "the tool said: account 42 is open");
    // The call, then the answer with its result.
    assert_eq!(rig.llm.attempts(words), 2);
    assert_eq!(failed_turns(&rig), 0);
    assert_nothing_left(&rig).await;
}

/// Frames of one turn through `end`, each awaited for at most `limit`.
async fn turn_within(client: &mut Client, words: &str, limit: Duration) -> Vec<Value> {
    client
        .send(&serde_json::json!({"type": "agent.transcript.update", "role": "user", "content": words}))
        .await;
    client.send(&llm_request(words)).await;
    let mut frames = Vec::new();
    client.socket.set_wait(limit);
    loop {
        let message = client
            .socket
            .next_frame()
            .await
            .unwrap_or_else(|error| {
                panic!("no frame within {limit:?} ({error}); so far: {frames:#?}")
            })
            .expect("the socket closed");
        let RawFrame::Binary(bytes) = message else {
            continue;
        };
        let frame: Value = serde_json::from_slice(&bytes).expect("a JSON frame");
        let done = frame["type"] == "agent.llm.response.end";
        frames.push(frame);
        if done {
            return frames;
        }
    }
}

#[tokio::test]
async fn with_default_limits_a_stream_silent_mid_answer_ends_the_turn_within_seconds() {
    // The client as an application builds it: no timeout set.
    let llm = FakeLlm::start().await;
    let client = llm.client_builder().build().expect("client");
    let server = TestServer::ready(crew_server(client)).await;
    let mut call = server.call("silent").await;

    let started = Instant::now();
    // A caller would hang up long before a minute of silence; the turn must end well before.
    let frames = turn_within(
        &mut call,
        "fault:stall-mid say something",
        Duration::from_secs(20),
    )
    .await;
    let frames = &frames[frames
        .iter()
        .position(|f| f["type"] == "agent.llm.response.start")
        .expect("a start frame")..];
    assert_failed_turn(frames, &PARTIAL, "did not answer within 10s");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    let (after, text) = call.turn("are you still there").await;
    assert_eq!(text, echo_answer("are you still there"), "{after:?}");
    call.close().await;
    server.wait_for_active(0).await;
    eventually("the fake LLM's connections to close", || async {
        llm.open_connections() == 0
    })
    .await;
}

#[tokio::test]
async fn an_endless_line_from_the_model_ends_the_turn_with_an_error_near_the_limit() {
    let rig = rig().await;
    let words = "fault:endless-line say something";
    let frames = faulty_turn_beside_healthy_calls(&rig, words).await;
    assert_failed_turn(&frames, &PARTIAL, "too large");
    assert_eq!(rig.llm.attempts(words), 1);
    assert!(
        rig.llm.flooded() < FLOOD_LIMIT / 2,
        "the client read {} bytes of the line",
        rig.llm.flooded()
    );
    assert_eq!(failed_turns(&rig), 1);
    assert_nothing_left(&rig).await;
}
