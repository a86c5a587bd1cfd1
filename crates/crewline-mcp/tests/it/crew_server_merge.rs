//! A crew server with the MCP router merged serves both the platform's WebSocket (`/ws`) and
//! MCP (`/mcp`) on one port, and both use the same tools, executor and ledger.

use crate::common;

use std::sync::Arc;

use crewline::{
    Crew, SessionSetup, ToolLoop,
    crew::{OutputAgent, OutputNode},
    llm::{Reply, ScriptedLlm},
    tool::{ExecuteOptions, ToolRegistry, executor::ledger::MemoryLedger},
    turn::TurnStream,
    types::Context,
};
use crewline_mcp::{McpClient, McpServer};
use crewline_server::CrewServer;
use crewline_testkit::platform::{PlatformClient, PlatformConfig};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use common::WAIT;

/// An output agent that runs the tool loop.
struct Booker {
    context: Context,
    tool_loop: ToolLoop,
}

impl OutputAgent for Booker {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }

    fn generate_response(&mut self) -> TurnStream<'_> {
        self.tool_loop.run(&mut self.context)
    }
}

/// A crew whose scripted model books a table with the shared tools, then says so.
fn crew(tools: &ToolRegistry) -> Crew {
    let llm = ScriptedLlm::new([
        Reply::tool_call(
            "book_table",
            json!({"restaurant": "Noma", "party_size": 2, "time": null}),
        ),
        Reply::text("Booked for two."),
    ]);
    let agent = Booker {
        context: Context::with_system("You book tables."),
        tool_loop: ToolLoop::new(Arc::new(llm), Arc::new(tools.clone())),
    };
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new("booker", agent));
    crew
}

#[tokio::test]
async fn one_port_serves_the_crew_websocket_and_mcp() {
    let ledger = Arc::new(MemoryLedger::new());
    let tools = common::registry(&ledger);
    let mcp = McpServer::new(&tools).expect("the tools export to MCP");
    let crew_tools = tools.clone();
    let server = CrewServer::new(move |_setup: SessionSetup| crew(&crew_tools)).merge(mcp.router());

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let handle = server.handle();
    let task = tokio::spawn(server.serve(listener));

    // MCP on /mcp.
    let client = tokio::time::timeout(WAIT, McpClient::connect_http(&format!("http://{addr}/mcp")))
        .await
        .expect("connect in time")
        .expect("MCP is served on /mcp");
    let mut mounted = ToolRegistry::new();
    client.mount(&mut mounted).await.expect("the tools mount");
    let call = crewline::types::ToolCall::new(
        "m1",
        "book_table",
        r#"{"restaurant":"Noma","party_size":3}"#,
    );
    let result = mounted
        .execute(&[call], ExecuteOptions::new().sequential())
        .await
        .remove(0)
        .result;
    assert!(!result.is_error(), "{}", result.content());

    // The crew on /ws, through the platform client.
    let mut call = PlatformClient::connect(PlatformConfig::new(format!("ws://{addr}/ws")))
        .await
        .expect("the crew is served on /ws");
    let turn = call
        .user_turn("a table for two")
        .expect("the turn is sent")
        .finish()
        .await
        .expect("the turn ends");
    let spoken = turn.text;
    assert_eq!(spoken, "Booked for two.");

    // One executor, one ledger: the MCP call and the crew's call.
    let booked: Vec<Value> = ledger.records().into_iter().map(|r| r.arguments).collect();
    assert_eq!(
        booked,
        [
            json!({"restaurant": "Noma", "party_size": 3}),
            json!({"restaurant": "Noma", "party_size": 2, "time": null}),
        ]
    );
    drop(mounted);
    client.close().await;
    call.close().await.expect("close the call");
    handle.shutdown();
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the server drains in time")
        .expect("the server task does not panic")
        .expect("the server stops cleanly");
}

/// POSTs an MCP `initialize` to `/mcp` with `Host: localhost` and `extra` header lines;
/// returns the status line.
async fn initialize(addr: std::net::SocketAddr, extra: &str) -> String {
    common::initialize_raw(addr, "localhost", extra).await
}

#[tokio::test]
async fn a_merged_mcp_router_is_behind_the_crew_servers_token() {
    let ledger = Arc::new(MemoryLedger::new());
    let tools = common::registry(&ledger);
    let mcp = McpServer::new(&tools).expect("the tools export to MCP");
    let crew_tools = tools.clone();
    let server = CrewServer::new(move |_setup: SessionSetup| crew(&crew_tools))
        .auth_token("crew-secret")
        .merge(mcp.router());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let handle = server.handle();
    let task = tokio::spawn(server.serve(listener));

    // A forged loopback `Host` (what the allowlist checks) is no way in.
    let forged = initialize(addr, "").await;
    assert!(forged.contains(" 401 "), "{forged}");
    let wrong = initialize(addr, "Authorization: Bearer crew-secre\r\n").await;
    assert!(wrong.contains(" 401 "), "{wrong}");
    let url = format!("http://{addr}/mcp");
    assert!(McpClient::connect_http(&url).await.is_err());
    let client = tokio::time::timeout(
        WAIT,
        McpClient::connect_http_with_bearer(&url, "crew-secret"),
    )
    .await
    .expect("connect in time")
    .expect("the crew server's token opens MCP");
    assert_eq!(client.tools().await.expect("listed").len(), 2);
    assert!(ledger.records().is_empty(), "no call ran");
    // An open MCP session holds a graceful shutdown; the client leaves first.
    client.close().await;

    handle.shutdown();
    tokio::time::timeout(WAIT, task)
        .await
        .expect("stops in time")
        .expect("no panic")
        .expect("serves cleanly");
}

#[tokio::test]
async fn the_crew_servers_metrics_count_the_merged_mcp_sessions() {
    let ledger = Arc::new(MemoryLedger::new());
    let tools = common::registry(&ledger);
    let mcp = McpServer::new(&tools).expect("the tools export to MCP");
    let crew_tools = tools.clone();
    let server = CrewServer::new(move |_setup: SessionSetup| crew(&crew_tools)).merge(mcp.router());
    let sessions = mcp.clone();
    server.handle().metrics().gauge(
        "crewline_mcp_sessions",
        "MCP sessions open on the merged /mcp router.",
        move || sessions.open_sessions() as u64,
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let handle = server.handle();
    let task = tokio::spawn(server.serve(listener));

    let scrape = || async {
        crewline_testkit::platform::http::get(addr, "/metrics")
            .await
            .expect("/metrics answers")
            .body
    };
    assert!(
        scrape()
            .await
            .lines()
            .any(|l| l == "crewline_mcp_sessions 0")
    );
    let client = tokio::time::timeout(WAIT, McpClient::connect_http(&format!("http://{addr}/mcp")))
        .await
        .expect("connect in time")
        .expect("MCP is served on /mcp");
    let body = scrape().await;
    assert!(
        body.lines().any(|l| l == "crewline_mcp_sessions 1"),
        "{body}"
    );
    client.close().await;

    handle.shutdown();
    tokio::time::timeout(WAIT, task)
        .await
        .expect("stops in time")
        .expect("no panic")
        .expect("serves cleanly");
}
