//! Soak (issue 14, "Show it"; issue 30): for minutes, slow readers, a flood of half-open
//! connections, oversized frames, endless lines from the model, ping floods from platforms
//! that never read and calls holding unfinished messages past the server's budget run beside
//! healthy calls. The healthy
//! calls must get every answer, right and in time, and the process's memory must stay flat.
//!
//! Behind a flag, as it takes minutes (10 by default):
//!
//! ```sh
//! CREWLINE_SOAK_SECS=600 cargo test --release -p crewline-server --test soak -- --ignored --nocapture
//! ```
//!
//! It prints one line of figures at the end (SECURITY.md quotes them).

mod common;
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
    Crew, LoopAgent, OutputNode, SessionSetup, ToolLoop, llm::OpenAiClient, tool::ToolRegistry,
};
use crewline_server::CrewServer;
use fake_llm::{FakeLlm, echo_answer};
use serde_json::json;
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
    unfinished: AtomicU64,
    unfinished_closed: AtomicU64,
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

/// A platform that floods pings and never reads (issue 30: 1.4 GiB in 10 s): the server must
/// close the call, with its memory flat.
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
    let burst = masked_frame(0x9, &[0x55; 125]).repeat(1000);
    // Until the server stops taking them (it closed the call), or 10 s.
    let flooded = tokio::time::timeout(Duration::from_secs(10), async {
        while stream.write_all(&burst).await.is_ok() {}
    })
    .await;
    if flooded.is_ok() {
        figures.ping_floods_closed.fetch_add(1, Ordering::Relaxed);
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
    let figures = Arc::new(Figures::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

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
        tokio::spawn(async move {
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
                let flood_figures = Arc::clone(&figures);
                running.spawn(async move { ping_flood(addr, &flood_figures).await });
                for _ in 0..5 {
                    let figures = Arc::clone(&figures);
                    running.spawn(async move { unfinished_holder(addr, &figures).await });
                }
                if wave.is_multiple_of(2) {
                    let (frame_url, frame_figures) = (url.clone(), Arc::clone(&figures));
                    running.spawn(async move { oversized_frame(&frame_url, &frame_figures).await });
                    let (line_url, line_figures) = (url.clone(), Arc::clone(&figures));
                    running.spawn(async move { endless_line(&line_url, &line_figures).await });
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
        peak = peak.max(rss_kib());
        for handle in &healthy {
            assert!(!handle.is_finished(), "a healthy call ended early");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for handle in healthy {
        handle.await.expect("a healthy call failed");
    }
    attackers.await.expect("the attackers failed");
    // Let the last attackers' calls be cleaned up before the final reading.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let end = rss_kib();

    let f = &figures;
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "soak {seconds} s: healthy turns {} (max {} ms); slow readers {} ({} closed by the \
         server); half-open {} ({} closed); oversized frames {}; endless lines {} ({} failed \
         cleanly); ping floods {} ({} closed); unfinished messages {} ({} closed, {} of them for \
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
        "every ping flood's call is closed by the server"
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
