//! Losing Redis: operations fail with an error that names Redis and the cause, a waiting call
//! looks again once Redis is back, and the store works again without a restart.

mod common;

use std::time::Duration;

use common::RedisServer;
use crewline_redis::RedisStore;
use crewline_remote::{StoreError, StoreLimits, TaskStore, wire::ToolAnswer};
use serde_json::json;

fn tool_t() -> Vec<crewline_remote::wire::CustomTool> {
    vec![crewline_remote::wire::CustomTool {
        name: "t".to_owned(),
        description: "A tool.".to_owned(),
        inputs: json!({"type": "object"}),
        output: String::new(),
        timeout_ms: None,
    }]
}

/// `step`'s result, failing the test when it takes longer than `limit`.
async fn within<T>(limit: Duration, what: &str, step: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, step)
        .await
        .unwrap_or_else(|_| panic!("{what} took more than {limit:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_redis_fails_operations_clearly_and_its_return_restores_them() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let store = RedisStore::connect(server.url(), StoreLimits::default())
        .await
        .expect("connected");
    let task = store.create("a", None, tool_t()).await.expect("create");
    store.attach(&task.id).await.expect("attach");
    let event = store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .expect("emit");
    let waiter = {
        let (store, id, event) = (store.clone(), task.id.clone(), event.id.clone());
        tokio::spawn(async move { store.wait_answer(&id, &event).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;

    server.stop();
    let refused = within(
        Duration::from_secs(10),
        "an operation while Redis is down",
        store.create("a", None, tool_t()),
    )
    .await;
    let Err(StoreError::Backend(message)) = refused else {
        panic!("not a backend error: {refused:?}");
    };
    let expected = format!(
        "the task store (Redis at {}) is unreachable: ",
        server.url()
    );
    assert!(message.starts_with(&expected), "{message}");
    let read = within(Duration::from_secs(10), "a read", store.get(&task.id)).await;
    assert!(matches!(read, Err(StoreError::Backend(_))), "{read:?}");
    assert!(
        !waiter.is_finished(),
        "the waiting call is not failed by the outage alone"
    );

    assert!(server.restart(), "redis-server is back on the same port");
    // The wake-ups come back and every waiter looks again; this one's task went with the old
    // server's data (no persistence here), which it now hears at once, not at its timeout.
    let looked_again = within(Duration::from_secs(15), "the waiter's second look", waiter)
        .await
        .expect("the waiter");
    assert_eq!(looked_again, Err(StoreError::UnknownTask(task.id.clone())));

    // And the store works again, without a restart.
    let task = within(
        Duration::from_secs(10),
        "the first operation after the outage",
        store.create("a", None, tool_t()),
    )
    .await
    .expect("create after the outage");
    store.attach(&task.id).await.expect("attach");
    let event = store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .expect("emit");
    store
        .answer(&task.id, &event.id, ToolAnswer::ok(json!("back")))
        .await
        .expect("answer");
    let answer = store.wait_answer(&task.id, &event.id).await.expect("wait");
    assert_eq!(answer.output, json!("back"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_at_startup_is_a_clear_error() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    server.stop();
    let error = RedisStore::connect(server.url(), StoreLimits::default())
        .await
        .expect_err("nothing listens there");
    assert_eq!(
        error.to_string(),
        format!("the task store (Redis at {}) is unreachable", server.url())
    );
    assert!(
        std::error::Error::source(&error).is_some(),
        "the cause is kept"
    );
}
