//! Bad input through the server: a corpus of generated bad frames (arbitrary bytes, mutated
//! valid frames, wrong field types, deep nesting) sent on one live call, each dropped and
//! counted under the kind the decoder gives it while the call goes on answering; and frames
//! and messages at, and one byte over, the size limit.

use crate::common;

use common::*;
use crewline::protocol::{DecodeError, decode};
use crewline_server::{CrewServer, FrameDrop};
use proptest::{
    prelude::*,
    strategy::ValueTree,
    test_runner::{Config, TestRunner},
};
use serde_json::{Value, json};

/// Bad frames generated per run (`CREWLINE_BAD_FRAMES` overrides).
const BAD_FRAMES: usize = 1500;
/// The server's frame limit in these tests.
const LIMIT: usize = 64 * 1024;

fn drop_kind(error: &DecodeError) -> FrameDrop {
    match error {
        DecodeError::NotUtf8 => FrameDrop::NotUtf8,
        DecodeError::NotJson(_) => FrameDrop::NotJson,
        DecodeError::NotAnObject => FrameDrop::NotAnObject,
        DecodeError::MissingType => FrameDrop::MissingType,
        DecodeError::UnknownType(_) => FrameDrop::UnknownType,
        DecodeError::TooDeep => FrameDrop::TooDeep,
        _ => FrameDrop::InvalidFields,
    }
}

const KINDS: [FrameDrop; 7] = [
    FrameDrop::NotUtf8,
    FrameDrop::NotJson,
    FrameDrop::NotAnObject,
    FrameDrop::MissingType,
    FrameDrop::UnknownType,
    FrameDrop::InvalidFields,
    FrameDrop::TooDeep,
];

/// Valid frames to mutate.
fn seeds() -> Vec<Vec<u8>> {
    [
        json!({"type": "agent.transcript.update", "role": "user", "content": "Hello there"}),
        json!({"type": "system.llm.request", "messages": [{"role": "user", "content": "Hi"}],
            "extra_params": {"temperature": 0.2}}),
        json!({"type": "system.user.started_speaking", "timestamp": "2030-01-02T03:04:05"}),
        json!({"type": "agent.log", "name": "n", "payload": {"a": [1, {"b": null}]}}),
        json!({"type": "agent.transfer_call", "transfer_call_number": "+1555",
            "transfer_options": {"type": "cold_transfer"}, "on_hold_music": "none"}),
    ]
    .iter()
    .map(|frame| frame.to_string().into_bytes())
    .collect()
}

fn wrong_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
        Just(json!([1, 2])),
        Just(json!({"x": {}})),
    ]
}

/// Frames of every kind of badness (some turn out valid; the test keeps the bad ones).
fn frame() -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds();
    let mutated = (
        prop::sample::select(seeds),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    )
        .prop_map(|(mut bytes, edits)| {
            for (at, byte) in edits {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
            bytes
        });
    let wrong_types = (
        prop::sample::select(vec![
            ("agent.transcript.update", "role"),
            ("agent.transcript.update", "content"),
            ("system.llm.request", "messages"),
            ("system.llm.request", "extra_params"),
            ("agent.speak", "text"),
            ("agent.error", "severity"),
            ("agent.transfer_call", "transfer_options"),
            ("system.init", "session_context"),
            ("system.output_agent.update_settings", "settings"),
        ]),
        wrong_value(),
    )
        .prop_map(|((event_type, field), value)| {
            let mut frame = json!({"type": event_type});
            frame[field] = value;
            frame.to_string().into_bytes()
        });
    let deep = (90_usize..2000, prop::bool::ANY).prop_map(|(depth, objects)| {
        let (open, close) = if objects {
            (r#"{"a":"#, "}")
        } else {
            ("[", "]")
        };
        format!(
            r#"{{"type":"agent.log","name":"n","payload":{{"x":{}1{}}}}}"#,
            open.repeat(depth),
            close.repeat(depth)
        )
        .into_bytes()
    });
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        "\\PC{0,200}".prop_map(String::into_bytes),
        mutated,
        wrong_types,
        deep,
        Just(b"{\"type\": 7}".to_vec()),
        Just(b"{\"type\": \"system.nope\"}".to_vec()),
        Just(b"[{\"type\": \"agent.ready\"}]".to_vec()),
    ]
}

/// `n` generated frames the decoder refuses, with the kind of each.
fn bad_frames(n: usize) -> Vec<(Vec<u8>, FrameDrop)> {
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let strategy = frame();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let bytes = strategy.new_tree(&mut runner).expect("a frame").current();
        if let Err(error) = decode(&bytes) {
            let kind = drop_kind(&error);
            out.push((bytes, kind));
        }
    }
    out
}

fn frame_count() -> usize {
    std::env::var("CREWLINE_BAD_FRAMES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(BAD_FRAMES)
}

#[tokio::test]
async fn a_corpus_of_bad_frames_is_dropped_and_counted_by_kind_and_the_call_goes_on() {
    let server = TestServer::ready(CrewServer::new(echo_setup).max_frame_bytes(LIMIT)).await;
    let mut client = server.call("Ada").await;
    let frames = bad_frames(frame_count());
    let mut expected = std::collections::HashMap::new();
    for (i, (bytes, kind)) in frames.iter().enumerate() {
        *expected.entry(kind.as_str()).or_insert(0_u64) += 1;
        // Text frames must be UTF-8 on the wire; the rest go as binary.
        match String::from_utf8(bytes.clone()) {
            Ok(text) if i % 2 == 0 => client.send_text(&text).await,
            _ => client.send_bytes(bytes.clone()).await,
        }
        // Every so often, the call still answers.
        if i % 250 == 249 {
            let words = format!("still there {i}");
            let (_, text) = client.turn(&words).await;
            assert_eq!(text, expected_answer("Ada", &words));
        }
    }
    let (_, text) = client.turn("the end").await;
    assert_eq!(text, expected_answer("Ada", "the end"));

    let metrics = server.handle.metrics();
    let mut kinds_seen = 0;
    for kind in KINDS {
        let want = expected.get(kind.as_str()).copied().unwrap_or(0);
        assert_eq!(metrics.dropped_frames(kind), want, "{kind:?}");
        if want > 0 {
            kinds_seen += 1;
        }
    }
    eprintln!(
        "bad frames sent through the server: {}, by kind: {expected:?}",
        frames.len()
    );
    assert_eq!(kinds_seen, KINDS.len(), "{expected:?}");
    assert_eq!(server.handle.active_sessions(), 1);
    client.close().await;
    server.wait_for_active(0).await;
}

/// A transcript update of exactly `size` bytes.
fn transcript_of_size(size: usize) -> Vec<u8> {
    let empty = json!({"type": "agent.transcript.update", "role": "user", "content": ""})
        .to_string()
        .into_bytes();
    let padding = size - empty.len();
    json!({"type": "agent.transcript.update", "role": "user", "content": "x".repeat(padding)})
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn frames_at_the_limit_pass_and_one_byte_over_closes_the_call_with_1009() {
    let server = TestServer::ready(CrewServer::new(echo_setup).max_frame_bytes(LIMIT)).await;

    // At the limit: accepted (the transcript comes back as its echo), as text and as binary.
    let mut client = server.call("Ada").await;
    let at_limit = transcript_of_size(LIMIT);
    client.send_bytes(at_limit.clone()).await;
    assert_eq!(client.recv().await["type"], "agent.transcript.update");
    client
        .send_text(std::str::from_utf8(&at_limit).expect("UTF-8"))
        .await;
    assert_eq!(client.recv().await["type"], "agent.transcript.update");
    // Deeply nested and undecodable frames just under the limit are dropped, not fatal.
    client.send_text(&"[".repeat(LIMIT)).await;
    let mut garbage = vec![0xff_u8; LIMIT];
    garbage[0] = b'{';
    client.send_bytes(garbage).await;
    let (_, text) = client.turn("still here").await;
    assert_eq!(text, expected_answer("Ada", "still here"));

    // One byte over: fatal agent.error and 1009.
    client.send_bytes(transcript_of_size(LIMIT + 1)).await;
    let (frames, close) = client.recv_until_close().await;
    assert!(
        frames.iter().any(|f| f["type"] == "agent.error"),
        "{frames:?}"
    );
    assert_eq!(close.expect("a close frame").code, 1009);

    // A message over the limit in small fragments, each under it, is refused the same way.
    let mut client = server.call("Bo").await;
    let whole = transcript_of_size(LIMIT + 1);
    let pieces: Vec<&[u8]> = whole.chunks(LIMIT / 4).collect();
    client
        .socket
        .send_fragments(&pieces)
        .await
        .expect("send the fragments");
    let (_, close) = client.recv_until_close().await;
    assert_eq!(close.expect("a close frame").code, 1009);

    server.wait_for_active(0).await;
    let metrics = server.handle.metrics();
    assert_eq!(metrics.dropped_frames(FrameDrop::TooBig), 2);
    assert_eq!(metrics.dropped_frames(FrameDrop::TooDeep), 1);
    assert_eq!(metrics.dropped_frames(FrameDrop::NotUtf8), 1);
}
