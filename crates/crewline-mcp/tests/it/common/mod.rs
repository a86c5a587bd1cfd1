//! Test tools and servers: a registry with a ledger and a guardrail, served over MCP on
//! 127.0.0.1:0 or an in-process duplex.
#![allow(dead_code, unreachable_pub)]

use std::{net::SocketAddr, sync::Arc, time::Duration};

use async_trait::async_trait;
use crewline::{
    prelude::function_tool,
    tool::{
        Executor, ToolError, ToolRegistry,
        executor::{
            guardrails::{Guardrail, Verdict},
            ledger::MemoryLedger,
        },
    },
    types::ToolCall,
};
use crewline_mcp::{McpClient, McpServer, SchemaFlavour};
use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, CallToolResult},
    service::RunningService,
};
use serde_json::{Value, json};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

/// How long any single wait may take before a test fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// Book a table.
///
/// # Arguments
/// * `restaurant` - The restaurant's name
/// * `party_size` - How many people (1 to 12)
/// * `time` - When, e.g. 19:30
#[function_tool(export = "crew,mcp")]
async fn book_table(
    restaurant: String,
    party_size: u8,
    time: Option<String>,
) -> Result<Value, ToolError> {
    if !(1..=12).contains(&party_size) {
        return Err(ToolError::invalid_arguments(format!(
            "party_size must be between 1 and 12, not {party_size}"
        )));
    }
    Ok(json!({
        "restaurant": restaurant,
        "party_size": party_size,
        "time": time.unwrap_or_else(|| "19:00".to_owned()),
    }))
}

/// Echo text after a delay.
///
/// # Arguments
/// * `text` - What to echo
/// * `delay_ms` - How long to wait first
#[function_tool(export = "crew,mcp")]
async fn slow_echo(text: String, delay_ms: u64) -> String {
    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    text
}

/// A note for the staff (crew only).
///
/// # Arguments
/// * `note` - The note
#[function_tool(export = "crew")]
fn staff_note(note: String) -> String {
    format!("noted: {note}")
}

/// Blocks bookings at the restaurant called "Closed".
struct ClosedRestaurant;

#[async_trait]
impl Guardrail for ClosedRestaurant {
    fn name(&self) -> &str {
        "closed-restaurant"
    }

    async fn check_input(&self, _call: &ToolCall, arguments: &Value) -> Verdict {
        if arguments["restaurant"] == "Closed" {
            Verdict::block("that restaurant is closed today")
        } else {
            Verdict::Allow
        }
    }
}

/// The test tools (`book_table`, `slow_echo`, crew-only `staff_note`) in a registry whose
/// executor records to `ledger` and blocks the restaurant "Closed".
pub fn registry(ledger: &Arc<MemoryLedger>) -> ToolRegistry {
    let executor = Executor::builder()
        .ledger(Arc::clone(ledger) as _)
        .guardrail(ClosedRestaurant)
        .build();
    let mut tools = ToolRegistry::new().with_executor(Arc::new(executor));
    tools
        .register(BookTableTool)
        .expect("book_table registers")
        .register(SlowEchoTool)
        .expect("slow_echo registers")
        .register(StaffNoteTool)
        .expect("staff_note registers");
    tools
}

/// The MCP server of the test registry.
pub fn server(ledger: &Arc<MemoryLedger>, flavour: SchemaFlavour) -> McpServer {
    McpServer::with_flavour(&registry(ledger), flavour).expect("the test tools export to MCP")
}

/// An MCP server on 127.0.0.1:0 over streamable HTTP, stopped on drop.
pub struct HttpServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<Result<(), crewline_mcp::McpError>>>,
}

impl HttpServer {
    pub async fn start(server: McpServer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .serve_http_with_shutdown(listener, async move {
                    let _ = stopped.await;
                })
                .await
        });
        Self {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Stops the server and waits until it has stopped.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(WAIT, task)
                .await
                .expect("the server stops in time")
                .expect("the server task does not panic")
                .expect("the server stops cleanly");
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// A client connected to `server` over an in-process duplex (what stdio carries, minus
/// the process).
pub async fn duplex_client(server: McpServer) -> McpClient {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move { server.serve_io(server_io).await });
    tokio::time::timeout(WAIT, McpClient::connect_io(client_io))
        .await
        .expect("connect in time")
        .expect("the MCP handshake succeeds")
}

/// A plain rmcp client (no crewline code on its side) connected to `server` over an
/// in-process duplex: what any other MCP client would see.
pub async fn rmcp_client(server: McpServer) -> RunningService<RoleClient, ()> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move { server.serve_io(server_io).await });
    tokio::time::timeout(WAIT, ().serve(client_io))
        .await
        .expect("handshake in time")
        .expect("the handshake succeeds")
}

/// Calls the tool `name` with `args` (a JSON object) from a plain rmcp client.
pub async fn call_tool(
    client: &RunningService<RoleClient, ()>,
    name: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    let params = CallToolRequestParams::new(name.to_owned()).with_arguments(args);
    tokio::time::timeout(WAIT, client.call_tool(params))
        .await
        .expect("the call answers in time")
        .expect("the call is answered with a tool result")
}

/// The `{"error": {"kind", "message"}}` in `text`, as (kind, message).
pub fn error_of(text: &str) -> (String, String) {
    let value: Value = serde_json::from_str(text).expect("an error object");
    (
        value["error"]["kind"].as_str().expect("a kind").to_owned(),
        value["error"]["message"]
            .as_str()
            .expect("a message")
            .to_owned(),
    )
}

/// An MCP `initialize` request, as a raw client would send it.
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// POSTs an MCP `initialize` to `/mcp` with this `Host` header and `extra` header lines (each
/// ending in CRLF); returns the status line.
pub async fn initialize_raw(addr: SocketAddr, host: &str, extra: &str) -> String {
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{extra}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{INITIALIZE}",
        INITIALIZE.len()
    );
    // The head only: an accepted initialize may answer with an open event stream.
    crewline_testkit::platform::http::request_head(addr, &request)
        .await
        .expect("an answer in time")
}
