//! Nothing is left behind by connect/disconnect cycles: after thousands of calls that hang up
//! in every way (a close frame after a turn, a dropped socket before `system.init`, after
//! `agent.ready`, and in the middle of a turn), the live-session count and the runtime's
//! alive-task gauge are back to their baseline and the process's resident memory is back near
//! where it was after a warm-up.
//!
//! CI runs 1,000 cycles; `CREWLINE_LONG_TESTS=1` runs 10,000; `CREWLINE_LEAK_CYCLES=N` runs N.

// A binary of its own, not in tests/it: it asserts on the process's resident memory.

#[path = "it/common/mod.rs"]
mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::*;
use crewline_server::CrewServer;

/// Calls open at once.
const CONCURRENCY: usize = 50;
/// Cycles before the memory baseline is taken (allocator pools, the runtime's queues and the
/// sockets' buffers reach their working size).
const WARM_UP: usize = 500;
/// How far resident memory may be above the baseline at the end. A leak of one kilobyte per
/// call would pass it within the long run's cycles.
const MEMORY_SLACK: usize = 8 << 20;

fn long_tests() -> bool {
    std::env::var("CREWLINE_LONG_TESTS").is_ok_and(|value| value == "1")
}

/// The process's resident memory in bytes (Linux), or `None` elsewhere.
fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// One call that ends in the way chosen by `cycle`.
async fn one_call(url: &str, cycle: usize) {
    match cycle % 4 {
        // Hang up before the handshake.
        0 => drop(Client::connect(url).await),
        // A turn, then a clean close.
        1 => {
            let mut client = Client::connect(url).await;
            client.send(&init_frame(&format!("c{cycle}"))).await;
            assert_eq!(client.recv().await["type"], "agent.ready");
            let (_, text) = client.turn("hello").await;
            assert_eq!(text, expected_answer(&format!("c{cycle}"), "hello"));
            client.close().await;
        }
        // Drop the socket after agent.ready.
        2 => {
            let mut client = Client::connect(url).await;
            client.send(&init_frame(&format!("c{cycle}"))).await;
            assert_eq!(client.recv().await["type"], "agent.ready");
            drop(client);
        }
        // Drop the socket in the middle of a turn.
        _ => {
            let mut client = Client::connect(url).await;
            client.send(&init_frame(&format!("c{cycle}"))).await;
            assert_eq!(client.recv().await["type"], "agent.ready");
            client.send(&llm_request("a long story please")).await;
            client.recv_until("agent.llm.response.chunk").await;
            drop(client);
        }
    }
}

/// Runs `cycles` calls, numbered from `first`, on [`CONCURRENCY`] workers: a fixed number of
/// tasks, so the test's own memory does not grow with the number of cycles.
async fn run_cycles(url: &str, first: usize, cycles: usize) {
    let next = Arc::new(AtomicUsize::new(first));
    let end = first + cycles;
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let url = url.to_owned();
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                loop {
                    let cycle = next.fetch_add(1, Ordering::Relaxed);
                    if cycle >= end {
                        break;
                    }
                    one_call(&url, cycle).await;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a call failed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_disconnect_cycles_leave_no_session_task_or_memory_behind() {
    let cycles = std::env::var("CREWLINE_LEAK_CYCLES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(if long_tests() { 10_000 } else { 1_000 });
    // Words 5 ms apart, so a dropped-mid-turn call really is mid-turn.
    let server = TestServer::ready(CrewServer::new(|setup| {
        std::future::ready(Ok::<_, std::convert::Infallible>(echo_crew(
            &setup,
            Duration::from_millis(5),
        )))
    }))
    .await;
    let url = server.ws_url();
    let tasks_before = alive_tasks();

    run_cycles(&url, 0, WARM_UP).await;
    server.wait_for_active(0).await;
    eventually("alive tasks back after the warm-up", || async {
        alive_tasks() <= tasks_before
    })
    .await;
    let baseline = resident_bytes();

    run_cycles(&url, WARM_UP, cycles).await;
    server.wait_for_active(0).await;
    eventually(&format!("alive tasks back to {tasks_before}"), || async {
        alive_tasks() <= tasks_before
    })
    .await;
    let metrics = server.handle.metrics();
    // Every connection counts, also those that hung up before the handshake.
    assert_eq!(metrics.sessions_total(), (WARM_UP + cycles) as u64);
    assert_eq!(
        metrics.turns(crewline::session::TurnOutcome::Completed),
        ((WARM_UP + cycles) / 4) as u64
    );

    if let (Some(baseline), Some(after)) = (baseline, resident_bytes()) {
        eprintln!(
            "resident memory: {} KiB after the warm-up, {} KiB after {cycles} more calls",
            baseline / 1024,
            after / 1024
        );
        assert!(
            after <= baseline + MEMORY_SLACK,
            "resident memory grew from {baseline} to {after} bytes over {cycles} calls"
        );
    }
}
