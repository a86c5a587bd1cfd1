//! What crewline must send, derived from what the reference sent: the fixture, transformed by
//! the named rules below. Every difference between crewline and the reference that the parity
//! tests accept is one of these rules; nothing else is ignored. PARITY.md lists the same rules.
//! Long on purpose: the whole catalogue of accepted differences is kept in one file, each rule
//! beside the transform that applies it, so none is hidden in another module.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::{
    compare::{self, Frame},
    fixture::{CloseInfo, Connection, Fixture, LlmRequest, Op, StepResult},
};

/// What kind of rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// crewline deliberately behaves differently (better) than the reference.
    Deliberate,
    /// Not a behaviour difference: something timing or concurrency leaves open, in both.
    Tolerance,
    /// How a scenario is run differently so that it fits a fast test.
    Adaptation,
}

/// A named rule.
#[derive(Debug)]
pub struct Rule {
    pub name: &'static str,
    pub kind: Kind,
    pub what: &'static str,
}

/// Every rule, in PARITY.md's order.
pub const RULES: &[Rule] = &[
    Rule {
        name: "fresh_request_id",
        kind: Kind::Deliberate,
        what: "agent.llm.response.start carries a fresh request_id (reference: null) and the turn's tool logs carry it as turn_id (reference: \"\")",
    },
    Rule {
        name: "compact_json",
        kind: Kind::Deliberate,
        what: "frames are compact JSON with UTF-8 text (reference: spaces after ':' and ',', \\uXXXX escapes); the same values in the same key order",
    },
    Rule {
        name: "bad_frames_do_not_end_the_call",
        kind: Kind::Deliberate,
        what: "a text frame is read as an event and a frame that is not JSON is dropped; neither ends the call (reference: the session ends, close 1000 with an empty reason)",
    },
    Rule {
        name: "failed_handshake_is_explained",
        kind: Kind::Deliberate,
        what: "a failed handshake gets agent.error severity fatal with payload {reason} and crewline's message, then a close frame 1008 with a reason (reference: warning with payload {} or nothing, then a TCP drop, 1006)",
    },
    Rule {
        name: "handoff_after_turn_text",
        kind: Kind::Deliberate,
        what: "a hand-off requested by a tool is sent after the turn's text, right before agent.llm.response.end (reference: at once, between tool_call_start and tool_call_end)",
    },
    Rule {
        name: "tool_response_is_return_value",
        kind: Kind::Deliberate,
        what: "tool_call_end context.response is the tool's return value, null for the mirror's hand-off tools (reference: a hand-off summary)",
    },
    Rule {
        name: "tool_error_details",
        kind: Kind::Deliberate,
        what: "tool_call_error also carries error_kind and latency; error is crewline's message (for a tool's own error, the tool's message, as in the reference)",
    },
    Rule {
        name: "every_call_is_announced",
        kind: Kind::Deliberate,
        what: "unknown tools and unparseable arguments also get tool_call_start, and their logs carry the arguments as parsed (reference: only tool_call_error, with arguments {})",
    },
    Rule {
        name: "parallel_tool_logs",
        kind: Kind::Deliberate,
        what: "a round's tool_call_start logs all come first, then the ends and errors (reference: start and end per call in turn, since its tools never await)",
    },
    Rule {
        name: "all_calls_in_a_chunk_run",
        kind: Kind::Deliberate,
        what: "several tool-call headers in one stream chunk all run (reference: all but the first are dropped); expected as in two_tools_sequential",
    },
    Rule {
        name: "node_error_details",
        kind: Kind::Deliberate,
        what: "agent.error from node code: error_class is the Rust error type (LlmError for model failures), traceback the Rust cause chain; the message keeps the form '<Class> in <node>.<method>: <text>'",
    },
    Rule {
        name: "disconnect_cancels_generation",
        kind: Kind::Deliberate,
        what: "a disconnect cancels the running generation at once, so the LLM stream is dropped (reference: read to the end)",
    },
    Rule {
        name: "active_sessions_counts_live_calls",
        kind: Kind::Deliberate,
        what: "/, /health and /ready report the live calls in active_sessions (reference: 0)",
    },
    Rule {
        name: "strict_tool_schemas",
        kind: Kind::Deliberate,
        what: "tool parameter schemas are normalised for strict mode: additionalProperties false on every object (all properties are already required)",
    },
    Rule {
        name: "tool_messages_without_name",
        kind: Kind::Deliberate,
        what: "role tool messages to the LLM carry tool_call_id and content only (the reference crew's ToolResult.to_message() adds name)",
    },
    Rule {
        name: "tool_results_compact_json",
        kind: Kind::Deliberate,
        what: "structured tool results reach the LLM as compact JSON (the same value)",
    },
    Rule {
        name: "tool_errors_for_the_model",
        kind: Kind::Deliberate,
        what: "a failed call reaches the LLM as {\"error\": {\"kind\", \"message\"}} (reference: the bare exception text)",
    },
    Rule {
        name: "cancelled_stream_may_run_on",
        kind: Kind::Tolerance,
        what: "a generation cancelled by an interrupt or a disconnect may have sent up to 3 more of the scripted chunks than in the recording (the 100 ms chunk pace races the cancel on a loaded machine)",
    },
    Rule {
        name: "concurrent_nodes_interleave",
        kind: Kind::Tolerance,
        what: "frames of two nodes handling the same event (the output node's echo, the background node's agent.error) may come in either order, as in the reference",
    },
    Rule {
        name: "tool_completion_order",
        kind: Kind::Tolerance,
        what: "parallel tool calls finish in any order: their end and error logs are compared in call order",
    },
    Rule {
        name: "short_handshake_timeout",
        kind: Kind::Adaptation,
        what: "handshake_timeout runs with the server's handshake timeout at 500 ms (reference: 10 s); the outcome is compared",
    },
    Rule {
        name: "expected_silence_bound",
        kind: Kind::Adaptation,
        what: "a wait that timed out in the recording (an answer that must not come) watches for 1.5 s instead of its full timeout",
    },
];

/// The handshake timeout used for `handshake_timeout` (rule `short_handshake_timeout`).
pub const SHORT_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// An HTTP answer crewline must give.
#[derive(Debug, Clone)]
pub struct ExpectedHttp {
    pub path: String,
    pub status: u16,
    pub content_type: String,
    /// The exact body.
    pub body_raw: String,
}

/// What crewline must do in one scenario.
#[derive(Debug)]
pub struct Expected {
    pub frames: Vec<Frame>,
    pub llm_requests: Vec<LlmRequest>,
    pub steps: Vec<StepResult>,
    pub connections: Vec<Connection>,
    pub http: Vec<ExpectedHttp>,
    /// The rules that changed something, in order.
    pub applied: Vec<&'static str>,
    /// Whether rule `cancelled_stream_may_run_on` applies.
    pub run_on: bool,
    /// Whether rule `concurrent_nodes_interleave` applies.
    pub interleave: bool,
    /// Tool error details by call id (for the LLM messages): kind and message matcher.
    tool_errors: HashMap<String, (String, String)>,
}

impl Expected {
    fn apply(&mut self, rule: &'static str) {
        assert!(
            RULES.iter().any(|r| r.name == rule),
            "rule {rule} is not listed in RULES"
        );
        if !self.applied.contains(&rule) {
            self.applied.push(rule);
        }
    }
}

/// Builds what crewline must do in `fixture`'s scenario.
pub fn expected(fixture: &Fixture) -> Expected {
    let mut exp = Expected {
        frames: compare::from_fixture(&fixture.outbound),
        llm_requests: fixture.llm_requests.clone(),
        steps: fixture.steps.iter().map(|s| s.result).collect(),
        connections: fixture.connections.clone(),
        http: fixture
            .http
            .iter()
            .map(|h| ExpectedHttp {
                path: h.path.clone(),
                status: h.status,
                content_type: h.content_type.clone(),
                body_raw: serde_json::to_string(&h.body).unwrap(),
            })
            .collect(),
        applied: Vec::new(),
        run_on: false,
        interleave: false,
        tool_errors: HashMap::new(),
    };
    let script_calls = scripted_calls(&fixture.llm_script);
    match fixture.scenario.as_str() {
        "bad_frame_text" | "bad_frame_not_json" | "bad_frames" => {
            bad_frames_do_not_end_the_call(fixture, &mut exp)
        }
        "handshake_wrong_first_frame" => failed_handshake_is_explained(
            &mut exp,
            "not_init",
            "<<contains:system.user.joined>>",
            "expected system.init first",
        ),
        "handshake_invalid_init" => failed_handshake_is_explained(
            &mut exp,
            "bad_frame",
            "<<starts:expected system.init as the first frame>>",
            "invalid handshake",
        ),
        "handshake_timeout" => {
            exp.apply("short_handshake_timeout");
            failed_handshake_is_explained(
                &mut exp,
                "timeout",
                "<<starts:handshake timeout>>",
                "handshake timeout",
            )
        }
        "two_tools" => all_calls_in_a_chunk_run(fixture, &mut exp),
        "interrupt_mid_stream" => {
            exp.apply("cancelled_stream_may_run_on");
            exp.run_on = true;
        }
        "disconnect_mid_generation" => {
            exp.apply("cancelled_stream_may_run_on");
            exp.run_on = true;
            disconnect_cancels_generation(&mut exp);
        }
        "background_error" => {
            exp.apply("concurrent_nodes_interleave");
            exp.interleave = true;
        }
        _ => {}
    }
    if fixture.steps.iter().any(|s| s.result.timed_out) {
        exp.apply("expected_silence_bound");
    }
    fresh_request_id(&mut exp);
    handoff_after_turn_text(&mut exp);
    tool_response_is_return_value(&mut exp);
    let tool_names = offered_tools(&exp.llm_requests);
    tool_error_details(&mut exp, &script_calls, &tool_names);
    every_call_is_announced(&mut exp, &script_calls);
    parallel_tool_logs(&mut exp);
    node_error_details(&mut exp);
    active_sessions_counts_live_calls(fixture, &mut exp);
    llm_request_rules(&mut exp);
    if !exp.frames.is_empty() {
        exp.apply("compact_json");
    }
    exp
}

/// The tool calls of the mock script: id → (name, arguments text).
fn scripted_calls(script: &Value) -> HashMap<String, (String, String)> {
    let mut calls = HashMap::new();
    for rule in script["replies"].as_array().into_iter().flatten() {
        for call in rule["reply"]["tool_calls"].as_array().into_iter().flatten() {
            let arguments: String = call["arguments_chunks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            calls.insert(
                call["id"].as_str().unwrap_or_default().to_owned(),
                (
                    call["name"].as_str().unwrap_or_default().to_owned(),
                    arguments,
                ),
            );
        }
    }
    calls
}

/// The names of the tools the crew offers the model (from the recorded requests).
fn offered_tools(requests: &[LlmRequest]) -> Vec<String> {
    requests
        .first()
        .and_then(|r| r.body["tools"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/function/name")?.as_str().map(str::to_owned))
        .collect()
}

fn event_mut(frame: &mut Frame) -> &mut Map<String, Value> {
    frame
        .event
        .as_mut()
        .and_then(Value::as_object_mut)
        .expect("a JSON event")
}

fn new_frame(conn: usize, event: Value) -> Frame {
    Frame {
        conn,
        binary: true,
        raw: event.to_string(),
        event: Some(event),
    }
}

/// Rule `fresh_request_id`.
fn fresh_request_id(exp: &mut Expected) {
    let mut changed = false;
    for frame in &mut exp.frames {
        let kind = frame.kind().to_owned();
        let Some(event) = frame.event.as_mut().and_then(Value::as_object_mut) else {
            continue;
        };
        if kind == "agent.llm.response.start" && event.get("request_id") == Some(&Value::Null) {
            event.insert("request_id".into(), Value::from("<request_id>"));
            changed = true;
        }
        if let Some(Value::Object(payload)) = event.get_mut("payload")
            && kind == "agent.log"
            && payload.get("turn_id") == Some(&Value::from(""))
        {
            payload.insert("turn_id".into(), Value::from("<request_id>"));
            changed = true;
        }
    }
    if changed {
        exp.apply("fresh_request_id");
    }
}

/// Rule `handoff_after_turn_text`: each hand-off moves to just before its turn's `end`.
fn handoff_after_turn_text(exp: &mut Expected) {
    let mut i = 0;
    while i < exp.frames.len() {
        let kind = exp.frames[i].kind();
        if kind == "agent.end_call" || kind == "agent.transfer_call" {
            let conn = exp.frames[i].conn;
            let end = (i + 1..exp.frames.len())
                .find(|&j| {
                    exp.frames[j].conn == conn && exp.frames[j].kind() == "agent.llm.response.end"
                })
                .expect("a hand-off inside a turn");
            let handoff = exp.frames.remove(i);
            exp.frames.insert(end - 1, handoff);
            exp.apply("handoff_after_turn_text");
            i = end;
        } else {
            i += 1;
        }
    }
}

/// Rule `tool_response_is_return_value`: the mirror's hand-off tools return `None`.
fn tool_response_is_return_value(exp: &mut Expected) {
    let mut changed = false;
    for frame in &mut exp.frames {
        if frame.log_name() != Some("tool_call_end") {
            continue;
        }
        let event = event_mut(frame);
        let function = event["payload"]["function_name"]
            .as_str()
            .unwrap_or_default();
        if matches!(function, "end_call" | "transfer_call") {
            event["payload"]["context"]["response"] = Value::Null;
            changed = true;
        }
    }
    if changed {
        exp.apply("tool_response_is_return_value");
    }
}

/// Rule `tool_error_details`: crewline's payload, kind and message for each failed call.
fn tool_error_details(
    exp: &mut Expected,
    script: &HashMap<String, (String, String)>,
    tools: &[String],
) {
    for frame in &mut exp.frames {
        if frame.log_name() != Some("tool_call_error") {
            continue;
        }
        let event = event_mut(frame);
        let payload = event["payload"].as_object().cloned().unwrap_or_default();
        let id = payload["tool_call_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let function = payload["function_name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let arguments_parse = script
            .get(&id)
            .map(|(_, args)| serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object()));
        let (kind, message) = if !tools.contains(&function) {
            ("UnknownTool", format!("<<contains:`{function}`>>"))
        } else if arguments_parse == Some(false) {
            ("ToolArgsInvalid", "<<nonempty>>".to_owned())
        } else {
            // The tool's own error message, exactly as the reference reports it.
            (
                "ToolError",
                payload["error"].as_str().unwrap_or_default().to_owned(),
            )
        };
        let mut rebuilt = Map::new();
        for key in ["turn_id", "tool_call_id", "function_name", "context"] {
            rebuilt.insert(key.into(), payload[key].clone());
        }
        rebuilt.insert("error".into(), Value::from(message.clone()));
        rebuilt.insert("error_kind".into(), Value::from(kind));
        rebuilt.insert("latency".into(), Value::from("<latency_ms>"));
        rebuilt.insert("success".into(), Value::Bool(false));
        event.insert("payload".into(), Value::Object(rebuilt));
        exp.tool_errors.insert(id, (kind.to_owned(), message));
    }
    if !exp.tool_errors.is_empty() {
        exp.apply("tool_error_details");
    }
}

/// Rule `every_call_is_announced`: a start for every failed call that had none, and the
/// arguments as parsed (`{}` when they are not a JSON object).
fn every_call_is_announced(exp: &mut Expected, script: &HashMap<String, (String, String)>) {
    let mut i = 0;
    while i < exp.frames.len() {
        if exp.frames[i].log_name() != Some("tool_call_error") {
            i += 1;
            continue;
        }
        let id = exp.frames[i].tool_call_id().unwrap_or_default().to_owned();
        let announced = exp.frames[..i]
            .iter()
            .any(|f| f.log_name() == Some("tool_call_start") && f.tool_call_id() == Some(&id));
        if announced {
            i += 1;
            continue;
        }
        let arguments = script
            .get(&id)
            .and_then(|(_, args)| serde_json::from_str::<Value>(args).ok())
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        let error = event_mut(&mut exp.frames[i]);
        error["payload"]["context"]["arguments"] = arguments.clone();
        let payload = &error["payload"];
        let start = json!({
            "type": "agent.log",
            "timestamp": "<timestamp>",
            "name": "tool_call_start",
            "payload": {
                "turn_id": payload["turn_id"],
                "tool_call_id": payload["tool_call_id"],
                "function_name": payload["function_name"],
                "context": {"arguments": arguments},
            },
        });
        let conn = exp.frames[i].conn;
        exp.frames.insert(i, new_frame(conn, start));
        exp.apply("every_call_is_announced");
        i += 2;
    }
}

/// The tool logs' runs: maximal stretches of consecutive tool logs on one connection.
fn tool_log_runs(frames: &[Frame]) -> Vec<std::ops::Range<usize>> {
    let is_tool_log = |f: &Frame| f.log_name().is_some_and(|n| n.starts_with("tool_call_"));
    let mut runs = Vec::new();
    let mut i = 0;
    while i < frames.len() {
        if is_tool_log(&frames[i]) {
            let start = i;
            while i < frames.len()
                && is_tool_log(&frames[i])
                && frames[i].conn == frames[start].conn
            {
                i += 1;
            }
            runs.push(start..i);
        } else {
            i += 1;
        }
    }
    runs
}

/// Rule `parallel_tool_logs`: in each run of tool logs, the starts first.
fn parallel_tool_logs(exp: &mut Expected) {
    for run in tool_log_runs(&exp.frames) {
        let block: Vec<Frame> = exp.frames[run.clone()].to_vec();
        let (starts, rest): (Vec<Frame>, Vec<Frame>) = block
            .iter()
            .cloned()
            .partition(|f| f.log_name() == Some("tool_call_start"));
        let reordered: Vec<Frame> = starts.into_iter().chain(rest).collect();
        if reordered != block {
            exp.frames.splice(run, reordered);
            exp.apply("parallel_tool_logs");
        }
    }
}

/// Rule `tool_completion_order` (applied to expected and actual frames alike): within a run of
/// tool logs, ends and errors sorted by the order of their calls' starts.
pub fn tool_completion_order(frames: &mut [Frame]) -> bool {
    let mut changed = false;
    for run in tool_log_runs(frames) {
        let block = &mut frames[run];
        let order: Vec<String> = block
            .iter()
            .filter(|f| f.log_name() == Some("tool_call_start"))
            .filter_map(|f| f.tool_call_id().map(str::to_owned))
            .collect();
        let first_end = block
            .iter()
            .position(|f| f.log_name() != Some("tool_call_start"))
            .unwrap_or(block.len());
        let ends = &mut block[first_end..];
        let before: Vec<Option<String>> = ends
            .iter()
            .map(|f| f.tool_call_id().map(str::to_owned))
            .collect();
        ends.sort_by_key(|f| {
            f.tool_call_id()
                .and_then(|id| order.iter().position(|o| o == id))
                .unwrap_or(usize::MAX)
        });
        let after: Vec<Option<String>> = ends
            .iter()
            .map(|f| f.tool_call_id().map(str::to_owned))
            .collect();
        changed |= before != after;
    }
    changed
}

/// Rule `concurrent_nodes_interleave` (applied to expected and actual frames alike): a
/// background node's `agent.error` and the output node's echo of the same transcript come in
/// a fixed order (the echo first).
pub fn concurrent_nodes_interleave(frames: &mut [Frame]) {
    for i in 1..frames.len() {
        let is_background_error = |f: &Frame| {
            f.kind() == "agent.error"
                && f.event
                    .as_ref()
                    .and_then(|e| e.pointer("/payload/node_name"))
                    .and_then(Value::as_str)
                    == Some("failing-observer")
        };
        if is_background_error(&frames[i - 1])
            && frames[i].kind() == "agent.transcript.update"
            && frames[i].conn == frames[i - 1].conn
        {
            frames.swap(i - 1, i);
        }
    }
}

/// Rule `cancelled_stream_may_run_on` (applied to the actual frames): drops up to 3 chunks
/// beyond the recorded ones from a turn that was cancelled (no `end` in the recording's turn
/// on that connection, or an interrupt), when they are the script's next chunks.
/// Returns how many chunks it dropped.
pub fn cancelled_stream_may_run_on(
    expected: &[Frame],
    actual: &mut Vec<Frame>,
    script: &Value,
) -> usize {
    let mut dropped = 0;
    let scripted: Vec<String> = script["replies"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| {
            r["reply"]["content_chunks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|c| c.as_str().map(str::to_owned))
        .collect();
    let chunk_text = |f: &Frame| -> Option<String> {
        (f.kind() == "agent.llm.response.chunk")
            .then(|| f.event.as_ref()?["text"].as_str().map(str::to_owned))
            .flatten()
    };
    // Walk both sequences per connection; where actual has extra chunks right after the
    // recorded chunks of a turn, drop them if they continue the script.
    let conns = expected
        .iter()
        .chain(actual.iter())
        .map(|f| f.conn)
        .max()
        .map_or(0, |m| m + 1);
    for conn in 0..conns {
        let exp: Vec<&Frame> = expected.iter().filter(|f| f.conn == conn).collect();
        let mut positions: Vec<usize> = (0..actual.len())
            .filter(|&i| actual[i].conn == conn)
            .collect();
        let mut k = 0;
        let mut drop = Vec::new();
        while k < exp.len() && k < positions.len() {
            let a = &actual[positions[k]];
            let e = exp[k];
            if e.kind() != "agent.llm.response.chunk" && a.kind() == "agent.llm.response.chunk" {
                // An extra chunk: is it the scripted piece after the previous chunk?
                let previous = (0..k).rev().find_map(|j| chunk_text(exp[j]));
                let next = previous
                    .and_then(|p| scripted.iter().position(|s| *s == p))
                    .and_then(|at| scripted.get(at + 1 + drop.len()));
                if drop.len() < 3 && next.is_some() && next.cloned() == chunk_text(a) {
                    drop.push(positions[k]);
                    positions.remove(k);
                    continue;
                }
            }
            k += 1;
        }
        // Extra chunks after the last recorded frame of the connection (a disconnect).
        while k < positions.len() && drop.len() < 3 {
            let a = &actual[positions[k]];
            let previous = (0..exp.len()).rev().find_map(|j| chunk_text(exp[j]));
            let next = previous
                .and_then(|p| scripted.iter().position(|s| *s == p))
                .and_then(|at| scripted.get(at + 1 + drop.len()));
            if next.is_some() && next.cloned() == chunk_text(a) {
                drop.push(positions[k]);
                k += 1;
            } else {
                break;
            }
        }
        dropped += drop.len();
        for index in drop.into_iter().rev() {
            actual.remove(index);
        }
    }
    dropped
}

/// Rule `all_calls_in_a_chunk_run`: two_tools behaves as two_tools_sequential.
fn all_calls_in_a_chunk_run(fixture: &Fixture, exp: &mut Expected) {
    let sibling = Fixture::load("two_tools_sequential");
    let strip = |f: &Fixture| {
        f.steps
            .iter()
            .map(|s| format!("{:?}", s.op))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        strip(fixture),
        strip(&sibling),
        "two_tools and two_tools_sequential differ in their steps"
    );
    exp.frames = compare::from_fixture(&sibling.outbound);
    exp.llm_requests = sibling.llm_requests;
    exp.apply("all_calls_in_a_chunk_run");
}

/// Rule `bad_frames_do_not_end_the_call`: the frames before the bad one, the echoes of the
/// valid events sent after it (unknown fields dropped, as the reference does), then the turn
/// as recorded on a surviving socket in `bad_frame_no_type`.
fn bad_frames_do_not_end_the_call(fixture: &Fixture, exp: &mut Expected) {
    let sibling = Fixture::load("bad_frame_no_type");
    assert_eq!(fixture.llm_script, sibling.llm_script);
    let turn_start = sibling
        .outbound
        .iter()
        .position(|f| f.kind_of() == "agent.transcript.update")
        .expect("bad_frame_no_type has a turn");
    let first_bad = fixture
        .steps
        .iter()
        .position(|s| matches!(&s.op, Op::Send { text: true, .. } | Op::SendRaw { .. }))
        .expect("a bad frame");
    for step in &fixture.steps[first_bad..] {
        let Op::Send { frame, .. } = &step.op else {
            continue;
        };
        let kind = frame["type"].as_str().unwrap_or_default();
        if matches!(
            kind,
            "system.user.started_speaking" | "system.user.stopped_speaking"
        ) {
            let echo = json!({"type": kind, "timestamp": frame["timestamp"]});
            exp.frames.push(new_frame(0, echo));
        }
    }
    exp.frames
        .extend(compare::from_fixture(&sibling.outbound[turn_start..]));
    exp.llm_requests = sibling.llm_requests;
    for (step, result) in fixture.steps.iter().zip(&mut exp.steps) {
        if !matches!(step.op, Op::Settle { .. }) {
            *result = StepResult {
                ok: true,
                timed_out: false,
            };
        }
    }
    exp.connections = vec![open_until_the_end()];
    exp.apply("bad_frames_do_not_end_the_call");
}

/// A connection the client closed at the end with 1000 "recording finished".
fn open_until_the_end() -> Connection {
    let frame = Some((1000, "recording finished".to_owned()));
    Connection {
        open_at_end: true,
        close: CloseInfo {
            received: frame.clone(),
            sent: frame,
            server_first: Some(false),
            code: 1000,
        },
    }
}

/// Rule `failed_handshake_is_explained`.
fn failed_handshake_is_explained(
    exp: &mut Expected,
    reason: &str,
    message: &str,
    close_reason: &str,
) {
    let error = json!({
        "type": "agent.error",
        "timestamp": "<timestamp>",
        "message": message,
        "severity": "fatal",
        "payload": {"reason": reason},
    });
    exp.frames = vec![new_frame(0, error)];
    let frame = Some((1008, close_reason.to_owned()));
    exp.connections = vec![Connection {
        open_at_end: false,
        close: CloseInfo {
            received: frame.clone(),
            sent: frame,
            server_first: Some(true),
            code: 1008,
        },
    }];
    exp.apply("failed_handshake_is_explained");
}

/// Rule `node_error_details`.
fn node_error_details(exp: &mut Expected) {
    let mut changed = false;
    for frame in &mut exp.frames {
        if frame.kind() != "agent.error" {
            continue;
        }
        let event = event_mut(frame);
        let Some(payload) = event.get_mut("payload").and_then(Value::as_object_mut) else {
            continue;
        };
        if !payload.contains_key("traceback") {
            continue;
        }
        payload.insert("traceback".into(), Value::from("<<nonempty>>"));
        let message = event["message"].as_str().unwrap_or_default().to_owned();
        if let Some((_, rest)) = message.split_once(" in ")
            && let Some((place, _)) = rest.split_once(": ")
            && place.ends_with(".generate_response")
        {
            // The mirror's model is crewline's OpenAI client: its failures are `LlmError`s.
            event["payload"]["error_class"] = Value::from("LlmError");
            event["message"] = Value::from(format!("<<starts:LlmError in {place}: >>"));
        }
        changed = true;
    }
    if changed {
        exp.apply("node_error_details");
    }
}

/// Rule `disconnect_cancels_generation`: the request running at the disconnect is dropped.
fn disconnect_cancels_generation(exp: &mut Expected) {
    if let Some(first) = exp.llm_requests.first_mut() {
        first.outcome = "client_disconnected".to_owned();
        exp.apply("disconnect_cancels_generation");
    }
}

/// Rule `active_sessions_counts_live_calls`: the count of connections open at each probe.
fn active_sessions_counts_live_calls(fixture: &Fixture, exp: &mut Expected) {
    let mut live: Vec<bool> = Vec::new();
    let mut at_step = HashMap::new();
    for step in &fixture.steps {
        match step.op {
            Op::Connect => live.push(true),
            Op::Send { .. } | Op::SendRaw { .. } if live.is_empty() => live.push(true),
            Op::Close => {
                if let Some(last) = live.last_mut() {
                    *last = false;
                }
            }
            Op::Http { .. } => {
                at_step.insert(at_step.len(), live.iter().filter(|open| **open).count());
            }
            _ => {}
        }
    }
    let mut changed = false;
    for (i, http) in exp.http.iter_mut().enumerate() {
        let Ok(Value::Object(mut body)) = serde_json::from_str::<Value>(&http.body_raw) else {
            continue;
        };
        let count = at_step.get(&i).copied().unwrap_or(0);
        if let Some(active) = body.get_mut("active_sessions")
            && active.as_u64() != Some(count as u64)
        {
            *active = Value::from(count);
            http.body_raw = Value::Object(body).to_string();
            changed = true;
        }
    }
    if changed {
        exp.apply("active_sessions_counts_live_calls");
    }
}

/// The LLM request rules: `strict_tool_schemas`, `tool_messages_without_name`,
/// `tool_results_compact_json`, `tool_errors_for_the_model`.
fn llm_request_rules(exp: &mut Expected) {
    let mut applied = Vec::new();
    let tool_errors = exp.tool_errors.clone();
    for request in &mut exp.llm_requests {
        let body = &mut request.body;
        for tool in body["tools"].as_array_mut().into_iter().flatten() {
            if let Some(parameters) = tool.pointer_mut("/function/parameters") {
                close_objects(parameters);
                applied.push("strict_tool_schemas");
            }
        }
        for message in body["messages"].as_array_mut().into_iter().flatten() {
            if message["role"] != "tool" {
                continue;
            }
            let Some(message) = message.as_object_mut() else {
                continue;
            };
            if message.remove("name").is_some() {
                applied.push("tool_messages_without_name");
            }
            let id = message["tool_call_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if let Some((kind, text)) = tool_errors.get(&id) {
                message.insert(
                    "content".into(),
                    json!({"error": {"kind": kind, "message": text}}),
                );
                applied.push("tool_errors_for_the_model");
            } else if let Some(Value::String(content)) = message.get("content")
                && let Ok(parsed) = serde_json::from_str::<Value>(content)
            {
                if parsed.is_object() {
                    applied.push("tool_results_compact_json");
                }
                message.insert("content".into(), parsed);
            }
        }
    }
    for rule in applied {
        exp.apply(rule);
    }
}

/// Tool messages' JSON content parsed, so that spacing does not matter (applied to actual
/// bodies the same way as `llm_request_rules` does to the expected ones).
pub fn parse_tool_contents(body: &mut Value) {
    for message in body["messages"].as_array_mut().into_iter().flatten() {
        if message["role"] == "tool"
            && let Some(Value::String(content)) = message.get("content")
            && let Ok(parsed) = serde_json::from_str::<Value>(content)
        {
            message["content"] = parsed;
        }
    }
}

/// Adds `additionalProperties: false` to every object schema with `properties`.
fn close_objects(schema: &mut Value) {
    if let Value::Object(map) = schema {
        if map.contains_key("properties") && !map.contains_key("additionalProperties") {
            map.insert("additionalProperties".into(), Value::Bool(false));
        }
        for value in map.values_mut() {
            close_objects(value);
        }
    } else if let Value::Array(items) = schema {
        items.iter_mut().for_each(close_objects);
    }
}

#[test]
fn run_on_drops_only_the_scripts_next_chunks() {
    let frame = |kind: &str, text: Option<&str>| {
        let mut event = json!({"type": kind, "timestamp": "<timestamp>"});
        if let Some(text) = text {
            event["text"] = Value::from(text);
        }
        new_frame(0, event)
    };
    let script = json!({"replies": [{"reply": {"content_chunks": ["w0 ", "w1 ", "w2 ", "w3 "]}}]});
    let expected = vec![
        frame("agent.llm.response.start", None),
        frame("agent.llm.response.chunk", Some("w0 ")),
        frame("agent.llm.response.end", None),
    ];
    let mut actual = vec![
        frame("agent.llm.response.start", None),
        frame("agent.llm.response.chunk", Some("w0 ")),
        frame("agent.llm.response.chunk", Some("w1 ")),
        frame("agent.llm.response.chunk", Some("w2 ")),
        frame("agent.llm.response.end", None),
    ];
    assert_eq!(
        cancelled_stream_may_run_on(&expected, &mut actual, &script),
        2
    );
    assert_eq!(actual, expected);

    // A chunk that is not the script's next one is kept (and then differs).
    let mut wrong = vec![
        frame("agent.llm.response.start", None),
        frame("agent.llm.response.chunk", Some("w0 ")),
        frame("agent.llm.response.chunk", Some("w3 ")),
        frame("agent.llm.response.end", None),
    ];
    assert_eq!(
        cancelled_stream_may_run_on(&expected, &mut wrong, &script),
        0
    );
    assert_eq!(wrong.len(), 4);

    // After a disconnect, late chunks at the end of the connection.
    let cut = &expected[..2];
    let mut late = vec![
        frame("agent.llm.response.start", None),
        frame("agent.llm.response.chunk", Some("w0 ")),
        frame("agent.llm.response.chunk", Some("w1 ")),
    ];
    assert_eq!(cancelled_stream_may_run_on(cut, &mut late, &script), 1);
    assert_eq!(late, cut);
}
