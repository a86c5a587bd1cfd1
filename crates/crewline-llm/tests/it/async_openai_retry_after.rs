//! The async-openai client against the mock model's `429:SECS` and `503:SECS` faults: the
//! server's `Retry-After` reaches `LlmError::Api` as the default client reports it, a
//! provider's client makes one request (no retries of its own), and a `FallbackLlm` skips the
//! rate-limited provider for the server's pause, not its default one.
#![cfg(feature = "async-openai")]
#![allow(clippy::unwrap_used)] // A test fails loudly on what it did not expect.

use std::{sync::Arc, time::Duration};

use async_openai::config::OpenAIConfig;
use crewline_core::Message;
use crewline_llm::{AsyncOpenAiClient, ChatRequest, FallbackLlm, LlmClient, LlmError, collect};
use crewline_testkit::mock_llm::{
    Fault, MockLlm, RunningMockLlm, Script,
    raw::{After, RawReply},
};
use serde_json::json;

fn says(text: &str) -> RawReply {
    RawReply::chunks(
        &[
            json!({"choices": [{"index": 0, "delta": {"content": text}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ],
        After::Done,
    )
}

fn ask() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Send 100 to Bob.")])
}

/// A mock model failing every request with `fault`.
async fn failing(fault: &str) -> RunningMockLlm {
    // Faults apply to scripted mocks (a raw one sends its replies as they are).
    let mock = MockLlm::new(Script::text(1, Duration::ZERO))
        .start()
        .await
        .unwrap();
    mock.set_fault(Some(Fault::parse(fault).unwrap()));
    mock
}

fn provider(base_url: &str) -> Arc<dyn LlmClient> {
    let config = OpenAIConfig::new()
        .with_api_base(base_url)
        .with_api_key("sk-test");
    let client = AsyncOpenAiClient::provider_client(config, reqwest::Client::new());
    Arc::new(AsyncOpenAiClient::new(client, "mock"))
}

#[tokio::test]
async fn a_429_or_503_carries_the_servers_retry_after_and_is_asked_once() {
    for (fault, status) in [("429:7", 429), ("503:3", 503)] {
        let mock = failing(fault).await;
        let error = match provider(&mock.base_url()).stream_chat(ask()).await {
            Ok(_) => panic!("{fault}: answered"),
            Err(error) => error,
        };
        let secs = fault.split_once(':').unwrap().1.parse().unwrap();
        match &error {
            LlmError::Api {
                status: got,
                retry_after,
                ..
            } => {
                assert_eq!(*got, Some(status), "{fault}: {error}");
                assert_eq!(*retry_after, Some(Duration::from_secs(secs)), "{fault}");
            }
            other => panic!("{fault}: not an API error: {other:?}"),
        }
        assert_eq!(error.retry_after(), Some(Duration::from_secs(secs)));
        // No retry layer: the fallback, not async-openai, decides what happens next.
        assert_eq!(mock.mock().request_count(), 1, "{fault}");
    }
}

#[tokio::test]
async fn the_bounded_client_keeps_retry_after_too() {
    // A status with a `Retry-After` that async-openai's retry layer does not retry (a 4xx
    // other than 429), so the test waits on no backoff.
    let mock = failing("404:9").await;
    let config = OpenAIConfig::new()
        .with_api_base(mock.base_url())
        .with_api_key("sk-test");
    let client = AsyncOpenAiClient::bounded_client(config, reqwest::Client::new());
    let error = match AsyncOpenAiClient::new(client, "mock")
        .stream_chat(ask())
        .await
    {
        Ok(_) => panic!("answered"),
        Err(error) => error,
    };
    assert_eq!(error.retry_after(), Some(Duration::from_secs(9)), "{error}");
    assert!(
        matches!(
            error,
            LlmError::Api {
                status: Some(404),
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_fallback_skips_a_rate_limited_async_openai_provider_for_its_retry_after() {
    let limited = failing("429:30").await;
    let backup = MockLlm::raw(vec![says("Done."), says("Again.")])
        .start()
        .await
        .unwrap();
    let llm = FallbackLlm::builder()
        .provider("limited", provider(&limited.base_url()))
        .provider("backup", provider(&backup.base_url()))
        // Far shorter than the server's 30 s: a second turn that skips the provider shows the
        // server's pause was honoured, not this one.
        .rate_limit_pause(Duration::from_millis(1))
        .build()
        .unwrap();
    let first = collect(llm.stream_chat(ask()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(first.content, "Done.");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = collect(llm.stream_chat(ask()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(second.content, "Again.");
    assert_eq!(
        limited.mock().request_count(),
        1,
        "skipped for its Retry-After"
    );
    assert_eq!(llm.stats()[0].skipped, 1);
}
