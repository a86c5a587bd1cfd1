//! MCP tool calls run through the registry's executor: results, structured errors with
//! `isError`, validation, guardrails and the ledger, seen by a plain rmcp client over an
//! in-process duplex (the stdio transport without the process).

use crate::common;

use std::sync::Arc;

use crewline::{
    tool::executor::ledger::{MemoryLedger, Outcome},
    types::ToolErrorKind,
};
use crewline_mcp::SchemaFlavour;
use rmcp::{RoleClient, model::CallToolResult, service::RunningService};
use serde_json::{Value, json};

use common::{call_tool as call, error_of};

async fn connect(ledger: &Arc<MemoryLedger>) -> RunningService<RoleClient, ()> {
    common::rmcp_client(common::server(ledger, SchemaFlavour::Standard)).await
}

fn text(result: &CallToolResult) -> String {
    assert_eq!(result.content.len(), 1, "{result:?}");
    result.content[0]
        .as_text()
        .expect("text content")
        .text
        .clone()
}

#[tokio::test]
async fn a_successful_call_returns_the_tools_output_and_is_recorded() {
    let ledger = Arc::new(MemoryLedger::new());
    let client = connect(&ledger).await;
    let result = call(
        &client,
        "book_table",
        json!({"restaurant": "Noma", "party_size": 4}),
    )
    .await;
    assert_eq!(result.is_error, Some(false));
    let output: Value = serde_json::from_str(&text(&result)).expect("JSON output");
    assert_eq!(
        output,
        json!({"restaurant": "Noma", "party_size": 4, "time": "19:00"})
    );

    let records = ledger.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].tool, "book_table");
    assert_eq!(records[0].outcome, Outcome::Ok);
    assert_eq!(
        records[0].arguments,
        json!({"restaurant": "Noma", "party_size": 4})
    );
    assert!(
        records[0].call_id.starts_with("call_"),
        "{}",
        records[0].call_id
    );
}

#[tokio::test]
async fn tool_errors_are_is_error_results_with_the_models_error_json() {
    let ledger = Arc::new(MemoryLedger::new());
    let client = connect(&ledger).await;
    let result = call(
        &client,
        "book_table",
        json!({"restaurant": "Noma", "party_size": 40}),
    )
    .await;
    assert_eq!(result.is_error, Some(true));
    let (kind, message) = error_of(&text(&result));
    assert_eq!(kind, "ToolArgsInvalid");
    assert!(message.contains("between 1 and 12"), "{message}");

    let records = ledger.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, Outcome::Error);
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::ToolArgsInvalid));
}

#[tokio::test]
async fn arguments_that_break_the_schema_are_rejected_before_the_tool_runs() {
    let ledger = Arc::new(MemoryLedger::new());
    let client = connect(&ledger).await;
    let result = call(&client, "book_table", json!({"restaurant": "Noma"})).await;
    assert_eq!(result.is_error, Some(true));
    let (kind, message) = error_of(&text(&result));
    assert_eq!(kind, "ToolArgsInvalid");
    assert!(message.contains("party_size"), "{message}");
    assert_eq!(
        ledger.records()[0].error_kind,
        Some(ToolErrorKind::ToolArgsInvalid)
    );
}

#[tokio::test]
async fn guardrails_apply_to_mcp_calls() {
    let ledger = Arc::new(MemoryLedger::new());
    let client = connect(&ledger).await;
    let result = call(
        &client,
        "book_table",
        json!({"restaurant": "Closed", "party_size": 2}),
    )
    .await;
    assert_eq!(result.is_error, Some(true));
    let (kind, message) = error_of(&text(&result));
    assert_eq!(kind, "GuardrailBlocked");
    assert!(message.contains("closed today"), "{message}");
}

#[tokio::test]
async fn tools_not_exported_to_mcp_cannot_be_called() {
    let ledger = Arc::new(MemoryLedger::new());
    let client = connect(&ledger).await;
    let listed: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools are listed")
        .into_iter()
        .map(|tool| tool.name.into_owned())
        .collect();
    assert_eq!(listed, ["book_table", "slow_echo"]);

    let result = call(&client, "staff_note", json!({"note": "hi"})).await;
    assert_eq!(result.is_error, Some(true));
    let (kind, message) = error_of(&text(&result));
    assert_eq!(kind, "UnknownTool");
    assert!(message.contains("book_table, slow_echo"), "{message}");
    assert_eq!(
        ledger.records()[0].error_kind,
        Some(ToolErrorKind::UnknownTool)
    );
}
