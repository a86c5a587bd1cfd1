//! Shutdown and non-cancellable tools: a transfer the caller barged in on runs on after its
//! turn was dropped; the server's drain waits for it (within the drain deadline) so that it is
//! not cut half-way, and the ledger has its real outcome by the time `serve_with_shutdown`
//! returns.

use crate::common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use common::*;
use crewline::{
    Crew, SessionSetup, ToolLoop,
    agent::LoopAgent,
    crew::OutputNode,
    llm::{Reply, ScriptedLlm},
    prelude::function_tool,
    tool::{
        Executor, ToolRegistry,
        executor::ledger::{MemoryLedger, Outcome},
    },
};
use crewline_server::CrewServer;
use serde_json::json;

static STARTED: AtomicBool = AtomicBool::new(false);
static FINISHED: AtomicBool = AtomicBool::new(false);

/// Move money; takes about a second and must never be cut half-way.
#[function_tool(cancellable = false)]
async fn transfer() -> String {
    STARTED.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    FINISHED.store(true, Ordering::SeqCst);
    "transferred".to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_a_non_cancellable_tool_the_caller_barged_in_on() {
    let ledger = Arc::new(MemoryLedger::new());
    let executor = Executor::builder().ledger(ledger.clone()).build();
    let mut registry = ToolRegistry::new().with_executor(Arc::new(executor));
    registry.register(TransferTool).expect("transfer");
    let llm = ScriptedLlm::new([
        Reply::tool_call("transfer", json!({})),
        Reply::text("Done."),
    ]);
    let tool_loop = ToolLoop::new(Arc::new(llm), Arc::new(registry));
    let server = CrewServer::new(move |_setup: SessionSetup| {
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "agent",
            LoopAgent::new("You move money.", tool_loop.clone()),
        ));
        async move { Ok::<_, std::convert::Infallible>(crew) }
    })
    .drain_timeout(Duration::from_secs(5));
    let mut server = TestServer::ready(server).await;

    let mut client = server.call("Ada").await;
    client
        .send(&json!({"type": "agent.transcript.update", "role": "user", "content": "pay"}))
        .await;
    client.send(&llm_request("pay")).await;
    eventually("the transfer to start", || async {
        STARTED.load(Ordering::SeqCst)
    })
    .await;
    // The caller barges in, then hangs up: the turn (and the executor's future) is dropped.
    client
        .send(&json!({"type": "system.control.interrupt"}))
        .await;
    client.recv_until("agent.llm.response.end").await;
    client.close().await;
    assert!(
        !FINISHED.load(Ordering::SeqCst),
        "the test's tool was too fast"
    );

    server.signal_shutdown();
    server.join().await.expect("a clean shutdown");

    assert!(
        FINISHED.load(Ordering::SeqCst),
        "the server returned while the transfer was still running"
    );
    let records = ledger.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].tool, "transfer");
    assert_eq!(records[0].outcome, Outcome::Ok);
    assert!(records[0].ran_on);
}
