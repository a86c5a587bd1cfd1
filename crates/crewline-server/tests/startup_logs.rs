//! What a server says about its own access when it starts: once, and a warning only when
//! strangers can reach it.

// A binary of its own, not in tests/it: it installs the process's one global log subscriber
// (`CapturedLogs`) with its own filter and asserts on every line it captured.

#[path = "it/common/mod.rs"]
mod common;

use std::time::Duration;

use common::*;
use crewline_server::CrewServer;
use crewline_testkit::CapturedLogs;
use tokio::net::TcpListener;

#[tokio::test]
async fn a_loopback_server_without_a_token_says_so_once_and_does_not_warn() {
    let logs = CapturedLogs::install("info");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        CrewServer::new(echo_setup).serve_with_shutdown(listener, async {
            let _ = stopped.await;
        }),
    );
    let listening = async {
        while !logs.text().contains("crew server listening") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), listening)
        .await
        .expect("the server never said it listens");
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;

    let text = logs.text();
    assert_eq!(
        text.matches("serving on loopback without authentication")
            .count(),
        1,
        "{text}"
    );
    assert!(
        !text.contains("anyone who reaches the port"),
        "a loopback server warned that anyone can call:\n{text}"
    );
}
