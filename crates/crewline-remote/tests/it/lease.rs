//! A call holds its task under a lease: renewed while the call lives, re-attached by the
//! same call id after a reconnect, released to another call seconds after its replica died
//! (not after the task's 4 h age limit). Over the in-memory store, on paused time.

use std::time::Duration;

use crewline_core::{ToolCall, ToolErrorKind};
use crewline_remote::{
    AttachError, MemoryStore, StoreError, TaskApi, TaskStore,
    wire::{CustomTool, TaskStatus, ToolAnswer},
};
use crewline_tools::{ExecuteOptions, ToolRegistry};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(10);

fn tools() -> Vec<CustomTool> {
    vec![CustomTool {
        name: "pay".to_owned(),
        description: "Pays a bill.".to_owned(),
        inputs: json!({"type": "object"}),
        output: String::new(),
        timeout_ms: Some(2_000),
    }]
}

fn api(store: &MemoryStore) -> TaskApi {
    TaskApi::with_store(store.clone()).attach_lease(LEASE)
}

fn refused(result: Result<crewline_remote::RemoteTools, AttachError>) -> bool {
    matches!(
        result,
        Err(AttachError::Store(StoreError::AlreadyAttached(_)))
    )
}

#[tokio::test(start_paused = true)]
async fn a_dead_replicas_task_is_attachable_by_another_call_once_its_lease_lapses() {
    let store = MemoryStore::new();
    let task = store.create("a", None, tools()).await.expect("create");
    // Replica A attaches the task for call A and dies: no renewal, no release.
    store
        .attach_leased(&task.id, "call-A", "token-of-A", LEASE)
        .await
        .expect("attached on A");
    let api = api(&store);
    assert!(refused(api.attach_for(&task.id, "call-B").await));
    tokio::time::sleep(LEASE - Duration::from_secs(1)).await;
    assert!(
        refused(api.attach_for(&task.id, "call-B").await),
        "another call waits while the lease lives"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let remote = api
        .attach_for(&task.id, "call-B")
        .await
        .expect("released after the lease, not after hours");
    assert_eq!(remote.names(), ["pay"]);
}

#[tokio::test(start_paused = true)]
async fn a_reconnect_of_the_same_call_reattaches_its_task_and_the_old_end_does_not_finish_it() {
    let store = MemoryStore::new();
    let task = store.create("a", None, tools()).await.expect("create");
    let api = api(&store).reattach_grace(Duration::from_secs(2));
    let first = api.attach_for(&task.id, "call-A").await.expect("attached");
    // The platform reconnects the same call (on this replica or any other).
    let second = api
        .attach_for(&task.id, "call-A")
        .await
        .expect("the same call re-attaches");
    assert!(refused(api.attach_for(&task.id, "call-B").await));
    // The old socket's session ends: its task stays the reconnected call's.
    drop(first);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        store.get(&task.id).await.expect("get").status,
        TaskStatus::Running
    );
    let mut registry = ToolRegistry::new();
    second.register_into(&mut registry).expect("register");
    let answering = async {
        let event = loop {
            let polled = store
                .poll(&task.id, 0, Duration::from_secs(1))
                .await
                .expect("poll");
            if let Some(event) = polled.events.into_iter().next() {
                break event;
            }
        };
        store
            .answer(&task.id, &event.id, ToolAnswer::ok(json!("paid")))
            .await
            .expect("answer");
    };
    let calls = [ToolCall::new("c1", "pay", "{}")];
    let (runs, ()) = tokio::join!(registry.execute(&calls, ExecuteOptions::new()), answering);
    assert_eq!(runs[0].result.content(), "paid");
    // The reconnected call ends: the task is done once the grace has passed.
    drop((second, registry));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        store.get(&task.id).await.expect("get").status,
        TaskStatus::Done
    );
}

#[tokio::test(start_paused = true)]
async fn a_living_call_keeps_its_task_past_its_lease() {
    let store = MemoryStore::new();
    let task = store.create("a", None, tools()).await.expect("create");
    let api = api(&store);
    let _held = api.attach_for(&task.id, "call-A").await.expect("attached");
    tokio::time::sleep(LEASE * 6).await;
    assert!(
        refused(api.attach_for(&task.id, "call-B").await),
        "the lease is renewed while the call lives"
    );
}

#[tokio::test(start_paused = true)]
async fn taking_over_a_task_settles_the_calls_its_dead_holder_left_waiting() {
    let store = MemoryStore::new();
    let task = store.create("a", None, tools()).await.expect("create");
    store
        .attach_leased(&task.id, "call-A", "token-of-A", LEASE)
        .await
        .expect("attached on A");
    // A's calls: one a client took, one none did; then A dies.
    let taken = store
        .emit_tool_call(&task.id, "pay", json!({"n": 1}))
        .await
        .expect("emit");
    store.poll(&task.id, 0, Duration::ZERO).await.expect("poll");
    let untaken = store
        .emit_tool_call(&task.id, "pay", json!({"n": 2}))
        .await
        .expect("emit");
    tokio::time::sleep(LEASE + Duration::from_secs(1)).await;
    let _remote = api(&store)
        .attach_for(&task.id, "call-B")
        .await
        .expect("taken over");
    // The call no client took never reaches one; the one a client took refuses its answer.
    let polled = store.poll(&task.id, 0, Duration::ZERO).await.expect("poll");
    assert!(
        polled.events.iter().all(|event| event.id != untaken.id),
        "{:?}",
        polled.events
    );
    assert_eq!(
        store
            .answer(&task.id, &taken.id, ToolAnswer::ok(json!("paid")))
            .await,
        Err(StoreError::NotWaiting(taken.id.clone()))
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_task_was_taken_over_does_not_call_its_tools() {
    let store = MemoryStore::new();
    let task = store.create("a", None, tools()).await.expect("create");
    let api = api(&store);
    let stale = api.attach_for(&task.id, "call-A").await.expect("attached");
    // Call A's replica stops renewing (frozen) and another attachment takes the task.
    store
        .attach_leased(&task.id, "call-A", "token-elsewhere", LEASE)
        .await
        .expect("re-attached elsewhere");
    tokio::time::sleep(LEASE).await;
    let mut registry = ToolRegistry::new();
    stale.register_into(&mut registry).expect("register");
    let runs = registry
        .execute(&[ToolCall::new("c1", "pay", "{}")], ExecuteOptions::new())
        .await;
    assert_eq!(runs[0].result.error_kind(), Some(ToolErrorKind::ToolError));
    assert!(runs[0].result.content().contains("not called"));
    let polled = store.poll(&task.id, 0, Duration::ZERO).await.expect("poll");
    assert!(polled.events.is_empty());
}
