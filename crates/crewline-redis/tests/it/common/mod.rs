//! A real `redis-server` per test, on a free loopback port; and the contract suite's backend
//! over it.
//!
//! By default a server has RDB snapshots configured (`save 3600 1`, as a stock redis-server
//! has), in a directory of its own: crewline's check at connect accepts it, and since no test
//! lives an hour and the server is stopped with SIGKILL, none ever writes a snapshot, so a
//! restart starts empty (what the outage tests need: a restart that loses the data). The test
//! that restarts Redis and checks that nothing is lost runs with AOF
//! ([`RedisServer::start_with`], tests/it/persistence.rs).

#![allow(dead_code, unreachable_pub)]

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use crewline_redis::{RedisConfig, RedisStore};
use crewline_remote::{
    StoreLimits,
    store_contract::{Backend, Held},
};

/// A `redis-server` this test started; stopped when dropped.
pub struct RedisServer {
    binary: String,
    port: u16,
    args: Vec<String>,
    dir: PathBuf,
    child: Option<Child>,
}

/// The settings of a server started with [`RedisServer::start`].
pub const DEFAULT_ARGS: &[&str] = &["--save", "3600 1", "--appendonly", "no"];

/// Append-only file, fsynced every second: what docs/deploying.md tells operators to run.
pub const AOF_ARGS: &[&str] = &["--appendonly", "yes", "--appendfsync", "everysec"];

/// The server binary: `CREWLINE_REDIS_SERVER` (e.g. `valkey-server`), else `redis-server`.
fn server_binary() -> String {
    std::env::var("CREWLINE_REDIS_SERVER")
        .ok()
        .filter(|binary| !binary.is_empty())
        .unwrap_or_else(|| "redis-server".to_owned())
}

impl RedisServer {
    /// A fresh server, or `None` (with a note) where `redis-server` is not installed, unless
    /// `CREWLINE_REQUIRE_REDIS=1` makes that a failure.
    pub fn start() -> Option<Self> {
        Self::start_with(DEFAULT_ARGS)
    }

    /// A fresh server with `args` (e.g. `--maxmemory-policy allkeys-lru`, [`AOF_ARGS`]) in a
    /// directory of its own, or `None` as [`RedisServer::start`] says.
    pub fn start_with(args: &[&str]) -> Option<Self> {
        let binary = server_binary();
        if Command::new(&binary)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_err()
        {
            assert!(
                std::env::var("CREWLINE_REQUIRE_REDIS").as_deref() != Ok("1"),
                "{binary} is not installed, and CREWLINE_REQUIRE_REDIS=1 requires it"
            );
            // Past the test harness's capture, so that every run shows what it skipped.
            {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: {binary} is not installed; the Redis store's tests pass without running"
                );
            }
            return None;
        }
        for _ in 0..5 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port();
            let dir =
                std::env::temp_dir().join(format!("crewline-redis-{}-{port}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("the server's directory");
            let mut server = Self {
                binary: binary.clone(),
                port,
                args: args.iter().map(|arg| (*arg).to_owned()).collect(),
                dir,
                child: None,
            };
            if server.restart() {
                return Some(server);
            }
        }
        panic!("redis-server did not start on any of five free ports");
    }

    /// Every key matching `pattern`, with the milliseconds it has left (`PTTL`: -1 for a key
    /// that never expires).
    pub async fn keys_with_ttl(&self, pattern: &str) -> Vec<(String, i64)> {
        let client = redis::Client::open(self.url()).expect("url");
        let mut redis = client
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut redis)
            .await
            .expect("KEYS");
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let left: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut redis)
                .await
                .expect("PTTL");
            out.push((key, left));
        }
        out
    }

    /// Freezes the server (SIGSTOP): it holds its connections and answers nothing, as a
    /// frozen or swapping host does.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Thaws a frozen server (SIGCONT): it answers what it was sent meanwhile.
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Kills the server with SIGKILL (no shutdown, no save).
    pub fn kill(&mut self) {
        self.stop();
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("a running server").id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server with SIGKILL: no snapshot is written on the way out, so what survives
    /// is what its settings had already put on disk (nothing by default, the AOF with
    /// [`AOF_ARGS`]).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, the same settings and directory; whether it
    /// answers.
    pub fn restart(&mut self) -> bool {
        self.stop();
        let child = Command::new(&self.binary)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--daemonize", "no", "--dir"])
            .arg(&self.dir)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.pong() {
                return true;
            }
            if let Some(child) = &mut self.child
                && matches!(child.try_wait(), Ok(Some(_)))
            {
                // It exited: the port was taken meanwhile.
                self.child = None;
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
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
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The contract suite's backend: stores on one server, each fresh one under a prefix of its
/// own.
pub struct RedisBackend {
    pub server: RedisServer,
    prefixes: AtomicUsize,
}

impl RedisBackend {
    /// A backend over a fresh server, or `None` where there is no `redis-server`.
    pub fn open() -> Option<Self> {
        Some(Self {
            server: RedisServer::start()?,
            prefixes: AtomicUsize::new(0),
        })
    }
}

impl Backend for RedisBackend {
    type Store = RedisStore;

    async fn store(&self, limits: StoreLimits) -> RedisStore {
        let prefix = format!("test{}:", self.prefixes.fetch_add(1, Ordering::Relaxed));
        RedisConfig::new(self.server.url())
            .prefix(prefix)
            .limits(limits)
            .connect()
            .await
            .expect("connected to the test's redis-server")
    }

    async fn replica(&self, of: &RedisStore) -> RedisStore {
        RedisConfig::new(self.server.url())
            .prefix(of.prefix())
            .limits(of.limits())
            .connect()
            .await
            .expect("a second store on the test's redis-server")
    }

    async fn held(&self, store: &RedisStore) -> Held {
        let usage = store.usage().await.expect("the store's usage");
        Held {
            tasks: usage.tasks,
            bytes: usage.bytes,
        }
    }
}
