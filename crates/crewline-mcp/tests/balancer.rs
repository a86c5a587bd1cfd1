//! MCP over HTTP behind a real load balancer (HAProxy, round robin) with two replicas: a
//! stateless server needs nothing from the balancer; a server with sessions needs sticky
//! routing on `Mcp-Session-Id` (the HAProxy lines docs/mcp.md gives), and fails without it.
//!
//! Skipped with a note where `haproxy` is not installed, unless `CREWLINE_REQUIRE_HAPROXY=1`.

mod common;

use std::{
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use crewline::tool::executor::ledger::MemoryLedger;
use crewline_mcp::{McpServer, SchemaFlavour};
use serde_json::{Value, json};

use common::HttpServer;

/// The sticky-routing lines for a backend of MCP replicas with sessions (docs/mcp.md).
const STICKY: &str = "  stick-table type string len 128 size 100k expire 30m
  stick store-response res.hdr(Mcp-Session-Id)
  stick match req.hdr(Mcp-Session-Id)
";

fn haproxy_installed() -> bool {
    let found = Command::new("haproxy")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("CREWLINE_REQUIRE_HAPROXY").is_none(),
            "CREWLINE_REQUIRE_HAPROXY is set but haproxy is not installed"
        );
        eprintln!("note: haproxy is not installed; the load-balancer tests are skipped");
    }
    found
}

/// HAProxy in front of `replicas`, round robin, with `extra` backend lines; killed on drop.
struct Balancer {
    child: Child,
    url: String,
    _dir: TempDir,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed on drop.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn balancer(replicas: &[&HttpServer], extra: &str) -> Balancer {
    // A free port for the frontend (HAProxy binds it itself).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let servers: String = replicas
        .iter()
        .enumerate()
        .map(|(i, r)| format!("  server r{i} {}\n", r.addr))
        .collect();
    let config = format!(
        "defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
frontend mcp
  bind 127.0.0.1:{port}
  default_backend replicas
backend replicas
  balance roundrobin
{extra}{servers}"
    );
    let dir = std::env::temp_dir().join(format!("crewline-mcp-lb-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, config).expect("config written");
    let mut child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .spawn()
        .expect("haproxy starts");
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Balancer {
                child,
                url: format!("http://127.0.0.1:{port}/mcp"),
                _dir: TempDir(dir),
            };
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("haproxy did not listen on {port}");
}

/// What one JSON-RPC POST got back.
struct Answer {
    status: u16,
    session: Option<String>,
    /// The JSON-RPC message of the body (plain JSON or the `data` of an SSE event).
    message: Option<Value>,
}

/// A client of MCP 2025-06-18 (as smolagents' `mcp<2` speaks it), one POST at a time.
async fn post(http: &reqwest::Client, url: &str, session: Option<&str>, body: Value) -> Answer {
    let mut request = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = tokio::time::timeout(common::WAIT, request.send())
        .await
        .expect("an answer in time")
        .expect("the request is answered");
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = tokio::time::timeout(common::WAIT, response.text())
        .await
        .expect("the body in time")
        .unwrap_or_default();
    let message = serde_json::from_str(&text).ok().or_else(|| {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
    });
    Answer {
        status,
        session,
        message,
    }
}

/// Initializes, then books four tables; the status of every step that failed, and the
/// bookings that came back.
async fn session_of_calls(url: &str) -> (Vec<String>, usize) {
    let http = reqwest::Client::new();
    let mut failures = Vec::new();
    let init = post(
        &http,
        url,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "legacy", "version": "1"}}}),
    )
    .await;
    if init.status != 200 {
        failures.push(format!("initialize: {}", init.status));
    }
    let session = init.session.as_deref();
    let initialized = post(
        &http,
        url,
        session,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    if !(200..300).contains(&initialized.status) {
        failures.push(format!("initialized: {}", initialized.status));
    }
    let mut booked = 0;
    for id in 2..6 {
        let answer = post(
            &http,
            url,
            session,
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "book_table",
                "arguments": {"restaurant": "Chez Ada", "party_size": 2}}}),
        )
        .await;
        let text = answer
            .message
            .as_ref()
            .and_then(|m| m["result"]["content"][0]["text"].as_str())
            .unwrap_or_default()
            .to_owned();
        if answer.status == 200 && text.contains("Chez Ada") {
            booked += 1;
        } else {
            failures.push(format!(
                "tools/call {id}: {} {:?}",
                answer.status, answer.message
            ));
        }
    }
    (failures, booked)
}

fn replica(ledger: &Arc<MemoryLedger>, stateless: bool) -> McpServer {
    let server = common::server(ledger, SchemaFlavour::Standard);
    if stateless {
        server.stateless()
    } else {
        server
    }
}

#[tokio::test]
async fn a_stateless_server_needs_nothing_from_the_balancer() {
    if !haproxy_installed() {
        return;
    }
    let ledgers = [Arc::new(MemoryLedger::new()), Arc::new(MemoryLedger::new())];
    let a = HttpServer::start(replica(&ledgers[0], true)).await;
    let b = HttpServer::start(replica(&ledgers[1], true)).await;
    let lb = balancer(&[&a, &b], "").await;

    let (failures, booked) = session_of_calls(&lb.url).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(booked, 4);
    // Round robin spread the calls over both replicas, and each answered on its own.
    for ledger in &ledgers {
        assert!(!ledger.records().is_empty(), "a replica served no call");
    }
}

#[tokio::test]
async fn sessions_need_sticky_routing_on_the_session_header_and_work_with_it() {
    if !haproxy_installed() {
        return;
    }
    let ledgers = [Arc::new(MemoryLedger::new()), Arc::new(MemoryLedger::new())];
    let a = HttpServer::start(replica(&ledgers[0], false)).await;
    let b = HttpServer::start(replica(&ledgers[1], false)).await;

    // Without stickiness, round robin sends the session's next request to the other replica,
    // which has never heard of it.
    let plain = balancer(&[&a, &b], "").await;
    let (failures, _) = session_of_calls(&plain.url).await;
    assert!(
        !failures.is_empty(),
        "round robin without stickiness cannot keep a session"
    );
    drop(plain);

    let sticky = balancer(&[&a, &b], STICKY).await;
    for _ in 0..3 {
        let (failures, booked) = session_of_calls(&sticky.url).await;
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!(booked, 4);
    }
}
