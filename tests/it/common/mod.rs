//! Scaffolding shared by the example-crew integration tests: serving a crew on loopback,
//! connecting the platform client and running one user turn.
//!
//! Each test file is its own crate and uses only some of these helpers, so the ones it does
//! not use would otherwise be reported as dead code there.
#![allow(dead_code)]

use std::{net::SocketAddr, time::Duration};

use crewline::protocol::TransferCall;
use crewline_server::CrewServer;
use crewline_testkit::platform::{
    CrewFrame, PlatformClient, PlatformConfig, PlatformError, TurnSummary,
};

/// How long a handshake may take before the test fails instead of hanging.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `test` with a bound far above what it needs, so a hang fails instead of stalling.
pub(crate) async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("the test took longer than its bound")
}

/// Serves `server` on 127.0.0.1 (port 0) in the background; returns the bound address.
pub(crate) async fn listen(server: CrewServer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(server.serve(listener));
    addr
}

/// Serves `server` on 127.0.0.1 (port 0) in the background; returns its WebSocket URL.
pub(crate) async fn serve(server: CrewServer) -> String {
    let addr = listen(server).await;
    format!("ws://{addr}/ws")
}

/// Connects with `config`, failing the test if the handshake does not end in time; the
/// handshake's own outcome is returned so refusals can be asserted.
pub(crate) async fn connect_with(config: PlatformConfig) -> Result<PlatformClient, PlatformError> {
    tokio::time::timeout(CONNECT_TIMEOUT, PlatformClient::connect(config))
        .await
        .expect("the handshake ended in time")
}

/// Connects to `url` with the default call settings; the handshake must succeed.
pub(crate) async fn connect(url: &str) -> PlatformClient {
    connect_with(PlatformConfig::new(url))
        .await
        .expect("handshake")
}

/// Sends the user's `words` and waits for the crew's whole turn.
pub(crate) async fn say(client: &mut PlatformClient, words: &str) -> TurnSummary {
    client
        .user_turn(words)
        .expect("turn sent")
        .finish()
        .await
        .expect("turn finished")
}

/// The turn's `agent.transfer_call`; the turn must have sent one.
pub(crate) fn transfer_of(summary: &TurnSummary) -> TransferCall {
    summary
        .frames
        .iter()
        .find_map(|f| match &f.frame {
            CrewFrame::Transfer(transfer) => Some(transfer.clone()),
            _ => None,
        })
        .expect("agent.transfer_call")
}
