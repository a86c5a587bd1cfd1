//! What the crash tests share: a real `redis-server`, replicas that are this test binary run
//! again as child processes (killed with SIGKILL), and the platform's phone call to one.

// A test: a failed step should panic and fail it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crewline::protocol::ConversationType;
use crewline_testkit::platform::{PlatformClient, PlatformConfig, TurnSummary};

/// How long any step may take before the test fails instead of hanging.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A `redis-server` on a free loopback port, killed when dropped.
pub(crate) struct Redis {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Redis {
    /// A fresh server (RDB snapshots configured, as a stock one has, so crewline's
    /// persistence check accepts it), or `None` with a note where `redis-server` is missing.
    pub(crate) fn start() -> Option<Self> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let dir =
            std::env::temp_dir().join(format!("crewline-replicas-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the server's directory");
        let child = match Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "3600 1", "--appendonly", "no", "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(error) => {
                assert!(
                    std::env::var("CREWLINE_REQUIRE_REDIS").as_deref() != Ok("1"),
                    "redis-server is not installed, and CREWLINE_REQUIRE_REDIS=1 requires it"
                );
                // Past the test harness's capture, so that every run shows what it skipped.
                {
                    use std::io::Write as _;
                    let _ = writeln!(
                        std::io::stderr(),
                        "SKIPPED: redis-server could not be started ({error})"
                    );
                }
                return None;
            }
        };
        let redis = Self { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !redis.pong() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(redis)
    }

    fn pong(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) else {
            return false;
        };
        let mut reply = [0; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A replica in a process of its own; killed (SIGKILL) when dropped.
pub(crate) struct Replica {
    child: Child,
    addr: SocketAddr,
}

impl Replica {
    /// Runs this test binary's `test` (a replica's entry point, which serves on a free port
    /// and prints `PORT=<port>`) in a child process with `env`, and waits for its port.
    pub(crate) fn start(test: &str, env: &[(&str, String)]) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("a replica process");
        let stdout = child.stdout.take().expect("its stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("the replica printed its port")
                .expect("a line");
            // libtest writes `test replica_process ... ` before it, on the same line.
            if let Some((_, port)) = line.split_once("PORT=") {
                break port.trim().parse::<u16>().expect("a port");
            }
        };
        // The rest of its output is not read: keep the pipe drained so it never blocks.
        std::thread::spawn(move || for _ in lines {});
        Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// SIGKILL: no polite path, nothing flushed or released.
    pub(crate) fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }

    /// The platform's connection for the call `call_id` to this replica (of `kind`, else the
    /// platform client's default).
    pub(crate) async fn call(
        &self,
        call_id: &str,
        kind: Option<ConversationType>,
    ) -> PlatformClient {
        let mut config = PlatformConfig::new(format!("ws://{}/ws", self.addr));
        if let Some(kind) = kind {
            config.conversation_type = kind;
        }
        config.caller = Some(crewline::protocol::Caller {
            call_id: Some(call_id.to_owned()),
            ..Default::default()
        });
        tokio::time::timeout(WAIT, PlatformClient::connect(config))
            .await
            .expect("the handshake ended in time")
            .expect("handshake")
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends the caller's `words` and waits for the crew's whole turn.
pub(crate) async fn say(client: &mut PlatformClient, words: &str) -> TurnSummary {
    let turn = client.user_turn(words).expect("turn sent").finish();
    tokio::time::timeout(WAIT, turn)
        .await
        .expect("the turn ended in time")
        .expect("turn finished")
}
