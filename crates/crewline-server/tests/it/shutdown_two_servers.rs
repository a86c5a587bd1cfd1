//! Two crew servers in one process: each drain waits for the non-cancellable tools of its own
//! calls only. Shutting one down neither waits for nor cuts short a transfer the other's call
//! left running; the other's shutdown still waits for it.

use crate::common;

use std::{
    sync::{
        Arc, LazyLock,
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
use tokio::sync::Notify;

static STARTED: AtomicBool = AtomicBool::new(false);
static FINISHED: AtomicBool = AtomicBool::new(false);
/// The test lets the transfer end (it never ends on its own).
static RELEASE: LazyLock<Notify> = LazyLock::new(Notify::new);

/// Move money; ends only when the test says so, and must never be cut half-way.
#[function_tool(cancellable = false)]
async fn transfer() -> String {
    STARTED.store(true, Ordering::SeqCst);
    RELEASE.notified().await;
    FINISHED.store(true, Ordering::SeqCst);
    "transferred".to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_one_server_down_leaves_the_other_servers_tools_alone() {
    let ledger = Arc::new(MemoryLedger::new());
    let executor = Executor::builder().ledger(ledger.clone()).build();
    let mut registry = ToolRegistry::new().with_executor(Arc::new(executor));
    registry.register(TransferTool).expect("transfer");
    let llm = ScriptedLlm::new([
        Reply::tool_call("transfer", json!({})),
        Reply::text("Done."),
    ]);
    let tool_loop = ToolLoop::new(Arc::new(llm), Arc::new(registry));
    let paying = CrewServer::new(move |_setup: SessionSetup| {
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "agent",
            LoopAgent::new("You move money.", tool_loop.clone()),
        ));
        async move { Ok::<_, std::convert::Infallible>(crew) }
    })
    .drain_timeout(Duration::from_secs(30));
    // A drain deadline far past the harness's wait for `join`: were this server to wait for
    // the other's transfer, its `join` would fail instead of returning.
    let other = CrewServer::new(echo_setup).drain_timeout(Duration::from_secs(600));
    let mut paying = TestServer::ready(paying).await;
    let mut other = TestServer::ready(other).await;

    let mut client = paying.call("Ada").await;
    client
        .send(&json!({"type": "agent.transcript.update", "role": "user", "content": "pay"}))
        .await;
    client.send(&llm_request("pay")).await;
    eventually("the transfer to start", || async {
        STARTED.load(Ordering::SeqCst)
    })
    .await;
    // The caller barges in, then hangs up: the transfer runs on after its call ended.
    client
        .send(&json!({"type": "system.control.interrupt"}))
        .await;
    client.recv_until("agent.llm.response.end").await;
    client.close().await;

    other.signal_shutdown();
    other.join().await.expect("a clean shutdown");
    assert!(
        !FINISHED.load(Ordering::SeqCst),
        "the other server's shutdown waited for a transfer that was not its own"
    );

    // Not cut short either: the paying server's own shutdown waits for it to end.
    paying.signal_shutdown();
    RELEASE.notify_one();
    paying.join().await.expect("a clean shutdown");
    assert!(
        FINISHED.load(Ordering::SeqCst),
        "the paying server returned while its transfer was still running"
    );
    let records = ledger.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].outcome, Outcome::Ok);
    assert!(records[0].ran_on);
}
