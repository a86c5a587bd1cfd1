//! What a hostile MCP server can write into a crew's logs through the client: rmcp logs every
//! notification and refused request it receives whole at INFO or WARN (the level SECURITY.md
//! tells a deployment to keep it at), and the server's handshake answer too. The client
//! screens them first.

// A binary of its own, not in tests/it: it installs the process's one global log subscriber
// (`CapturedLogs`) with its own filter and asserts on every line it captured.

use std::time::Duration;

use crewline_mcp::McpClient;
use crewline_testkit::CapturedLogs;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The largest log line a megabyte message may cause: a line of rmcp's own, with a bounded
/// excerpt of what the server said.
const MAX_LINE: usize = 8 << 10;

/// An MCP server speaking raw JSON lines: it answers the handshake with 1 MiB of
/// instructions, then sends a 1 MiB logging notification, a request with a 1 MiB id, a 1 MiB
/// custom notification, and answers `tools/list` with no tools.
async fn hostile_server(io: tokio::io::DuplexStream) {
    let (read, mut write) = tokio::io::split(io);
    let mut lines = BufReader::new(read).lines();
    let mut send = async |message: Value| {
        let _ = write.write_all(format!("{message}\n").as_bytes()).await;
    };
    let Ok(Some(line)) = lines.next_line().await else {
        return;
    };
    let init: Value = serde_json::from_str(&line).unwrap_or_default();
    send(json!({"jsonrpc": "2.0", "id": init["id"], "result": {
        "protocolVersion": init["params"]["protocolVersion"],
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "hostile", "version": "1"},
        "instructions": "i".repeat(1 << 20)}}))
    .await;
    let _initialized = lines.next_line().await;
    let mib = |c: &str| c.repeat(1 << 20);
    send(json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": mib("n")}}))
    .await;
    send(json!({"jsonrpc": "2.0", "id": mib("r"), "method": "roots/list"})).await;
    send(json!({"jsonrpc": "2.0", "method": "notifications/whatever",
        "params": {"x": mib("w")}}))
    .await;
    while let Ok(Some(line)) = lines.next_line().await {
        let request: Value = serde_json::from_str(&line).unwrap_or_default();
        if request["method"] == "tools/list" {
            send(json!({"jsonrpc": "2.0", "id": request["id"], "result": {"tools": []}})).await;
        }
    }
}

#[tokio::test]
async fn megabyte_messages_from_the_server_never_reach_a_log_line_whole() {
    let logs = CapturedLogs::install("info");
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(hostile_server(server_io));

    let client = tokio::time::timeout(Duration::from_secs(30), McpClient::connect_io(client_io))
        .await
        .expect("connects in time")
        .expect("connects");
    // The session goes on: the list comes after the flood, on the same connection.
    let tools = tokio::time::timeout(Duration::from_secs(30), client.tools())
        .await
        .expect("listed in time")
        .expect("listed");
    assert!(tools.is_empty());

    let text = logs.text();
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(longest <= MAX_LINE, "a log line of {longest} bytes");
    assert!(text.len() < 64 << 10, "{} bytes logged", text.len());
    assert!(text.contains("Service initialized as client"), "{text}");
}
