//! A Redis that freezes (SIGSTOP, longer than a command's 5 s reply timeout) while a remote
//! agent polls and the crew calls its tools: a call its client ran is told its answer or an
//! unknown outcome, never "not called" or a failure (the model would run it again).

use crate::common;

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use common::RedisServer;
use crewline_core::{ToolCall, ToolErrorKind};
use crewline_redis::RedisStore;
use crewline_remote::{Backoff, ClientConfig, StoreLimits, TaskApi, TaskClient, wire::TaskRequest};
use crewline_tools::{ExecuteOptions, Exports, Target, Tool, ToolError, ToolRegistry};
use serde_json::{Value, json};

/// The client's tool: records every call it runs by its `n`.
struct Pay(Arc<Mutex<HashSet<u64>>>);

#[async_trait]
impl Tool for Pay {
    fn name(&self) -> &str {
        "pay"
    }
    fn description(&self) -> &str {
        "Pays bill n."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let n = arguments["n"].as_u64().unwrap_or(u64::MAX);
        self.0.lock().expect("lock").insert(n);
        Ok(json!({"paid": n}))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_run_during_a_redis_freeze_are_never_told_not_called() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = RedisStore::connect(server.url(), StoreLimits::default())
        .await
        .expect("connected");
    let api = TaskApi::with_store(store);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(axum::serve(listener, api.router()).into_future());

    // The remote agent: its `pay`, offered as the task's tool (2 s timeout), served by polling.
    let ran = Arc::new(Mutex::new(HashSet::new()));
    let mut local = ToolRegistry::new().with_default_exports(Exports::only(&[Target::Remote]));
    local.register(Pay(Arc::clone(&ran))).expect("pay");
    let client = TaskClient::new(
        ClientConfig::new(url)
            .long_poll(Some(Duration::from_secs(2)))
            .backoff(Backoff {
                initial: Duration::from_millis(100),
                max: Duration::from_secs(1),
                max_attempts: 60,
            }),
    )
    .expect("client");
    let mut tools = TaskClient::custom_tools(&local).expect("specs");
    tools[0].timeout_ms = Some(2_000);
    let request = TaskRequest {
        custom_tools: tools,
        ..TaskRequest::default()
    };
    let task = client.create_task(&request).await.expect("task").id;
    let serving = tokio::spawn({
        let task = task.clone();
        async move { client.serve(&task, &local).await }
    });

    // The crew's call: one `pay` every 100 ms for 12 s; Redis frozen from 2 s to 9 s.
    let remote = api.attach(&task).await.expect("attached");
    let mut crew = ToolRegistry::new();
    remote.register_into(&mut crew).expect("remote tools");
    let crew = Arc::new(crew);
    let calls: Vec<_> = (0..120u64)
        .map(|n| {
            let crew = Arc::clone(&crew);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100 * n)).await;
                let call = ToolCall::new(format!("c{n}"), "pay", json!({"n": n}).to_string());
                let result = crew
                    .execute(&[call], ExecuteOptions::new())
                    .await
                    .remove(0)
                    .result;
                (n, result)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.freeze();
    tokio::time::sleep(Duration::from_secs(7)).await;
    server.thaw();

    let (mut answered, mut unknown, mut not_called, mut other) = (0, 0, 0, 0);
    let mut wrong = Vec::new();
    for call in calls {
        let (n, result) = call.await.expect("a call");
        let content: Value = serde_json::from_str(&result.content()).unwrap_or(Value::Null);
        let message = content["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let was_run = ran.lock().expect("lock").contains(&n);
        match result.error_kind() {
            None => answered += 1,
            Some(ToolErrorKind::OutcomeUnknown) => unknown += 1,
            Some(_) if message.contains("not called") => not_called += 1,
            Some(_) => other += 1,
        }
        // A call its client ran is its answer, or an unknown outcome: anything else (not
        // called, failed, timed out) invites the model to run it again.
        if was_run
            && !matches!(
                result.error_kind(),
                None | Some(ToolErrorKind::OutcomeUnknown)
            )
        {
            wrong.push((n, result.content()));
        }
    }
    let ran = ran.lock().expect("lock").len();
    eprintln!(
        "frozen 7 s: 120 calls, {ran} run by the client; answered {answered}, outcome unknown \
         {unknown}, not called {not_called}, other errors {other}"
    );
    assert!(
        wrong.is_empty(),
        "{} calls that ran were told something else: {wrong:?}",
        wrong.len()
    );
    assert!(
        unknown + not_called > 0,
        "the freeze reached no call: the test shows nothing"
    );
    drop((remote, crew));
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
}
