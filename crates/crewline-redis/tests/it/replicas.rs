//! Two crew servers (two `TaskApi`s, each over its own `RedisStore`, on two ports) sharing one
//! Redis: a task created through one is run by a call on the other.

use crate::common;

use std::time::Duration;

use async_trait::async_trait;
use common::RedisServer;
use crewline_core::ToolCall;
use crewline_redis::RedisStore;
use crewline_remote::{
    ClientConfig, StoreLimits, TaskApi, TaskClient,
    wire::{TaskRequest, TaskStatus},
};
use crewline_tools::{ExecuteOptions, Exports, Tool, ToolError, ToolPolicy, ToolRegistry};
use serde_json::{Value, json};

/// A tool only the client's machine can run.
struct ReadClipboard;

#[async_trait]
impl Tool for ReadClipboard {
    fn name(&self) -> &str {
        "read_clipboard"
    }
    fn description(&self) -> &str {
        "The text on the user's clipboard."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().exports(Exports::all())
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        Ok(json!("Meet at 10:30"))
    }
}

/// Serves `api` on 127.0.0.1:0; returns its base URL.
async fn serve(api: &TaskApi) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let url = format!("http://{}", listener.local_addr().expect("local addr"));
    tokio::spawn(axum::serve(listener, api.router()).into_future());
    url
}

async fn replica(server: &RedisServer) -> TaskApi {
    let store = RedisStore::connect(server.url(), StoreLimits::default())
        .await
        .expect("connected");
    TaskApi::with_store(store).tool_timeout(Duration::from_secs(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_created_on_one_replica_is_run_by_a_call_on_the_other() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = (replica(&server).await, replica(&server).await);
    let url_a = serve(&a).await;

    // The client talks to replica A only: it creates the task there, polls and answers there.
    let mut local = ToolRegistry::new();
    local.register(ReadClipboard).expect("register");
    let client = TaskClient::new(ClientConfig::new(url_a).long_poll(Some(Duration::from_secs(5))))
        .expect("client");
    let request = TaskRequest {
        custom_tools: TaskClient::custom_tools(&local).expect("specs"),
        ..TaskRequest::default()
    };
    let task_id = client.create_task(&request).await.expect("created on A").id;
    let answering = tokio::spawn({
        let task_id = task_id.clone();
        async move { client.serve(&task_id, &local).await }
    });

    // The call lands on replica B: it attaches the task and calls the client's tool.
    let remote = b.attach(&task_id).await.expect("attached on B");
    let mut crew = ToolRegistry::new();
    remote.register_into(&mut crew).expect("remote tools");
    let call = ToolCall::new("call_1", "read_clipboard", "{}");
    let runs = tokio::time::timeout(
        Duration::from_secs(10),
        crew.execute(&[call], ExecuteOptions::new()),
    )
    .await
    .expect("the call on B got its answer from A in time");
    assert_eq!(runs[0].result.content(), "Meet at 10:30");

    // The call ends on B; the client, polling A, sees the task done.
    drop((remote, crew));
    let outcome = tokio::time::timeout(Duration::from_secs(10), answering)
        .await
        .expect("the client saw the end in time")
        .expect("the answering task")
        .expect("served");
    assert_eq!(
        (outcome.status, outcome.calls_answered),
        (TaskStatus::Done, 1)
    );
    assert_eq!(
        a.store().get(&task_id).await.expect("read on A").status,
        TaskStatus::Done
    );
}
