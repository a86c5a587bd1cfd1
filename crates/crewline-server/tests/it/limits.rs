//! The limits on what one caller or connection can hold (issue 14, "Limits on every input"):
//! `max_sessions`, pings and the idle timeout, the write timeout, the inbox byte budget, the
//! header-read timeout, a bounded shutdown, truncated platform ids, and the dry run retried.

use crate::common;

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{body::Body, routing::get};
use common::*;
use crewline::{
    Crew, SessionSetup, TurnEvent,
    crew::{OutputAgent, OutputNode},
    turn::TurnStream,
    types::Context,
};
use crewline_server::{CrewServer, ErrorKind, HandshakeFailure};
use futures::stream;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
};

// ---------------------------------------------------------------------------------------------
// A raw platform: an HTTP upgrade and masked frames written by hand, so that the test decides
// exactly what is read and answered (no library answering pings behind its back).

/// Sends the WebSocket upgrade request for `/ws` and reads the `101` response's head.
async fn raw_upgrade(stream: &mut TcpStream, addr: SocketAddr) {
    let request = format!(
        "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(WAIT, stream.read(&mut byte))
            .await
            .expect("upgrade response timeout")
            .expect("read");
        assert_eq!(read, 1, "the server closed during the upgrade");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
}

async fn send_json(stream: &mut TcpStream, frame: &Value) {
    let bytes = masked_frame(0x2, frame.to_string().as_bytes());
    stream.write_all(&bytes).await.expect("write a frame");
}

/// A raw call on `socket`: upgraded, `system.init` sent. Nothing is read after the upgrade.
async fn raw_call(socket: TcpSocket, addr: SocketAddr) -> TcpStream {
    let mut stream = socket.connect(addr).await.expect("connect");
    raw_upgrade(&mut stream, addr).await;
    send_json(&mut stream, &init_frame("raw")).await;
    stream
}

fn tcp_socket() -> TcpSocket {
    TcpSocket::new_v4().expect("socket")
}

// ---------------------------------------------------------------------------------------------
// Agents.

/// Sets its flag when dropped: tells the test that a turn's stream is gone.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Every turn streams 16 KiB chunks for ever; counts them and flags the turn's end.
struct FloodAgent {
    context: Context,
    produced: Arc<AtomicUsize>,
    turn_dropped: Arc<AtomicBool>,
}

impl OutputAgent for FloodAgent {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }

    fn generate_response(&mut self) -> TurnStream<'_> {
        let produced = Arc::clone(&self.produced);
        let flag = DropFlag(Arc::clone(&self.turn_dropped));
        let chunk = "x".repeat(16 * 1024);
        Box::pin(stream::repeat_with(move || {
            let _held = &flag;
            produced.fetch_add(1, Ordering::SeqCst);
            Ok(TurnEvent::Text(chunk.clone()))
        }))
    }
}

#[derive(Clone, Default)]
struct Flood {
    produced: Arc<AtomicUsize>,
    turn_dropped: Arc<AtomicBool>,
}

impl Flood {
    fn server(&self) -> CrewServer {
        let flood = self.clone();
        CrewServer::new(move |_setup: SessionSetup| {
            let mut crew = Crew::new();
            crew.add_node(OutputNode::new(
                "flood",
                FloodAgent {
                    context: Context::with_system("You never stop."),
                    produced: Arc::clone(&flood.produced),
                    turn_dropped: Arc::clone(&flood.turn_dropped),
                },
            ));
            async move { Ok::<_, Infallible>(crew) }
        })
    }

    /// Waits until the agent has stopped producing: its chunks wait behind a blocked socket.
    async fn wait_until_blocked(&self) {
        let deadline = Instant::now() + WAIT;
        let mut last = usize::MAX;
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = self.produced.load(Ordering::SeqCst);
            if now == last && now > 0 {
                return;
            }
            last = now;
            assert!(Instant::now() < deadline, "the answer never blocked");
        }
    }
}

/// Every turn waits for ever without a word: the node never takes its next event.
struct StuckAgent {
    context: Context,
}

impl OutputAgent for StuckAgent {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }

    fn generate_response(&mut self) -> TurnStream<'_> {
        Box::pin(stream::pending())
    }
}

// ---------------------------------------------------------------------------------------------
// max_sessions

#[tokio::test]
async fn a_call_past_max_sessions_is_refused_with_503_before_the_upgrade() {
    let server = TestServer::ready(CrewServer::new(echo_setup).max_sessions(2)).await;
    let first = server.call("Ada").await;
    let _second = server.call("Grace").await;

    let refused = refusal(&server.ws_url()).await;
    assert!(refused_with(&refused, 503), "{refused:?}");
    let metrics = server.handle.metrics();
    assert_eq!(metrics.handshake_failures(HandshakeFailure::Full), 1);
    assert!(
        server
            .get("/metrics")
            .await
            .body
            .contains("crewline_handshake_failures_total{reason=\"full\"} 1")
    );

    // A call that hangs up makes room for the next.
    first.close().await;
    server.wait_for_active(1).await;
    let mut third = server.call("Linus").await;
    let (_, text) = third.turn("hi").await;
    assert_eq!(text, expected_answer("Linus", "hi"));
}

// ---------------------------------------------------------------------------------------------
// Pings and the idle timeout

#[tokio::test]
async fn a_half_open_call_that_never_answers_pings_is_closed_after_the_idle_timeout() {
    let server = TestServer::ready(
        CrewServer::new(echo_setup)
            .ping_interval(Duration::from_millis(100))
            .idle_timeout(Duration::from_millis(400)),
    )
    .await;
    // Upgrades, sends system.init, then neither reads nor writes: pings go unanswered.
    let _silent = raw_call(tcp_socket(), server.addr).await;
    server.wait_for_active(1).await;

    server.wait_for_active(0).await;
    let metrics = server.handle.metrics();
    assert_eq!(metrics.errors(ErrorKind::IdleTimeout), 1);
}

#[tokio::test]
async fn a_silent_caller_who_answers_pings_stays_on_the_call() {
    let server = TestServer::ready(
        CrewServer::new(echo_setup)
            .ping_interval(Duration::from_millis(100))
            .idle_timeout(Duration::from_millis(400)),
    )
    .await;
    let mut client = server.call("Ada").await;
    // Reading answers the pings (the WebSocket library replies with pongs), and nothing else
    // is sent for five idle timeouts.
    let pings = tokio::time::timeout(Duration::from_secs(2), async {
        let mut pings = 0;
        while let Ok(Some(frame)) = client.socket.next_frame().await {
            if matches!(frame, RawFrame::Ping(_)) {
                pings += 1;
            }
        }
        pings
    })
    .await;
    assert!(pings.is_err(), "the call ended while the caller was silent");
    assert_eq!(server.handle.active_sessions(), 1);
    assert_eq!(server.handle.metrics().errors(ErrorKind::IdleTimeout), 0);
    let (_, text) = client.turn("still there?").await;
    assert_eq!(text, expected_answer("Ada", "still there?"));
}

// ---------------------------------------------------------------------------------------------
// The write timeout

/// A client socket with a tiny receive buffer, so that a platform that stops reading blocks
/// the server's writes early.
fn small_buffer_socket() -> TcpSocket {
    let socket = tcp_socket();
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    socket
}

#[tokio::test]
async fn a_platform_that_stops_reading_mid_answer_is_ended_by_the_write_timeout() {
    let flood = Flood::default();
    let server = TestServer::ready(
        flood
            .server()
            .write_timeout(Duration::from_millis(300))
            .ping_interval(Duration::from_secs(60))
            .idle_timeout(Duration::from_secs(60)),
    )
    .await;
    let mut platform = raw_call(small_buffer_socket(), server.addr).await;
    send_json(&mut platform, &llm_request("talk")).await;
    // The platform reads nothing: the answer fills the socket, then the writer's queue.
    server.wait_for_active(1).await;

    server.wait_for_active(0).await;
    assert_eq!(server.handle.metrics().errors(ErrorKind::WriteTimeout), 1);
    // The session was shut down: the turn's stream is gone.
    assert!(flood.turn_dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_barge_in_stops_the_turn_while_the_platform_is_not_reading() {
    let flood = Flood::default();
    let server = TestServer::ready(
        flood
            .server()
            // Far longer than the test's waits: only the barge-in may stop the turn here.
            .write_timeout(Duration::from_secs(120))
            .ping_interval(Duration::from_secs(120))
            .idle_timeout(Duration::from_secs(120)),
    )
    .await;
    let mut platform = raw_call(small_buffer_socket(), server.addr).await;
    send_json(&mut platform, &llm_request("talk")).await;
    flood.wait_until_blocked().await;
    assert!(!flood.turn_dropped.load(Ordering::SeqCst));

    send_json(&mut platform, &json!({"type": "system.control.interrupt"})).await;
    eventually("the barge-in to stop the turn", || async {
        flood.turn_dropped.load(Ordering::SeqCst)
    })
    .await;
    assert_eq!(server.handle.active_sessions(), 1);
}

// ---------------------------------------------------------------------------------------------
// Control frames and a platform that does not read (issue 30)

#[tokio::test]
async fn a_ping_flood_from_a_platform_that_never_reads_is_closed() {
    let server = TestServer::ready(
        CrewServer::new(echo_setup)
            // Far longer than the test's waits: no ping or idle timer may end this call.
            .ping_interval(Duration::from_secs(120))
            .idle_timeout(Duration::from_secs(120))
            .write_timeout(Duration::from_millis(500)),
    )
    .await;
    let mut platform = raw_call(small_buffer_socket(), server.addr).await;
    server.wait_for_active(1).await;
    // Pings with the largest payload, as fast as the socket takes them; nothing is read, so
    // every pong the server owes stays with the server.
    let burst = masked_frame(0x9, &[0x55; 125]).repeat(1000);
    let flooding = tokio::spawn(async move { while platform.write_all(&burst).await.is_ok() {} });

    server.wait_for_active(0).await;
    assert_eq!(server.handle.metrics().errors(ErrorKind::ControlFlood), 1);
    // Cut off by the flood's cap, not by a write that timed out.
    assert_eq!(server.handle.metrics().errors(ErrorKind::WriteTimeout), 0);
    flooding.abort();
}

#[tokio::test]
async fn a_ping_flood_before_system_init_is_closed_too() {
    let server = TestServer::ready(
        CrewServer::new(echo_setup)
            .handshake_timeout(Duration::from_secs(120))
            .write_timeout(Duration::from_millis(500)),
    )
    .await;
    let mut platform = small_buffer_socket()
        .connect(server.addr)
        .await
        .expect("connect");
    raw_upgrade(&mut platform, server.addr).await;
    let burst = masked_frame(0x9, &[0x55; 125]).repeat(1000);
    let flooding = tokio::spawn(async move { while platform.write_all(&burst).await.is_ok() {} });

    eventually("the flood to be counted", || async {
        server.handle.metrics().errors(ErrorKind::ControlFlood) == 1
    })
    .await;
    server.wait_for_active(0).await;
    flooding.abort();
}

#[tokio::test]
async fn a_platform_that_pings_at_a_sane_rate_keeps_its_call() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let mut client = server.call("Ada").await;
    for _ in 0..20 {
        client
            .socket
            .send_ping(b"still here".to_vec())
            .await
            .expect("ping");
        assert!(matches!(client.next_frame().await, RawFrame::Pong(_)));
    }
    let (_, text) = client.turn("hi").await;
    assert_eq!(text, expected_answer("Ada", "hi"));
    assert_eq!(server.handle.metrics().errors(ErrorKind::ControlFlood), 0);
}

/// Every turn says one 5 MiB chunk, then a short one.
struct HugeChunkAgent {
    context: Context,
}

impl OutputAgent for HugeChunkAgent {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }

    fn generate_response(&mut self) -> TurnStream<'_> {
        Box::pin(stream::iter([
            Ok(TurnEvent::Text("y".repeat(5 << 20))),
            Ok(TurnEvent::Text("still here".to_owned())),
        ]))
    }
}

#[tokio::test]
async fn an_outbound_event_over_the_frame_limit_becomes_an_agent_error_and_the_call_goes_on() {
    let server = TestServer::ready(CrewServer::new(|_setup: SessionSetup| {
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "huge",
            HugeChunkAgent {
                context: Context::with_system("You say too much."),
            },
        ));
        async move { Ok::<_, Infallible>(crew) }
    }))
    .await;
    let mut client = server.call("Ada").await;
    let (frames, text) = client.turn("talk").await;
    assert_eq!(text, "still here");
    let error = frames
        .iter()
        .find(|frame| frame["type"] == "agent.error")
        .expect("an agent.error in place of the huge chunk");
    assert_eq!(error["payload"]["reason"], "event_too_large", "{error}");
    assert_eq!(error["severity"], "warning", "{error}");
    assert_eq!(server.handle.active_sessions(), 1);
}

// ---------------------------------------------------------------------------------------------
// The inbox byte budget

#[tokio::test]
async fn events_past_the_inbox_byte_budget_are_refused_with_an_error_to_the_platform() {
    let server = TestServer::ready(
        CrewServer::new(|_setup: SessionSetup| {
            let mut crew = Crew::new();
            crew.add_node(OutputNode::new(
                "stuck",
                StuckAgent {
                    context: Context::with_system("You think for ever."),
                },
            ));
            async move { Ok::<_, Infallible>(crew) }
        })
        .inbox_bytes(256 * 1024),
    )
    .await;
    let mut client = server.call("Ada").await;
    // The node takes the request and is then stuck in its turn: what follows waits.
    client.send(&llm_request("think")).await;
    client.recv_until("agent.llm.response.start").await;
    let words = "w".repeat(100 * 1024);
    for _ in 0..3 {
        client
            .send(&json!({"type": "agent.transcript.update", "role": "user", "content": words}))
            .await;
    }
    // Two fit in 256 KiB; the third is dropped, and the platform is told.
    let error = client
        .recv_until("agent.error")
        .await
        .pop()
        .expect("a frame");
    assert_eq!(error["payload"]["reason"], "inbox_full", "{error}");
    assert_eq!(error["severity"], "warning", "{error}");
    let message = error["message"].as_str().expect("a message");
    assert!(message.contains("agent.transcript.update"), "{message}");
    assert_eq!(server.handle.metrics().dropped_events("inbox_bytes"), 1);
    // The call goes on.
    assert_eq!(server.handle.active_sessions(), 1);
}

// ---------------------------------------------------------------------------------------------
// The header-read timeout

#[tokio::test]
async fn a_client_that_sends_half_a_request_line_is_disconnected_after_the_header_timeout() {
    let server = TestServer::ready(
        CrewServer::new(echo_setup).header_read_timeout(Duration::from_millis(300)),
    )
    .await;
    for partial in ["GET /hea", ""] {
        let mut stream = TcpStream::connect(server.addr).await.expect("connect");
        stream.write_all(partial.as_bytes()).await.expect("write");
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await;
        assert!(
            closed.is_ok(),
            "a client that sent {partial:?} was still connected after {WAIT:?}"
        );
    }
    // A whole request on time is still served.
    assert_eq!(server.get("/health").await.status, 200);
}

// ---------------------------------------------------------------------------------------------
// A bounded shutdown

#[tokio::test]
async fn shutdown_returns_within_the_drain_deadline_despite_an_endless_stream_and_open_calls() {
    let drain = Duration::from_millis(500);
    let endless = axum::Router::new().route(
        "/events",
        get(|| async { Body::from_stream(stream::pending::<Result<String, Infallible>>()) }),
    );
    let mut server = TestServer::ready(
        CrewServer::new(echo_setup)
            .merge(endless)
            .drain_timeout(drain),
    )
    .await;
    // A long-lived streaming GET (an MCP event stream), its head read.
    let mut events = TcpStream::connect(server.addr).await.expect("connect");
    let request = format!("GET /events HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    events.write_all(request.as_bytes()).await.expect("write");
    let mut head = [0u8; 12];
    events
        .read_exact(&mut head)
        .await
        .expect("the stream's head");
    assert_eq!(&head, b"HTTP/1.1 200");
    // A call that goes on, answering the close when it comes...
    let mut talking = server.call("Ada").await;
    let talking = tokio::spawn(async move { talking.recv_until_close().await });
    // ... and one that never reads again, so never answers it.
    let _deaf = raw_call(tcp_socket(), server.addr).await;
    server.wait_for_active(2).await;

    let started = Instant::now();
    server.signal_shutdown();
    // The drain deadline, the close timeout (5 s) and a few seconds for the connections.
    let bound = drain + Duration::from_secs(10);
    tokio::time::timeout(bound, server.join())
        .await
        .unwrap_or_else(|_| panic!("serve_with_shutdown still running after {bound:?}"))
        .expect("served");
    let (_, close) = talking.await.expect("the talking call");
    assert_eq!(close.map(|frame| frame.code), Some(1001));
    assert!(started.elapsed() >= drain);
}

// ---------------------------------------------------------------------------------------------
// Platform ids in logs

/// Collects everything a `fmt` subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_megabyte_call_id_is_truncated_in_spans_and_logs() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // This test's runtime is single-threaded: every task of the server logs here.
    let _default = tracing::subscriber::set_default(subscriber);

    let server = TestServer::ready(CrewServer::new(echo_setup).max_frame_bytes(4 << 20)).await;
    let call_id = "9".repeat(1 << 20);
    let mut init = init_frame("Ada");
    init["session_context"]["conversation_type"] = json!("telephonyInbound");
    init["session_context"]["caller"] = json!({"call_id": call_id});
    let mut client = Client::connect(&server.ws_url()).await;
    client.send(&init).await;
    assert_eq!(client.recv().await["type"], "agent.ready");
    let (_, text) = client.turn("hello").await;
    assert_eq!(text, expected_answer("Ada", "hello"));
    client.close().await;
    server.wait_for_active(0).await;

    let log = captured
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let log = String::from_utf8_lossy(&log);
    // The id is there, cut: the call's lines can still be found by it.
    assert!(log.contains(&format!("{}…", &call_id[..64])), "{log:.2000}");
    assert!(!log.contains(&call_id[..65]), "the whole id was logged");
    assert!(
        log.len() < 256 * 1024,
        "{} bytes of log for one call",
        log.len()
    );
}

// ---------------------------------------------------------------------------------------------
// The dry run retried

#[tokio::test]
async fn ready_turns_200_once_a_failing_setup_recovers_without_a_restart() {
    let dry_runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&dry_runs);
    let server = TestServer::start(CrewServer::new(move |setup: SessionSetup| {
        let attempt = if setup.is_dry_run() {
            counted.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            usize::MAX
        };
        async move {
            if attempt <= 2 {
                return Err(std::io::Error::other("the database is not up yet"));
            }
            Ok(echo_crew(&setup, Duration::ZERO))
        }
    }))
    .await;
    eventually("the first dry run to fail", || async {
        server.get("/ready").await.status == 503 && dry_runs.load(Ordering::SeqCst) >= 1
    })
    .await;

    // Retried after 1 s, then 2 s: the third attempt succeeds.
    server.wait_for_ready().await;
    assert_eq!(dry_runs.load(Ordering::SeqCst), 3);
    let mut client = server.call("Ada").await;
    let (_, text) = client.turn("hi").await;
    assert_eq!(text, expected_answer("Ada", "hi"));
}
