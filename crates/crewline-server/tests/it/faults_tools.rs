//! Tool faults through a whole call (server, session, tool loop, the real `OpenAiClient`
//! against a fake LLM that calls the tool named in the caller's words): a tool that hangs,
//! blocks its thread, panics, reads bytes that are not UTF-8, or returns 10 MB. Each reaches
//! the model as a structured `{"error": {"kind", "message"}}` and the platform as a
//! `tool_call_error` log; the turn still streams its answer and `end`, never `agent.error`;
//! healthy calls beside it are untouched; and afterwards no session, task or connection is
//! left.

use crate::common;
use crate::fake_llm;

use std::{sync::Arc, time::Duration};

use common::*;
use crewline::{
    Crew, SessionSetup, ToolLoop,
    agent::LoopAgent,
    crew::OutputNode,
    llm::OpenAiClient,
    prelude::function_tool,
    session::TurnOutcome,
    tool::{DEFAULT_MAX_RESULT_BYTES, ToolError, ToolRegistry},
};
use crewline_server::CrewServer;
use fake_llm::{FakeLlm, echo_answer, spawn_healthy_calls};
use serde_json::Value;

/// Healthy calls running beside each faulty one.
const HEALTHY_CALLS: usize = 4;
/// The bytes a file-reading tool finds: "fo", two bytes that are not UTF-8, "o".
const NOT_UTF8: [u8; 5] = [0x66, 0x6f, 0xff, 0xfe, 0x6f];

/// Wait for an answer that never comes.
#[function_tool(timeout_ms = 300)]
async fn hang() -> Result<String, ToolError> {
    std::future::pending::<()>().await;
    Ok("unreachable".to_owned())
}

/// Read from a device that blocks its thread.
#[function_tool(timeout_ms = 300)]
fn block() -> String {
    std::thread::sleep(Duration::from_millis(1500));
    "late".to_owned()
}

/// Fail with a bug.
#[function_tool]
fn explode() -> String {
    panic!("index out of bounds: the secret internal detail")
}

/// Read a file whose bytes are not UTF-8, replacing what cannot be read.
#[function_tool]
fn read_lossy() -> String {
    String::from_utf8_lossy(&NOT_UTF8).into_owned()
}

/// Read a file whose bytes are not UTF-8, insisting on text.
#[function_tool]
fn read_strict() -> Result<String, std::string::FromUtf8Error> {
    String::from_utf8(NOT_UTF8.to_vec())
}

/// Dump a whole 10 MB log.
#[function_tool]
fn dump_log() -> String {
    "x".repeat(10 * 1024 * 1024)
}

fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    registry
        .register(HangTool)
        .expect("hang")
        .register(ExplodeTool)
        .expect("explode")
        .register(BlockTool)
        .expect("block")
        .register(ReadLossyTool)
        .expect("read_lossy")
        .register(ReadStrictTool)
        .expect("read_strict")
        .register(DumpLogTool)
        .expect("dump_log");
    registry
}

fn crew_server(llm: &FakeLlm) -> CrewServer {
    let client = OpenAiClient::builder()
        .model("fake")
        .api_key("sk-test-not-a-real-key")
        .base_url(llm.base_url())
        .read_env(false)
        .first_byte_timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let tool_loop = ToolLoop::new(Arc::new(client), Arc::new(registry()));
    CrewServer::new(move |_setup: SessionSetup| {
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "agent",
            LoopAgent::new("You use tools.", tool_loop.clone()),
        ));
        async move { Ok::<_, std::convert::Infallible>(crew) }
    })
}

/// What the platform saw of one tool turn.
struct ToolTurn {
    frames: Vec<Value>,
    /// The size of the largest frame, in bytes.
    largest_frame: usize,
}

impl ToolTurn {
    /// The `tool_call_end` or `tool_call_error` log.
    fn finished(&self) -> &Value {
        self.frames
            .iter()
            .find(|f| {
                f["type"] == "agent.log"
                    && (f["name"] == "tool_call_end" || f["name"] == "tool_call_error")
            })
            .expect("a tool_call_end or tool_call_error log")
    }
}

/// Reads raw frames through `end`, measuring them.
async fn read_turn(client: &mut Client) -> ToolTurn {
    let mut frames = Vec::new();
    let mut largest_frame = 0;
    loop {
        let RawFrame::Binary(bytes) = client.next_frame().await else {
            continue;
        };
        largest_frame = largest_frame.max(bytes.len());
        // Every frame is UTF-8 JSON, whatever the tool read.
        let frame: Value = serde_json::from_slice(&bytes).expect("a UTF-8 JSON frame");
        let done = frame["type"] == "agent.llm.response.end";
        frames.push(frame);
        if done {
            return ToolTurn {
                frames,
                largest_frame,
            };
        }
    }
}

/// Runs the turn that calls `tool` on a fresh call beside healthy calls, then a healthy turn
/// on the same call; checks that nothing is left afterwards.
async fn tool_turn_beside_healthy_calls(tool: &str) -> ToolTurn {
    let llm = FakeLlm::start().await;
    let server = TestServer::ready(crew_server(&llm)).await;
    let baseline = alive_tasks();
    let url = server.ws_url();
    let healthy = spawn_healthy_calls(&url, HEALTHY_CALLS);

    let mut client = server.call("faulty").await;
    let words = format!("tool:{tool} please");
    client.send(&llm_request(&words)).await;
    let turn = read_turn(&mut client).await;
    let kinds = types(&turn.frames);
    assert!(!kinds.contains(&"agent.error".to_owned()), "{kinds:?}");
    assert_eq!(kinds[0], "agent.llm.response.start", "{kinds:?}");
    // The model was asked again with the tool's result and answered.
    assert_eq!(llm.attempts(&words), 2);
    assert!(spoken(&turn.frames).starts_with("the tool said: "));

    let (after, text) = client.turn("are you still there").await;
    assert_eq!(text, echo_answer("are you still there"), "{after:?}");
    client.close().await;
    for call in healthy {
        call.await.expect("a healthy call failed");
    }

    let metrics = server.handle.metrics();
    assert_eq!(metrics.turns(TurnOutcome::Failed), 0);
    assert_eq!(
        metrics.turns(TurnOutcome::Completed),
        (2 + 2 * HEALTHY_CALLS) as u64
    );
    server.wait_for_active(0).await;
    eventually("the fake LLM's connections to close", || async {
        llm.open_connections() == 0
    })
    .await;
    eventually(&format!("alive tasks back to {baseline}"), || async {
        alive_tasks() <= baseline
    })
    .await;
    turn
}

/// Asserts a `tool_call_error` of `kind` whose message contains `message`, and that the
/// model read the same structured error.
fn assert_tool_error(turn: &ToolTurn, kind: &str, message: &str) {
    let log = turn.finished();
    assert_eq!(log["name"], "tool_call_error", "{log}");
    assert_eq!(log["payload"]["success"], false, "{log}");
    assert_eq!(log["payload"]["error_kind"], kind, "{log}");
    let error = log["payload"]["error"].as_str().expect("an error message");
    assert!(error.contains(message), "{error}");
    let said = spoken(&turn.frames);
    assert!(
        said.contains(&format!(r#"{{"error":{{"kind":"{kind}","message":"#)),
        "{said}"
    );
}

#[tokio::test]
async fn a_hanging_tool_times_out_and_the_model_is_told() {
    let turn = tool_turn_beside_healthy_calls("hang").await;
    assert_tool_error(&turn, "Timeout", "did not finish within 300ms");
}

#[tokio::test]
async fn a_tool_blocking_its_thread_times_out_without_stalling_other_calls() {
    // Run on the runtime's own thread, the tool would block every call and return "late"
    // before its timer could fire; on a thread of its own it is cut off at 300 ms.
    let turn = tool_turn_beside_healthy_calls("block").await;
    assert_tool_error(&turn, "Timeout", "did not finish within 300ms");
}

#[tokio::test]
async fn a_panicking_tool_is_a_tool_error_without_the_panic_text() {
    let turn = tool_turn_beside_healthy_calls("explode").await;
    assert_tool_error(&turn, "ToolError", "failed unexpectedly");
    // The panic's text is for the operator only.
    let all = serde_json::to_string(&turn.frames).expect("JSON");
    assert!(!all.contains("secret internal detail"), "{all}");
}

#[tokio::test]
async fn a_tool_reading_bytes_that_are_not_utf8_lossily_returns_replacement_characters() {
    let turn = tool_turn_beside_healthy_calls("read_lossy").await;
    let log = turn.finished();
    assert_eq!(log["name"], "tool_call_end", "{log}");
    assert_eq!(
        log["payload"]["context"]["response"], "fo\u{fffd}\u{fffd}o",
        "{log}"
    );
    assert!(spoken(&turn.frames).ends_with("fo\u{fffd}\u{fffd}o"));
}

#[tokio::test]
async fn a_tool_insisting_on_utf8_fails_with_a_tool_error() {
    let turn = tool_turn_beside_healthy_calls("read_strict").await;
    assert_tool_error(&turn, "ToolError", "invalid utf-8");
}

#[tokio::test]
async fn a_10_mb_tool_result_is_refused_with_a_tool_error_and_never_sent() {
    let turn = tool_turn_beside_healthy_calls("dump_log").await;
    assert_tool_error(
        &turn,
        "ToolError",
        &format!("larger than the {DEFAULT_MAX_RESULT_BYTES} bytes"),
    );
    // Neither the platform nor the model got the 10 MB.
    assert!(turn.largest_frame < 4096, "{}", turn.largest_frame);
}
