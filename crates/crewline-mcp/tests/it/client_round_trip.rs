//! A crewline MCP server's tools mounted into another registry with `McpClient`, over
//! streamable HTTP on 127.0.0.1:0 and over an in-process duplex: calls go through both
//! executors, remote errors become structured tool errors, both ledgers record the calls.

use crate::common;

use std::{sync::Arc, time::Duration};

use crewline::{
    tool::{
        ExecuteOptions, Executor, ToolRegistry,
        executor::ledger::{MemoryLedger, Outcome},
    },
    types::{ToolCall, ToolErrorKind, ToolResult},
};
use crewline_mcp::{McpClient, McpError, SchemaFlavour};
use serde_json::{Value, json};

use common::{HttpServer, WAIT, error_of};

/// The results of `calls` run by `registry`, in call order (`parallel`: concurrently).
async fn results(registry: &ToolRegistry, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
    registry
        .execute(calls, ExecuteOptions::new().parallel(parallel))
        .await
        .into_iter()
        .map(|run| run.result)
        .collect()
}

/// An empty registry recording to `ledger`.
fn local_registry(ledger: &Arc<MemoryLedger>) -> ToolRegistry {
    let executor = Executor::builder().ledger(Arc::clone(ledger) as _).build();
    ToolRegistry::new().with_executor(Arc::new(executor))
}

async fn run(registry: &ToolRegistry, name: &str, args: Value) -> ToolResult {
    let call = ToolCall::new(format!("local_{name}"), name, args.to_string());
    let mut results = tokio::time::timeout(WAIT, results(registry, &[call], false))
        .await
        .expect("the call answers in time");
    results.pop().expect("one result")
}

/// Mounts `client`'s tools and checks a success, a remote error and both ledgers.
async fn round_trip(client: McpClient, remote_ledger: &Arc<MemoryLedger>) {
    let local_ledger = Arc::new(MemoryLedger::new());
    let mut registry = local_registry(&local_ledger);
    let names = client.mount(&mut registry).await.expect("the tools mount");
    assert_eq!(names, ["book_table", "slow_echo"]);
    // The remote schema arrives intact: the local model sees the same arguments.
    let definition = &registry.definitions()[0];
    assert_eq!(definition.description, "Book a table.");
    assert_eq!(
        definition.parameters["required"],
        json!(["restaurant", "party_size", "time"])
    );
    assert_eq!(
        definition.parameters["properties"]["time"]["type"],
        json!(["string", "null"])
    );

    let ok = run(
        &registry,
        "book_table",
        json!({"restaurant": "Noma", "party_size": 4, "time": "20:00"}),
    )
    .await;
    assert!(!ok.is_error(), "{}", ok.content());
    assert_eq!(
        serde_json::from_str::<Value>(&ok.content()).expect("JSON"),
        json!({"restaurant": "Noma", "party_size": 4, "time": "20:00"})
    );

    // The remote tool's own error keeps its kind: the model knows to fix its arguments.
    // An optional argument may be left out, as the remote schema allows.
    let bad = run(
        &registry,
        "book_table",
        json!({"restaurant": "Noma", "party_size": 40}),
    )
    .await;
    assert!(bad.is_error());
    assert_eq!(bad.error_kind(), Some(ToolErrorKind::ToolArgsInvalid));
    let (_, message) = error_of(&bad.content());
    assert!(message.contains("between 1 and 12"), "{message}");

    // Another remote kind reaches the model as a tool error with the remote message.
    let blocked = run(
        &registry,
        "book_table",
        json!({"restaurant": "Closed", "party_size": 2}),
    )
    .await;
    assert_eq!(blocked.error_kind(), Some(ToolErrorKind::ToolError));
    assert!(
        error_of(&blocked.content()).1.contains("closed today"),
        "{}",
        blocked.content()
    );

    let local: Vec<_> = local_ledger
        .records()
        .into_iter()
        .map(|r| (r.call_id, r.outcome, r.error_kind))
        .collect();
    assert_eq!(
        local,
        [
            ("local_book_table".to_owned(), Outcome::Ok, None),
            (
                "local_book_table".to_owned(),
                Outcome::Error,
                Some(ToolErrorKind::ToolArgsInvalid)
            ),
            (
                "local_book_table".to_owned(),
                Outcome::Error,
                Some(ToolErrorKind::ToolError)
            ),
        ]
    );
    let remote: Vec<_> = remote_ledger
        .records()
        .into_iter()
        .map(|r| (r.arguments, r.outcome, r.error_kind))
        .collect();
    assert_eq!(
        remote,
        [
            (
                json!({"restaurant": "Noma", "party_size": 4, "time": "20:00"}),
                Outcome::Ok,
                None
            ),
            (
                json!({"restaurant": "Noma", "party_size": 40}),
                Outcome::Error,
                Some(ToolErrorKind::ToolArgsInvalid)
            ),
            (
                json!({"restaurant": "Closed", "party_size": 2}),
                Outcome::Error,
                Some(ToolErrorKind::GuardrailBlocked)
            ),
        ]
    );
}

#[tokio::test]
async fn round_trip_over_streamable_http() {
    let remote_ledger = Arc::new(MemoryLedger::new());
    let server = HttpServer::start(common::server(&remote_ledger, SchemaFlavour::Standard)).await;
    let client = tokio::time::timeout(WAIT, McpClient::connect_http(&server.url()))
        .await
        .expect("connect in time")
        .expect("the client connects");
    round_trip(client, &remote_ledger).await;
    server.stop().await;
}

#[tokio::test]
async fn round_trip_over_an_in_process_duplex() {
    let remote_ledger = Arc::new(MemoryLedger::new());
    let client =
        common::duplex_client(common::server(&remote_ledger, SchemaFlavour::Standard)).await;
    round_trip(client, &remote_ledger).await;
}

#[tokio::test]
async fn a_remote_call_over_its_timeout_is_a_timeout_for_the_model() {
    let remote_ledger = Arc::new(MemoryLedger::new());
    let server = HttpServer::start(common::server(&remote_ledger, SchemaFlavour::Standard)).await;
    let client = McpClient::connect_http(&server.url())
        .await
        .expect("the client connects")
        .with_timeout(Duration::from_millis(200));
    let local_ledger = Arc::new(MemoryLedger::new());
    let mut registry = local_registry(&local_ledger);
    client.mount(&mut registry).await.expect("the tools mount");

    let slow = run(
        &registry,
        "slow_echo",
        json!({"text": "hi", "delay_ms": 5_000}),
    )
    .await;
    assert_eq!(
        slow.error_kind(),
        Some(ToolErrorKind::Timeout),
        "{}",
        slow.content()
    );
    assert_eq!(
        local_ledger.records()[0].error_kind,
        Some(ToolErrorKind::Timeout)
    );
    // The connection is still usable afterwards.
    let quick = run(&registry, "slow_echo", json!({"text": "hi", "delay_ms": 0})).await;
    assert_eq!(quick.content(), "hi");
    server.stop().await;
}

#[tokio::test]
async fn a_server_that_went_away_is_a_tool_error_not_a_crash() {
    let remote_ledger = Arc::new(MemoryLedger::new());
    let server = HttpServer::start(common::server(&remote_ledger, SchemaFlavour::Standard)).await;
    let client = McpClient::connect_http(&server.url())
        .await
        .expect("the client connects");
    let local_ledger = Arc::new(MemoryLedger::new());
    let mut registry = local_registry(&local_ledger);
    client.mount(&mut registry).await.expect("the tools mount");
    server.stop().await;

    let result = run(&registry, "slow_echo", json!({"text": "hi", "delay_ms": 0})).await;
    assert_eq!(
        result.error_kind(),
        Some(ToolErrorKind::ToolError),
        "{}",
        result.content()
    );
    assert!(
        error_of(&result.content())
            .1
            .contains("could not be reached"),
        "{}",
        result.content()
    );
    let record = &local_ledger.records()[0];
    assert!(
        record
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("MCP server")),
        "{record:?}"
    );
}

#[tokio::test]
async fn mounting_a_clashing_name_adds_nothing() {
    let remote_ledger = Arc::new(MemoryLedger::new());
    let client =
        common::duplex_client(common::server(&remote_ledger, SchemaFlavour::Standard)).await;
    let local_ledger = Arc::new(MemoryLedger::new());
    let mut registry = common::registry(&local_ledger)
        .subset(&["slow_echo"])
        .expect("subset");
    let error = client
        .mount(&mut registry)
        .await
        .expect_err("slow_echo clashes");
    assert!(matches!(error, McpError::Register(_)), "{error:?}");
    // The error names its own layer; the registry's cause names the tool.
    let cause = std::error::Error::source(&error).map(ToString::to_string);
    assert!(
        cause.is_some_and(|cause| cause.contains("slow_echo")),
        "{error:?}"
    );
    assert_eq!(registry.names(), ["slow_echo"]);
}

#[tokio::test]
async fn a_peer_that_hangs_up_in_the_handshake_is_a_session_error_keeping_its_cause() {
    let (client_io, server_io) = tokio::io::duplex(1024);
    drop(server_io);
    let outcome = tokio::time::timeout(WAIT, McpClient::connect_io(client_io))
        .await
        .expect("the handshake gives up in time");
    let Err(error) = outcome else {
        panic!("a handshake with nobody succeeded")
    };
    assert!(matches!(error, McpError::Session(_)), "{error}");
    assert!(
        std::error::Error::source(&error).is_some(),
        "the cause was dropped: {error:?}"
    );
}
