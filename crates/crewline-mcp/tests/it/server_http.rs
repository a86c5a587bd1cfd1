//! The standalone streamable-HTTP server: it serves MCP at `/mcp`, guards against DNS
//! rebinding by checking `Host`, takes a bearer token (and refuses to serve beyond loopback
//! without one), and stops on its shutdown signal.

use crate::common;

use std::{net::SocketAddr, sync::Arc};

use crewline::tool::executor::ledger::MemoryLedger;
use crewline_mcp::SchemaFlavour;
use tokio::net::TcpStream;

use common::{HttpServer, WAIT};

/// POSTs an MCP `initialize` to `/mcp` with this `Host` header; returns the status line.
async fn initialize_with_host(addr: SocketAddr, host: &str) -> String {
    common::initialize_raw(addr, host, "").await
}

#[tokio::test]
async fn only_loopback_hosts_are_served_by_default() {
    let server = HttpServer::start(common::server(
        &Arc::new(MemoryLedger::new()),
        SchemaFlavour::Standard,
    ))
    .await;
    let local = initialize_with_host(server.addr, &server.addr.to_string()).await;
    assert!(local.contains(" 200 "), "{local}");
    let rebound = initialize_with_host(server.addr, "evil.example").await;
    assert!(rebound.contains(" 403 "), "{rebound}");
    server.stop().await;
}

#[tokio::test]
async fn listed_hosts_are_served() {
    let mcp = common::server(&Arc::new(MemoryLedger::new()), SchemaFlavour::Standard)
        .allowed_hosts(["tools.example"]);
    let server = HttpServer::start(mcp).await;
    let listed = initialize_with_host(server.addr, "tools.example").await;
    assert!(listed.contains(" 200 "), "{listed}");
    let other = initialize_with_host(server.addr, "evil.example").await;
    assert!(other.contains(" 403 "), "{other}");
    server.stop().await;
}

#[tokio::test]
async fn the_server_stops_on_its_signal_even_with_a_client_connected() {
    let server = HttpServer::start(common::server(
        &Arc::new(MemoryLedger::new()),
        SchemaFlavour::Standard,
    ))
    .await;
    let client = crewline_mcp::McpClient::connect_http(&server.url())
        .await
        .expect("the client connects");
    let addr = server.addr;
    // `stop` asserts the server task ends, cleanly, within the wait.
    server.stop().await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the port is closed"
    );
    drop(client);
}

#[tokio::test]
async fn a_client_can_reach_a_server_behind_a_bearer_token() {
    let mcp = common::server(&Arc::new(MemoryLedger::new()), SchemaFlavour::Standard)
        .auth_token("secret");
    let server = HttpServer::start(mcp).await;
    let url = server.url();

    let refused = tokio::time::timeout(WAIT, crewline_mcp::McpClient::connect_http(&url))
        .await
        .expect("an answer in time");
    assert!(refused.is_err(), "no token, no session");
    let client = tokio::time::timeout(
        WAIT,
        crewline_mcp::McpClient::connect_http_with_bearer(&url, "secret"),
    )
    .await
    .expect("an answer in time")
    .expect("the token opens a session");
    let tools = client.tools().await.expect("tools are listed");
    assert_eq!(tools.len(), 2);
    // A loopback `Host` is no credential.
    let forged = initialize_with_host(server.addr, "localhost").await;
    assert!(forged.contains(" 401 "), "{forged}");
    server.stop().await;
}

#[tokio::test]
async fn http_beyond_loopback_without_a_token_refuses_to_start() {
    let mcp = common::server(&Arc::new(MemoryLedger::new()), SchemaFlavour::Standard);
    // Refused before the first accept.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0")
        .await
        .expect("bind");
    let error = mcp.serve_http(listener).await.expect_err("must refuse");
    let message = error.to_string();
    assert!(
        matches!(error, crewline_mcp::McpError::Unauthenticated { .. }),
        "{error:?}"
    );
    for setting in ["auth_token", "CREWLINE_AUTH_TOKEN", "allow_unauthenticated"] {
        assert!(message.contains(setting), "{setting} not in: {message}");
    }
}

#[tokio::test]
async fn an_empty_token_is_a_configuration_error() {
    let mcp =
        common::server(&Arc::new(MemoryLedger::new()), SchemaFlavour::Standard).auth_token("");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let error = mcp.serve_http(listener).await.expect_err("must refuse");
    assert!(
        matches!(
            error,
            crewline_mcp::McpError::Auth {
                setting: "auth_token",
                ..
            }
        ),
        "{error:?}"
    );
}
