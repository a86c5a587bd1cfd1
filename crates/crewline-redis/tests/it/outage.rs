//! Losing Redis: operations fail with an error that names Redis and the cause, a waiting call
//! looks again once Redis is back, and the store works again without a restart.

use crate::common;

use std::time::Duration;

use common::RedisServer;
use crewline_core::ToolCall;
use crewline_redis::RedisStore;
use crewline_remote::{StoreError, StoreLimits, TaskApi, TaskStore, wire::ToolAnswer};
use crewline_tools::{ExecuteOptions, ToolRegistry};
use serde_json::{Value, json};

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
    if let Err(error) = &refused {
        // The layer says itself; the Redis error is its cause.
        assert_eq!(error.to_string(), "the task store failed");
        let redis = std::error::Error::source(error)
            .and_then(std::error::Error::source)
            .and_then(|cause| cause.downcast_ref::<redis::RedisError>());
        assert!(redis.is_some(), "{error:?}");
    }
    let Err(StoreError::Backend(message)) = refused else {
        panic!("not a backend error: {refused:?}");
    };
    let expected = format!(
        "the task store (Redis at {}) is unreachable: ",
        server.url()
    );
    assert!(message.starts_with(&expected), "{message}");
    let read = within(Duration::from_secs(10), "a read", store.get(&task.id)).await;
    // Refused before it was sent: certainly not run (`Unreachable`); lost on a connection
    // that broke under it: maybe run (`Backend`).
    assert!(
        matches!(
            read,
            Err(StoreError::Backend(_) | StoreError::Unreachable(_))
        ),
        "{read:?}"
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_replica_loses_redis_goes_on_and_its_remote_tools_fail_as_tool_errors() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let store = RedisStore::connect(server.url(), StoreLimits::default())
        .await
        .expect("connected");
    let api = TaskApi::with_store(store.clone());
    let task = store
        .create("anonymous", None, tool_t())
        .await
        .expect("create");
    let remote = api.attach(&task.id).await.expect("attach");
    let mut crew = ToolRegistry::new();
    remote.register_into(&mut crew).expect("remote tools");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(axum::serve(listener, api.router()).into_future());

    server.stop();
    // The call's remote tool fails as a tool error the model can read; nothing panics. The
    // first command meets the connection Redis dropped, and cannot know whether Redis ran it
    // before it went: an unknown outcome. Once the connection is refused, nothing was sent.
    let call = |id: &'static str| {
        let crew = &crew;
        async move {
            let runs = within(
                Duration::from_secs(10),
                "a remote tool call while Redis is down",
                crew.execute(&[ToolCall::new(id, "t", "{}")], ExecuteOptions::new()),
            )
            .await;
            runs[0].result.clone()
        }
    };
    let first = call("c1").await;
    assert!(first.is_error());
    let second = call("c2").await;
    let content: Value = serde_json::from_str(&second.content()).expect("error JSON");
    assert_eq!(
        content["error"]["message"],
        "the remote tool was not called: the task store is unavailable"
    );
    // The task API answers 503 with the reason.
    let response = within(
        Duration::from_secs(10),
        "a task request while Redis is down",
        get_over_tcp(&url, &task.id),
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    assert!(response.contains("Redis at"), "{response}");
    drop((remote, crew));
}

/// `GET /task/{id}` over a plain TCP connection: the status line, headers and body.
async fn get_over_tcp(url: &str, id: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let request =
        format!("GET /task/{id} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response");
    response
}
