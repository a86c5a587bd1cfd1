//! A call's hold on its task, shared through Redis: a replica that dies (its runtime dropped
//! with the call's tools never released, as SIGKILL leaves them) frees the task for another
//! call within the lease; the same call id re-attaches at once, from another replica.

use crate::common;

use std::time::{Duration, Instant};

use common::RedisServer;
use crewline_redis::{RedisConfig, RedisStore};
use crewline_remote::{AttachError, StoreError, StoreLimits, TaskApi, TaskStore, wire::CustomTool};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(1);

fn tools() -> Vec<CustomTool> {
    vec![CustomTool {
        name: "pay".to_owned(),
        description: "Pays a bill.".to_owned(),
        inputs: json!({"type": "object"}),
        output: String::new(),
        timeout_ms: None,
    }]
}

async fn store(server: &RedisServer) -> RedisStore {
    RedisConfig::new(server.url())
        .prefix("lease:")
        .limits(StoreLimits::default())
        .connect()
        .await
        .expect("connected")
}

fn refused(result: &Result<crewline_remote::RemoteTools, AttachError>) -> bool {
    matches!(
        result,
        Err(AttachError::Store(StoreError::AlreadyAttached(_)))
    )
}

/// Replica A: its own runtime and connection; attaches `task` for `call` and dies there,
/// without releasing anything (the runtime and its renewals are dropped, the tools leaked).
fn replica_attaches_and_dies(url: String, task: String, call: &'static str) {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            let store = RedisConfig::new(url)
                .prefix("lease:")
                .connect()
                .await
                .expect("A connected");
            let api = TaskApi::with_store(store).attach_lease(LEASE);
            let remote = api.attach_for(&task, call).await.expect("attached on A");
            std::mem::forget(remote);
        });
        drop(runtime);
    })
    .join()
    .expect("replica A");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_task_is_attachable_within_the_lease_and_by_its_own_call_at_once() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let b = store(&server).await;
    let task = b.create("a", None, tools()).await.expect("create");
    replica_attaches_and_dies(server.url(), task.id.clone(), "call-A");
    let died = Instant::now();
    let api = TaskApi::with_store(b.clone()).attach_lease(LEASE);

    // Another call waits while the lease lives...
    assert!(refused(&api.attach_for(&task.id, "call-B").await));
    // ...but the same call, reconnecting to replica B, attaches it again at once.
    let reattached = api
        .attach_for(&task.id, "call-A")
        .await
        .expect("the same call re-attaches on another replica");
    assert_eq!(reattached.names(), ["pay"]);
    assert!(refused(&api.attach_for(&task.id, "call-B").await));
    drop(reattached);

    // A second death: this time no reconnect, and another call gets the task after the lease.
    let task = b.create("a", None, tools()).await.expect("create");
    replica_attaches_and_dies(server.url(), task.id.clone(), "call-C");
    let died_again = Instant::now();
    let taken = loop {
        match api.attach_for(&task.id, "call-D").await {
            Ok(remote) => break remote,
            Err(AttachError::Store(StoreError::AlreadyAttached(_)))
                if died_again.elapsed() < LEASE * 5 =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("not released within five leases: {error}"),
        }
    };
    let waited = died_again.elapsed();
    eprintln!("lease {LEASE:?}: a dead replica's task was attachable after {waited:?}");
    assert!(waited >= LEASE / 2, "released before its lease: {waited:?}");
    drop((taken, died));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_over_settles_the_dead_holders_waiting_calls() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let b = store(&server).await;
    let task = b.create("a", None, tools()).await.expect("create");
    b.attach_leased(&task.id, "call-A", "token-A", LEASE)
        .await
        .expect("attached by A");
    let taken = b
        .emit_tool_call(&task.id, "pay", json!({"n": 1}))
        .await
        .expect("emit");
    b.poll(&task.id, 0, Duration::ZERO).await.expect("poll");
    let untaken = b
        .emit_tool_call(&task.id, "pay", json!({"n": 2}))
        .await
        .expect("emit");
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    b.attach_leased(&task.id, "call-B", "token-B", LEASE)
        .await
        .expect("taken over after the lease");
    let polled = b.poll(&task.id, 0, Duration::ZERO).await.expect("poll");
    assert!(polled.events.iter().all(|event| event.id != untaken.id));
    assert_eq!(
        b.answer(
            &task.id,
            &taken.id,
            crewline_remote::wire::ToolAnswer::ok(json!("paid"))
        )
        .await,
        Err(StoreError::NotWaiting(taken.id.clone()))
    );
    // The old holder's end does not finish the task the new one holds.
    assert_eq!(
        b.release(
            &task.id,
            "token-A",
            crewline_remote::wire::TaskStatus::Done,
            None
        )
        .await,
        Ok(false)
    );
    assert_eq!(
        b.renew(&task.id, "token-A", LEASE).await,
        Err(StoreError::AlreadyAttached(task.id.clone()))
    );
    b.renew(&task.id, "token-B", LEASE).await.expect("B renews");
}
