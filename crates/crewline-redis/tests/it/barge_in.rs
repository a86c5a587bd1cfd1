//! A barge-in (the turn's future dropped) while a remote tool's call waits, over the Redis
//! store: whether a client took the call cannot be told without a round trip, so the model
//! reads that it may have run (never "cancelled", which invites a retry), and the call is
//! withdrawn behind, so a client that had not taken it never does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::RedisServer;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_redis::{RedisConfig, RedisStore};
use crewline_remote::{
    StoreError, StoreLimits, TaskApi, TaskStore,
    wire::{CustomTool, TaskEvent, ToolAnswer},
};
use crewline_tools::{ExecuteOptions, ToolRegistry};
use serde_json::json;

async fn store(server: &RedisServer) -> RedisStore {
    RedisConfig::new(server.url())
        .prefix("barge:")
        .limits(StoreLimits::default())
        .connect()
        .await
        .expect("connected")
}

/// A task with the remote tool `pay`, attached to a call; its id, tools and registry.
async fn call_with_pay(store: &RedisStore) -> (String, crewline_remote::RemoteTools, ToolRegistry) {
    let pay = CustomTool {
        name: "pay".to_owned(),
        description: "Pays a bill.".to_owned(),
        inputs: json!({"type": "object"}),
        output: String::new(),
        timeout_ms: Some(20_000),
    };
    let task = store.create("a", None, vec![pay]).await.expect("create");
    let remote = TaskApi::with_store(store.clone())
        .attach_for(&task.id, "call-1")
        .await
        .expect("attach");
    let mut registry = ToolRegistry::new();
    remote.register_into(&mut registry).expect("register");
    (task.id, remote, registry)
}

/// The tool call of `task` a client polling now sees, if any.
async fn pollable(store: &RedisStore, task: &str) -> Option<TaskEvent> {
    let polled = store.poll(task, 0, Duration::ZERO).await.expect("poll");
    polled.events.into_iter().find(|e| e.name == "tool_call")
}

/// Runs `pay` until `cut` is ready, then drops the call (the barge-in); what the model reads.
async fn barge_in(
    registry: &ToolRegistry,
    cut: impl std::future::Future<Output = ()>,
) -> ToolResult {
    let context = registry.context();
    let call = ToolCall::new("c1", "pay", "{}");
    let running = registry.execute(
        std::slice::from_ref(&call),
        ExecuteOptions::new().in_run(context.clone()),
    );
    tokio::select! {
        runs = running => panic!("the call finished before the barge-in: {runs:?}"),
        () = cut => {}
    }
    registry.interrupted(&call, &context)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barge_in_on_a_remote_call_is_an_unknown_outcome_and_a_call_no_client_took_is_withdrawn()
{
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = store(&server).await;

    // Cut before any client polled: it may have run as far as the model knows, and it is
    // withdrawn, so no client ever takes it.
    let (task, _remote, registry) = call_with_pay(&store).await;
    let before = bytes(&store).await;
    // Cut once the call is stored (its bytes are charged), without polling it.
    let result = barge_in(&registry, async {
        while bytes(&store).await == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(
        result.error_kind(),
        Some(ToolErrorKind::OutcomeUnknown),
        "{}",
        result.content()
    );
    // Withdrawn behind the barge-in: its bytes are freed, and no poll returns it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while bytes(&store).await != before {
        assert!(Instant::now() < deadline, "the cut call was not withdrawn");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(pollable(&store, &task).await, None);

    // Cut after a client took it: unknown too, and its late answer is refused.
    let (task, _remote, registry) = call_with_pay(&store).await;
    let mut taken = None;
    let result = barge_in(&registry, async {
        loop {
            if let Some(event) = pollable(&store, &task).await {
                taken = Some(event);
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(result.error_kind(), Some(ToolErrorKind::OutcomeUnknown));
    let event = taken.expect("taken");
    // The withdraw runs behind the barge-in: wait until the store marks the call abandoned
    // (an answer that comes before it is taken as the call's outcome, by design). A fixed
    // pause (200 ms, then 2 s) was not enough on a loaded two-core machine.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !abandoned(&server, &task, &event.id).await {
        assert!(
            Instant::now() < deadline,
            "the cut call was not abandoned: {:?}",
            dump(&server, &task).await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        store
            .answer(&task, &event.id, ToolAnswer::ok(json!("paid")))
            .await,
        Err(StoreError::NotWaiting(event.id.clone()))
    );
}

/// The bytes the store holds, all tasks together.
/// Whether the store marked the call `event` of `task` abandoned (its state `x`), read from
/// Redis itself: the withdraw behind a barge-in is not observable through the store's API.
async fn abandoned(server: &RedisServer, task: &str, event: &str) -> bool {
    let client = redis::Client::open(server.url()).expect("a client");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connected");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*calls:{task}"))
        .query_async(&mut connection)
        .await
        .expect("KEYS");
    let Some(key) = keys.first() else {
        return false;
    };
    let state: Option<String> = redis::cmd("HGET")
        .arg(key)
        .arg(format!("c:{event}"))
        .query_async(&mut connection)
        .await
        .expect("HGET");
    state.as_deref() == Some("x")
}

async fn dump(server: &RedisServer, task: &str) -> Vec<(String, String)> {
    let client = redis::Client::open(server.url()).expect("a client");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connected");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{task}*"))
        .query_async(&mut connection)
        .await
        .expect("KEYS");
    let mut out = Vec::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .expect("TYPE");
        if kind == "hash" {
            let all: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut connection)
                .await
                .expect("HGETALL");
            for (f, v) in all {
                out.push((format!("{key} {f}"), v.chars().take(60).collect()));
            }
        } else {
            out.push((key, kind));
        }
    }
    out
}

async fn bytes(store: &RedisStore) -> usize {
    store.usage().await.expect("usage").bytes
}
