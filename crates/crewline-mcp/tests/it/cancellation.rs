//! An MCP request the client cancels stops the running tool call (for cancellable tools) and
//! is recorded as `Cancelled`; a tool with `cancellable = false` runs on to completion. Seen
//! from a plain rmcp client (`notifications/cancelled`), from crewline's `McpClient` (a
//! dropped call future: barge-in, timeout) and from a client that closes its session.

use crate::common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline::{
    tool::{
        Executor, Exports, Tool, ToolError, ToolPolicy, ToolRegistry,
        executor::ledger::{LedgerRecord, MemoryLedger, Outcome},
    },
    types::{ToolCall, ToolErrorKind},
};
use crewline_mcp::{McpClient, McpError, McpServer};
use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequest, CallToolRequestParams, ClientRequest},
    service::{PeerRequestOptions, RequestHandle, RunningService},
};
use serde_json::{Value, json};
use tokio::{net::TcpListener, sync::Notify};
use tokio_util::sync::CancellationToken;

/// How long any single wait may take before a test fails (never reached when it passes).
const WAIT: Duration = Duration::from_secs(20);

/// What a test tool lets the test see and steer.
#[derive(Default)]
struct Probe {
    /// Notified when the tool starts.
    started: Notify,
    /// Set when the tool's future is dropped before it finished.
    dropped: AtomicBool,
    /// Set when the tool ran to its end.
    completed: AtomicBool,
    /// Released by the test to let a waiting tool finish.
    release: Notify,
}

/// Sets `dropped` unless disarmed: observes the tool's future being dropped mid-way.
struct DropFlag(Arc<Probe>, bool);

impl Drop for DropFlag {
    fn drop(&mut self) {
        if !self.1 {
            self.0.dropped.store(true, Ordering::SeqCst);
        }
    }
}

/// A tool that waits for `release` (forever, unless released), recording what happened.
struct Waiting {
    name: &'static str,
    cancellable: bool,
    probe: Arc<Probe>,
}

#[async_trait]
impl Tool for Waiting {
    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> &str {
        "Waits until released."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }

    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().cancellable(self.cancellable)
    }

    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        let mut guard = DropFlag(Arc::clone(&self.probe), false);
        self.probe.started.notify_one();
        self.probe.release.notified().await;
        self.probe.completed.store(true, Ordering::SeqCst);
        guard.1 = true;
        Ok(json!("done"))
    }
}

/// A server registry with a cancellable `slow` and a non-cancellable `pay`, and its ledger.
struct Fixture {
    server: McpServer,
    ledger: Arc<MemoryLedger>,
    slow: Arc<Probe>,
    pay: Arc<Probe>,
}

fn fixture() -> Fixture {
    let ledger = Arc::new(MemoryLedger::new());
    let executor = Executor::builder().ledger(Arc::clone(&ledger) as _).build();
    let (slow, pay) = (Arc::new(Probe::default()), Arc::new(Probe::default()));
    // Served over MCP: the registry opts its tools in (the default is the crew only).
    let mut tools = ToolRegistry::new()
        .with_executor(Arc::new(executor))
        .with_default_exports(Exports::all());
    tools
        .register(Waiting {
            name: "slow",
            cancellable: true,
            probe: Arc::clone(&slow),
        })
        .expect("slow registers")
        .register(Waiting {
            name: "pay",
            cancellable: false,
            probe: Arc::clone(&pay),
        })
        .expect("pay registers");
    Fixture {
        server: McpServer::new(&tools).expect("the tools export to MCP"),
        ledger,
        slow,
        pay,
    }
}

async fn connect_duplex(server: &McpServer) -> RunningService<RoleClient, ()> {
    common::rmcp_client(server.clone()).await
}

fn call_request(name: &str) -> ClientRequest {
    ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
        name.to_owned(),
    )))
}

/// Sends a cancellable call to the tool `name` and waits until `probe` says it started.
async fn start_call(
    client: &RunningService<RoleClient, ()>,
    name: &str,
    probe: &Probe,
) -> RequestHandle<RoleClient> {
    let handle = client
        .peer()
        .send_cancellable_request(call_request(name), PeerRequestOptions::no_options())
        .await
        .expect("the request is sent");
    within(&format!("{name} to start"), probe.started.notified()).await;
    handle
}

/// Waits until the ledger holds `count` records, and returns them.
async fn recorded(ledger: &MemoryLedger, count: usize) -> Vec<LedgerRecord> {
    tokio::time::timeout(WAIT, async {
        loop {
            let records = ledger.records();
            if records.len() >= count {
                return records;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the ledger records the call in time")
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

#[tokio::test]
async fn a_cancelled_request_drops_the_tools_future_and_is_recorded_as_cancelled() {
    let fixture = fixture();
    let client = connect_duplex(&fixture.server).await;
    let handle = start_call(&client, "slow", &fixture.slow).await;
    handle
        .cancel(Some("the user hung up".to_owned()))
        .await
        .expect("the cancellation is sent");

    let records = recorded(&fixture.ledger, 1).await;
    assert!(
        fixture.slow.dropped.load(Ordering::SeqCst),
        "the tool's future was not dropped"
    );
    assert!(!fixture.slow.completed.load(Ordering::SeqCst));
    assert_eq!(records[0].tool, "slow");
    assert_eq!(records[0].outcome, Outcome::Error);
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::Cancelled));

    // Only that call was cancelled: the session's next call runs.
    let next = start_call(&client, "slow", &fixture.slow).await;
    fixture.slow.release.notify_one();
    let answer = within("the second answer", next.await_response())
        .await
        .expect("the second call is answered");
    let rmcp::model::ServerResult::CallToolResult(result) = answer else {
        panic!("not a tool result: {answer:?}")
    };
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let records = recorded(&fixture.ledger, 2).await;
    assert_eq!(records[1].outcome, Outcome::Ok);
    client.cancel().await.expect("the client closes");
}

#[tokio::test]
async fn a_cancelled_request_to_a_non_cancellable_tool_runs_to_completion() {
    let fixture = fixture();
    let client = connect_duplex(&fixture.server).await;
    let handle = start_call(&client, "pay", &fixture.pay).await;
    handle
        .cancel(Some("changed my mind".to_owned()))
        .await
        .expect("the cancellation is sent");
    // The session handles messages in order: once this answer is back, the server has taken
    // the cancellation in, so the tool is released only after it was cancelled.
    within("a listing", client.peer().list_all_tools())
        .await
        .expect("the tools are listed");
    fixture.pay.release.notify_one();

    let records = recorded(&fixture.ledger, 1).await;
    assert!(fixture.pay.completed.load(Ordering::SeqCst));
    assert!(!fixture.pay.dropped.load(Ordering::SeqCst));
    assert_eq!(records[0].tool, "pay");
    assert_eq!(records[0].outcome, Outcome::Ok);
    client.cancel().await.expect("the client closes");
}

/// Serves `server` over streamable HTTP on 127.0.0.1:0; returns its MCP URL and the serving
/// task (abort it to stop the server).
async fn serve_http(server: &McpServer) -> (String, tokio::task::JoinHandle<Result<(), McpError>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let server = server.clone();
    (
        url,
        tokio::spawn(async move { server.serve_http(listener).await }),
    )
}

/// A crewline registry whose tools are the server's, mounted through `McpClient` over HTTP.
async fn mounted(
    server: &McpServer,
) -> (
    ToolRegistry,
    Arc<MemoryLedger>,
    McpClient,
    CancellationToken,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let stop = CancellationToken::new();
    let (server, stopped) = (server.clone(), stop.clone());
    tokio::spawn(async move {
        server
            .serve_http_with_shutdown(listener, async move { stopped.cancelled().await })
            .await
    });
    let client = McpClient::connect_http(&url)
        .await
        .expect("the client connects");
    let ledger = Arc::new(MemoryLedger::new());
    let executor = Executor::builder().ledger(Arc::clone(&ledger) as _).build();
    let mut registry = ToolRegistry::new()
        .with_executor(Arc::new(executor))
        .with_default_exports(Exports::all());
    client.mount(&mut registry).await.expect("the tools mount");
    (registry, ledger, client, stop)
}

#[tokio::test]
async fn barge_in_on_a_mounted_tool_cancels_the_call_on_the_server() {
    let fixture = fixture();
    let (registry, client_ledger, client, stop) = mounted(&fixture.server).await;
    let context = registry.context();
    let run = context.run().clone();
    let call = ToolCall::new("c1", "slow", "{}");
    let barge_in = async {
        within("the remote tool to start", fixture.slow.started.notified()).await;
        run.cancel();
    };
    let (local, ()) = within("the local call", async {
        tokio::join!(registry.execute_one(&call, &context), barge_in)
    })
    .await;
    assert_eq!(
        local.result.error_kind(),
        Some(ToolErrorKind::Cancelled),
        "{}",
        local.result.content()
    );
    assert_eq!(
        client_ledger.records()[0].error_kind,
        Some(ToolErrorKind::Cancelled)
    );

    // Dropping the local call's future sent `notifications/cancelled`: the server stopped the
    // tool too.
    let records = recorded(&fixture.ledger, 1).await;
    assert!(fixture.slow.dropped.load(Ordering::SeqCst));
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::Cancelled));
    drop(registry);
    client.close().await;
    stop.cancel();
}

#[tokio::test]
async fn a_timed_out_mounted_call_is_cancelled_on_the_server() {
    let fixture = fixture();
    let (url, server_task) = serve_http(&fixture.server).await;
    let client = McpClient::connect_http(&url)
        .await
        .expect("the client connects")
        .with_timeout(Duration::from_millis(200));
    let mut registry = ToolRegistry::new();
    client.mount(&mut registry).await.expect("the tools mount");
    let result = within(
        "the local timeout",
        registry.execute_one(&ToolCall::new("c1", "slow", "{}"), &registry.context()),
    )
    .await;
    assert_eq!(result.result.error_kind(), Some(ToolErrorKind::Timeout));
    let records = recorded(&fixture.ledger, 1).await;
    assert!(fixture.slow.dropped.load(Ordering::SeqCst));
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::Cancelled));
    drop(registry);
    client.close().await;
    server_task.abort();
}

#[tokio::test]
async fn a_client_that_closes_its_session_mid_call_cancels_the_call() {
    let fixture = fixture();
    let client = connect_duplex(&fixture.server).await;
    let pending = start_call(&client, "slow", &fixture.slow).await;
    // The client goes away without cancelling the request (the transport closes). rmcp gives
    // running calls a few seconds to answer, then cancels them.
    drop(pending);
    client.cancel().await.expect("the client closes");

    let records = recorded(&fixture.ledger, 1).await;
    assert!(fixture.slow.dropped.load(Ordering::SeqCst));
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::Cancelled));
}

#[tokio::test]
async fn an_http_client_that_ends_its_session_mid_call_cancels_the_call() {
    let fixture = fixture();
    let (url, server_task) = serve_http(&fixture.server).await;
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url);
    let client = within("the handshake", ().serve(transport))
        .await
        .expect("the handshake succeeds");
    let pending = start_call(&client, "slow", &fixture.slow).await;
    // The client leaves without cancelling the request: closing ends its HTTP session
    // (DELETE), which ends the server's session and its running calls.
    drop(pending);
    client.cancel().await.expect("the client closes");

    let records = recorded(&fixture.ledger, 1).await;
    assert!(fixture.slow.dropped.load(Ordering::SeqCst));
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::Cancelled));
    server_task.abort();
}
