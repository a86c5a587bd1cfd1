//! Web pages and DNS rebinding (issue 30, point 6): a browser page of another site cannot open
//! calls on a crew, and a loopback crew without a token answers loopback names only.

use crate::common;

use std::net::SocketAddr;

use common::*;
use crewline_server::{CrewServer, HandshakeFailure};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// Sends a WebSocket upgrade for `path` with `Host: host` and the extra header lines `extra`;
/// returns the answer's status.
async fn upgrade_status(addr: SocketAddr, path: &str, host: &str, extra: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let mut buf = [0_u8; 1024];
    tokio::time::timeout(WAIT, async {
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("an answer");
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {text}"))
}

#[tokio::test]
async fn a_page_of_another_site_cannot_open_a_call_on_a_local_crew() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let host = server.addr.to_string();
    for origin in [
        "http://attacker.example",
        "https://attacker.example:8080",
        "null",
    ] {
        let extra = format!("Origin: {origin}\r\n");
        let status = upgrade_status(server.addr, "/ws", &host, &extra).await;
        assert_eq!(status, 403, "{origin}");
    }
    let metrics = server.handle.metrics();
    assert_eq!(metrics.handshake_failures(HandshakeFailure::Forbidden), 3);
    assert_eq!(metrics.sessions_total(), 0);

    // A platform (no Origin), the playground on this machine, and the crew's own page may.
    for extra in [
        String::new(),
        "Origin: http://127.0.0.1:7000\r\n".to_owned(),
        "Origin: http://localhost:5173\r\n".to_owned(),
        format!("Origin: http://{host}\r\n"),
    ] {
        assert_eq!(
            upgrade_status(server.addr, "/ws", &host, &extra).await,
            101,
            "{extra}"
        );
    }
}

#[tokio::test]
async fn an_allowed_origin_may_open_calls() {
    let server = TestServer::ready(
        CrewServer::new(echo_setup)
            .auth_token("t0ken")
            .allow_origin("https://console.example.com"),
    )
    .await;
    let host = server.addr.to_string();
    let allowed = "Origin: https://console.example.com\r\nAuthorization: Bearer t0ken\r\n";
    assert_eq!(
        upgrade_status(server.addr, "/ws", &host, allowed).await,
        101
    );
    let other = "Origin: https://other.example.com\r\nAuthorization: Bearer t0ken\r\n";
    assert_eq!(upgrade_status(server.addr, "/ws", &host, other).await, 403);
}

#[tokio::test]
async fn a_rebound_name_is_refused_by_a_loopback_crew_without_a_token() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    // The attacker's page, its name rebound to 127.0.0.1: same-origin, but not a loopback name.
    let rebound = "attacker.example:8080";
    let origin = format!("Origin: http://{rebound}\r\n");
    assert_eq!(
        upgrade_status(server.addr, "/ws", rebound, &origin).await,
        403
    );
    let metrics = http_request(
        server.addr,
        &format!("GET /metrics HTTP/1.1\r\nHost: {rebound}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(metrics.status, 403);
    assert_eq!(server.handle.metrics().sessions_total(), 0);
    // Loopback names pass.
    for host in ["localhost:8080", "127.0.0.1", "[::1]:8080"] {
        assert_eq!(
            upgrade_status(server.addr, "/ws", host, "").await,
            101,
            "{host}"
        );
    }

    // With a token, the name does not matter: the page has no token.
    let with_token = TestServer::ready(CrewServer::new(echo_setup).auth_token("t0ken")).await;
    let status = upgrade_status(
        with_token.addr,
        "/ws",
        "crew.example.net",
        "Authorization: Bearer t0ken\r\n",
    )
    .await;
    assert_eq!(status, 101);
}
