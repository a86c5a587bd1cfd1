//! The WARN lines a caller can cause on every call are written once per interval for all calls,
//! with their count (issue 30, the same class as the refusal log): a token holder opening call
//! after call with a wrong first frame, or sending bad frames, must not write a line each.

// A binary of its own, not in tests/it: it installs the process's one global log subscriber
// (`CapturedLogs`) with its own filter and asserts on every line it captured.

#[path = "it/common/mod.rs"]
mod common;

use common::*;
use crewline_server::{CrewServer, FrameDrop, HandshakeFailure};
use crewline_testkit::CapturedLogs;
use serde_json::json;

fn warn_lines<'a>(text: &'a str, message: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|line| line.contains("WARN") && line.contains(message))
        .collect()
}

#[tokio::test]
async fn calls_with_a_wrong_first_frame_or_bad_frames_write_one_warn_line_each_kind() {
    let logs = CapturedLogs::install("warn");
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    for _ in 0..30 {
        let mut client = Client::connect(&server.ws_url()).await;
        client
            .send(&json!({"type": "system.user.joined", "timestamp": "2030-01-02T03:04:01.001111"}))
            .await;
        let (_, close) = client.recv_until_close().await;
        assert_eq!(close.expect("a close frame").code, 1008);
    }
    let mut client = server.call("Ada").await;
    for _ in 0..30 {
        client.send_text("not an event").await;
    }
    let (_, text) = client.turn("still there?").await;
    assert_eq!(text, expected_answer("Ada", "still there?"));

    let metrics = server.handle.metrics();
    assert_eq!(metrics.handshake_failures(HandshakeFailure::NotInit), 30);
    assert_eq!(metrics.dropped_frames(FrameDrop::NotJson), 30);
    let text = logs.text();
    // The first of each kind is reported at once; the rest wait for the next interval (10 s).
    let not_init = warn_lines(&text, "the first frame is not system.init");
    assert_eq!(not_init.len(), 1, "{not_init:#?}");
    assert!(not_init[0].contains("calls=1"), "{}", not_init[0]);
    let bad = warn_lines(&text, "dropped an inbound frame");
    assert_eq!(bad.len(), 1, "{bad:#?}");
    assert!(bad[0].contains("frames=1"), "{}", bad[0]);
}
