//! A crew server with the MCP router merged serves both the platform's WebSocket (`/ws`) and
//! MCP (`/mcp`) on one port, and both use the same tools, executor and ledger.

mod common;

use std::{convert::Infallible, sync::Arc};

use crewline::{
    Crew, OutputAgent, OutputNode, SessionSetup, ToolLoop, TurnStream,
    core::{Context, ToolCall, ToolResult},
    llm::{Reply, ScriptedLlm},
    tool::{ExecuteOptions, ToolRegistry, executor::ledger::MemoryLedger},
};
use crewline_mcp::{McpClient, McpServer};
use crewline_server::CrewServer;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_tungstenite::{connect_async, tungstenite::Message as WsMessage};

use common::WAIT;

/// The results of `calls` run by `registry`, in call order (`parallel`: concurrently).
async fn results(registry: &ToolRegistry, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
    registry
        .execute(calls, ExecuteOptions::new().parallel(parallel))
        .await
        .into_iter()
        .map(|run| run.result)
        .collect()
}

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

async fn next_frame(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Value {
    loop {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time")
            .expect("the socket is open")
            .expect("no socket error");
        if let WsMessage::Binary(bytes) = message {
            return serde_json::from_slice(&bytes).expect("a JSON frame");
        }
    }
}

#[tokio::test]
async fn one_port_serves_the_crew_websocket_and_mcp() {
    let ledger = Arc::new(MemoryLedger::new());
    let tools = common::registry(&ledger);
    let mcp = McpServer::new(&tools).expect("the tools export to MCP");
    let crew_tools = tools.clone();
    let server = CrewServer::new(move |_setup: SessionSetup| {
        let crew = crew(&crew_tools);
        async move { Ok::<_, Infallible>(crew) }
    })
    .merge(mcp.router());

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
    let call = crewline::core::ToolCall::new(
        "m1",
        "book_table",
        r#"{"restaurant":"Noma","party_size":3}"#,
    );
    let result = results(&mounted, &[call], false).await.remove(0);
    assert!(!result.is_error(), "{}", result.content());

    // The crew on /ws.
    let (mut ws, _) = tokio::time::timeout(WAIT, connect_async(format!("ws://{addr}/ws")))
        .await
        .expect("connect in time")
        .expect("the crew is served on /ws");
    let init = json!({
        "type": "system.init",
        "timestamp": "2030-01-02T03:04:00.000000",
        "version": "1.0",
        "session_context": {"initial_variables": {}, "conversation_type": "webcall", "caller": null},
        "output_agent_settings": {"interruptible": true}
    });
    for frame in [
        init,
        json!({"type": "agent.transcript.update", "role": "user", "content": "a table for two"}),
        json!({"type": "system.llm.request", "messages": [{"role": "user", "content": "a table for two"}]}),
    ] {
        ws.send(WsMessage::binary(frame.to_string().into_bytes()))
            .await
            .expect("send");
    }
    let mut spoken = String::new();
    loop {
        let frame = next_frame(&mut ws).await;
        if frame["type"] == "agent.llm.response.chunk" {
            spoken.push_str(frame["text"].as_str().unwrap_or_default());
        }
        if frame["type"] == "agent.llm.response.end" {
            break;
        }
    }
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
    ws.close(None).await.expect("close the socket");
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{extra}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    let mut buf = [0u8; 1024];
    while !response.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, stream.read(&mut buf))
            .await
            .expect("an answer in time")
            .expect("read");
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&response)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_merged_mcp_router_is_behind_the_crew_servers_token() {
    let ledger = Arc::new(MemoryLedger::new());
    let tools = common::registry(&ledger);
    let mcp = McpServer::new(&tools).expect("the tools export to MCP");
    let crew_tools = tools.clone();
    let server = CrewServer::new(move |_setup: SessionSetup| {
        let crew = crew(&crew_tools);
        async move { Ok::<_, Infallible>(crew) }
    })
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
