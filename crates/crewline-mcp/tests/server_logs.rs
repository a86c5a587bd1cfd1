//! What an MCP client (a token holder) can write into the server's logs: rmcp logs every
//! notification a client sends whole at INFO, the client's handshake at INFO, and the id and
//! error of every request it fails at WARN (an unknown method's error repeats its name), at
//! the `rmcp=info` SECURITY.md tells a deployment to keep. The server screens them first, on
//! stdio and over HTTP; the session goes on.

// A binary of its own, not in tests/it: it installs the process's one global log subscriber
// (`CapturedLogs`) with its own filter and asserts on every line it captured.

#[path = "it/common/mod.rs"]
mod common;

use std::{collections::HashMap, sync::Arc};

use crewline::tool::executor::ledger::MemoryLedger;
use crewline_mcp::{McpServer, SchemaFlavour};
use crewline_testkit::CapturedLogs;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use common::{HttpServer, WAIT};

/// The largest log line a megabyte message may cause: a line of rmcp's own, with at most a
/// small message in it.
const MAX_LINE: usize = 8 << 10;

fn mcp() -> McpServer {
    common::server(&Arc::new(MemoryLedger::new()), SchemaFlavour::Standard)
}

fn logs() -> &'static CapturedLogs {
    CapturedLogs::install("info")
}

/// Just under a megabyte of `c`: with its JSON around it, a message under the 1 MiB body cap.
fn mib(c: &str) -> String {
    c.repeat((1 << 20) - 1024)
}

fn initialize(id: u64, client_name: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": client_name, "version": "1"}}})
}

/// What a hostile client sends once its session is open: a 1 MiB cancellation reason, a
/// 1 MiB custom notification, a `ping` with a 1 MiB id, and a custom request (id 3) whose
/// method is 1 MiB long.
fn flood() -> Vec<Value> {
    vec![
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": 99, "reason": mib("c")}}),
        json!({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {"x": mib("w")}}),
        json!({"jsonrpc": "2.0", "id": mib("i"), "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": mib("m")}),
    ]
}

/// The longest line of `text`.
fn longest_line(text: &str) -> usize {
    text.lines().map(str::len).max().unwrap_or(0)
}

#[tokio::test]
async fn megabyte_messages_from_a_stdio_client_never_reach_a_log_line_whole() {
    let logs = logs();
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = mcp();
    tokio::spawn(async move { server.serve_io(server_io).await });
    let (read, mut write) = tokio::io::split(client_io);
    let mut lines = BufReader::new(read).lines();

    // An `initialize` carrying a 1 MiB client name, then an ordinary one.
    let mut messages = vec![initialize(1, &mib("n")), initialize(2, "raw")];
    messages.push(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    messages.extend(flood());
    messages.push(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}));
    for message in messages {
        write
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write");
    }
    // The answers, by id, until the listing at the end (the session goes on).
    let mut answers = HashMap::new();
    while !answers.contains_key(&json!(4)) {
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("an answer in time")
            .expect("read")
            .expect("the session is still open");
        let answer: Value = serde_json::from_str(&line).expect("a JSON-RPC message");
        answers.insert(answer["id"].clone(), answer);
    }

    let text = logs.text();
    assert!(
        longest_line(&text) <= MAX_LINE,
        "a log line of {} bytes",
        longest_line(&text)
    );
    assert!(text.len() < 64 << 10, "{} bytes logged", text.len());
    assert!(text.contains("Service initialized as server"), "{text}");
    // The refused requests are told so; the listing is served.
    assert_eq!(answers[&json!(1)]["error"]["code"], -32600, "{:?}", answers);
    assert_eq!(answers[&json!(3)]["error"]["code"], -32600);
    assert!(answers[&json!(2)]["result"]["serverInfo"].is_object());
    assert!(answers[&json!(4)]["result"]["tools"].is_array());
}

/// One JSON-RPC POST to `url`: its status and the JSON-RPC message of its body (plain JSON or
/// the `data` of an SSE event), and the session id it gave.
async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: &Value,
) -> (u16, Option<Value>, Option<String>) {
    let mut request = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = tokio::time::timeout(WAIT, request.send())
        .await
        .expect("an answer in time")
        .expect("the request is answered");
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = tokio::time::timeout(WAIT, response.text())
        .await
        .expect("the body in time")
        .unwrap_or_default();
    let message = serde_json::from_str(&text).ok().or_else(|| {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
    });
    (status, message, session)
}

#[tokio::test]
async fn megabyte_messages_from_an_http_client_never_reach_a_log_line_whole() {
    let logs = logs();
    let http = reqwest::Client::new();
    // What each server answered the oversized initialize and the flood with, checked after
    // the logs.
    let mut refusals = Vec::new();
    for server in [mcp(), mcp().stateless()] {
        let server = HttpServer::start(server).await;
        let url = server.url();

        let (status, refused, _) = post(&http, &url, None, &initialize(1, &mib("n"))).await;
        refusals.push((
            status,
            refused.map(|message| message["error"]["code"].clone()),
        ));
        let (status, _, session) = post(&http, &url, None, &initialize(2, "raw")).await;
        assert_eq!(status, 200);
        let session = session.as_deref();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        post(&http, &url, session, &initialized).await;
        for message in flood() {
            let (status, refused, _) = post(&http, &url, session, &message).await;
            refusals.push((
                status,
                refused.map(|message| message["error"]["code"].clone()),
            ));
        }
        // The session goes on.
        let list = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"});
        let (status, listed, _) = post(&http, &url, session, &list).await;
        assert_eq!(status, 200);
        assert!(listed.expect("a listing")["result"]["tools"].is_array());
        server.stop().await;
    }

    let text = logs.text();
    assert!(
        longest_line(&text) <= MAX_LINE,
        "a log line of {} bytes",
        longest_line(&text)
    );
    assert!(text.len() < 64 << 10, "{} bytes logged", text.len());
    // A notification screened out is taken (202); a request is refused with a JSON-RPC
    // "invalid request" (400), under its id when that is small.
    let code = Some(json!(-32600));
    let expected = [
        (400, code.clone()),
        (202, None),
        (202, None),
        (400, code.clone()),
        (400, code),
    ];
    assert_eq!(refusals, [expected.clone(), expected].concat());
}

#[tokio::test]
async fn a_stdio_client_that_does_not_start_with_initialize_gets_a_short_error() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(async move { mcp().serve_io(server_io).await });
    let (_read, mut write) = tokio::io::split(client_io);
    // A megabyte answer to nothing, first (answers pass the screen whole: rmcp does not log
    // them once the session is open).
    let call = json!({"jsonrpc": "2.0", "id": 1, "result": {"x": mib("a")}});
    write
        .write_all(format!("{call}\n").as_bytes())
        .await
        .expect("write");

    let error = tokio::time::timeout(WAIT, serving)
        .await
        .expect("the session ends in time")
        .expect("the session does not panic")
        .expect_err("a session without a handshake fails");

    // The error (which the binary serving stdio logs or prints) does not carry the message.
    let text = format!("{error} {error:?}");
    assert!(text.len() < 1024, "an error of {} bytes", text.len());
    let cause = std::error::Error::source(&error).map(ToString::to_string);
    assert!(
        cause.is_some_and(|cause| cause.contains("not an initialize request")),
        "{error:?}"
    );
}

/// Sends `request` (a whole HTTP/1.1 request) and returns the response's status line.
async fn raw(addr: std::net::SocketAddr, request: &str) -> String {
    let head = crewline_testkit::platform::http::request_head(addr, request)
        .await
        .expect("an answer in time");
    head.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn headers_rmcp_logs_whole_are_refused_past_a_kibibyte() {
    let logs = logs();
    let server = HttpServer::start(mcp()).await;
    let addr = server.addr;
    let stateless = HttpServer::start(mcp().stateless()).await;
    let long = "h".repeat(32 << 10);
    let body = common::INITIALIZE;
    let post = |host: &str, extra: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{extra}Content-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let statuses = [
        // A malformed Host (rmcp: "rejected request with malformed Host header").
        raw(addr, &post(&format!("{long}:x"), "")).await,
        // A protocol version that does not match the body's (rmcp: "rejecting initialize:
        // MCP-Protocol-Version header does not match").
        raw(
            stateless.addr,
            &post("127.0.0.1", &format!("MCP-Protocol-Version: {long}\r\n")),
        )
        .await,
    ];
    // An ordinary request is still served.
    let served = raw(addr, &post("127.0.0.1", "")).await;
    server.stop().await;
    stateless.stop().await;

    let text = logs.text();
    assert!(
        longest_line(&text) <= MAX_LINE,
        "a log line of {} bytes",
        longest_line(&text)
    );
    for status in statuses {
        assert!(status.starts_with("HTTP/1.1 400"), "{status}");
    }
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
}
