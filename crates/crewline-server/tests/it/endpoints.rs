//! The HTTP endpoints, readiness, authentication, the handshake and the frame limit, against
//! a real server on a loopback port with a real WebSocket client.

use crate::common;

use std::{io, time::Duration};

use common::*;
use crewline::{Crew, SessionSetup};
use crewline_server::{CrewServer, FrameDrop, HandshakeFailure};
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../../tests/fixtures/reference/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("fixture JSON")
}

#[tokio::test]
async fn status_endpoints_match_the_reference_byte_for_byte() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let recorded = fixture("http_endpoints");
    let probes = recorded["http"].as_array().expect("http probes");
    // The probes before the call (steps 0-4): /, /health, /ready, an unknown path, plain /ws.
    for probe in probes.iter().filter(|p| p["step"].as_u64() < Some(5)) {
        let path = probe["path"].as_str().expect("path");
        let response = server.get(path).await;
        assert_eq!(u64::from(response.status), probe["status"], "{path}");
        assert_eq!(response.body, probe["body_raw"], "{path}");
        assert_eq!(
            response.header("content-type"),
            probe["content_type"].as_str(),
            "{path}"
        );
    }
}

#[tokio::test]
async fn other_methods_get_405_in_the_reference_shape() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let response = http_request(
        server.addr,
        "POST /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(response.status, 405);
    assert_eq!(response.body, r#"{"detail":"Method Not Allowed"}"#);
}

#[tokio::test]
async fn merged_routes_are_served_beside_the_crew_routes() {
    let extra = axum::Router::new().route("/extra", axum::routing::get(|| async { "extra" }));
    let server = TestServer::ready(CrewServer::new(echo_setup).merge(extra)).await;
    let response = server.get("/extra").await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, "extra");
    // The crew's own routes and the reference's 404 shape are unchanged.
    assert_eq!(server.get("/health").await.status, 200);
    let missing = server.get("/nowhere").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body, r#"{"detail":"Not Found"}"#);
}

#[tokio::test]
async fn ready_is_503_with_the_reason_when_setup_fails() {
    let server = TestServer::start(CrewServer::new(|_setup: SessionSetup| async {
        Err::<Crew, _>(io::Error::other("OPENAI_API_KEY is not set"))
    }))
    .await;
    let addr = server.addr;
    eventually("the failed dry run", || async move {
        http_get(addr, "/ready")
            .await
            .body
            .contains("OPENAI_API_KEY")
    })
    .await;
    let response = server.get("/ready").await;
    assert_eq!(response.status, 503);
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(
        response.body,
        r#"{"detail":{"status":"not_ready","reason":"crew setup failed: OPENAI_API_KEY is not set"}}"#
    );
    // Liveness and the status page stay up.
    assert_eq!(
        server.get("/health").await.body,
        r#"{"status":"ok","active_sessions":0}"#
    );
    assert_eq!(
        server.get("/").await.body,
        r#"{"status":"running","ready":false,"active_sessions":0}"#
    );
    // A call gets the error and a close frame with a reason.
    let mut client = Client::connect(&server.ws_url()).await;
    client.send(&init_frame("Ada")).await;
    let (frames, close) = client.recv_until_close().await;
    assert_eq!(types(&frames), ["agent.error"]);
    assert_eq!(frames[0]["severity"], "fatal");
    assert_eq!(
        frames[0]["message"],
        "crew setup failed: OPENAI_API_KEY is not set"
    );
    assert_eq!(frames[0]["payload"], json!({"reason": "setup_failed"}));
    let close = close.expect("a close frame");
    assert_eq!(close.code, 1011);
    assert_eq!(close.reason.as_str(), "crew setup failed");
    assert_eq!(
        server
            .handle
            .metrics()
            .handshake_failures(HandshakeFailure::SetupFailed),
        1
    );
}

#[tokio::test]
async fn ready_is_503_when_setup_hangs_past_the_setup_timeout() {
    let server = TestServer::start(
        CrewServer::new(|_setup: SessionSetup| async {
            std::future::pending::<Result<Crew, io::Error>>().await
        })
        .setup_timeout(Duration::from_millis(300)),
    )
    .await;
    let first = server.get("/ready").await;
    assert_eq!(first.status, 503);
    assert_eq!(first.json().expect("JSON")["detail"]["status"], "not_ready");
    let addr = server.addr;
    eventually("the setup timeout", || async move {
        http_get(addr, "/ready")
            .await
            .body
            .contains("did not finish within 300ms")
    })
    .await;
    assert_eq!(server.get("/ready").await.status, 503);
    assert_eq!(server.get("/health").await.status, 200);
}

#[tokio::test]
async fn ready_names_an_invalid_graph() {
    let server = TestServer::start(CrewServer::new(|_setup: SessionSetup| async {
        let mut crew = Crew::new();
        crew.add_edge("agent", "ghost");
        Ok::<_, io::Error>(crew)
    }))
    .await;
    let addr = server.addr;
    eventually("the failed dry run", || async move {
        http_get(addr, "/ready").await.body.contains("invalid crew")
    })
    .await;
    let body = server.get("/ready").await.json().expect("JSON");
    assert!(
        body["detail"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("invalid crew: ")),
        "{body}"
    );
}

#[tokio::test]
async fn a_panicking_setup_fails_its_call_only() {
    let server = TestServer::ready(CrewServer::new(|setup: SessionSetup| async move {
        if setup.initial_variables().get("name") == Some(&json!("panic")) {
            panic!("setup exploded");
        }
        echo_setup(setup).await
    }))
    .await;
    let mut doomed = Client::connect(&server.ws_url()).await;
    doomed.send(&init_frame("panic")).await;
    let (frames, close) = doomed.recv_until_close().await;
    assert_eq!(types(&frames), ["agent.error"]);
    assert_eq!(frames[0]["severity"], "fatal");
    assert_eq!(frames[0]["message"], "crew setup panicked: setup exploded");
    assert_eq!(close.expect("close").code, 1011);

    let mut fine = server.call("Ada").await;
    let (_, text) = fine.turn("still there?").await;
    assert_eq!(text, expected_answer("Ada", "still there?"));
    fine.close().await;
    assert_eq!(
        server
            .handle
            .metrics()
            .handshake_failures(HandshakeFailure::SetupPanicked),
        1
    );
}

#[tokio::test]
async fn auth_is_checked_before_the_upgrade() {
    let server = TestServer::ready(CrewServer::new(echo_setup).auth_token("s3cr3t/+")).await;

    let error = refusal(&server.ws_url()).await;
    assert!(refused_with(&error, 401), "{error:?}");
    let error = refusal(&format!("{}?token=wrong", server.ws_url())).await;
    assert!(refused_with(&error, 401), "{error:?}");
    let mut config = PlatformConfig::new(server.ws_url());
    config.token = Some("not-it".to_owned());
    let error = refusal_with(config).await;
    assert!(refused_with(&error, 401), "{error:?}");

    // The right token, in the header or (percent-encoded) in the query.
    let mut config = PlatformConfig::new(server.ws_url());
    config.token = Some("s3cr3t/+".to_owned());
    let mut client = Client::connect_with(config).await;
    client.send(&init_frame("Ada")).await;
    assert_eq!(client.recv().await["type"], "agent.ready");
    client.close().await;

    let mut client = Client::connect(&format!("{}?token=s3cr3t%2F%2B", server.ws_url())).await;
    client.send(&init_frame("Ada")).await;
    assert_eq!(client.recv().await["type"], "agent.ready");
    client.close().await;

    // The status endpoints need no token.
    assert_eq!(server.get("/health").await.status, 200);
    assert_eq!(
        server
            .handle
            .metrics()
            .handshake_failures(HandshakeFailure::Unauthorized),
        3
    );
}

#[tokio::test]
async fn silence_gets_an_error_and_a_close_frame_after_the_handshake_timeout() {
    let server = TestServer::ready(
        CrewServer::new(echo_setup).handshake_timeout(Duration::from_millis(300)),
    )
    .await;
    let mut client = Client::connect(&server.ws_url()).await;
    // Pings do not count as the first frame.
    client.socket.send_ping(b"hi".to_vec()).await.expect("ping");
    let (frames, close) = client.recv_until_close().await;
    assert_eq!(types(&frames), ["agent.error"]);
    assert_eq!(frames[0]["severity"], "fatal");
    assert_eq!(
        frames[0]["message"],
        "handshake timeout: no system.init within 300ms"
    );
    let close = close.expect("a close frame");
    assert_eq!(close.code, 1008);
    assert_eq!(close.reason.as_str(), "handshake timeout");
    server.wait_for_active(0).await;
    assert_eq!(
        server
            .handle
            .metrics()
            .handshake_failures(HandshakeFailure::Timeout),
        1
    );
}

#[tokio::test]
async fn a_wrong_or_invalid_first_frame_gets_an_error_and_a_close_frame() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let cases: [(Value, &str, &str); 3] = [
        (
            json!({"type": "system.user.joined", "timestamp": "2030-01-02T03:04:01.001111"}),
            "expected system.init as the first frame, got system.user.joined",
            "expected system.init first",
        ),
        (
            json!({"type": "system.init", "version": "1.0",
                   "session_context": {"initial_variables": {}, "caller": null}}),
            "expected system.init as the first frame: invalid `system.init` event",
            "invalid handshake",
        ),
        (
            json!("not an object"),
            "expected system.init as the first frame: frame is not a JSON object",
            "invalid handshake",
        ),
    ];
    for (frame, message, reason) in cases {
        let mut client = Client::connect(&server.ws_url()).await;
        client.send(&frame).await;
        let (frames, close) = client.recv_until_close().await;
        assert_eq!(types(&frames), ["agent.error"], "{frame}");
        assert_eq!(frames[0]["severity"], "fatal");
        let got = frames[0]["message"].as_str().expect("message");
        assert!(got.starts_with(message), "{got}");
        let close = close.expect("a close frame");
        assert_eq!(close.code, 1008);
        assert_eq!(close.reason.as_str(), reason);
    }
    let metrics = server.handle.metrics();
    assert_eq!(metrics.handshake_failures(HandshakeFailure::NotInit), 1);
    assert_eq!(metrics.handshake_failures(HandshakeFailure::BadFrame), 2);
    server.wait_for_active(0).await;
}

#[tokio::test]
async fn an_oversized_frame_closes_the_call_with_1009() {
    let server = TestServer::ready(CrewServer::new(echo_setup).max_frame_bytes(4096)).await;

    // As the first frame.
    let mut client = Client::connect(&server.ws_url()).await;
    client.send_bytes(vec![b' '; 10_000]).await;
    let (frames, close) = client.recv_until_close().await;
    assert_eq!(types(&frames), ["agent.error"]);
    assert_eq!(
        frames[0]["message"],
        "a frame of 10000 bytes is over this server's limit of 4096 bytes"
    );
    assert_eq!(close.expect("close").code, 1009);

    // During a call: frames under the limit pass, the first one over it ends the call.
    let mut client = server.call("Ada").await;
    let (_, text) = client.turn("short").await;
    assert_eq!(text, expected_answer("Ada", "short"));
    let mut big = json!({"type": "agent.transcript.update", "role": "user", "content": ""});
    big["content"] = json!("x".repeat(5000));
    client.send(&big).await;
    let (frames, close) = client.recv_until_close().await;
    let error = frames
        .iter()
        .find(|f| f["type"] == "agent.error")
        .expect("agent.error");
    assert_eq!(error["severity"], "fatal");
    let close = close.expect("close");
    assert_eq!(close.code, 1009);
    assert_eq!(close.reason.as_str(), "frame too large");
    server.wait_for_active(0).await;
    assert_eq!(server.handle.metrics().dropped_frames(FrameDrop::TooBig), 2);
}

#[tokio::test]
async fn metrics_are_served_in_the_prometheus_text_format() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let mut client = server.call("Ada").await;
    client.turn("hello").await;
    client.send_text("not json").await;
    let (_, text) = client.turn("again").await;
    assert_eq!(text, expected_answer("Ada", "again"));

    let response = server.get("/metrics").await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let body = &response.body;
    for line in [
        "# TYPE crewline_active_sessions gauge",
        "crewline_active_sessions 1",
        "crewline_sessions_total 1",
        "crewline_turns_started_total 2",
        "crewline_turns_total{outcome=\"completed\"} 2",
        "crewline_turns_total{outcome=\"failed\"} 0",
        "# TYPE crewline_time_to_first_chunk_seconds histogram",
        "crewline_time_to_first_chunk_seconds_count 2",
        "crewline_turn_duration_seconds_count 2",
        "crewline_llm_time_to_first_token_seconds_count 2",
        "# TYPE crewline_tool_duration_seconds histogram",
        "# TYPE crewline_tool_errors_total counter",
        "crewline_node_errors_total{severity=\"fatal\"} 0",
        "crewline_errors_total{kind=\"bad_frame\"} 1",
        "crewline_dropped_frames_total{reason=\"not_json\"} 1",
        "crewline_dropped_frames_total{reason=\"too_big\"} 0",
        "# TYPE crewline_dropped_events_total counter",
        "crewline_handshake_failures_total{reason=\"timeout\"} 0",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing `{line}` in:\n{body}"
        );
    }
    client.close().await;
    server.wait_for_active(0).await;
    assert!(
        server
            .get("/metrics")
            .await
            .body
            .contains("crewline_active_sessions 0\n")
    );
}
