//! Tool results, arguments and error texts never reach a log line whole: an MCP client that
//! gets a tool to return (or fail with) a megabyte costs the logs at most an excerpt.

// A binary of its own, not in tests/it: it installs the process's one global log subscriber
// (`CapturedLogs`) with its own filter and asserts on every line it captured.

#[path = "it/common/mod.rs"]
mod common;

use async_trait::async_trait;
use crewline::tool::{Exports, Tool, ToolError, ToolRegistry};
use crewline_core::LOG_EXCERPT_BYTES;
use crewline_mcp::McpServer;
use crewline_testkit::CapturedLogs;
use serde_json::{Value, json};

/// Just under a megabyte: the most a tool result may be (1 MiB) with room for its JSON.
const MIB: usize = (1 << 20) - 1024;

/// Everything this test binary logs, at TRACE, but rmcp's own DEBUG and TRACE records: rmcp
/// logs every JSON-RPC message whole there (a deployment keeps `rmcp` at `info` or above; see
/// SECURITY.md), and it is crewline's own log lines this test bounds.
fn captured_logs() -> &'static CapturedLogs {
    CapturedLogs::install("trace,rmcp=info")
}

/// Declares an object result and returns a megabyte of something else.
struct HugeLiar;

#[async_trait]
impl Tool for HugeLiar {
    fn name(&self) -> &str {
        "huge_liar"
    }
    fn description(&self) -> &str {
        "Says it returns a forecast."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn result_schema(&self) -> Option<Value> {
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
            .into()
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        Ok(json!({"town": "r".repeat(MIB)}))
    }
}

/// Fails with a megabyte of error text (as a remote client's error answer can).
struct HugeFailure;

#[async_trait]
impl Tool for HugeFailure {
    fn name(&self) -> &str {
        "huge_failure"
    }
    fn description(&self) -> &str {
        "Fails at length."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        Err(ToolError::new("e".repeat(MIB)).with_detail("d".repeat(MIB)))
    }
}

/// The longest run of `c` in `text`.
fn longest_run(text: &str, c: char) -> usize {
    text.split(|x| x != c).map(str::len).max().unwrap_or(0)
}

#[tokio::test]
async fn a_megabyte_result_or_error_logs_at_most_an_excerpt() {
    let logs = captured_logs();
    // Hand-written tools have no `export` of their own: the registry opts them in to MCP.
    let mut tools = ToolRegistry::new().with_default_exports(Exports::all());
    tools
        .register(HugeLiar)
        .expect("liar registers")
        .register(HugeFailure)
        .expect("failure registers");
    let server = McpServer::new(&tools).expect("the tools export to MCP");
    let client = common::rmcp_client(server).await;

    let bad = common::call_tool(&client, "huge_liar", json!({})).await;
    assert_eq!(
        bad.is_error,
        Some(true),
        "a result off its schema is an error"
    );
    let failed = common::call_tool(&client, "huge_failure", json!({})).await;
    assert_eq!(failed.is_error, Some(true));

    let text = logs.text();
    assert!(
        text.contains("the result does not match the tool's declared output schema"),
        "the bad result is logged"
    );
    assert!(text.contains("tool call failed"), "the failure is logged");
    for c in ['r', 'e', 'd'] {
        let run = longest_run(&text, c);
        assert!(
            run <= LOG_EXCERPT_BYTES,
            "a log line carries {run} bytes of a tool's text ({c})"
        );
    }
    assert!(
        text.contains(&format!("({} bytes in all)", MIB + 11)),
        "the length is logged"
    );
    assert!(text.len() < 64 << 10, "{} bytes of logs", text.len());
}
