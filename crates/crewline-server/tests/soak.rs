//! Soak (issues 14 and 30, "Show it"): for minutes, slow readers, a flood of half-open
//! connections, oversized frames, endless lines from the model, ping floods from clients that
//! never read, model answers of 50 MiB of tool-call arguments or 100,000 tool calls, a 1 GiB
//! error body read by the async-openai client, and, on a standalone MCP server in the same
//! process, half-open requests and a flood of sessions, and calls holding unfinished messages
//! past the server's budget, all run beside healthy calls (crew and MCP). The healthy calls
//! must get every answer, right and in time, and the process's memory must stay flat.
//!
//! Behind a flag, as it takes minutes (10 by default):
//!
//! ```sh
//! CREWLINE_SOAK_SECS=600 cargo test --release -p crewline-server --test soak -- --ignored --nocapture
//! ```
//!
//! It prints one line of figures at the end (SECURITY.md quotes them).

// A binary of its own, not in tests/it: it asserts on the process's resident memory.

#[path = "it/common/mod.rs"]
mod common;
#[path = "it/fake_llm/mod.rs"]
mod fake_llm;

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use common::*;
use crewline::{
    Crew, SessionSetup, ToolLoop, agent::LoopAgent, crew::OutputNode, llm::OpenAiClient,
    tool::ToolRegistry,
};
use crewline::{llm::AsyncOpenAiClient, prelude::function_tool, tool::ToolError};
use crewline_mcp::{McpClient, McpServer};
use crewline_server::CrewServer;
use fake_llm::{FakeLlm, echo_answer};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
};

/// Healthy calls, each taking turns back to back for the whole soak.
const HEALTHY_CALLS: usize = 8;
/// The longest a healthy turn may take while the attacks run (its answer takes milliseconds).
const HEALTHY_TURN_BOUND: Duration = Duration::from_secs(3);
/// How much the resident memory may grow from the end of the warm-up to the end.
const RSS_GROWTH_BOUND_KIB: u64 = 64 * 1024;

/// Counters of what the attackers did and what the healthy calls saw.
#[derive(Default)]
struct Figures {
    healthy_turns: AtomicU64,
    healthy_max_ms: AtomicU64,
    slow_readers: AtomicU64,
    slow_readers_closed: AtomicU64,
    half_open: AtomicU64,
    half_open_closed: AtomicU64,
    oversized_frames: AtomicU64,
    endless_lines: AtomicU64,
    endless_lines_failed: AtomicU64,
    ping_floods: AtomicU64,
    ping_floods_closed: AtomicU64,
    pings_sent: AtomicU64,
    huge_answers: AtomicU64,
    huge_answers_failed: AtomicU64,
    largest_frame: AtomicU64,
    huge_error_bodies: AtomicU64,
    huge_error_bodies_failed: AtomicU64,
    mcp_healthy_calls: AtomicU64,
    mcp_half_open: AtomicU64,
    mcp_half_open_closed: AtomicU64,
    mcp_sessions_opened: AtomicU64,
    mcp_sessions_refused: AtomicU64,
    unfinished: AtomicU64,
    unfinished_closed: AtomicU64,
}

/// The longest frame the platform may receive in a turn whose model answer was refused: the
/// refusal is a short `agent.error`, never an echo of the answer.
const REFUSED_ANSWER_FRAME_BOUND: u64 = 64 * 1024;

/// The standalone MCP server's one tool.
#[function_tool(export = "mcp")]
async fn shout(text: String) -> Result<String, ToolError> {
    Ok(text.to_uppercase())
}

/// The server under soak: the real client on the fake model, with the connection limits
/// shortened so that each attacker is turned away many times over the soak.
fn soak_server(client: OpenAiClient) -> CrewServer {
    let tool_loop = ToolLoop::new(Arc::new(client), Arc::new(ToolRegistry::new()));
    CrewServer::new(move |_setup: SessionSetup| {
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "agent",
            LoopAgent::new("You answer.", tool_loop.clone()),
        ));
        async move { Ok::<_, std::convert::Infallible>(crew) }
    })
    .write_timeout(Duration::from_secs(2))
    .ping_interval(Duration::from_secs(2))
    .idle_timeout(Duration::from_secs(5))
    .header_read_timeout(Duration::from_secs(2))
    // Room for about ten held 900 KiB messages: the holders below overdraw it every second.
    .max_pending_bytes(8 << 20)
}

/// The soak's second crew server: the async-openai client on the same fake model.
fn async_openai_server(base_url: &str) -> CrewServer {
    use async_openai::config::OpenAIConfig;
    let config = OpenAIConfig::new()
        .with_api_base(base_url)
        .with_api_key("sk-soak");
    // Bounded as SECURITY.md asks: a plain `Client::with_config` reads any error body whole.
    let http = AsyncOpenAiClient::bounded_client(config, reqwest::Client::new());
    let client = AsyncOpenAiClient::new(http, "fake");
    let tool_loop = ToolLoop::new(Arc::new(client), Arc::new(ToolRegistry::new()));
    CrewServer::new(move |_setup: SessionSetup| {
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "agent",
            LoopAgent::new("You answer.", tool_loop.clone()),
        ));
        async move { Ok::<_, std::convert::Infallible>(crew) }
    })
}

/// The standalone MCP server (`shout`) on 127.0.0.1:0, served until the test ends.
async fn mcp_server() -> SocketAddr {
    let mut tools = ToolRegistry::new();
    tools.register(ShoutTool).expect("shout registers");
    let server = McpServer::new(&tools).expect("shout exports to MCP");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { server.serve_http(listener).await });
    addr
}

/// The process's resident memory, KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Reads until the server closes the connection (or `bound` passes); whether it closed.
async fn closed_by_server(stream: &mut TcpStream, bound: Duration) -> bool {
    let mut buf = vec![0u8; 16 * 1024];
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// Upgrades `stream` to a WebSocket on `/ws` by hand; whether the server said 101.
async fn upgrade(stream: &mut TcpStream, addr: SocketAddr) -> bool {
    let request = format!(
        "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(WAIT, stream.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => return false,
        }
    }
    head.starts_with(b"HTTP/1.1 101")
}

/// A platform that asks for answers and stops reading: its call must be ended by the write
/// timeout, without touching the others.
async fn slow_reader(addr: SocketAddr, figures: &Figures) {
    let socket = TcpSocket::new_v4().expect("socket");
    // A small receive buffer, so the server's socket fills after a few answers.
    let _ = socket.set_recv_buffer_size(4096);
    let Ok(mut stream) = socket.connect(addr).await else {
        return;
    };
    if !upgrade(&mut stream, addr).await {
        return;
    }
    figures.slow_readers.fetch_add(1, Ordering::Relaxed);
    let init = init_frame("slow-reader").to_string();
    let _ = stream.write_all(&masked_frame(0x2, init.as_bytes())).await;
    // Each request is echoed back with its 8 KiB of text, and answered.
    let words = "x".repeat(8 * 1024);
    let request = llm_request(&words).to_string();
    let frame = masked_frame(0x2, request.as_bytes());
    for _ in 0..64 {
        if tokio::time::timeout(Duration::from_millis(500), stream.write_all(&frame))
            .await
            .map_or(true, |written| written.is_err())
        {
            break;
        }
    }
    // Never read; wait for the server to give up on the call (write timeout, then close).
    tokio::time::sleep(Duration::from_secs(6)).await;
    if closed_by_server(&mut stream, Duration::from_secs(10)).await {
        figures.slow_readers_closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// Half-open connections: half a request line, or an upgraded call that never answers pings.
async fn half_open(addr: SocketAddr, upgraded: bool, figures: &Figures) {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return;
    };
    figures.half_open.fetch_add(1, Ordering::Relaxed);
    if upgraded {
        if !upgrade(&mut stream, addr).await {
            return;
        }
    } else if stream.write_all(b"GET /ws HT").await.is_err() {
        return;
    }
    // Never another byte: the header timeout, or (upgraded) the handshake timeout (10 s) plus
    // the closing handshake the client never answers (5 s), must end it.
    let waited = Instant::now();
    if closed_by_server(&mut stream, Duration::from_secs(25)).await {
        figures.half_open_closed.fetch_add(1, Ordering::Relaxed);
    } else {
        eprintln!(
            "half-open (upgraded: {upgraded}) still open after {:?}",
            waited.elapsed()
        );
    }
}

/// A call that holds an unfinished 900 KiB message and sends nothing more: closed by the server,
/// for the budget of unfinished messages or by the idle timeout.
async fn unfinished_holder(addr: SocketAddr, figures: &Figures) {
    let mut stream = unfinished_message(addr).await;
    figures.unfinished.fetch_add(1, Ordering::Relaxed);
    // The idle timeout (5 s) and the close timeout (5 s) for a call the budget let through.
    if closed_by_server(&mut stream, Duration::from_secs(15)).await {
        figures.unfinished_closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// A frame twice the limit: the call is closed with 1009.
async fn oversized_frame(url: &str, figures: &Figures) {
    let mut call = Client::connect(url).await;
    call.send(&init_frame("oversized")).await;
    let _ = call.recv().await;
    let frame = json!({"type": "agent.transcript.update", "role": "user",
        "content": "y".repeat(2 << 20)});
    let _ = call.socket.send_json(&frame).await;
    figures.oversized_frames.fetch_add(1, Ordering::Relaxed);
    drop(call);
}

/// A turn whose model sends an endless line: it must end with `agent.error` and `end`.
async fn endless_line(url: &str, figures: &Figures) {
    let mut call = Client::connect(url).await;
    call.send(&init_frame("endless")).await;
    let _ = call.recv().await;
    figures.endless_lines.fetch_add(1, Ordering::Relaxed);
    let (frames, _) = call.turn("fault:endless-line go on").await;
    if types(&frames).contains(&"agent.error".to_owned()) {
        figures.endless_lines_failed.fetch_add(1, Ordering::Relaxed);
    }
    call.close().await;
}

/// A client that floods pings and never reads: the server must cut it off with its memory
/// bounded (pongs it cannot send are not queued without end).
async fn ping_flood(addr: SocketAddr, figures: &Figures) {
    let socket = TcpSocket::new_v4().expect("socket");
    let _ = socket.set_recv_buffer_size(4096);
    let Ok(mut stream) = socket.connect(addr).await else {
        return;
    };
    if !upgrade(&mut stream, addr).await {
        return;
    }
    figures.ping_floods.fetch_add(1, Ordering::Relaxed);
    let init = init_frame("ping-flood").to_string();
    let _ = stream.write_all(&masked_frame(0x2, init.as_bytes())).await;
    // Many pings to a write: the flood is bounded by the socket, not by the loop.
    let batch: Vec<u8> = (0..64)
        .flat_map(|_| masked_frame(0x9, &[b'p'; 125]))
        .collect();
    let flooding = Instant::now();
    while flooding.elapsed() < Duration::from_secs(8) {
        match tokio::time::timeout(Duration::from_millis(500), stream.write_all(&batch)).await {
            Ok(Ok(())) => {
                figures.pings_sent.fetch_add(64, Ordering::Relaxed);
            }
            // The server stopped reading (it cut us off, or its socket is full): stop.
            Ok(Err(_)) | Err(_) => break,
        }
    }
    if closed_by_server(&mut stream, Duration::from_secs(15)).await {
        figures.ping_floods_closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// A turn whose model answer is far over any real one (`fault:huge-args` or
/// `fault:many-calls`): it must end with `agent.error` and `end`, put no large frame on the
/// wire, and leave the call working.
async fn huge_answer(url: &str, fault: &str, figures: &Figures) {
    let mut call = Client::connect(url).await;
    call.send(&init_frame("huge-answer")).await;
    let _ = call.recv().await;
    figures.huge_answers.fetch_add(1, Ordering::Relaxed);
    let (frames, _) = call.turn(&format!("{fault} go on")).await;
    let largest = frames
        .iter()
        .map(|frame| frame.to_string().len() as u64)
        .max()
        .unwrap_or(0);
    figures.largest_frame.fetch_max(largest, Ordering::Relaxed);
    let words = "after the huge answer";
    let (_, text) = call.turn(words).await;
    if types(&frames).contains(&"agent.error".to_owned()) && text == echo_answer(words) {
        figures.huge_answers_failed.fetch_add(1, Ordering::Relaxed);
    } else {
        eprintln!(
            "a huge answer ({fault}) did not end cleanly: {:?}",
            types(&frames)
        );
    }
    call.close().await;
}

/// A turn on the async-openai client whose model answers 400 with a 1 GiB body.
async fn huge_error_body(url: &str, figures: &Figures) {
    let mut call = Client::connect(url).await;
    call.send(&init_frame("huge-error")).await;
    let _ = call.recv().await;
    figures.huge_error_bodies.fetch_add(1, Ordering::Relaxed);
    let (frames, _) = call.turn("fault:huge-error go on").await;
    let largest = frames
        .iter()
        .map(|frame| frame.to_string().len() as u64)
        .max()
        .unwrap_or(0);
    figures.largest_frame.fetch_max(largest, Ordering::Relaxed);
    if types(&frames).contains(&"agent.error".to_owned()) {
        figures
            .huge_error_bodies_failed
            .fetch_add(1, Ordering::Relaxed);
    }
    call.close().await;
}

/// Half a request line to the MCP server: the header timeout must end it.
async fn mcp_half_open(addr: SocketAddr, figures: &Figures) {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return;
    };
    if stream.write_all(b"POST /mcp HT").await.is_err() {
        return;
    }
    figures.mcp_half_open.fetch_add(1, Ordering::Relaxed);
    if closed_by_server(&mut stream, Duration::from_secs(25)).await {
        figures.mcp_half_open_closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// MCP `initialize` requests that open sessions and never close them.
async fn mcp_session_flood(addr: SocketAddr, sessions: usize, figures: &Figures) {
    const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{INITIALIZE}",
        INITIALIZE.len()
    );
    for _ in 0..sessions {
        match crewline_testkit::platform::http::request_head(addr, &request).await {
            Ok(head) if head.contains(" 200 ") => {
                figures.mcp_sessions_opened.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {
                figures.mcp_sessions_refused.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {}
        }
    }
}

/// An MCP client calling `shout` back to back for the whole soak.
async fn mcp_healthy(addr: SocketAddr, figures: Arc<Figures>, stop: Arc<AtomicBool>) {
    let client = McpClient::connect_http(&format!("http://{addr}/mcp"))
        .await
        .expect("the healthy MCP client connects");
    let tools = client.tools().await.expect("the MCP tools list");
    let shout = tools
        .iter()
        .find(|tool| tool.name() == "shout")
        .expect("shout is listed");
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let text = format!("mcp call {n}");
        let answered = tokio::time::timeout(HEALTHY_TURN_BOUND, shout.call(json!({"text": text})))
            .await
            .unwrap_or_else(|_| panic!("healthy MCP call {n} took over {HEALTHY_TURN_BOUND:?}"))
            .unwrap_or_else(|error| panic!("healthy MCP call {n} failed: {error}"));
        assert_eq!(answered, Value::String(text.to_uppercase()));
        figures.mcp_healthy_calls.fetch_add(1, Ordering::Relaxed);
        n += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak of minutes: CREWLINE_SOAK_SECS=600 cargo test --release -p crewline-server --test soak -- --ignored --nocapture"]
async fn healthy_calls_are_unaffected_and_memory_stays_flat_under_attack() {
    let seconds: u64 = std::env::var("CREWLINE_SOAK_SECS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(600);
    let soak = Duration::from_secs(seconds);
    let warm_up = (soak / 10).max(Duration::from_secs(10));

    let llm = FakeLlm::start().await;
    let server =
        TestServer::ready(soak_server(llm.client_builder().build().expect("client"))).await;
    let url = server.ws_url();
    let addr = server.addr;
    let second = TestServer::ready(async_openai_server(&llm.base_url())).await;
    let async_openai_url = second.ws_url();
    let mcp = mcp_server().await;
    let figures = Arc::new(Figures::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mcp_healthy = tokio::spawn(mcp_healthy(mcp, Arc::clone(&figures), Arc::clone(&stop)));

    let mut healthy = Vec::new();
    for i in 0..HEALTHY_CALLS {
        let (url, figures, stop) = (url.clone(), Arc::clone(&figures), Arc::clone(&stop));
        healthy.push(tokio::spawn(async move {
            let mut call = Client::connect(&url).await;
            call.send(&init_frame(&format!("healthy-{i}"))).await;
            assert_eq!(call.recv().await["type"], "agent.ready");
            let mut turn = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let words = format!("healthy call {i} turn {turn}");
                let asked = Instant::now();
                let (frames, text) = tokio::time::timeout(HEALTHY_TURN_BOUND, call.turn(&words))
                    .await
                    .unwrap_or_else(|_| {
                        panic!("healthy call {i} turn {turn} took over {HEALTHY_TURN_BOUND:?}")
                    });
                assert_eq!(text, echo_answer(&words), "healthy call {i}: {frames:?}");
                let took = asked.elapsed().as_millis() as u64;
                figures.healthy_max_ms.fetch_max(took, Ordering::Relaxed);
                figures.healthy_turns.fetch_add(1, Ordering::Relaxed);
                turn += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            call.close().await;
        }));
    }

    // The attackers: each wave starts its connections and lets them run their course.
    let attackers = {
        let (url, figures, stop) = (url.clone(), Arc::clone(&figures), Arc::clone(&stop));
        // `CREWLINE_SOAK_SKIP=mcp-sessions,huge-answer` leaves attackers out, to find which one
        // a memory growth follows.
        let skip = std::env::var("CREWLINE_SOAK_SKIP").unwrap_or_default();
        tokio::spawn(async move {
            let on = |name: &str| !skip.split(',').any(|skipped| skipped.trim() == name);
            let mut wave = 0u64;
            let mut running = tokio::task::JoinSet::new();
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..2 {
                    let figures = Arc::clone(&figures);
                    running.spawn(async move { slow_reader(addr, &figures).await });
                }
                for n in 0..20u32 {
                    let figures = Arc::clone(&figures);
                    running
                        .spawn(async move { half_open(addr, n.is_multiple_of(4), &figures).await });
                }
                if on("ping-flood") {
                    let flood_figures = Arc::clone(&figures);
                    running.spawn(async move { ping_flood(addr, &flood_figures).await });
                }
                if on("unfinished") {
                    for _ in 0..5 {
                        let figures = Arc::clone(&figures);
                        running.spawn(async move { unfinished_holder(addr, &figures).await });
                    }
                }
                if wave.is_multiple_of(2) {
                    let (frame_url, frame_figures) = (url.clone(), Arc::clone(&figures));
                    running.spawn(async move { oversized_frame(&frame_url, &frame_figures).await });
                    let (line_url, line_figures) = (url.clone(), Arc::clone(&figures));
                    running.spawn(async move { endless_line(&line_url, &line_figures).await });
                    if on("huge-error") {
                        let (error_url, error_figures) =
                            (async_openai_url.clone(), Arc::clone(&figures));
                        running.spawn(
                            async move { huge_error_body(&error_url, &error_figures).await },
                        );
                    }
                }
                if wave.is_multiple_of(4) && on("huge-answer") {
                    let fault = if wave.is_multiple_of(8) {
                        "fault:huge-args"
                    } else {
                        "fault:many-calls"
                    };
                    let (huge_url, huge_figures) = (url.clone(), Arc::clone(&figures));
                    running
                        .spawn(async move { huge_answer(&huge_url, fault, &huge_figures).await });
                }
                if on("mcp-half-open") {
                    for _ in 0..5 {
                        let figures = Arc::clone(&figures);
                        running.spawn(async move { mcp_half_open(mcp, &figures).await });
                    }
                }
                if on("mcp-sessions") {
                    let session_figures = Arc::clone(&figures);
                    running
                        .spawn(async move { mcp_session_flood(mcp, 200, &session_figures).await });
                }
                wave += 1;
                // Reap finished ones so the set stays small.
                while running.try_join_next().is_some() {}
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            while let Some(done) = running.join_next().await {
                done.expect("an attacker panicked");
            }
        })
    };

    tokio::time::sleep(warm_up).await;
    let baseline = rss_kib();
    let mut peak = baseline;
    while started.elapsed() < soak {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let rss = rss_kib();
        // The timeline, so a run that fails its bound shows whether memory levels off.
        eprintln!("soak: {:>4} s, RSS {rss} KiB", started.elapsed().as_secs());
        peak = peak.max(rss);
        for handle in &healthy {
            assert!(!handle.is_finished(), "a healthy call ended early");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for handle in healthy {
        handle.await.expect("a healthy call failed");
    }
    attackers.await.expect("the attackers failed");
    mcp_healthy.await.expect("the healthy MCP client failed");
    // Let the last attackers' calls be cleaned up before the final reading.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let end = rss_kib();

    let f = &figures;
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "soak {seconds} s: healthy turns {} (max {} ms); slow readers {} ({} closed by the \
         server); half-open {} ({} closed); oversized frames {}; endless lines {} ({} failed \
         cleanly); ping floods {} ({} closed, {} pings sent); huge answers {} ({} ended \
         cleanly); 1 GiB error bodies {} ({} ended cleanly); largest frame of those turns {} \
         bytes; healthy MCP calls {}; MCP half-open {} ({} closed); MCP sessions opened {}, \
         refused {}; unfinished messages {} ({} closed, {} of them for \
         the budget); RSS after warm-up {} KiB, peak {} KiB, end {} KiB",
        load(&f.healthy_turns),
        load(&f.healthy_max_ms),
        load(&f.slow_readers),
        load(&f.slow_readers_closed),
        load(&f.half_open),
        load(&f.half_open_closed),
        load(&f.oversized_frames),
        load(&f.endless_lines),
        load(&f.endless_lines_failed),
        load(&f.ping_floods),
        load(&f.ping_floods_closed),
        load(&f.pings_sent),
        load(&f.huge_answers),
        load(&f.huge_answers_failed),
        load(&f.huge_error_bodies),
        load(&f.huge_error_bodies_failed),
        load(&f.largest_frame),
        load(&f.mcp_healthy_calls),
        load(&f.mcp_half_open),
        load(&f.mcp_half_open_closed),
        load(&f.mcp_sessions_opened),
        load(&f.mcp_sessions_refused),
        load(&f.unfinished),
        load(&f.unfinished_closed),
        server
            .handle
            .metrics()
            .errors(crewline_server::ErrorKind::MessageBudget),
        baseline,
        peak,
        end,
    );
    assert!(load(&f.healthy_turns) > 0);
    assert_eq!(
        load(&f.slow_readers),
        load(&f.slow_readers_closed),
        "every slow reader's call is ended by the server"
    );
    assert_eq!(
        load(&f.half_open),
        load(&f.half_open_closed),
        "every half-open connection is closed by the server"
    );
    assert_eq!(
        load(&f.endless_lines),
        load(&f.endless_lines_failed),
        "every endless line ends its turn with agent.error"
    );
    assert_eq!(
        load(&f.ping_floods),
        load(&f.ping_floods_closed),
        "every ping flood is cut off by the server"
    );
    assert_eq!(
        load(&f.huge_answers),
        load(&f.huge_answers_failed),
        "every huge model answer ends its turn with agent.error and the call goes on"
    );
    assert_eq!(
        load(&f.huge_error_bodies),
        load(&f.huge_error_bodies_failed),
        "every 1 GiB error body ends its turn with agent.error"
    );
    assert!(
        load(&f.largest_frame) < REFUSED_ANSWER_FRAME_BOUND,
        "a refused answer put a {} byte frame on the wire",
        load(&f.largest_frame)
    );
    assert!(load(&f.mcp_healthy_calls) > 0);
    assert_eq!(
        load(&f.mcp_half_open),
        load(&f.mcp_half_open_closed),
        "every half-open MCP request is closed by the server"
    );
    assert_eq!(
        load(&f.unfinished),
        load(&f.unfinished_closed),
        "every call holding an unfinished message is closed by the server"
    );
    assert!(
        end.saturating_sub(baseline) < RSS_GROWTH_BOUND_KIB,
        "memory grew from {baseline} KiB to {end} KiB"
    );
}

/// Opens a call and leaves a 900 KiB binary message unfinished (three fragments, no FIN).
async fn unfinished_message(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    assert!(upgrade(&mut stream, addr).await, "upgraded");
    let init = init_frame("unfinished").to_string();
    stream
        .write_all(&masked_frame(0x2, init.as_bytes()))
        .await
        .expect("init");
    let piece = vec![b'u'; 300 * 1024];
    for opcode in [0x2, 0x0, 0x0] {
        let mut frame = masked_frame(opcode, &piece);
        frame[0] &= 0x7f; // not the last fragment
        // A call the server closed for the budget of unfinished messages stops reading: its
        // later writes may fail.
        if stream.write_all(&frame).await.is_err() {
            break;
        }
    }
    stream
}

/// A measurement, not a check (issue 30): the resident memory 200 calls cost while each holds
/// an unfinished 900 KiB message. Run alone:
///
/// ```sh
/// cargo test -p crewline-server --test soak -- --ignored --nocapture unfinished
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test -p crewline-server --test soak -- --ignored --nocapture unfinished"]
async fn unfinished_messages_cost_per_call() {
    const CALLS: usize = 200;
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let before = rss_kib();
    let mut calls = Vec::new();
    for _ in 0..CALLS {
        calls.push(unfinished_message(server.addr).await);
    }
    server.wait_for_active(CALLS).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_kib();
    println!(
        "{CALLS} calls each holding an unfinished 900 KiB message: RSS {before} KiB -> {after} \
         KiB, {} KiB per call",
        after.saturating_sub(before) / CALLS as u64
    );
    drop(calls);
}

/// A measurement, not a check: the same 200 calls against a server whose budget of unfinished
/// messages is 64 MiB. Run alone:
///
/// ```sh
/// cargo test -p crewline-server --test soak -- --ignored --nocapture unfinished
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test -p crewline-server --test soak -- --ignored --nocapture unfinished"]
async fn unfinished_messages_are_bounded_across_calls() {
    const CALLS: usize = 200;
    const BUDGET: usize = 64 << 20;
    let server = TestServer::ready(CrewServer::new(echo_setup).max_pending_bytes(BUDGET)).await;
    let before = rss_kib();
    let mut calls = Vec::new();
    for _ in 0..CALLS {
        calls.push(unfinished_message(server.addr).await);
    }
    let refused = server
        .handle
        .metrics()
        .errors(crewline_server::ErrorKind::MessageBudget);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_kib();
    println!(
        "{CALLS} calls each trying to hold an unfinished 900 KiB message, budget {} MiB: {refused} \
         closed with 1013, {} live, {} KiB charged; RSS {before} KiB -> {after} KiB, {} KiB per \
         call",
        BUDGET >> 20,
        server.handle.active_sessions(),
        server.handle.pending_message_bytes() / 1024,
        after.saturating_sub(before) / CALLS as u64
    );
    assert!(server.handle.pending_message_bytes() <= BUDGET);
    drop(calls);
}
