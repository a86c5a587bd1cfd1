//! MCP over HTTP behind a real load balancer (HAProxy, round robin) with two replicas: a
//! stateless server needs nothing from the balancer; a server with sessions needs sticky
//! routing on `Mcp-Session-Id` (the HAProxy lines docs/mcp.md gives), and fails without it.
//!
//! Skipped with a note where `haproxy` is not installed, unless `CREWLINE_REQUIRE_HAPROXY=1`.

use crate::common;

use std::sync::Arc;

use crewline::tool::executor::ledger::MemoryLedger;
use crewline_mcp::{McpServer, SchemaFlavour};
use crewline_testkit::haproxy::Balancer;
use serde_json::{Value, json};

use common::HttpServer;

/// The sticky-routing lines for a backend of MCP replicas with sessions (docs/mcp.md).
const STICKY: &str = "  stick-table type string len 128 size 100k expire 30m
  stick store-response res.hdr(Mcp-Session-Id)
  stick match req.hdr(Mcp-Session-Id)
";

fn haproxy_installed() -> bool {
    let found = Balancer::available();
    if !found {
        // Past the test harness's capture, so that every run shows what it skipped.
        {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: haproxy is not installed; the load-balancer tests are skipped"
            );
        }
    }
    found
}

/// HAProxy round robin in front of `replicas`, with `extra` backend lines.
async fn balancer(replicas: &[&HttpServer], extra: &str) -> (Balancer, String) {
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let lb = Balancer::start(&addrs, &format!("  balance roundrobin\n{extra}"), "")
        .await
        .expect("haproxy starts");
    let url = format!("http://{}/mcp", lb.addr());
    (lb, url)
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
    let (_lb, url) = balancer(&[&a, &b], "").await;

    let (failures, booked) = session_of_calls(&url).await;
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
    let (plain, url) = balancer(&[&a, &b], "").await;
    let (failures, _) = session_of_calls(&url).await;
    assert!(
        !failures.is_empty(),
        "round robin without stickiness cannot keep a session"
    );
    drop(plain);

    let (_sticky, url) = balancer(&[&a, &b], STICKY).await;
    for _ in 0..3 {
        let (failures, booked) = session_of_calls(&url).await;
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!(booked, 4);
    }
}
