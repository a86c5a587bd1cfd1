//! Nothing a store wrote outlives its tasks, even when no replica is left to clean up.

use crate::common;

use std::time::Duration;

use common::RedisServer;
use crewline_redis::RedisConfig;
use crewline_remote::{StoreLimits, TaskStore, wire::TaskStatus};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_expires_with_the_tasks_when_every_replica_is_gone() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let limits = StoreLimits {
        waiting_ttl: Duration::from_millis(1000),
        linger: Duration::from_millis(1000),
        ..StoreLimits::default()
    };
    let store = RedisConfig::new(server.url())
        .prefix("gone:")
        .limits(limits)
        .connect()
        .await
        .expect("connected");
    let tools = vec![crewline_remote::wire::CustomTool {
        name: "t".to_owned(),
        description: "A tool.".to_owned(),
        inputs: json!({"type": "object"}),
        output: String::new(),
        timeout_ms: None,
    }];
    store
        .create("a", None, Vec::new())
        .await
        .expect("a waiting task");
    let run = store.create("b", None, tools).await.expect("create");
    store.attach(&run.id).await.expect("attach");
    let event = store
        .emit_tool_call(&run.id, "t", json!({}))
        .await
        .expect("emit");
    store
        .answer(
            &run.id,
            &event.id,
            crewline_remote::wire::ToolAnswer::ok(json!(1)),
        )
        .await
        .expect("an answer nobody takes");
    store
        .finish(&run.id, TaskStatus::Done, Some(json!("out")))
        .await
        .expect("finish");
    drop(store);

    let keys = server.keys_with_ttl("gone:*").await;
    assert!(keys.len() >= 8, "tasks, calls and the books: {keys:?}");
    for (key, ttl) in &keys {
        assert!(
            (1..=1000).contains(ttl),
            "{key} expires with the tasks, not {ttl} ms"
        );
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let left = server.keys_with_ttl("gone:*").await;
    assert!(left.is_empty(), "{left:?} outlived every task");
}
