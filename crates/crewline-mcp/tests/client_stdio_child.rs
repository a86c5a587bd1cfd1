//! `McpClient::spawn`: a crewline MCP server in a child process, over its stdin and stdout.
//!
//! This test binary is its own child: started with `CREWLINE_MCP_CHILD=1` it serves the test
//! tools on stdio (so it needs no libtest harness, whose output would corrupt stdout);
//! otherwise it runs the test, which spawns it that way.

// A binary of its own, not in tests/it: `harness = false`, it runs itself as the MCP child.

#[path = "it/common/mod.rs"]
mod common;

use std::{process::ExitCode, sync::Arc, time::Duration};

use crewline::{
    tool::{
        ExecuteOptions, Executor, ToolRegistry,
        executor::ledger::{JsonlLedger, MemoryLedger, Outcome},
    },
    types::{ToolCall, ToolErrorKind, ToolResult},
};
use crewline_mcp::{McpClient, SchemaFlavour};

/// The results of `calls` run by `registry`, in call order (`parallel`: concurrently).
async fn results(registry: &ToolRegistry, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
    registry
        .execute(calls, ExecuteOptions::new().parallel(parallel))
        .await
        .into_iter()
        .map(|run| run.result)
        .collect()
}

const CHILD: &str = "CREWLINE_MCP_CHILD";
const LEDGER: &str = "CREWLINE_MCP_CHILD_LEDGER";

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    if std::env::var_os(CHILD).is_some() {
        runtime.block_on(serve_child());
        return ExitCode::SUCCESS;
    }
    runtime.block_on(tools_of_a_child_process_run_through_both_executors());
    eprintln!("client_stdio_child: tools_of_a_child_process_run_through_both_executors ... ok");
    ExitCode::SUCCESS
}

/// The child: the test tools on stdio, recording to the JSON Lines ledger the parent named.
async fn serve_child() {
    let path = std::env::var(LEDGER).expect("the parent names a ledger");
    let executor = Executor::builder()
        .ledger(Arc::new(JsonlLedger::open(&path).expect("open the ledger")))
        .build();
    let tools = common::registry(&Arc::new(MemoryLedger::new())).with_executor(Arc::new(executor));
    let server = crewline_mcp::McpServer::with_flavour(&tools, SchemaFlavour::Standard)
        .expect("the tools export");
    server.serve_stdio().await.expect("serve stdio");
}

async fn tools_of_a_child_process_run_through_both_executors() {
    let dir = std::env::temp_dir().join(format!("crewline-mcp-child-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let remote_ledger = dir.join("ledger.jsonl");
    let _ = std::fs::remove_file(&remote_ledger);

    let mut command = tokio::process::Command::new(std::env::current_exe().expect("this binary"));
    command.env(CHILD, "1").env(LEDGER, &remote_ledger);
    let client = tokio::time::timeout(common::WAIT, McpClient::spawn(command))
        .await
        .expect("the child answers in time")
        .expect("the child speaks MCP")
        .with_timeout(Duration::from_secs(5));

    let local = Arc::new(MemoryLedger::new());
    let executor = Executor::builder().ledger(Arc::clone(&local) as _).build();
    let mut registry = ToolRegistry::new().with_executor(Arc::new(executor));
    let names = client.mount(&mut registry).await.expect("mount");
    assert_eq!(names, ["book_table", "slow_echo"]);

    let calls = [
        ToolCall::new(
            "c1",
            "book_table",
            r#"{"restaurant":"Noma","party_size":2,"time":"18:00"}"#,
        ),
        ToolCall::new(
            "c2",
            "book_table",
            r#"{"restaurant":"Noma","party_size":99}"#,
        ),
    ];
    let results = results(&registry, &calls, false).await;
    assert!(!results[0].is_error(), "{}", results[0].content());
    assert!(
        results[0].content().contains("18:00"),
        "{}",
        results[0].content()
    );
    assert_eq!(
        results[1].error_kind(),
        Some(ToolErrorKind::ToolArgsInvalid)
    );

    drop(registry);
    client.close().await;

    let local: Vec<_> = local
        .records()
        .into_iter()
        .map(|r| (r.call_id, r.outcome))
        .collect();
    assert_eq!(
        local,
        [
            ("c1".to_owned(), Outcome::Ok),
            ("c2".to_owned(), Outcome::Error)
        ]
    );
    let remote = JsonlLedger::read(&remote_ledger).expect("the child's ledger");
    let remote: Vec<_> = remote
        .into_iter()
        .map(|r| (r.outcome, r.error_kind))
        .collect();
    assert_eq!(
        remote,
        [
            (Outcome::Ok, None),
            (Outcome::Error, Some(ToolErrorKind::ToolArgsInvalid))
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
