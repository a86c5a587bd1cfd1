//! Redis that can be lost: crewline refuses at connect a Redis whose settings can drop its
//! keys (an evicting `maxmemory-policy`, no persistence at all), accepts one that will not say
//! (`CONFIG` disabled, as managed services do) with a warning, and with the AOF that
//! docs/deploying.md gives, a Redis killed with SIGKILL and started again keeps every task.

use crate::common;

use common::{AOF_ARGS, RedisServer};
use crewline_redis::{RedisConfig, RedisStoreError};
use crewline_remote::{StoreError, TaskStore, wire::TaskStatus};

#[tokio::test]
async fn an_eviction_policy_that_can_drop_crewlines_keys_refuses_the_start() {
    // volatile-lru too: every crewline key has a TTL, so it can evict them all.
    for policy in ["allkeys-lru", "volatile-lru"] {
        let Some(server) =
            RedisServer::start_with(&[AOF_ARGS, &["--maxmemory-policy", policy]].concat())
        else {
            return;
        };
        let refused = RedisConfig::new(server.url()).open().await;
        let Err(error @ RedisStoreError::EvictionPolicy { .. }) = &refused else {
            panic!("{policy}: not refused for its eviction policy: {refused:?}");
        };
        let message = error.to_string();
        assert!(
            message.contains(&format!("maxmemory-policy {policy}"))
                && message.contains("set `maxmemory-policy noeviction`"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn noeviction_with_an_append_only_file_is_accepted() {
    let Some(server) =
        RedisServer::start_with(&[AOF_ARGS, &["--maxmemory-policy", "noeviction"]].concat())
    else {
        return;
    };
    let store = RedisConfig::new(server.url())
        .connect()
        .await
        .expect("noeviction and AOF are accepted");
    store.create("a", None, Vec::new()).await.expect("create");
}

#[tokio::test]
async fn a_redis_that_keeps_nothing_on_disk_refuses_the_start() {
    let Some(server) = RedisServer::start_with(&["--save", "", "--appendonly", "no"]) else {
        return;
    };
    let refused = RedisConfig::new(server.url()).open().await;
    let Err(error @ RedisStoreError::NoPersistence { .. }) = &refused else {
        panic!("not refused for keeping nothing on disk: {refused:?}");
    };
    let message = error.to_string();
    assert!(
        message.contains("appendonly yes")
            && message.contains("CREWLINE_REDIS_REQUIRE_PERSISTENCE=0"),
        "{message}"
    );
}

#[tokio::test]
async fn a_redis_that_will_not_tell_its_settings_is_accepted() {
    // Managed Redis often disables CONFIG: crewline cannot check, so it warns and goes on
    // (even though this one would have been refused had it told).
    let Some(server) = RedisServer::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--rename-command",
        "CONFIG",
        "",
    ]) else {
        return;
    };
    let store = RedisConfig::new(server.url())
        .connect()
        .await
        .expect("a Redis without CONFIG is accepted");
    store.create("a", None, Vec::new()).await.expect("create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_survive_redis_killed_with_sigkill_when_it_runs_with_an_append_only_file() {
    // appendfsync everysec: Redis writes each command to the AOF before it answers, so a
    // killed process loses nothing it acknowledged; only a crash of the machine (the page
    // cache) loses up to about a second, which this test does not show.
    let Some(mut server) =
        RedisServer::start_with(&[AOF_ARGS, &["--maxmemory-policy", "noeviction"]].concat())
    else {
        return;
    };
    let store = RedisConfig::new(server.url())
        .connect()
        .await
        .expect("connected");
    let mut ids = Vec::new();
    for i in 0..50 {
        let task = store
            .create("a", Some(format!("task {i}")), Vec::new())
            .await
            .expect("create");
        if i % 2 == 0 {
            store.attach(&task.id).await.expect("attach");
        }
        ids.push(task.id);
    }

    server.stop(); // SIGKILL
    assert!(server.restart(), "redis-server is back on the same port");
    // The first command may meet the killed server's dead socket (an error, as outage.rs
    // shows); the store reconnects by itself.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Err(StoreError::Backend(error)) = store.get(&ids[0]).await {
        assert!(
            std::time::Instant::now() < deadline,
            "the store did not come back: {error}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    for (i, id) in ids.iter().enumerate() {
        let task = store.get(id).await.expect("every task is still there");
        assert_eq!(task.task.as_deref(), Some(format!("task {i}").as_str()));
        let expected = if i % 2 == 0 {
            TaskStatus::Running
        } else {
            TaskStatus::Waiting
        };
        assert_eq!(task.status, expected, "task {i} kept its status");
    }
}
