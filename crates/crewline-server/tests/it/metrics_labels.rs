//! `/metrics` stays small whatever the model says (issue 30): a tool name the model invents is
//! never a label of its own (one `unknown` label), and gauges added by a merged router are
//! served beside the server's own.

use crate::common;

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use common::*;
use crewline::{
    Crew, SessionSetup, ToolLoop,
    agent::LoopAgent,
    crew::OutputNode,
    llm::{Reply, ScriptedLlm},
    tool::ToolRegistry,
};
use crewline_server::CrewServer;
use serde_json::json;

/// A scrape with a handful of tools is a few kilobytes: 64 KiB is far above it and far below
/// any invented name worth the attack.
const SMALL_SCRAPE: usize = 64 * 1024;

#[tokio::test]
async fn a_scrape_after_an_invented_200_kib_tool_name_stays_small_with_one_unknown_label() {
    // Under the tool loop's `AnswerLimits` (256 KiB a call), so the call reaches the metrics.
    let invented = "x".repeat(200 * 1024);
    let llm = Arc::new(ScriptedLlm::new([
        Reply::tool_call(&invented, json!({})),
        Reply::text("Sorry, I cannot do that."),
    ]));
    let tool_loop = ToolLoop::new(llm, Arc::new(ToolRegistry::new()));
    let server = TestServer::ready(CrewServer::new(move |_setup: SessionSetup| {
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "agent",
            LoopAgent::new("You answer.", tool_loop.clone()),
        ));
        async move { Ok::<_, std::convert::Infallible>(crew) }
    }))
    .await;

    let mut call = server.call("Ada").await;
    let (_, text) = call.turn("do the thing").await;
    assert_eq!(text, "Sorry, I cannot do that.");

    let response = server.get("/metrics").await;
    assert_eq!(response.status, 200);
    let body = &response.body;
    assert!(
        body.len() < SMALL_SCRAPE,
        "a scrape of {} bytes after one invented tool name",
        body.len()
    );
    let line = "crewline_tool_errors_total{tool=\"unknown\",kind=\"UnknownTool\"} 1";
    assert!(
        body.lines().any(|l| l == line),
        "missing `{line}` in:\n{body}"
    );
    call.close().await;
}

#[tokio::test]
async fn a_gauge_added_to_the_metrics_is_served_on_each_scrape() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let open = Arc::new(AtomicU64::new(3));
    let read = Arc::clone(&open);
    server
        .handle
        .metrics()
        .gauge("crewline_mcp_sessions", "MCP sessions open.", move || {
            read.load(Ordering::Relaxed)
        });
    let body = server.get("/metrics").await.body;
    assert!(
        body.lines().any(|l| l == "crewline_mcp_sessions 3"),
        "{body}"
    );
    open.store(1, Ordering::Relaxed);
    let body = server.get("/metrics").await.body;
    assert!(
        body.lines().any(|l| l == "crewline_mcp_sessions 1"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE crewline_mcp_sessions gauge"),
        "{body}"
    );
}
