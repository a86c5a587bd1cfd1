//! crewline's own task API (`TaskApi`) over real HTTP on 127.0.0.1, with the crate's client
//! answering and the crew's side played by a registry holding the attached remote tools.

use crate::common;

use std::{sync::Arc, time::Duration};

use common::Weather;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_remote::{
    AttachError, ClientConfig, ClientError, RemoteTools, SMOOTH_PREFIX, StoreError, TaskApi,
    TaskClient, TaskOutcome,
    wire::{CustomTool, Envelope, TaskRequest, TaskResponse},
};
use crewline_tools::{ExecuteOptions, Exports, Target, ToolRegistry};
use serde_json::{Map, Value, json};

/// The results of `calls` run by `registry`, in call order (`parallel`: concurrently).
async fn results(registry: &ToolRegistry, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
    registry
        .execute(calls, ExecuteOptions::new().parallel(parallel))
        .await
        .into_iter()
        .map(|run| run.result)
        .collect()
}

/// Serves `api` on 127.0.0.1:0; returns its base URL.
async fn serve(api: &TaskApi) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let router = api.router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

fn client_registry() -> ToolRegistry {
    // The client offers its tools to the remote crew: an explicit opt-in (the default
    // export is the crew only).
    let mut registry = ToolRegistry::new().with_default_exports(Exports::only(&[Target::Remote]));
    registry.register(Weather).expect("weather");
    registry
}

fn client(url: &str) -> TaskClient {
    TaskClient::new(ClientConfig::new(url).long_poll(Some(Duration::from_secs(5)))).expect("client")
}

/// Creates a task offering the client registry's tools and starts `client` answering its
/// tool calls; returns the created task and the answering task.
async fn create_and_serve(
    client: &TaskClient,
) -> (
    TaskResponse,
    tokio::task::JoinHandle<Result<TaskOutcome, ClientError>>,
) {
    let registry = client_registry();
    let task = client
        .create_task(&TaskRequest {
            custom_tools: TaskClient::custom_tools(&registry).expect("specs"),
            ..TaskRequest::default()
        })
        .await
        .expect("task created");
    let serving = {
        let (client, id) = (client.clone(), task.id.clone());
        tokio::spawn(async move { client.serve(&id, &registry).await })
    };
    (task, serving)
}

fn weather_spec(timeout_ms: Option<u64>) -> CustomTool {
    CustomTool {
        name: "get_weather".to_owned(),
        description: "Get the current weather for a city.".to_owned(),
        inputs: json!({"type": "object", "properties": {"location": {"type": "string"}},
                       "required": ["location"]}),
        output: "Temperature and conditions".to_owned(),
        timeout_ms,
    }
}

/// The crew's side: a registry with the task's remote tools.
fn crew_registry(remote: &RemoteTools) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    remote.register_into(&mut registry).expect("remote tools");
    registry
}

async fn call(registry: &ToolRegistry, id: &str, arguments: Value) -> ToolResult {
    let calls = [ToolCall::new(id, "get_weather", arguments.to_string())];
    results(registry, &calls, false).await.remove(0)
}

fn error_message(result: &ToolResult) -> String {
    let content: Value = serde_json::from_str(&result.content()).expect("error JSON");
    content["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned()
}

/// Long-polls the task until a tool_call event comes; returns its id.
async fn next_tool_call(http: &reqwest::Client, url: &str, task: &str) -> String {
    let body: Value = http
        .get(format!("{url}/task/{task}?event_t=0&wait_ms=10000"))
        .send()
        .await
        .expect("poll")
        .json()
        .await
        .expect("poll body");
    body["r"]["events"][0]["id"]
        .as_str()
        .expect("a tool_call event")
        .to_owned()
}

#[tokio::test]
async fn remote_tool_calls_are_answered_by_the_client_and_the_task_ends_with_the_call() {
    let api = TaskApi::new();
    let url = serve(&api).await;
    let client = client(&url);
    let (task, serving) = create_and_serve(&client).await;
    assert_eq!(task.status.as_str(), "waiting");

    let mut variables = Map::new();
    variables.insert("task_id".to_owned(), json!(task.id));
    let remote = api
        .attach_call(&variables)
        .await
        .expect("attached")
        .expect("the call names a task");
    assert_eq!(remote.names(), ["get_weather"]);
    let crew = crew_registry(&remote);

    let paris = call(&crew, "c1", json!({"location": "Paris"})).await;
    assert!(!paris.is_error(), "{}", paris.content());
    let value: Value = serde_json::from_str(&paris.content()).expect("JSON result");
    assert_eq!(value["temperature_c"], 18);

    let atlantis = call(&crew, "c2", json!({"location": "Atlantis"})).await;
    assert_eq!(atlantis.error_kind(), Some(ToolErrorKind::ToolError));
    assert_eq!(error_message(&atlantis), "No weather data for Atlantis");

    let empty = call(&crew, "c3", json!({"location": ""})).await;
    assert_eq!(
        empty.error_kind(),
        Some(ToolErrorKind::ToolArgsInvalid),
        "the client's own argument check reaches the model as ToolArgsInvalid"
    );

    // The call ends: its registry and tools go, and the task is done.
    drop((crew, remote));
    let outcome = tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .expect("client finished in time")
        .expect("client task")
        .expect("client served");
    assert_eq!(outcome.status.as_str(), "done");
    assert_eq!(outcome.calls_answered, 3);
}

#[tokio::test]
async fn an_unanswered_call_is_an_unknown_outcome_and_a_late_answer_is_refused() {
    let api = TaskApi::new();
    let url = serve(&api).await;
    let task = client(&url)
        .create_task(&TaskRequest {
            custom_tools: vec![weather_spec(Some(100))],
            ..TaskRequest::default()
        })
        .await
        .expect("task");
    let remote = api.attach(&task.id).await.expect("attached");
    let crew = Arc::new(crew_registry(&remote));

    // The client takes the call and never answers: it may have run it, so the model must
    // not run it again.
    let pending = {
        let crew = Arc::clone(&crew);
        tokio::spawn(async move { call(&crew, "c1", json!({"location": "Paris"})).await })
    };
    let http = reqwest::Client::new();
    let event = next_tool_call(&http, &url, &task.id).await;
    let result = pending.await.expect("call");
    assert_eq!(result.error_kind(), Some(ToolErrorKind::OutcomeUnknown));
    let late = http
        .post(format!("{url}/task/{}/event", task.id))
        .json(
            &json!({"name": "tool_call", "id": event, "payload": {"code": 200, "output": "sunny"}}),
        )
        .send()
        .await
        .expect("answer");
    assert_eq!(late.status(), 409);
    let body: Value = late.json().await.expect("error body");
    assert!(
        body["detail"]
            .as_str()
            .expect("detail")
            .contains("no longer waiting"),
        "{body}"
    );
}

#[tokio::test]
async fn answers_are_checked_with_clear_errors() {
    let api = TaskApi::new();
    let url = serve(&api).await;
    let http = reqwest::Client::new();
    let task = client(&url)
        .create_task(&TaskRequest {
            custom_tools: vec![weather_spec(None)],
            ..TaskRequest::default()
        })
        .await
        .expect("task");
    let remote = api.attach(&task.id).await.expect("attached");
    let crew = crew_registry(&remote);
    let pending = tokio::spawn(async move { call(&crew, "c1", json!({"location": "Oslo"})).await });
    let event = next_tool_call(&http, &url, &task.id).await;
    let post = |body: String| {
        let http = http.clone();
        let url = format!("{url}/task/{}/event", task.id);
        async move {
            let response = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("post");
            let status = response.status().as_u16();
            let body: Value = response.json().await.expect("JSON body");
            (
                status,
                body["detail"].as_str().unwrap_or_default().to_owned(),
            )
        }
    };

    let (status, detail) = post("{not json".to_owned()).await;
    assert_eq!(status, 400);
    assert!(detail.contains("malformed event JSON"), "{detail}");
    let (status, detail) =
        post(json!({"name": "browser_action", "id": event, "payload": {}}).to_string()).await;
    assert_eq!(status, 400);
    assert!(detail.contains("only `tool_call`"), "{detail}");
    let (status, detail) =
        post(json!({"name": "tool_call", "payload": {"code": 200}}).to_string()).await;
    assert_eq!(status, 400);
    assert!(detail.contains("needs the `id`"), "{detail}");
    let (status, detail) = post(
        json!({"name": "tool_call", "id": event, "payload": {"code": 302, "output": 1}})
            .to_string(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(detail.contains("payload.code must be 200"), "{detail}");
    let (status, detail) =
        post(json!({"name": "tool_call", "id": "evt_nope", "payload": {"code": 200}}).to_string())
            .await;
    assert_eq!(status, 404);
    assert!(detail.contains("no event `evt_nope`"), "{detail}");

    let answer = json!({"name": "tool_call", "id": event,
        "payload": {"code": 500, "output": {"error": {"kind": "ToolError", "message": "station offline"}}}})
    .to_string();
    let (status, _) = post(answer.clone()).await;
    assert_eq!(status, 200);
    let (status, detail) = post(answer).await;
    assert_eq!(status, 409);
    assert!(detail.contains("already answered"), "{detail}");

    let result = pending.await.expect("call");
    assert_eq!(result.error_kind(), Some(ToolErrorKind::ToolError));
    assert_eq!(
        error_message(&result),
        "the tool failed on the client's side: station offline"
    );

    let unknown = http
        .get(format!("{url}/task/task_nope?event_t=0"))
        .send()
        .await
        .expect("get");
    assert_eq!(unknown.status(), 404);
    let bad_cursor = http
        .get(format!("{url}/task/{}?event_t=yesterday", task.id))
        .send()
        .await
        .expect("get");
    assert_eq!(bad_cursor.status(), 400);
}

#[tokio::test]
async fn tasks_attach_once_and_bad_task_ids_are_clear_errors() {
    let api = TaskApi::new();
    let url = serve(&api).await;
    let task = client(&url)
        .create_task(&TaskRequest::default())
        .await
        .expect("task");
    let _remote = api.attach(&task.id).await.expect("attached");

    assert!(matches!(
        api.attach(&task.id).await,
        Err(AttachError::Store(StoreError::AlreadyAttached(_)))
    ));
    assert!(matches!(
        api.attach("task_nope").await,
        Err(AttachError::Store(StoreError::UnknownTask(_)))
    ));
    let mut variables = Map::new();
    assert!(
        api.attach_call(&variables)
            .await
            .expect("no task")
            .is_none()
    );
    variables.insert("task_id".to_owned(), json!(42));
    assert!(matches!(
        api.attach_call(&variables).await,
        Err(AttachError::NotAString(_))
    ));
}

#[tokio::test]
async fn invalid_custom_tools_are_refused_when_the_task_is_created() {
    let api = TaskApi::new();
    let url = serve(&api).await;
    let http = reqwest::Client::new();
    let mut bad_name = weather_spec(None);
    bad_name.name = "get weather".to_owned();
    let mut bad_inputs = weather_spec(None);
    bad_inputs.inputs = json!({"type": "string"});

    for (tools, expected) in [
        (vec![bad_name], "not a valid tool name"),
        (vec![bad_inputs], "one object"),
        (
            vec![weather_spec(None), weather_spec(None)],
            "already registered",
        ),
        (vec![weather_spec(Some(0))], "timeout_ms"),
    ] {
        let response = http
            .post(format!("{url}/task"))
            .json(&json!({"task": null, "custom_tools": tools}))
            .send()
            .await
            .expect("post");
        assert_eq!(response.status(), 400);
        let body: Value = response.json().await.expect("body");
        assert!(
            body["detail"].as_str().expect("detail").contains(expected),
            "{body}"
        );
    }
    let malformed = http
        .post(format!("{url}/task"))
        .body("{\"custom_tools\": 3}")
        .send()
        .await
        .expect("post");
    assert_eq!(malformed.status(), 400);
}

#[tokio::test]
async fn the_api_key_is_required_when_configured() {
    let api = TaskApi::new().api_key("sk-crew").expect("a key");
    let url = serve(&api).await;
    let http = reqwest::Client::new();

    // At crewline's own path and at Smooth's (where its SDK sends the key too).
    for prefix in ["", SMOOTH_PREFIX] {
        let create = || http.post(format!("{url}{prefix}/task")).json(&json!({}));
        let missing = create().send().await.expect("post");
        assert_eq!(missing.status(), 401);
        let wrong = create()
            .header("apikey", "sk-guess")
            .send()
            .await
            .expect("post");
        assert_eq!(wrong.status(), 401);
        let bearer = create().bearer_auth("sk-crew").send().await.expect("post");
        assert_eq!(bearer.status(), 200);
    }
    let task = TaskClient::new(ClientConfig::new(&url).api_key("sk-crew"))
        .expect("client")
        .create_task(&TaskRequest::default())
        .await
        .expect("the client's key is accepted");
    assert!(task.id.starts_with("task_"));
}

#[tokio::test]
async fn the_task_api_answers_at_smooths_paths_and_its_telemetry_gets_a_quiet_204() {
    let api = TaskApi::new().api_key("sk-crew").expect("a key");
    let url = serve(&api).await;
    let http = reqwest::Client::new();

    // Smooth's SDK: base URL `{host}/api/` and `v1/task` (the key is checked there as at
    // `/task`: `the_api_key_is_required_when_configured`).
    let created: TaskResponse = http
        .post(format!("{url}/api/v1/task"))
        .header("apikey", "sk-crew")
        .json(&json!({"task": "weather line"}))
        .send()
        .await
        .expect("post")
        .json::<Envelope<TaskResponse>>()
        .await
        .expect("a task")
        .r;
    let polled = http
        .get(format!("{url}/api/v1/task/{}?event_t=0", created.id))
        .header("apikey", "sk-crew")
        .send()
        .await
        .expect("get");
    // 202 while the task waits for its call, as Smooth answers.
    assert_eq!(polled.status(), 202);
    // The same task at crewline's own path: one API, two prefixes.
    let same = http
        .get(format!("{url}/task/{}", created.id))
        .header("apikey", "sk-crew")
        .send()
        .await
        .expect("get");
    assert_eq!(same.status(), 202);

    // The SDK's telemetry (sent unless SMOOTH_TELEMETRY=off): 204, with or without a key.
    let telemetry = http
        .post(format!("{url}/api/v1/telemetry"))
        .json(&json!({"event": "sdk.run", "properties": {"version": "0.4.5"}}))
        .send()
        .await
        .expect("post");
    assert_eq!(telemetry.status(), 204);
    assert!(telemetry.bytes().await.expect("body").is_empty());
    // Nothing else is served under the prefix.
    let unknown = http
        .get(format!("{url}/api/v1/tasks"))
        .header("apikey", "sk-crew")
        .send()
        .await
        .expect("get");
    assert_eq!(unknown.status(), 404);
}

#[tokio::test]
async fn the_crates_client_works_against_smooths_base_path() {
    let api = TaskApi::new();
    let url = serve(&api).await;
    let client = client(&format!("{url}/api/v1"));
    let (task, serving) = create_and_serve(&client).await;

    let remote = api.attach(&task.id).await.expect("attached");
    let crew = crew_registry(&remote);
    let paris = call(&crew, "c1", json!({"location": "Paris"})).await;
    assert!(!paris.is_error(), "{}", paris.content());

    drop((crew, remote));
    let outcome = tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .expect("client finished in time")
        .expect("client task")
        .expect("client served");
    assert_eq!(outcome.status.as_str(), "done");
}

/// The detail of an error response.
/// Creates a task at Smooth's path with `body` (sent with `key` as `apikey`, if any), as any
/// HTTP client would; returns its id.
async fn create_raw(http: &reqwest::Client, url: &str, key: Option<&str>, body: Value) -> String {
    let mut request = http.post(format!("{url}/api/v1/task")).json(&body);
    if let Some(key) = key {
        request = request.header("apikey", key);
    }
    let created: Value = request
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("body");
    created["r"]["id"].as_str().expect("id").to_owned()
}

async fn detail(response: reqwest::Response) -> String {
    let body: Value = response.json().await.expect("error body");
    body["detail"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn one_key_cannot_park_every_task_slot() {
    // Default limits: the store holds 10 000 tasks, one caller 1 000 of them.
    let api = TaskApi::new().api_key("sk-crew").expect("a key");
    let url = serve(&api).await;
    let http = reqwest::Client::new();
    let create = || {
        http.post(format!("{url}/task"))
            .bearer_auth("sk-crew")
            .json(&json!({}))
            .send()
    };
    for _ in 0..1_000 {
        assert_eq!(create().await.expect("post").status(), 200);
    }
    let refused = create().await.expect("post");
    assert_eq!(
        refused.status(),
        429,
        "the caller's own cap, not the store's 503"
    );
    let reason = detail(refused).await;
    assert!(reason.contains("1000 tasks"), "{reason}");
}

#[tokio::test]
async fn a_task_over_its_byte_budget_is_refused_with_the_reason() {
    let api = TaskApi::new();
    let url = serve(&api).await;
    let http = reqwest::Client::new();
    // 1.5 MiB: under the HTTP body limit, over a task's default budget of 1 MiB.
    let mut spec = weather_spec(None);
    spec.description = "x".repeat(3 << 19);
    let refused = http
        .post(format!("{url}/task"))
        .json(&TaskRequest {
            custom_tools: vec![spec],
            ..TaskRequest::default()
        })
        .send()
        .await
        .expect("post");
    assert_eq!(refused.status(), 413);
    let reason = detail(refused).await;
    assert!(reason.contains("at most 1048576 bytes"), "{reason}");
}

#[tokio::test]
async fn cancelling_the_task_after_its_client_took_a_call_is_an_unknown_outcome() {
    let api = TaskApi::new();
    let url = serve(&api).await;
    let client = client(&url);
    let task = client
        .create_task(&TaskRequest {
            custom_tools: vec![weather_spec(None)],
            ..TaskRequest::default()
        })
        .await
        .expect("task");
    let remote = api.attach(&task.id).await.expect("attached");
    let crew = Arc::new(crew_registry(&remote));
    let pending = {
        let crew = Arc::clone(&crew);
        tokio::spawn(async move { call(&crew, "c1", json!({"location": "Oslo"})).await })
    };
    next_tool_call(&reqwest::Client::new(), &url, &task.id).await;

    let cancelled = client.cancel(&task.id).await.expect("cancelled");

    assert_eq!(cancelled.status.as_str(), "cancelled");
    let result = pending.await.expect("call");
    // The client had taken the call: it may have run it before cancelling.
    assert_eq!(result.error_kind(), Some(ToolErrorKind::OutcomeUnknown));
    assert!(
        error_message(&result).contains("task ended"),
        "{}",
        result.content()
    );
}

/// Measures a remote tool call's round trip over loopback, with long polling and with plain
/// polling every 250 ms, calls spaced 0-250 ms apart; prints to stderr. Run with
/// `cargo test -p crewline-remote --release --test it -- --ignored --nocapture server::`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test"]
async fn measure_round_trip() {
    for (label, long_poll, calls) in [
        ("long polling (wait_ms)", Some(Duration::from_secs(5)), 60),
        ("plain polling every 250 ms", None, 60),
    ] {
        let api = TaskApi::new();
        let url = serve(&api).await;
        let client = TaskClient::new(
            ClientConfig::new(&url)
                .long_poll(long_poll)
                .poll_interval(Duration::from_millis(250)),
        )
        .expect("client");
        let (task, serving) = create_and_serve(&client).await;
        let remote = api.attach(&task.id).await.expect("attached");
        let crew = crew_registry(&remote);
        let mut times = Vec::new();
        for i in 0..calls {
            // Calls come at varied times, as a conversation's do, not right after an answer.
            tokio::time::sleep(Duration::from_millis((i as u64 * 37) % 250)).await;
            let started = std::time::Instant::now();
            let result = call(&crew, &format!("c{i}"), json!({"location": "Paris"})).await;
            times.push(started.elapsed());
            assert!(!result.is_error());
        }
        times.sort();
        eprintln!(
            "remote tool round trip over loopback, {label} ({calls} calls): median {:?}, \
             p95 {:?}, max {:?}",
            times[calls / 2],
            times[calls * 95 / 100],
            times[calls - 1]
        );
        drop((crew, remote));
        serving.await.expect("join").expect("served");
    }
}

#[test]
fn an_empty_api_key_is_an_error() {
    let error = TaskApi::new()
        .api_key("")
        .expect_err("an empty key admits nothing");
    assert!(error.to_string().contains("empty"), "{error}");
}

#[tokio::test]
async fn each_of_several_keys_is_accepted_and_an_empty_header_is_not() {
    let api = TaskApi::new()
        .credential(crewline_remote::Credential::new("alice", "sk-alice").expect("key"))
        .credential(crewline_remote::Credential::new("bob", "sk-bob").expect("key"));
    let url = serve(&api).await;
    let http = reqwest::Client::new();
    for (header, value, status) in [
        ("apikey", "sk-alice", 200),
        ("apikey", "sk-bob", 200),
        ("authorization", "Bearer sk-bob", 200),
        ("apikey", "", 401),
        ("authorization", "Bearer ", 401),
        ("apikey", "sk-carol", 401),
    ] {
        let response = http
            .post(format!("{url}/task"))
            .header(header, value)
            .json(&json!({}))
            .send()
            .await
            .expect("post");
        assert_eq!(response.status(), status, "{header}: {value}");
        if status == 401 {
            assert_eq!(
                response
                    .headers()
                    .get("www-authenticate")
                    .map(|v| v.to_str().expect("ascii")),
                Some("Bearer")
            );
        }
    }
}

#[tokio::test]
async fn one_key_cannot_read_answer_or_cancel_another_keys_task() {
    let api = TaskApi::new()
        .credential(crewline_remote::Credential::new("alice", "sk-alice").expect("key"))
        .credential(crewline_remote::Credential::new("bob", "sk-bob").expect("key"));
    let url = serve(&api).await;
    let http = reqwest::Client::new();
    let body = json!({"custom_tools": [weather_spec(None)]});
    let id = create_raw(&http, &url, Some("sk-alice"), body).await;
    let remote = api.attach(&id).await.expect("attached");
    let crew = crew_registry(&remote);
    let calling = tokio::spawn(async move {
        let result = call(&crew, "c1", json!({"location": "Oslo"})).await;
        (result, crew)
    });
    // Wait until alice's task has its tool call, so a leak would have something to show.
    let alice = |request: reqwest::RequestBuilder| request.header("apikey", "sk-alice");
    let body: Value = alice(http.get(format!("{url}/api/v1/task/{id}?wait_ms=10000")))
        .send()
        .await
        .expect("poll")
        .json()
        .await
        .expect("poll body");
    let event = body["r"]["events"][0]["id"]
        .as_str()
        .expect("event")
        .to_owned();

    // Bob, with a valid key of his own, sees no such task on any route.
    let bob = |request: reqwest::RequestBuilder| request.header("apikey", "sk-bob");
    let answer = json!({"name": "tool_call", "id": event,
                        "payload": {"code": 200, "output": "sunny, says bob"}});
    for request in [
        bob(http.get(format!("{url}/api/v1/task/{id}?event_t=0"))),
        bob(http
            .post(format!("{url}/api/v1/task/{id}/event"))
            .json(&answer)),
        bob(http.delete(format!("{url}/api/v1/task/{id}"))),
    ] {
        let response = request.send().await.expect("request");
        assert_eq!(response.status(), 404);
        let text = response.text().await.expect("body");
        assert!(!text.contains("Oslo") && text.contains(&id), "{text}");
    }

    // Alice's call is untouched by all that: her answer is the one the model gets.
    let answer = json!({"name": "tool_call", "id": event,
                        "payload": {"code": 200, "output": {"temperature_c": 7}}});
    let response = alice(
        http.post(format!("{url}/api/v1/task/{id}/event"))
            .json(&answer),
    )
    .send()
    .await
    .expect("answer");
    assert_eq!(response.status(), 200);
    let (result, crew) = calling.await.expect("call");
    assert_eq!(result.content(), r#"{"temperature_c":7}"#);
    drop((crew, remote));
}

#[tokio::test]
async fn smooths_sdk_parameter_map_inputs_become_a_schema_the_crew_checks() {
    let api = TaskApi::new();
    let url = serve(&api).await;
    let http = reqwest::Client::new();
    // What `@client.tool(inputs={...})` of smooth-py sends: parameter name -> its schema.
    let body = json!({"task": "weather line", "custom_tools": [{
        "name": "get_weather",
        "description": "The weather in a city.",
        "inputs": {"location": {"type": "string", "description": "The city"}},
        "output": "string",
    }]});
    let id = create_raw(&http, &url, None, body).await;
    let remote = api.attach(&id).await.expect("attached");
    let crew = crew_registry(&remote);
    let schema = &crew.definitions()[0].parameters;
    assert_eq!(schema["required"], json!(["location"]), "{schema}");
    // The location is required: a call without it never reaches the client.
    let missing = call(&crew, "c1", json!({})).await;
    assert_eq!(missing.error_kind(), Some(ToolErrorKind::ToolArgsInvalid));

    // A shape that is neither form is refused when the task is created, by name.
    let response = http
        .post(format!("{url}/api/v1/task"))
        .json(&json!({"custom_tools": [{"name": "t", "description": "d",
                                        "inputs": {"location": 5}, "output": "o"}]}))
        .send()
        .await
        .expect("create");
    assert_eq!(response.status(), 400);
    let detail = detail(response).await;
    assert!(
        detail.contains("custom tool `t`") && detail.contains("inputs.location"),
        "{detail}"
    );
}

#[tokio::test]
async fn a_finished_task_carries_what_the_call_concluded() {
    let api = TaskApi::new();
    let url = serve(&api).await;
    let http = reqwest::Client::new();
    let create = || {
        let body = json!({"custom_tools": [weather_spec(None)]});
        create_raw(&http, &url, None, body)
    };
    let finished = |id: String| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            for _ in 0..200 {
                let body: Value = http
                    .get(format!("{url}/api/v1/task/{id}"))
                    .send()
                    .await
                    .expect("poll")
                    .json()
                    .await
                    .expect("body");
                if body["r"]["status"] != "running" {
                    return body["r"].clone();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("task {id} never finished");
        }
    };

    // The crew says what the call concluded.
    let id = create().await;
    let remote = api.attach(&id).await.expect("attached");
    remote
        .output()
        .set(json!({"resolved": true, "city": "Oslo"}))
        .expect("small enough");
    drop(remote);
    let task = finished(id).await;
    assert_eq!(task["status"], "done");
    assert_eq!(task["output"], json!({"resolved": true, "city": "Oslo"}));

    // By default: the agent's last reply, as the call's conversation had it.
    let id = create().await;
    let remote = api.attach(&id).await.expect("attached");
    let mut context = crewline_core::Context::with_system("You are a weather line.");
    context.add(crewline_core::Message::user("Weather in Oslo?"));
    context.add(crewline_core::Message::assistant(
        "In Oslo it is 7 degrees.",
    ));
    context.add(crewline_core::Message::user("Thanks, bye!"));
    context.add(crewline_core::Message::assistant("  Goodbye!  "));
    remote.output().record_last_reply(&context);
    drop(remote);
    assert_eq!(finished(id).await["output"], "Goodbye!");

    // An output far larger than a conclusion is refused when it is set, not lost silently.
    let id = create().await;
    let remote = api.attach(&id).await.expect("attached");
    let error = remote
        .output()
        .set("x".repeat(crewline_remote::MAX_OUTPUT_BYTES))
        .expect_err("too large");
    assert!(error.to_string().contains("at most 65536 bytes"), "{error}");
    drop(remote);
    assert_eq!(finished(id).await["output"], Value::Null);
}
