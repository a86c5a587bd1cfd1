//! Refused requests (issue 30, points 7 and 8): one request is one guess, a refusal closes its
//! connection, and a flood of refusals writes one log line per interval, not one each.

// A binary of its own, not in tests/it: it installs the process's one global log subscriber
// (`CapturedLogs`) with its own filter and asserts on every line it captured.

#[path = "it/common/mod.rs"]
mod common;

use std::time::Duration;

use common::*;
use crewline_server::{CrewServer, HandshakeFailure};
use crewline_testkit::CapturedLogs;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const TOKEN: &str = "crew-token-0b1d2f";

fn server() -> CrewServer {
    CrewServer::new(echo_setup).auth_token(TOKEN)
}

/// Sends `requests` on one connection and reads until the server closes it (or 3 s pass).
async fn one_connection(server: &TestServer, requests: &str) -> (String, bool) {
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream.write_all(requests.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut answer))
        .await
        .is_ok();
    (String::from_utf8_lossy(&answer).into_owned(), closed)
}

fn get(path: &str, headers: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n")
}

#[tokio::test]
async fn a_refused_request_closes_its_connection_so_each_guess_costs_a_new_one() {
    let server = TestServer::ready(server()).await;
    // Three keep-alive guesses pipelined on one connection: only the first is answered.
    let guesses: String = ["wrong-1", "wrong-2", TOKEN]
        .iter()
        .map(|guess| get("/metrics", &format!("Authorization: Bearer {guess}\r\n")))
        .collect();
    let (answer, closed) = one_connection(&server, &guesses).await;
    assert!(
        closed,
        "the connection stayed open after a refusal: {answer}"
    );
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer}");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    // A caller with the token keeps its connection for several requests.
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    let (answer, _) = one_connection(
        &server,
        &format!(
            "{}{}",
            get("/metrics", &bearer),
            get("/metrics", &format!("{bearer}Connection: close\r\n"))
        ),
    )
    .await;
    assert_eq!(answer.matches("HTTP/1.1 200").count(), 2, "{answer}");
}

#[tokio::test]
async fn wrong_guesses_beside_the_right_token_get_a_400_not_a_call() {
    let server = TestServer::ready(server()).await;
    let upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    let wrong: String = (0..3600).map(|i| format!("token=guess{i}&")).collect();
    let attempts = [
        get(&format!("/ws?{wrong}token={TOKEN}"), upgrade),
        get(
            "/ws?token=wrong",
            &format!("{upgrade}Authorization: Bearer {TOKEN}\r\n"),
        ),
        get(
            "/ws",
            &format!(
                "{upgrade}{}Authorization: Bearer {TOKEN}\r\n",
                "Authorization: Bearer wrong\r\n".repeat(90)
            ),
        ),
    ];
    for request in &attempts {
        let (answer, closed) = one_connection(&server, request).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("more than one credential"), "{answer}");
        assert!(closed);
    }
    assert_eq!(server.handle.metrics().sessions_total(), 0);
    assert_eq!(
        server
            .handle
            .metrics()
            .handshake_failures(HandshakeFailure::Unauthorized),
        attempts.len() as u64
    );
}

#[tokio::test]
async fn a_flood_of_refusals_writes_one_warn_line_with_its_count() {
    let logs = CapturedLogs::install("warn");
    let server = TestServer::ready(server()).await;
    for i in 0..300 {
        // Closed by the client too: this test is about the log, not the connection.
        let request = get(&format!("/ws?token=guess{i}"), "Connection: close\r\n");
        let (answer, _) = one_connection(&server, &request).await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    assert_eq!(
        server
            .handle
            .metrics()
            .handshake_failures(HandshakeFailure::Unauthorized),
        300
    );
    let text = logs.text();
    // This test's refusals (the other tests' servers refuse other ways).
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("refused"))
        .filter(|line| !line.contains("/metrics") && !line.contains("more than one"))
        .collect();
    // The first refusal is reported at once; the rest wait for the next interval (10 s).
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("refused=1"), "{}", lines[0]);
    assert!(!text.contains("guess"), "a guess reached the log");
}
