//! The Rust mock LLM against crewline's own `OpenAiClient`: text, tool calls (two headers in
//! one chunk), HTTP errors with retries, a cut stream, a stall, and the control endpoints; and
//! its raw mode on the same listener.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crewline::{
    llm::{ChatRequest, LlmClient, LlmError, OpenAiClient, StreamItem},
    types::{Message, ToolCall, ToolDefinition},
};
use crewline_testkit::mock_llm::{MockLlm, RunningMockLlm, Script};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const WAIT: Duration = Duration::from_secs(10);

async fn start(script: Value) -> RunningMockLlm {
    let mock = MockLlm::new(Script::from_json(&script).unwrap());
    mock.spawn("127.0.0.1:0".parse().unwrap()).await.unwrap()
}

fn client(running: &RunningMockLlm, retries: usize) -> OpenAiClient {
    OpenAiClient::builder()
        .model("mock-gpt")
        .base_url(running.base_url())
        .api_key("sk-mock")
        .read_env(false)
        .max_retries(retries)
        .first_byte_timeout(WAIT)
        .build()
        .unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::system("Be brief."), Message::user(text)])
}

/// Every item of one streamed completion, stopping at the first error.
async fn stream_all(
    client: &OpenAiClient,
    request: ChatRequest,
) -> Vec<Result<StreamItem, LlmError>> {
    let mut items = Vec::new();
    let mut stream = match client.stream_chat(request).await {
        Ok(stream) => stream,
        Err(error) => return vec![Err(error)],
    };
    while let Some(item) = tokio::time::timeout(WAIT, stream.next()).await.unwrap() {
        let failed = item.is_err();
        items.push(item);
        if failed {
            break;
        }
    }
    items
}

fn texts(items: &[Result<StreamItem, LlmError>]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| match item {
            Ok(StreamItem::Text(text)) if !text.is_empty() => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// A raw HTTP/1.1 exchange: status and body.
async fn http(running: &RunningMockLlm, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut socket = TcpStream::connect(running.addr()).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, socket.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

#[tokio::test]
async fn text_streams_in_chunks_and_the_request_is_recorded() {
    let running =
        start(json!({"replies": [{"reply": {"content_chunks": ["Hel", "lo", " there."]}}]})).await;
    let items = stream_all(&client(&running, 0), ask("Hi")).await;
    assert_eq!(texts(&items), ["Hel", "lo", " there."]);
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(StreamItem::Usage(u)) if u.prompt_tokens == 10))
    );

    assert!(running.mock().wait_settled(WAIT).await);
    let requests = running.mock().requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].outcome, "completed");
    assert_eq!(requests[0].body["stream"], true);
    assert_eq!(
        requests[0].body["stream_options"],
        json!({"include_usage": true})
    );
    assert_eq!(
        requests[0].body["messages"][1],
        json!({"role": "user", "content": "Hi"})
    );
}

#[tokio::test]
async fn two_tool_calls_whose_headers_share_one_chunk_are_both_assembled() {
    let running = start(json!({"replies": [{"reply": {
        "tool_calls_in_one_chunk": true,
        "tool_calls": [
            {"id": "call_paris", "name": "get_weather", "arguments_chunks": ["{\"loca", "tion\": \"", "Paris\"}"]},
            {"id": "call_tokyo", "name": "get_weather", "arguments_chunks": ["{\"location\": ", "\"Tokyo\"}"]}
        ]
    }}]}))
    .await;
    let items = stream_all(&client(&running, 0), ask("Paris and Tokyo?")).await;
    let calls: Vec<ToolCall> = items
        .iter()
        .filter_map(|item| match item {
            Ok(StreamItem::ToolCalls(calls)) => Some(calls.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(
        calls,
        [
            ToolCall::new("call_paris", "get_weather", "{\"location\": \"Paris\"}"),
            ToolCall::new("call_tokyo", "get_weather", "{\"location\": \"Tokyo\"}"),
        ]
    );
    assert!(texts(&items).is_empty());
}

#[tokio::test]
async fn the_tool_script_calls_the_crews_own_tool_with_arguments_from_its_schema() {
    let mock = MockLlm::new(Script::first_tool(2, Duration::ZERO));
    let running = mock.spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let llm = client(&running, 0);
    let city = ToolDefinition::new(
        "lookup_forecast",
        "The forecast in a city.",
        json!({"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "note": {"type": ["string", "null"]}
        }, "required": ["city", "unit"]}),
    );
    let calls = |items: &[Result<StreamItem, LlmError>]| -> Vec<ToolCall> {
        items
            .iter()
            .filter_map(|item| match item {
                Ok(StreamItem::ToolCalls(calls)) => Some(calls.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    };
    let items = stream_all(&llm, ask("Weather in Paris?").with_tools(vec![city])).await;
    let called = calls(&items);
    assert_eq!(called.len(), 1, "{items:?}");
    assert_eq!(called[0].name, "lookup_forecast");
    let arguments: Value = serde_json::from_str(&called[0].arguments).unwrap();
    assert_eq!(arguments, json!({"city": "Paris", "unit": "celsius"}));
    // A request that offers no tool gets the old `get_weather` call.
    let items = stream_all(&llm, ask("Weather in Paris?")).await;
    assert_eq!(calls(&items)[0].name, "get_weather");
}

#[tokio::test]
async fn an_http_500_is_retried_then_reported_and_the_next_rule_answers() {
    let running = start(json!({"replies": [
        {"when": {"last_user_contains": "fail"}, "reply": {"http_status": 500}},
        {"reply": {"content_chunks": ["fine"]}}
    ]}))
    .await;
    let llm = client(&running, 2);
    let items = stream_all(&llm, ask("please fail")).await;
    match items.as_slice() {
        [
            Err(LlmError::Api {
                status: Some(500),
                message,
                ..
            }),
        ] => {
            assert_eq!(message, "mock upstream failure")
        }
        other => panic!("expected one HTTP 500 error, got {other:?}"),
    }
    assert_eq!(texts(&stream_all(&llm, ask("hello")).await), ["fine"]);
    let outcomes: Vec<String> = running
        .mock()
        .requests()
        .into_iter()
        .map(|r| r.outcome)
        .collect();
    assert_eq!(outcomes, ["http_500", "http_500", "http_500", "completed"]);
}

#[tokio::test]
async fn a_429_carries_its_json_error_body() {
    let running = start(json!({"replies": [{"reply": {
        "http_status": 429,
        "error_body": {"error": {"message": "slow down", "type": "rate_limit_error", "param": null, "code": "rate_limit"}}
    }}]}))
    .await;
    let (status, body) = http(
        &running,
        "POST",
        "/v1/chat/completions",
        r#"{"model":"m","stream":true}"#,
    )
    .await;
    assert_eq!(status, 429);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["message"], "slow down");
    let items = stream_all(&client(&running, 0), ask("hi")).await;
    assert!(
        matches!(&items[..], [Err(LlmError::Api { status: Some(429), message, .. })] if message == "slow down"),
        "{items:?}"
    );
}

#[tokio::test]
async fn a_cut_stream_delivers_the_chunks_before_the_cut_then_an_error() {
    let running = start(json!({"replies": [{"reply": {
        "content_chunks": ["Hello", " there,", " how", " are", " you?"],
        "cut_after_chunks": 3
    }}]}))
    .await;
    let items = stream_all(&client(&running, 2), ask("Hi")).await;
    assert_eq!(texts(&items), ["Hello", " there,"]);
    assert!(
        matches!(items.last(), Some(Err(LlmError::StreamCut(_)))),
        "{items:?}"
    );
    assert!(running.mock().wait_settled(WAIT).await);
    let requests = running.mock().requests();
    assert_eq!(
        requests.len(),
        1,
        "a cut after the first byte is never retried"
    );
    assert_eq!(requests[0].outcome, "cut_by_script_after_3_chunks");
}

#[tokio::test]
async fn a_client_that_goes_away_is_recorded_as_disconnected() {
    let running = start(json!({"replies": [{"reply": {
        "content_chunks": ["a", "b", "c", "d", "e", "f"],
        "chunk_delay_ms": 50
    }}]}))
    .await;
    let llm = client(&running, 0);
    let mut stream = llm.stream_chat(ask("Hi")).await.unwrap();
    let first = tokio::time::timeout(WAIT, stream.next()).await.unwrap();
    assert!(matches!(first, Some(Ok(_))), "{first:?}");
    drop(stream);
    assert!(running.mock().wait_settled(WAIT).await);
    assert_eq!(running.mock().requests()[0].outcome, "client_disconnected");
}

#[tokio::test]
async fn a_stall_before_the_first_byte_hits_the_clients_time_limit() {
    let running = start(
        json!({"replies": [{"reply": {"content_chunks": ["late"], "first_byte_delay_ms": 3000}}]}),
    )
    .await;
    let llm = OpenAiClient::builder()
        .model("mock-gpt")
        .base_url(running.base_url())
        .api_key("sk-mock")
        .read_env(false)
        .max_retries(0)
        .first_byte_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let started = Instant::now();
    let items = stream_all(&llm, ask("Hi")).await;
    assert!(
        matches!(&items[..], [Err(LlmError::Timeout(_))]),
        "{items:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn non_streaming_requests_get_one_completion_object() {
    let running = start(json!({"replies": [{"reply": {"content_chunks": ["Hel", "lo"]}}]})).await;
    let response = client(&running, 0).chat(ask("Hi")).await.unwrap();
    assert_eq!(response.content, "Hello");
    let (status, body) = http(&running, "POST", "/chat/completions", r#"{"model":"m"}"#).await;
    assert_eq!(status, 200);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "m");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello");
}

#[tokio::test]
async fn control_endpoints_load_reset_and_list() {
    let running = start(json!({})).await;
    assert_eq!(
        http(&running, "GET", "/health", "").await,
        (200, r#"{"status":"ok"}"#.to_owned())
    );
    let (status, _) = http(&running, "POST", "/_mock/script", r#"{"replies": 5}"#).await;
    assert_eq!(status, 400);
    let script = r#"{"model": "scripted", "replies": [{"when": {"request_index": 1}, "reply": {"content_chunks": ["second"]}}]}"#;
    assert_eq!(http(&running, "POST", "/_mock/script", script).await.0, 200);

    let llm = client(&running, 0);
    assert_eq!(texts(&stream_all(&llm, ask("a")).await), ["OK."]);
    assert_eq!(texts(&stream_all(&llm, ask("b")).await), ["second"]);
    let (_, listed) = http(&running, "GET", "/_mock/requests", "").await;
    let listed: Vec<Value> = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1]["index"], 1);
    assert_eq!(listed[1]["outcome"], "completed");
    assert_eq!(listed[1]["headers"]["content-type"], "application/json");

    assert_eq!(http(&running, "POST", "/_mock/reset", "").await.0, 200);
    assert!(running.mock().requests().is_empty());
    // The counter restarts: index 0 again gets the default reply.
    assert_eq!(texts(&stream_all(&llm, ask("c")).await), ["OK."]);
}

#[tokio::test]
async fn a_body_that_is_not_json_is_recorded_as_unparseable() {
    let running = start(json!({})).await;
    let (status, body) = http(&running, "POST", "/v1/chat/completions", "not json").await;
    assert_eq!(status, 200);
    assert!(body.contains("chat.completion"));
    assert_eq!(
        running.mock().requests()[0].body,
        json!({"_unparseable": "not json"})
    );
}

#[tokio::test]
async fn the_raw_mode_is_the_same_mock_on_the_same_listener_and_stops_with_it() {
    use crewline_testkit::mock_llm::raw::{After, RawReply};

    let scripted = MockLlm::new(Script::default());
    let raw = MockLlm::raw(vec![RawReply::chunks(&[json!({"n": 1})], After::Done)]);
    assert!(!scripted.is_raw() && raw.is_raw());
    let running = raw.start().await.unwrap();

    // Byte for byte: the event as given, then `[DONE]`.
    let (status, body) = http(&running, "POST", "/v1/chat/completions", "{}").await;
    assert_eq!(status, 200);
    assert!(body.contains("data: {\"n\":1}\n\n"), "{body}");
    assert!(body.contains("data: [DONE]"), "{body}");
    // Past the script: the raw mode's 500, on a new connection.
    let (status, body) = http(&running, "POST", "/v1/chat/completions", "{}").await;
    assert_eq!((status, body.contains("no reply left")), (500, true));
    let mock = running.mock().clone();
    assert_eq!((mock.request_count(), mock.connections()), (2, 2));
    assert_eq!(mock.raw_requests()[0].path, "/v1/chat/completions");
    // The scripted log is the scripted mode's.
    assert!(mock.requests().is_empty());

    let addr = running.addr();
    running.shutdown(WAIT).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "a stopped mock accepts no connection"
    );
}
