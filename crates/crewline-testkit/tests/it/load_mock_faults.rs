//! The mock LLM's per-request faults (the `x-mock-fault` header or a `[[mock:FAULT]]` marker
//! in the last user message) seen through crewline's own `OpenAiClient`, on the load-test
//! script that `crewline mock-llm --chunks C --chunk-delay-ms D` serves.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crewline::{
    llm::{ChatRequest, LlmClient, LlmError, OpenAiClient, StreamItem},
    types::Message,
};
use crewline_testkit::mock_llm::{MockLlm, RunningMockLlm, Script};
use futures::StreamExt;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const WAIT: Duration = Duration::from_secs(10);

async fn start() -> RunningMockLlm {
    let mock = MockLlm::new(Script::text(6, Duration::ZERO));
    mock.spawn("127.0.0.1:0".parse().unwrap()).await.unwrap()
}

fn client(running: &RunningMockLlm, retries: usize, first_byte: Duration) -> OpenAiClient {
    OpenAiClient::builder()
        .model("mock-gpt")
        .base_url(running.base_url())
        .api_key("sk-mock")
        .read_env(false)
        .max_retries(retries)
        .first_byte_timeout(first_byte)
        .build()
        .unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::system("Be brief."), Message::user(text)])
}

async fn stream_all(
    client: &OpenAiClient,
    request: ChatRequest,
) -> (Vec<String>, Option<LlmError>) {
    let mut texts = Vec::new();
    let mut stream = match client.stream_chat(request).await {
        Ok(stream) => stream,
        Err(error) => return (texts, Some(error)),
    };
    while let Some(item) = tokio::time::timeout(WAIT, stream.next()).await.unwrap() {
        match item {
            Ok(StreamItem::Text(text)) if !text.is_empty() => texts.push(text),
            Ok(_) => {}
            Err(error) => return (texts, Some(error)),
        }
    }
    (texts, None)
}

fn outcomes(running: &RunningMockLlm) -> Vec<String> {
    running
        .mock()
        .requests()
        .into_iter()
        .map(|r| r.outcome)
        .collect()
}

#[tokio::test]
async fn a_marker_picks_a_500_or_429_for_that_request_only() {
    let running = start().await;
    let llm = client(&running, 1, WAIT);
    let (texts, error) = stream_all(&llm, ask("hello [[mock:500]]")).await;
    assert!(texts.is_empty());
    assert!(
        matches!(
            error,
            Some(LlmError::Api {
                status: Some(500),
                ..
            })
        ),
        "{error:?}"
    );
    let (_, error) = stream_all(&llm, ask("[[mock:429]] again")).await;
    match error {
        Some(LlmError::Api {
            status: Some(429),
            message,
            ..
        }) => assert!(message.contains("Rate limit"), "{message}"),
        other => panic!("expected a 429, got {other:?}"),
    }
    // A request without a marker is answered by the script.
    let (texts, error) = stream_all(&llm, ask("hello")).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(texts.len(), 6);
    // Errors before the first byte are retried once (max_retries 1), then reported.
    assert_eq!(
        outcomes(&running),
        ["http_500", "http_500", "http_429", "http_429", "completed"]
    );
}

#[tokio::test]
async fn a_cut_marker_breaks_the_stream_mid_way_and_is_not_retried() {
    let running = start().await;
    let llm = client(&running, 2, WAIT);
    let (texts, error) = stream_all(&llm, ask("tell me [[mock:cut]]")).await;
    assert!(matches!(error, Some(LlmError::StreamCut(_))), "{error:?}");
    // Some of the six pieces arrived, not all.
    assert!(!texts.is_empty() && texts.len() < 6, "{texts:?}");
    assert!(running.mock().wait_settled(WAIT).await);
    let outcomes = outcomes(&running);
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert!(
        outcomes[0].starts_with("cut_by_script_after_"),
        "{outcomes:?}"
    );

    let (texts, _) = stream_all(&llm, ask("[[mock:cut:2]]")).await;
    assert_eq!(texts, ["tok0 "], "the role delta, then one piece");
}

/// Sends a streaming completion request with `x-mock-fault: <fault>` over raw HTTP/1.1.
async fn send_with_header(running: &RunningMockLlm, fault: &str) -> TcpStream {
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut socket = TcpStream::connect(running.addr()).await.unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\n\
         {}: {fault}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        crewline_testkit::mock_llm::FAULT_HEADER,
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    socket
}

#[tokio::test]
async fn the_header_picks_a_fault_too_and_a_stall_sends_nothing() {
    let running = start().await;
    let mut stalled = send_with_header(&running, "stall:5000").await;
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(300), stalled.read(&mut byte)).await;
    assert!(read.is_err(), "a stalled request must send no byte");

    let mut failed = send_with_header(&running, "500").await;
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, failed.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    assert!(text.starts_with("HTTP/1.1 500"), "{text}");

    // The stalled one is still pending; the failed one is recorded.
    let outcomes = outcomes(&running);
    assert_eq!(outcomes, ["pending", "http_500"]);
    // Unmarked requests through the client stream normally.
    let (texts, error) = stream_all(&client(&running, 0, WAIT), ask("hello")).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(texts.len(), 6);
}
