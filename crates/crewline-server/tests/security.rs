//! Security: with authentication on, a connection without the right token is refused before
//! the upgrade, so none of its frames is read and the crew's setup never runs; and no secret
//! (the LLM API key, the server's token) reaches the logs (every target, at TRACE) or an
//! `agent.error` payload, also when the LLM server echoes the key back.

// A binary of its own, not in tests/it: it installs the process's one global log subscriber
// (`CapturedLogs`) with its own filter and asserts on every line it captured.

#[path = "it/common/mod.rs"]
mod common;
#[path = "it/fake_llm/mod.rs"]
mod fake_llm;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::*;
use crewline::{
    Crew, SessionSetup, ToolLoop, agent::LoopAgent, crew::OutputNode, llm::OpenAiClient,
    tool::ToolRegistry,
};
use crewline_server::{CrewServer, FrameDrop, HandshakeFailure};
use crewline_testkit::CapturedLogs;
use fake_llm::FakeLlm;
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// The server's shared secret.
const TOKEN: &str = "crew-token-7f3a9c1e5b";
/// The LLM API key.
const API_KEY: &str = "sk-live-4e8d2b6a0c9f1735";

/// Everything every test of this binary logs, at TRACE, from every crate (`log` records too),
/// but the test's own WebSocket client: its handshake trace shows the URL it was given, token
/// and all, and it stands for the platform, not for the crew's server.
fn captured_logs() -> &'static CapturedLogs {
    CapturedLogs::install("trace,tungstenite::handshake::client=off")
}

fn logs_text() -> String {
    captured_logs().text()
}

/// A server with `TOKEN` whose crew answers with the real client (key `API_KEY`) on `llm`;
/// counts the setups of real calls.
fn server(llm: &FakeLlm, setups: Arc<AtomicUsize>) -> CrewServer {
    let client = OpenAiClient::builder()
        .model("fake")
        .api_key(API_KEY)
        .base_url(llm.base_url())
        .read_env(false)
        .first_byte_timeout(Duration::from_secs(2))
        .idle_timeout(Duration::from_secs(1))
        .max_retries(1)
        .build()
        .expect("client");
    let tool_loop = ToolLoop::new(Arc::new(client), Arc::new(ToolRegistry::new()));
    CrewServer::new(move |setup: SessionSetup| {
        if !setup.is_dry_run() {
            setups.fetch_add(1, Ordering::SeqCst);
        }
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "agent",
            LoopAgent::new("You answer.", tool_loop.clone()),
        ));
        async move { Ok::<_, std::convert::Infallible>(crew) }
    })
    .auth_token(TOKEN)
}

/// Sends an upgrade request with `auth` (extra header lines) on `path`, immediately followed by
/// a `system.init` frame, as an eager client would; returns the status and whatever came back.
async fn upgrade_then_init(server: &TestServer, path: &str, auth: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{auth}\r\n",
        server.addr
    );
    let mut bytes = request.into_bytes();
    bytes.extend(masked_frame(
        0x2,
        init_frame("intruder").to_string().as_bytes(),
    ));
    stream.write_all(&bytes).await.expect("write");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, async {
        let mut buf = [0_u8; 4096];
        // The answer's head is enough: the refusal has a small body.
        while !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.expect("an answer to the upgrade");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    (status, text)
}

#[tokio::test]
async fn calls_without_the_right_token_are_refused_before_any_frame_is_read() {
    captured_logs();
    let llm = FakeLlm::start().await;
    let setups = Arc::new(AtomicUsize::new(0));
    let server = TestServer::ready(server(&llm, Arc::clone(&setups))).await;

    let attempts = [
        ("/ws", String::new()),
        ("/ws?token=", String::new()),
        ("/ws?token=crew-token-7f3a9c1e5", String::new()),
        ("/ws?token=crew-token-7f3a9c1e5bX", String::new()),
        ("/ws?tok=crew-token-7f3a9c1e5b", String::new()),
        ("/ws", "Authorization: Bearer wrong\r\n".to_owned()),
        ("/ws", format!("Authorization: Basic {TOKEN}\r\n")),
        ("/ws", format!("Authorization: Bearer{TOKEN}\r\n")),
        ("/ws", format!("X-Token: {TOKEN}\r\n")),
        ("/ws", format!("Cookie: token={TOKEN}\r\n")),
    ];
    for (path, auth) in &attempts {
        let (status, answer) = upgrade_then_init(&server, path, auth).await;
        assert_eq!(status, 401, "{path} {auth}: {answer}");
        assert!(answer.contains("Bearer"), "{answer}");
        assert!(!answer.contains("agent.ready"), "{answer}");
    }

    let metrics = server.handle.metrics();
    assert_eq!(
        metrics.handshake_failures(HandshakeFailure::Unauthorized),
        attempts.len() as u64
    );
    // No call was started, no setup ran, no frame was read (not even as a bad one).
    assert_eq!(setups.load(Ordering::SeqCst), 0);
    assert_eq!(metrics.sessions_total(), 0);
    assert_eq!(server.handle.active_sessions(), 0);
    for reason in [
        FrameDrop::NotJson,
        FrameDrop::NotUtf8,
        FrameDrop::NotAnObject,
        FrameDrop::MissingType,
        FrameDrop::UnknownType,
        FrameDrop::InvalidFields,
        FrameDrop::TooDeep,
        FrameDrop::TooBig,
    ] {
        assert_eq!(metrics.dropped_frames(reason), 0, "{reason:?}");
    }
    assert_eq!(llm.total(), 0);

    // The right token, in the header, opens a call (and only then does setup run).
    let (status, answer) = upgrade_then_init(
        &server,
        "/ws",
        &format!("Authorization: Bearer {TOKEN}\r\n"),
    )
    .await;
    assert_eq!(status, 101, "{answer}");
    eventually("the authorised call's setup", || async {
        setups.load(Ordering::SeqCst) == 1
    })
    .await;
}

#[tokio::test]
async fn no_secret_reaches_the_logs_or_agent_error_payloads() {
    captured_logs();
    let llm = FakeLlm::start().await;
    let setups = Arc::new(AtomicUsize::new(0));
    let server = TestServer::ready(server(&llm, setups)).await;

    // Refused attempts with near-miss tokens, and calls with the right one both ways.
    let _ = upgrade_then_init(&server, "/ws?token=wrong-guess", "").await;
    let mut frames: Vec<Value> = Vec::new();
    let mut in_query = Client::connect(&format!("{}?token={TOKEN}", server.ws_url())).await;
    in_query.send(&init_frame("Ada")).await;
    frames.push(in_query.recv().await);
    let mut config = PlatformConfig::new(server.ws_url());
    config.token = Some(TOKEN.to_owned());
    let mut in_header = Client::connect_with(config).await;
    in_header.send(&init_frame("Bo")).await;
    frames.push(in_header.recv().await);

    // Turns that fail in every way the client reports: the key must not surface in any.
    for words in [
        "fault:echo-key hello",
        "fault:500 hello",
        "fault:cut hello",
        "fault:error-event hello",
        "fault:stall-mid hello",
        "a healthy turn",
    ] {
        let (turn, _) = in_query.turn(words).await;
        frames.extend(turn);
        let (turn, _) = in_header.turn(words).await;
        frames.extend(turn);
    }
    in_query.close().await;
    in_header.close().await;
    server.wait_for_active(0).await;

    // The echoed key did come back from the server, so the test can see a leak.
    let errors: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "agent.error")
        .collect();
    assert_eq!(errors.len(), 2 * 5, "{frames:#?}");
    let echoed = errors
        .iter()
        .find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("HTTP 401"))
        })
        .expect("the 401 error");
    assert!(
        echoed["message"]
            .as_str()
            .is_some_and(|m| m.contains("<redacted>")),
        "{echoed}"
    );

    let all_frames = serde_json::to_string(&frames).expect("JSON");
    let logs = logs_text();
    assert!(
        logs.contains("refused requests without a valid credential"),
        "the capture works: {logs:.2000}"
    );
    for secret in [API_KEY, TOKEN] {
        assert!(!all_frames.contains(secret), "{secret} in frames");
        let line = logs.lines().find(|line| line.contains(secret));
        assert!(line.is_none(), "{secret} in the logs: {line:?}");
    }
}

/// Sends `GET path` with the extra header lines `auth`; returns the status.
async fn status_of(server: &TestServer, path: &str, auth: &str) -> u16 {
    http_request(
        server.addr,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\n{auth}Connection: close\r\n\r\n",
            server.addr
        ),
    )
    .await
    .status
}

#[tokio::test]
async fn neither_token_form_reaches_a_log_line_on_any_route() {
    captured_logs();
    let llm = FakeLlm::start().await;
    // A merged route that logs its whole URI at INFO: it must never see `?token=`.
    let merged = axum::Router::new().route(
        "/extra",
        axum::routing::get(|uri: axum::http::Uri| async move {
            tracing::info!(%uri, "extra route");
            "extra"
        }),
    );
    let server = TestServer::ready(server(&llm, Arc::new(AtomicUsize::new(0))).merge(merged)).await;
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    // Route, status with `?token=`, status with the bearer header.
    let routes = [
        ("/", 401, 200),
        ("/health", 200, 200),
        ("/ready", 200, 200),
        ("/metrics", 401, 200),
        ("/ws", 404, 404),
        ("/extra", 401, 200),
        ("/nowhere", 401, 404),
    ];
    for (path, with_query, with_header) in routes {
        let query_path = format!("{path}?a=1&token={TOKEN}");
        assert_eq!(
            status_of(&server, &query_path, "").await,
            with_query,
            "{query_path}"
        );
        assert_eq!(
            status_of(&server, path, &bearer).await,
            with_header,
            "{path}"
        );
        let both = format!("{path}?token={TOKEN}");
        assert_eq!(
            status_of(&server, &both, &bearer).await,
            with_header,
            "{both}"
        );
    }
    // A real call with each form, so `/ws` runs its upgrade and session spans too.
    let mut in_query = Client::connect(&format!("{}?token={TOKEN}", server.ws_url())).await;
    in_query.send(&init_frame("Ada")).await;
    let ready = in_query.recv().await;
    assert_eq!(ready["type"], "agent.ready", "{ready}");
    in_query.close().await;
    server.wait_for_active(0).await;

    let logs = logs_text();
    assert!(
        logs.contains("extra route"),
        "the capture works: {logs:.2000}"
    );
    let line = logs.lines().find(|line| line.contains(TOKEN));
    assert!(line.is_none(), "the token in the logs: {line:?}");
}
