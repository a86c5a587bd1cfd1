//! The mock model's provider faults (a server down, 503, 429 with `Retry-After`, a stall
//! before the first byte, a stream broken before or after text or inside a tool call, a slow
//! stream), per request and for a whole server (`set_fault`, a timed schedule), each seen by
//! crewline's default client as a fallback client will see it.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crewline::{
    llm::{ChatRequest, LlmClient, LlmError, OpenAiClient, StreamItem},
    types::Message,
};
use crewline_testkit::{
    mock_llm::{Fault, FaultSchedule, MockLlm, RunningMockLlm, Script},
    platform::http,
};
use futures::StreamExt;
use serde_json::Value;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);

async fn start(script: Script) -> RunningMockLlm {
    MockLlm::new(script).start().await.unwrap()
}

async fn text_mock() -> RunningMockLlm {
    start(Script::text(6, Duration::ZERO)).await
}

fn client(running: &RunningMockLlm) -> OpenAiClient {
    running
        .client_builder()
        .model("mock-gpt")
        .max_retries(0)
        .first_byte_timeout(WAIT)
        .build()
        .unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user(text)])
}

/// What a streamed answer brought before it ended: its texts, whether complete tool calls
/// came, and the error that ended it.
#[derive(Debug, Default)]
struct Seen {
    texts: Vec<String>,
    tool_calls: usize,
    error: Option<LlmError>,
}

async fn stream(client: &OpenAiClient, request: ChatRequest) -> Seen {
    let mut seen = Seen::default();
    let mut stream = match client.stream_chat(request).await {
        Ok(stream) => stream,
        Err(error) => {
            seen.error = Some(error);
            return seen;
        }
    };
    while let Some(item) = tokio::time::timeout(WAIT, stream.next()).await.unwrap() {
        match item {
            Ok(StreamItem::Text(text)) if !text.is_empty() => seen.texts.push(text),
            Ok(StreamItem::ToolCalls(calls)) => seen.tool_calls += calls.len(),
            Ok(_) => {}
            Err(error) => {
                seen.error = Some(error);
                break;
            }
        }
    }
    seen
}

fn outcomes(running: &RunningMockLlm) -> Vec<String> {
    running
        .mock()
        .requests()
        .into_iter()
        .map(|r| r.outcome)
        .collect()
}

/// What a provider that is down looks like to the client: the connection reset before any
/// answer, reported as the server not reached.
fn is_down(error: &Option<LlmError>) -> bool {
    matches!(error, Some(LlmError::Connect(_)))
}

#[tokio::test]
async fn a_server_set_down_resets_new_and_kept_alive_connections_then_recovers() {
    let running = text_mock().await;
    let llm = client(&running);
    // A first answer leaves a connection in the client's pool.
    let healthy = stream(&llm, ask("hello")).await;
    assert!(healthy.error.is_none(), "{:?}", healthy.error);

    running.set_fault(Some(Fault::Down));
    assert_eq!(running.mock().fault(), Some(Fault::Down));
    for _ in 0..3 {
        let seen = stream(&llm, ask("hello")).await;
        assert!(seen.texts.is_empty(), "{seen:?}");
        assert!(is_down(&seen.error), "{seen:?}");
    }
    // A fresh client has no kept-alive connection: its connection is reset at accept.
    let fresh = stream(&client(&running), ask("hello")).await;
    assert!(is_down(&fresh.error), "{fresh:?}");
    let stats = running.mock().stats();
    // The kept-alive connection was reset by its request; the new ones as soon as accepted
    // (at least one per request: the client may try a reset connection once more).
    assert_eq!(stats.requests_by_fault["down"], 1, "{stats:?}");
    assert!(stats.connections_reset >= 3, "{stats:?}");
    assert_eq!(stats.fault.as_deref(), Some("down"));

    running.set_fault(None);
    let back = stream(&llm, ask("hello")).await;
    assert!(back.error.is_none(), "{:?}", back.error);
    assert_eq!(back.texts.len(), 6);
}

#[tokio::test]
async fn a_down_marker_resets_only_its_own_request() {
    let running = text_mock().await;
    let llm = client(&running);
    let seen = stream(&llm, ask("hello [[mock:down]]")).await;
    assert!(seen.texts.is_empty() && is_down(&seen.error), "{seen:?}");
    let after = stream(&llm, ask("hello")).await;
    assert!(after.error.is_none(), "{:?}", after.error);
    assert_eq!(outcomes(&running), ["connection_reset", "completed"]);
    let stats = running.mock().stats();
    assert_eq!(stats.requests_by_fault["down"], 1);
    assert_eq!(stats.requests_by_fault["none"], 1);
}

#[tokio::test]
async fn a_503_and_a_429_with_retry_after_reach_the_client() {
    let running = text_mock().await;
    let llm = client(&running);
    let unavailable = stream(&llm, ask("[[mock:503]]")).await;
    assert!(
        matches!(
            unavailable.error,
            Some(LlmError::Api {
                status: Some(503),
                ..
            })
        ),
        "{unavailable:?}"
    );
    let limited = stream(&llm, ask("[[mock:429:2]]")).await;
    assert!(
        matches!(
            limited.error,
            Some(LlmError::Api {
                status: Some(429),
                ..
            })
        ),
        "{limited:?}"
    );
    // The header itself, as the wire carries it.
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let raw = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\n\
         x-mock-fault: 429:7\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = http::request(running.addr(), &raw).await.unwrap();
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-after"), Some("7"));
    assert_eq!(
        answer.json().unwrap()["error"]["code"],
        "rate_limit_exceeded"
    );
    assert_eq!(outcomes(&running), ["http_503", "http_429", "http_429"]);
}

#[tokio::test]
async fn a_stall_before_the_first_byte_meets_the_clients_first_byte_timeout() {
    let running = text_mock().await;
    let llm = running
        .client_builder()
        .model("mock-gpt")
        .max_retries(0)
        .first_byte_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let seen = stream(&llm, ask("[[mock:stall:5000]]")).await;
    assert!(matches!(seen.error, Some(LlmError::Timeout(_))), "{seen:?}");
    assert!(seen.texts.is_empty());
    // The client let the request go.
    assert!(running.mock().wait_settled(WAIT).await);
    assert_eq!(outcomes(&running), ["client_disconnected"]);
}

#[tokio::test]
async fn a_stream_broken_after_the_role_event_has_spoken_nothing() {
    let running = text_mock().await;
    let seen = stream(&client(&running), ask("[[mock:cut:role]]")).await;
    assert!(
        matches!(seen.error, Some(LlmError::StreamCut(_))),
        "{seen:?}"
    );
    assert!(seen.texts.is_empty(), "{seen:?}");
    assert!(running.mock().wait_settled(WAIT).await);
    assert_eq!(outcomes(&running), ["cut_by_script_after_1_chunks"]);
}

#[tokio::test]
async fn a_stream_broken_inside_a_tool_call_yields_no_call() {
    let running = start(Script::weather_tool(4, Duration::ZERO)).await;
    let llm = client(&running);
    let seen = stream(&llm, ask("Weather in Paris? [[mock:cut:tool]]")).await;
    assert!(
        matches!(seen.error, Some(LlmError::StreamCut(_))),
        "{seen:?}"
    );
    // The header and a fragment of the arguments arrived; no call is handed out to run.
    assert_eq!(seen.tool_calls, 0, "{seen:?}");
    assert!(seen.texts.is_empty());
    assert!(running.mock().wait_settled(WAIT).await);
    assert_eq!(outcomes(&running), ["cut_by_script_after_2_chunks"]);
    // Without the fault the same request gets its call whole.
    let whole = stream(&llm, ask("Weather in Paris?")).await;
    assert_eq!(whole.tool_calls, 1, "{whole:?}");
}

#[tokio::test]
async fn a_stream_broken_after_text_has_spoken_that_text_only() {
    let running = text_mock().await;
    let llm = client(&running);
    let seen = stream(&llm, ask("[[mock:cut:text]]")).await;
    assert!(
        matches!(seen.error, Some(LlmError::StreamCut(_))),
        "{seen:?}"
    );
    assert_eq!(seen.texts, ["tok0 "]);
    let more = stream(&llm, ask("[[mock:cut:text:3]]")).await;
    assert_eq!(more.texts, ["tok0 ", "tok1 ", "tok2 "]);
}

#[tokio::test]
async fn a_slow_server_pauses_before_every_event() {
    let running = text_mock().await;
    let llm = client(&running);
    running.set_fault(Some(Fault::Slow(Duration::from_millis(30))));
    let began = Instant::now();
    let seen = stream(&llm, ask("hello")).await;
    assert!(seen.error.is_none(), "{:?}", seen.error);
    assert_eq!(seen.texts.len(), 6);
    // Nine events (role, six pieces, finish, [DONE]) each waited at least 30 ms.
    assert!(began.elapsed() >= Duration::from_millis(9 * 30));
    // A request's own fault wins over the server's.
    let cut = stream(&llm, ask("[[mock:cut:text]]")).await;
    assert_eq!(cut.texts, ["tok0 "]);
    let stats = running.mock().stats();
    assert_eq!(stats.requests_by_fault["slow:30"], 1);
    assert_eq!(stats.requests_by_fault["cut:text:1"], 1);
}

#[tokio::test]
async fn a_schedule_goes_down_then_slow_then_recovers() {
    let running = text_mock().await;
    let llm = client(&running);
    let schedule = FaultSchedule::parse("down for 20s, stall:300 for 20s").unwrap();
    let ago = |secs| {
        Instant::now()
            .checked_sub(Duration::from_secs(secs))
            .unwrap()
    };

    running
        .mock()
        .set_schedule_started_at(schedule.clone(), ago(1));
    let down = stream(&llm, ask("hello")).await;
    assert!(is_down(&down.error), "{down:?}");

    running
        .mock()
        .set_schedule_started_at(schedule.clone(), ago(25));
    let began = Instant::now();
    let slow = stream(&llm, ask("hello")).await;
    assert!(slow.error.is_none(), "{:?}", slow.error);
    assert!(began.elapsed() >= Duration::from_millis(300));
    let stats = running.mock().stats();
    let progress = stats.schedule.unwrap();
    assert_eq!(progress.phase, Some(1));
    assert_eq!(progress.phases[1].fault, "stall:300");
    assert_eq!(
        (progress.phases[1].from_ms, progress.phases[1].to_ms),
        (20_000, Some(40_000))
    );
    assert_eq!(progress.phases[1].requests, 1);

    running.mock().set_schedule_started_at(schedule, ago(41));
    let recovered = stream(&llm, ask("hello")).await;
    assert!(recovered.error.is_none(), "{:?}", recovered.error);
    assert_eq!(running.mock().fault(), None);
    assert_eq!(running.mock().stats().schedule.unwrap().phase, None);
}

#[tokio::test]
async fn an_armed_schedule_starts_at_the_first_completion_request() {
    let running = text_mock().await;
    running
        .mock()
        .arm_schedule(FaultSchedule::parse("503 for 1m").unwrap());
    // Health checks and stats do not start it.
    assert_eq!(
        http::get(running.addr(), "/health").await.unwrap().status,
        200
    );
    let stats = http::get(running.addr(), "/_mock/stats").await.unwrap();
    assert_eq!(
        stats.json().unwrap()["schedule"]["started_unix_ms"],
        Value::Null
    );
    let waiting = running.mock().stats().schedule.unwrap();
    assert_eq!((waiting.started_unix_ms, waiting.phase), (None, None));
    // Not started yet: no fault, though the first phase is a 503.
    assert_eq!(running.mock().fault(), None);

    let seen = stream(&client(&running), ask("hello")).await;
    assert!(
        matches!(
            seen.error,
            Some(LlmError::Api {
                status: Some(503),
                ..
            })
        ),
        "{seen:?}"
    );
    let started = running.mock().stats().schedule.unwrap();
    assert!(started.started_unix_ms.is_some());
    assert_eq!(started.phase, Some(0));
}

#[tokio::test]
async fn the_control_endpoints_set_faults_and_count_requests() {
    let running = text_mock().await;
    let llm = client(&running);
    let post = |path: &str, body: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: mock\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let addr = running.addr();
    let set = http::request(addr, &post("/_mock/fault", "503"))
        .await
        .unwrap();
    assert_eq!(set.status, 200, "{set:?}");
    let failed = stream(&llm, ask("hello")).await;
    assert!(matches!(
        failed.error,
        Some(LlmError::Api {
            status: Some(503),
            ..
        })
    ));
    let bad = http::request(addr, &post("/_mock/fault", "boom"))
        .await
        .unwrap();
    assert_eq!(bad.status, 400);
    http::request(addr, &post("/_mock/fault", "ok"))
        .await
        .unwrap();
    assert!(stream(&llm, ask("hello")).await.error.is_none());
    let scheduled = http::request(addr, &post("/_mock/fault-schedule", "429:1 for 1m"))
        .await
        .unwrap();
    assert_eq!(scheduled.status, 200, "{scheduled:?}");
    let limited = stream(&llm, ask("hello")).await;
    assert!(matches!(
        limited.error,
        Some(LlmError::Api {
            status: Some(429),
            ..
        })
    ));
    // A script load clears the request log, not the counters.
    running.mock().load(Script::text(2, Duration::ZERO));
    let stats = http::get(addr, "/_mock/stats")
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(stats["requests"], 3);
    assert_eq!(stats["requests_by_fault"]["503"], 1);
    assert_eq!(stats["requests_by_fault"]["none"], 1);
    assert_eq!(stats["requests_by_fault"]["429:1"], 1);
    assert_eq!(stats["fault"], "429:1");
    assert_eq!(stats["schedule"]["phases"][0]["requests"], 1);
}
