//! A real HAProxy in front of test servers on loopback, for tests of what a load balancer sees
//! (health checks, draining, sticky sessions, a frozen replica): [`Balancer`], and
//! [`shipped_backend`] to run a shipped configuration's settings.
//!
//! Where `haproxy` is not installed, [`Balancer::available`] says so (and fails the test when
//! `CREWLINE_REQUIRE_HAPROXY` is set, as CI sets it once it has installed HAProxy).

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

/// The variable that makes a missing `haproxy` a failure instead of a skipped test.
pub const REQUIRE_VARIABLE: &str = "CREWLINE_REQUIRE_HAPROXY";

/// Why a balancer could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BalancerError {
    /// The configuration or its directory could not be written, or HAProxy not started.
    #[error("HAProxy could not be started")]
    Io(#[from] std::io::Error),
    /// HAProxy started but never listened.
    #[error("HAProxy did not listen on 127.0.0.1:{0}")]
    NotListening(u16),
}

/// HAProxy (`mode http`) in front of backends on loopback; stopped when dropped.
#[derive(Debug)]
pub struct Balancer {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Balancer {
    /// Whether `haproxy` can run here (a test that cannot run says so and returns); a missing
    /// `haproxy` panics instead when [`REQUIRE_VARIABLE`] is set.
    pub fn available() -> bool {
        let found = Command::new("haproxy")
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !found {
            assert!(
                std::env::var_os(REQUIRE_VARIABLE).is_none(),
                "{REQUIRE_VARIABLE} is set but haproxy is not installed"
            );
            tracing::warn!("haproxy is not installed; load-balancer tests are skipped");
        }
        found
    }

    /// HAProxy on a free loopback port in front of `backends`, with `backend` lines (balance,
    /// checks, stickiness) before the `server` lines; each server line gets `server_options`
    /// (e.g. `check inter 200ms fall 1 rise 1`).
    pub async fn start(
        backends: &[SocketAddr],
        backend: &str,
        server_options: &str,
    ) -> Result<Self, BalancerError> {
        // A free port for the frontend; HAProxy binds it itself a moment later.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, addr)| format!("  server r{i} {addr} {server_options}\n"))
            .collect();
        let config = format!(
            "defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  timeout tunnel 1h
frontend front
  bind 127.0.0.1:{port}
  default_backend replicas
backend replicas
{backend}
{servers}"
        );
        let dir =
            std::env::temp_dir().join(format!("crewline-haproxy-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, config)?;
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(Stdio::null())
            .spawn()?;
        let balancer = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
        };
        for _ in 0..400 {
            if tokio::net::TcpStream::connect(balancer.addr).await.is_ok() {
                return Ok(balancer);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err(BalancerError::NotListening(port))
    }

    /// The frontend's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The settings of the `backend crew` section of a shipped configuration (e.g.
/// `deploy/test/haproxy.cfg.in`) without its `server` lines, `@BALANCE@` filled with
/// `balance`: what [`Balancer::start`] takes as `backend`, so a test runs the settings as
/// shipped.
pub fn shipped_backend(template: &str, balance: &str) -> String {
    template
        .lines()
        .skip_while(|line| line.trim() != "backend crew")
        .skip(1)
        .take_while(|line| !line.trim().is_empty() && !line.trim_start().starts_with("server "))
        .filter(|line| !line.trim_start().starts_with('#'))
        .map(|line| format!("{}\n", line.replace("@BALANCE@", balance)))
        .collect()
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
