//! The task client against a local fake of a Smooth-style task API (axum on 127.0.0.1:0) that
//! follows the documented shapes: `{"r": ...}` envelopes, 202 while running and 200 when
//! done, `tool_call` events with `{name, input}` payloads and ms timestamps.

use crate::common;

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    routing::{get, post},
};
use common::Weather;
use crewline_remote::{Backoff, ClientConfig, ClientError, TaskClient, wire::TaskRequest};
use crewline_tools::{Exports, Target, Tool, ToolError, ToolPolicy, ToolRegistry};
use serde_json::{Value, json};

/// What the fake sends for one poll.
#[derive(Clone)]
enum PollReply {
    /// An error status with a body.
    Fail(StatusCode),
    /// A running task with these events.
    Running(Vec<Value>),
    /// A finished task with these events (the final poll).
    Done(Vec<Value>),
}

#[derive(Default)]
struct Fake {
    created: Vec<Value>,
    api_keys: Vec<Option<String>>,
    polls: VecDeque<PollReply>,
    cursors: Vec<u64>,
    answers: Vec<Value>,
}

type Shared = Arc<Mutex<Fake>>;

fn tool_call(id: &str, timestamp: u64, name: &str, input: Value) -> Value {
    json!({"id": id, "name": "tool_call", "timestamp": timestamp,
           "payload": {"name": name, "input": input}})
}

async fn create(
    State(fake): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    let mut fake = fake.lock().expect("fake lock");
    fake.api_keys.push(
        headers
            .get("apikey")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    );
    fake.created.push(body);
    Json(
        json!({"r": {"id": "task_abc123", "status": "running", "output": null,
                      "live_url": "https://live.example/v/1"}}),
    )
}

async fn poll(
    State(fake): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> (StatusCode, Json<Value>) {
    let mut fake = fake.lock().expect("fake lock");
    if id != "task_abc123" {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"detail": "Task not found"})),
        );
    }
    let cursor = query
        .get("event_t")
        .and_then(|t| t.parse().ok())
        .expect("event_t on every poll");
    let reply = fake
        .polls
        .pop_front()
        .unwrap_or(PollReply::Done(Vec::new()));
    if !matches!(reply, PollReply::Fail(_)) {
        fake.cursors.push(cursor);
    }
    match reply {
        PollReply::Fail(status) => (status, Json(json!({"detail": "upstream hiccup"}))),
        PollReply::Running(events) => (
            StatusCode::ACCEPTED,
            Json(json!({"r": {"id": id, "status": "running", "events": events}})),
        ),
        PollReply::Done(events) => (
            StatusCode::OK,
            Json(
                json!({"r": {"id": id, "status": "done", "output": "all good",
                              "events": events}}),
            ),
        ),
    }
}

async fn answer(
    State(fake): State<Shared>,
    Path(_id): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    let id = body["id"].clone();
    fake.lock().expect("fake lock").answers.push(body);
    Json(json!({"r": {"id": id}}))
}

/// Serves the fake with `polls` scripted; returns its base URL (with Smooth's `/api/v1`).
async fn fake_api(polls: Vec<PollReply>) -> (String, Shared) {
    let fake: Shared = Arc::new(Mutex::new(Fake {
        polls: polls.into(),
        ..Fake::default()
    }));
    let app = Router::new()
        .route("/api/v1/task", post(create))
        .route("/api/v1/task/{id}", get(poll))
        .route("/api/v1/task/{id}/event", post(answer))
        .with_state(Arc::clone(&fake));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/api/v1"), fake)
}

fn client(base_url: &str) -> TaskClient {
    TaskClient::new(
        ClientConfig::new(base_url)
            .api_key("sk-test-key")
            .poll_interval(Duration::from_millis(5))
            .backoff(Backoff {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(4),
                max_attempts: 4,
            }),
    )
    .expect("client")
}

/// A tool that panics.
struct Explode;

#[async_trait]
impl Tool for Explode {
    fn name(&self) -> &str {
        "explode"
    }
    fn description(&self) -> &str {
        "Always panics."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        panic!("kaboom")
    }
}

/// A tool slower than its own timeout.
struct Slow;

#[async_trait]
impl Tool for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn description(&self) -> &str {
        "Takes too long."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::default().timeout(Duration::from_millis(50))
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(json!("late"))
    }
}

fn registry() -> ToolRegistry {
    // The client offers its tools to the remote crew: an explicit opt-in.
    let mut registry = ToolRegistry::new().with_default_exports(Exports::only(&[Target::Remote]));
    registry
        .register(Weather)
        .expect("weather")
        .register(Explode)
        .expect("explode")
        .register(Slow)
        .expect("slow");
    registry
}

fn answer_for<'a>(answers: &'a [Value], id: &str) -> &'a Value {
    answers
        .iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("no answer to {id} in {answers:?}"))
}

#[tokio::test]
async fn tool_calls_are_answered_once_despite_duplicates_errors_and_a_final_poll() {
    let (url, fake) = fake_api(vec![
        PollReply::Fail(StatusCode::SERVICE_UNAVAILABLE),
        PollReply::Fail(StatusCode::BAD_GATEWAY),
        PollReply::Running(vec![tool_call(
            "evt_1",
            1000,
            "get_weather",
            json!({"location": "Paris"}),
        )]),
        PollReply::Running(vec![
            tool_call("evt_1", 1000, "get_weather", json!({"location": "Paris"})),
            tool_call(
                "evt_2",
                2000,
                "get_weather",
                json!({"location": "Atlantis"}),
            ),
        ]),
        PollReply::Running(Vec::new()),
        PollReply::Done(vec![tool_call(
            "evt_3",
            3000,
            "get_weather",
            json!({"location": "Paris"}),
        )]),
    ])
    .await;

    let request = TaskRequest {
        task: Some("What is the weather in Paris?".to_owned()),
        ..TaskRequest::default()
    };
    let outcome = client(&url)
        .run(request, &registry())
        .await
        .expect("task served");

    assert_eq!(outcome.status.as_str(), "done");
    assert_eq!(outcome.output, Some(json!("all good")));
    assert_eq!(outcome.calls_answered, 3);
    assert_eq!(outcome.duplicates_skipped, 1);
    let fake = fake.lock().expect("fake lock");
    assert_eq!(fake.answers.len(), 3, "each call answered exactly once");
    let paris = answer_for(&fake.answers, "evt_1");
    assert_eq!(paris["name"], "tool_call");
    assert_eq!(paris["payload"]["code"], 200);
    assert_eq!(paris["payload"]["output"]["temperature_c"], 18);
    let atlantis = answer_for(&fake.answers, "evt_2");
    assert_eq!(
        atlantis["payload"]["code"], 400,
        "a tool error the agent can correct"
    );
    assert_eq!(
        atlantis["payload"]["output"]["error"]["message"],
        "No weather data for Atlantis"
    );
    assert_eq!(
        answer_for(&fake.answers, "evt_3")["payload"]["code"],
        200,
        "final poll"
    );
    assert_eq!(
        fake.cursors,
        [0, 1000, 2000, 2000],
        "the cursor follows the events"
    );

    let created = &fake.created[0];
    assert_eq!(created["task"], "What is the weather in Paris?");
    let tools = created["custom_tools"].as_array().expect("custom_tools");
    let weather = tools
        .iter()
        .find(|t| t["name"] == "get_weather")
        .expect("get_weather");
    assert_eq!(
        weather["description"],
        "Get the current weather for a city."
    );
    assert_eq!(weather["inputs"]["required"], json!(["location"]));
    assert_eq!(weather["output"], "Temperature and conditions.");
    assert_eq!(fake.api_keys, [Some("sk-test-key".to_owned())]);
}

#[tokio::test]
async fn bad_arguments_are_400_and_panics_and_timeouts_are_500() {
    let (url, fake) = fake_api(vec![PollReply::Done(vec![
        tool_call("evt_args", 10, "get_weather", json!({})),
        tool_call("evt_panic", 11, "explode", json!({})),
        tool_call("evt_slow", 12, "slow", json!({})),
        tool_call("evt_unknown", 13, "teleport", json!({})),
    ])])
    .await;

    client(&url)
        .serve("task_abc123", &registry())
        .await
        .expect("task served");

    let fake = fake.lock().expect("fake lock");
    let args = answer_for(&fake.answers, "evt_args");
    assert_eq!(args["payload"]["code"], 400);
    assert_eq!(
        args["payload"]["output"]["error"]["kind"],
        "ToolArgsInvalid"
    );
    let panic = answer_for(&fake.answers, "evt_panic");
    assert_eq!(panic["payload"]["code"], 500);
    assert!(
        !panic["payload"].to_string().contains("kaboom"),
        "the panic's text stays with the operator"
    );
    let slow = answer_for(&fake.answers, "evt_slow");
    assert_eq!(slow["payload"]["code"], 500);
    assert_eq!(slow["payload"]["output"]["error"]["kind"], "Timeout");
    let unknown = answer_for(&fake.answers, "evt_unknown");
    assert_eq!(unknown["payload"]["code"], 400);
    assert_eq!(unknown["payload"]["output"]["error"]["kind"], "UnknownTool");
}

#[tokio::test]
async fn persistent_server_errors_end_in_a_typed_give_up() {
    let (url, _fake) = fake_api(vec![PollReply::Fail(StatusCode::SERVICE_UNAVAILABLE); 10]).await;

    let error = client(&url)
        .serve("task_abc123", &registry())
        .await
        .expect_err("gave up");

    match error {
        ClientError::GaveUp { attempts, last } => {
            assert_eq!(attempts, 4);
            assert!(
                matches!(*last, ClientError::Status { status: 503, ref detail } if detail == "upstream hiccup"),
                "{last}"
            );
        }
        other => panic!("expected GaveUp, got {other}"),
    }
}

#[tokio::test]
async fn an_unknown_task_is_reported_without_retrying() {
    let (url, _fake) = fake_api(Vec::new()).await;

    let error = client(&url)
        .serve("task_nope", &registry())
        .await
        .expect_err("unknown task");

    assert!(
        matches!(error, ClientError::TaskNotFound(ref id) if id == "task_nope"),
        "{error}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_network_error_after_retries() {
    // Bound but never listening: connecting is refused, and no other test can take the port
    // meanwhile (a port freed by dropping a listener could be reused by a concurrent test's server).
    let refusing = tokio::net::TcpSocket::new_v4().expect("socket");
    refusing.bind(([127, 0, 0, 1], 0).into()).expect("bind");
    let addr = refusing.local_addr().expect("addr");

    let error = client(&format!("http://{addr}"))
        .poll("task_abc123", 0)
        .await
        .expect_err("nothing listens");

    assert!(
        matches!(&error, ClientError::GaveUp { last, .. } if matches!(**last, ClientError::Network(_))),
        "{error}"
    );
}

/// A server that answers every request with `head` (status line and headers), then `body`,
/// then holds the connection open without another byte: what a hostile or broken task API
/// (or a proxy in front of one) can do.
async fn raw_api(head: &'static str, body: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let body = Arc::new(body);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = Arc::clone(&body);
            tokio::spawn(async move {
                // The request head (no request here has a body worth waiting for).
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
                // Never finishes the body: only a client that stops on its own returns.
                tokio::time::sleep(Duration::from_secs(3600)).await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_poll_answer_declaring_a_gigabyte_is_refused_at_once_without_reading_it() {
    // 1 GiB declared, a few bytes sent, then nothing: reading it whole would wait out the
    // request timeout (and, were it sent, hold a gigabyte).
    let url = raw_api(
        "HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: 1073741824\r\n\r\n",
        br#"{"r": {"id": "task_abc123", "status": "running", "events": ["#.to_vec(),
    )
    .await;
    let client = TaskClient::new(
        ClientConfig::new(url)
            .long_poll(None)
            .request_timeout(Duration::from_secs(20)),
    )
    .expect("client");

    let started = std::time::Instant::now();
    let error = client.poll("task_abc123", 0).await.expect_err("too large");

    assert!(
        matches!(error, ClientError::TooLarge { limit } if limit == crewline_remote::MAX_RESPONSE_BYTES),
        "{error}"
    );
    assert!(
        !error.is_retryable(),
        "the same poll would bring the same body"
    );
    assert!(error.to_string().contains("8388608 bytes"), "{error}");
    // Not a speed assertion: refused before the 20 s request timeout could end it instead.
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test]
async fn a_poll_answer_over_the_limit_is_refused_once_the_limit_is_read() {
    // No declared length (chunked): the client counts what it reads. Valid JSON, so a client
    // that read it whole would accept it.
    let padding = "x".repeat(1 << 20);
    let events = serde_json::to_string(&json!({"r": {"id": "task_abc123", "status": "running",
        "events": [], "padding": padding}}))
    .expect("json");
    let app = Router::new().route(
        "/api/v1/task/{id}",
        get(move || {
            let events = events.clone();
            async move { (StatusCode::ACCEPTED, events) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let limit = 256 << 10;
    let client = TaskClient::new(
        ClientConfig::new(format!("http://{addr}/api/v1"))
            .long_poll(None)
            .max_response_bytes(limit),
    )
    .expect("client");

    let error = client.poll("task_abc123", 0).await.expect_err("too large");

    assert!(
        matches!(error, ClientError::TooLarge { limit: l } if l == limit),
        "{error}"
    );
    // The same body fits under a limit above it: nothing else changed.
    let roomy = TaskClient::new(
        ClientConfig::new(format!("http://{addr}/api/v1"))
            .long_poll(None)
            .max_response_bytes(2 << 20),
    )
    .expect("client");
    let task = roomy.poll("task_abc123", 0).await.expect("fits");
    assert_eq!(task.id, "task_abc123");
}

#[tokio::test]
async fn an_endless_error_body_is_read_only_for_its_first_bytes() {
    // A 500 whose body never ends (100 KiB sent, then silence): the client takes the start of
    // it as the detail and retries, instead of waiting for an end that never comes.
    let url = raw_api(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/html\r\ntransfer-encoding: chunked\r\n\r\n",
        {
            let chunk = vec![b'<'; 100 << 10];
            let mut body = format!("{:x}\r\n", chunk.len()).into_bytes();
            body.extend_from_slice(&chunk);
            body.extend_from_slice(b"\r\n");
            body
        },
    )
    .await;
    let client = TaskClient::new(
        ClientConfig::new(url)
            .long_poll(None)
            .request_timeout(Duration::from_secs(20))
            .backoff(Backoff {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(2),
                max_attempts: 2,
            }),
    )
    .expect("client");

    let error = client.poll("task_abc123", 0).await.expect_err("a 500");

    match error {
        ClientError::GaveUp { attempts: 2, last } => match *last {
            ClientError::Status {
                status: 500,
                detail,
            } => {
                assert_eq!(detail.chars().count(), 500, "the detail is cut");
                assert!(detail.chars().all(|c| c == '<'), "{detail}");
            }
            other => panic!("expected the 500, got {other}"),
        },
        other => panic!("expected GaveUp after 2 attempts, got {other}"),
    }
}

/// A tool that counts how many of its calls run at once.
struct Counting {
    running: Arc<std::sync::atomic::AtomicUsize>,
    most: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait]
impl Tool for Counting {
    fn name(&self) -> &str {
        "count"
    }
    fn description(&self) -> &str {
        "Counts its concurrent calls."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        use std::sync::atomic::Ordering;
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        // Long enough for every call the client lets run to be running together.
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(json!("counted"))
    }
}

#[tokio::test]
async fn a_poll_with_a_thousand_tool_calls_runs_them_at_most_the_cap_at_a_time() {
    let calls: Vec<Value> = (1..=1000)
        .map(|i| tool_call(&format!("evt_{i}"), i, "count", json!({})))
        .collect();
    let (url, fake) = fake_api(vec![PollReply::Running(calls)]).await;
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut registry = ToolRegistry::new().with_default_exports(Exports::only(&[Target::Remote]));
    registry
        .register(Counting {
            running: Arc::default(),
            most: Arc::clone(&most),
        })
        .expect("count");

    let outcome = client(&url)
        .serve("task_abc123", &registry)
        .await
        .expect("served");

    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        most <= crewline_remote::MAX_CONCURRENT_CALLS,
        "{most} calls ran at once"
    );
    assert!(most > 1, "calls still run side by side ({most})");
    assert_eq!(outcome.calls_answered, 1000, "every call is still answered");
    assert_eq!(fake.lock().expect("fake lock").answers.len(), 1000);
}

#[tokio::test]
async fn an_event_with_a_megabyte_id_is_skipped_and_the_others_are_answered() {
    let long_id = "e".repeat(1 << 20);
    let (url, fake) = fake_api(vec![PollReply::Running(vec![
        tool_call(&long_id, 1000, "get_weather", json!({"location": "Paris"})),
        tool_call("evt_2", 2000, "get_weather", json!({"location": "Paris"})),
    ])])
    .await;

    let outcome = client(&url)
        .serve("task_abc123", &registry())
        .await
        .expect("served");

    assert_eq!(outcome.calls_answered, 1);
    let fake = fake.lock().expect("fake lock");
    assert_eq!(fake.answers.len(), 1, "only the ordinary event is answered");
    assert_eq!(fake.answers[0]["id"], "evt_2");
    assert_eq!(
        fake.cursors.last(),
        Some(&2000),
        "the cursor moves past the skipped event"
    );
}
