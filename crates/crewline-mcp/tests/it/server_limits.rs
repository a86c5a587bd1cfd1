//! The standalone MCP server's limits (issue 30): the crew server's header-read timeout on its
//! listener, a cap on open HTTP sessions answered with a 503, and idle sessions closed.

use crate::common;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use crewline::tool::executor::ledger::MemoryLedger;
use crewline_mcp::{McpServer, SchemaFlavour};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use common::{HttpServer, WAIT};

fn mcp() -> McpServer {
    common::server(&Arc::new(MemoryLedger::new()), SchemaFlavour::Standard)
}

/// POSTs an MCP `initialize` (a new session) and returns the response's head.
async fn initialize(addr: SocketAddr) -> String {
    post(addr, common::INITIALIZE).await
}

/// POSTs `body` to `/mcp` and returns the response's head.
async fn post(addr: SocketAddr, body: &str) -> String {
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    // A server that refuses the body may answer before reading all of it.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(WAIT, stream.read(&mut byte))
            .await
            .expect("an answer in time")
            .expect("read");
        assert_eq!(read, 1, "the server closed before the response's head");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).to_lowercase()
}

/// Waits until `server` has `open` sessions open.
async fn wait_for_sessions(server: &McpServer, open: usize) {
    tokio::time::timeout(WAIT, async {
        while server.open_sessions() != open {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{} sessions open, not {open}, after {WAIT:?}",
            server.open_sessions()
        )
    });
}

#[tokio::test]
async fn half_a_request_line_is_disconnected_after_the_header_timeout() {
    let server = HttpServer::start(mcp().header_read_timeout(Duration::from_millis(300))).await;
    for partial in ["POST /mc", ""] {
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
    assert!(initialize(server.addr).await.starts_with("http/1.1 200"));
    server.stop().await;
}

#[tokio::test]
async fn a_session_past_the_cap_is_refused_with_503_and_the_open_ones_go_on() {
    let mcp = mcp().max_sessions(2);
    let server = HttpServer::start(mcp.clone()).await;
    let client = tokio::time::timeout(WAIT, crewline_mcp::McpClient::connect_http(&server.url()))
        .await
        .expect("connect in time")
        .expect("the first session opens");
    assert!(initialize(server.addr).await.starts_with("http/1.1 200"));
    wait_for_sessions(&mcp, 2).await;

    let refused = initialize(server.addr).await;
    assert!(refused.starts_with("http/1.1 503"), "{refused}");
    assert!(refused.contains("retry-after: "), "{refused}");
    assert_eq!(mcp.open_sessions(), 2);
    assert_eq!(mcp.refused_sessions(), 1);
    // The sessions already open are served.
    let tools = client.tools().await.expect("the open session is served");
    assert_eq!(tools.len(), 2);
    drop(client);
    server.stop().await;
}

#[tokio::test]
async fn an_idle_session_is_closed_and_its_place_freed() {
    let mcp = mcp()
        .max_sessions(1)
        .session_idle_timeout(Duration::from_millis(300));
    let server = HttpServer::start(mcp.clone()).await;
    assert!(initialize(server.addr).await.starts_with("http/1.1 200"));
    wait_for_sessions(&mcp, 1).await;
    // Idle past the timeout: closed, and its place taken by a new session.
    wait_for_sessions(&mcp, 0).await;
    assert!(initialize(server.addr).await.starts_with("http/1.1 200"));
    server.stop().await;
}

#[tokio::test]
async fn a_request_body_past_the_cap_is_refused_with_413() {
    let server = HttpServer::start(mcp()).await;
    // An initialize padded past 1 MiB (rmcp alone reads up to 4 MiB).
    let padding = "x".repeat(crewline_mcp::DEFAULT_MAX_REQUEST_BYTES);
    let padded = common::INITIALIZE.replacen(
        r#""clientInfo":{"#,
        &format!(r#""padding":"{padding}","clientInfo":{{"#),
        1,
    );
    let refused = post(server.addr, &padded).await;
    assert!(refused.starts_with("http/1.1 413"), "{refused}");
    assert!(initialize(server.addr).await.starts_with("http/1.1 200"));
    server.stop().await;
}
