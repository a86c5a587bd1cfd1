//! A frozen replica (SIGSTOP: a stuck process, a paused VM) behind HAProxy as shipped
//! (`deploy/test/haproxy.cfg.in`): HAProxy marks it down within seconds and closes the calls it
//! holds, so the platform sees the socket end and reconnects to a live replica, instead of
//! hearing silence for as long as the process stays frozen.
//!
//! Each replica is a process of its own (this test binary run again as `replica_process`), so
//! that one can be frozen. Skipped with a note where `haproxy` is not installed, unless
//! `CREWLINE_REQUIRE_HAPROXY=1`.

use crate::common;

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::*;
use crewline_server::CrewServer;
use crewline_testkit::haproxy::{Balancer, shipped_backend};

/// Set in a replica process: run the server instead of skipping.
const CHILD_VARIABLE: &str = "CREWLINE_FROZEN_REPLICA_CHILD";
/// The line a replica process prints with its address.
const ADDR_LINE: &str = "replica listening on ";

/// Not a test of its own: the body of a replica process the test below starts.
#[tokio::test]
#[ignore = "a replica process for a_frozen_replicas_calls_are_closed_by_the_balancer"]
async fn replica_process() {
    if std::env::var_os(CHILD_VARIABLE).is_none() {
        return;
    }
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    println!("{ADDR_LINE}{}", server.addr);
    // Serve until the test kills this process.
    std::future::pending::<()>().await;
}

/// A replica process; killed (and resumed first, if frozen) when dropped.
struct Replica {
    child: Child,
    addr: SocketAddr,
}

impl Replica {
    fn start() -> Self {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "--exact",
                "frozen_replica::replica_process",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_VARIABLE, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("a replica process");
        let stdout = child.stdout.take().expect("its stdout");
        let addr = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix(ADDR_LINE).map(str::to_owned))
            .expect("the replica says where it listens")
            .parse()
            .expect("an address");
        Self { child, addr }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal}");
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // SIGCONT first: a stopped process does not act on SIGKILL's exit until resumed on
        // every system, and a test must leave nothing frozen behind.
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many calls `addr`'s replica holds (its `/` says).
async fn active_calls(addr: SocketAddr) -> u64 {
    let response = http_get(addr, "/").await;
    let body: serde_json::Value = serde_json::from_str(&response.body).expect("JSON");
    body["active_sessions"].as_u64().expect("active_sessions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replicas_calls_are_closed_by_the_balancer() {
    if !Balancer::available() {
        // Past the test harness's capture, so that every run shows what it skipped.
        {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: haproxy is not installed; the frozen-replica test is skipped"
            );
        }
        return;
    }
    let replicas = [Replica::start(), Replica::start()];
    let template = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/test/haproxy.cfg.in"
    ))
    .expect("the shipped HAProxy configuration");
    let backend = shipped_backend(&template, "roundrobin");
    assert!(
        backend.contains("on-marked-down shutdown-sessions"),
        "{backend}"
    );
    let lb = Balancer::start(&[replicas[0].addr, replicas[1].addr], &backend, "")
        .await
        .expect("haproxy starts");
    let url = format!("ws://{}/ws", lb.addr());

    // A live call through the balancer; find the replica that holds it.
    let mut live = Client::connect(&url).await;
    live.send(&init_frame("Ada")).await;
    assert_eq!(live.recv().await["type"], "agent.ready");
    let (_, text) = live.turn("hello").await;
    assert_eq!(text, expected_answer("Ada", "hello"));
    let holder = usize::from(active_calls(replicas[1].addr).await == 1);
    assert_eq!(active_calls(replicas[holder].addr).await, 1);

    replicas[holder].signal("-STOP");
    let frozen = Instant::now();
    // The call's socket ends (HAProxy closes it) instead of staying open and silent: each
    // read waits at most WAIT, and the whole at most 15 s.
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match live.socket.next_frame().await {
                Ok(Some(RawFrame::Close(_)) | None) | Err(PlatformError::Closed { .. }) => {
                    return Ok(());
                }
                // What the replica sent before it froze (the turn's trailing frames, pings).
                Ok(Some(_)) => continue,
                Err(error) => return Err(error),
            }
        }
    })
    .await;
    let took = frozen.elapsed();
    match ended {
        Ok(Ok(())) => eprintln!("the frozen replica's call was closed {took:?} after SIGSTOP"),
        Ok(Err(error)) => panic!("the call stayed open and silent: {error}"),
        Err(_) => panic!("the call stayed open and silent for {took:?}"),
    }

    // The platform reconnects through the balancer: the live replica takes the call.
    let mut again = Client::connect(&url).await;
    again.send(&init_frame("Ada")).await;
    assert_eq!(again.recv().await["type"], "agent.ready");
    let (_, text) = again.turn("still there?").await;
    assert_eq!(text, expected_answer("Ada", "still there?"));
    again.close().await;
}
