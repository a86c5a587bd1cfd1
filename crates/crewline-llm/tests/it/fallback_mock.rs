//! `FallbackLlm` end to end over the mock model, through the default client and the
//! async-openai one: a refused port, a 503, a stream cut after half a tool call, a provider
//! that never answers (first-byte timeout and hedging, the loser's connection closed), a
//! stream cut after spoken text (continued without a repeat), the breaker and the retry
//! budget.
#![allow(clippy::unwrap_used)] // A test fails loudly on what it did not expect.

use std::{sync::Arc, time::Duration};

use crewline_core::{Message, ToolCall};
use crewline_llm::{
    AfterText, BreakerConfig, ChatRequest, FallbackLlm, Hedge, LlmClient, LlmError, OpenAiClient,
    RetryBudget, StreamItem, collect,
};
use crewline_testkit::mock_llm::{
    MockLlm, RunningMockLlm,
    raw::{After, RawReply},
};
use serde_json::json;

/// Generous upper bound for anything that should happen "at once" on a loaded CI machine.
const PROMPTLY: Duration = Duration::from_secs(5);

/// Which client reaches each provider.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Default,
    #[cfg(feature = "async-openai")]
    AsyncOpenAi,
}

const KINDS: &[Kind] = &[
    Kind::Default,
    #[cfg(feature = "async-openai")]
    Kind::AsyncOpenAi,
];

fn client(kind: Kind, base_url: &str) -> Arc<dyn LlmClient> {
    match kind {
        Kind::Default => Arc::new(
            OpenAiClient::builder()
                .model("mock")
                .base_url(base_url)
                .api_key("sk-test")
                .read_env(false)
                // The fallback client fails over instead.
                .max_retries(0)
                .build()
                .expect("client"),
        ),
        #[cfg(feature = "async-openai")]
        Kind::AsyncOpenAi => {
            use async_openai::config::OpenAIConfig;
            let config = OpenAIConfig::new()
                .with_api_base(base_url)
                .with_api_key("sk-test");
            // As a provider of a fallback is built: bounded, `Retry-After` kept, no retries.
            Arc::new(crewline_llm::AsyncOpenAiClient::new(
                crewline_llm::AsyncOpenAiClient::provider_client(config, reqwest::Client::new()),
                "mock",
            ))
        }
    }
}

/// A base URL where nothing listens.
async fn refused_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/v1")
}

async fn raw(replies: Vec<RawReply>) -> RunningMockLlm {
    MockLlm::raw(replies).start().await.expect("mock")
}

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

#[tokio::test]
async fn a_refused_port_fails_over_on_both_clients() {
    for &kind in KINDS {
        let backup = raw(vec![says("Done.")]).await;
        let llm = FallbackLlm::builder()
            .provider("down", client(kind, &refused_url().await))
            .provider("backup", client(kind, &backup.base_url()))
            .build()
            .unwrap();
        let answer = collect(llm.stream_chat(ask()).await.unwrap())
            .await
            .unwrap();
        assert_eq!(answer.content, "Done.", "{kind:?}");
        assert_eq!(answer.provider.as_deref(), Some("backup"), "{kind:?}");
        assert_eq!(llm.stats()[0].failovers, 1, "{kind:?}");
    }
}

#[tokio::test]
async fn a_503_fails_over_on_both_clients() {
    for &kind in KINDS {
        let down = raw(vec![RawReply::Status(
            503,
            r#"{"error": {"message": "overloaded"}}"#.into(),
        )])
        .await;
        let backup = raw(vec![says("Done.")]).await;
        let llm = FallbackLlm::builder()
            .provider("down", client(kind, &down.base_url()))
            .provider("backup", client(kind, &backup.base_url()))
            .build()
            .unwrap();
        let answer = collect(llm.stream_chat(ask()).await.unwrap())
            .await
            .unwrap();
        assert_eq!(answer.content, "Done.", "{kind:?}");
        // Neither client retries it itself (`max_retries(0)`; `provider_client` has no retry
        // layer): the fallback, not a provider's own backoff, decides what happens next.
        assert_eq!(down.mock().request_count(), 1, "{kind:?}");
    }
}

#[tokio::test]
async fn half_a_tool_call_then_a_cut_never_reaches_the_caller_on_both_clients() {
    for &kind in KINDS {
        let broken = raw(vec![RawReply::chunks(
            &[json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": 0, "id": "call_half", "type": "function",
                "function": {"name": "send_money", "arguments": "{\"to\": \"Bob\", \"amount\": 1"}
            }]}}]})],
            After::Cut,
        )])
        .await;
        let backup = raw(vec![RawReply::chunks(
            &[
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
                    "index": 0, "id": "call_whole", "type": "function",
                    "function": {"name": "send_money", "arguments": "{\"to\": \"Bob\", \"amount\": 100}"}
                }]}}]}),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            ],
            After::Done,
        )])
        .await;
        let llm = FallbackLlm::builder()
            .provider("broken", client(kind, &broken.base_url()))
            .provider("backup", client(kind, &backup.base_url()))
            .build()
            .unwrap();
        let mut stream = llm.stream_chat(ask()).await.unwrap();
        let mut calls = Vec::new();
        while let Some(item) = futures::StreamExt::next(&mut stream).await {
            if let StreamItem::ToolCalls(batch) = item.unwrap() {
                calls.extend(batch);
            }
        }
        assert_eq!(
            calls,
            vec![ToolCall::new(
                "call_whole",
                "send_money",
                r#"{"to": "Bob", "amount": 100}"#
            )],
            "{kind:?}"
        );
    }
}

#[tokio::test]
async fn a_provider_that_never_answers_is_cut_at_the_first_byte_timeout_on_both_clients() {
    for &kind in KINDS {
        let stalled = raw(vec![RawReply::StallBeforeHeaders]).await;
        let backup = raw(vec![says("Done.")]).await;
        let llm = FallbackLlm::builder()
            .provider("stalled", client(kind, &stalled.base_url()))
            .provider("backup", client(kind, &backup.base_url()))
            // The limit is the backup's too: long enough for its first byte on a loaded
            // two-core CI machine (300 ms was not).
            .first_byte_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let answer = collect(llm.stream_chat(ask()).await.unwrap())
            .await
            .unwrap();
        assert_eq!(answer.content, "Done.", "{kind:?}");
        assert!(
            stalled.mock().disconnected_within(PROMPTLY).await,
            "{kind:?}: the stalled request's connection is closed"
        );
    }
}

#[tokio::test]
async fn a_hedge_wins_over_a_stalled_provider_whose_connection_is_closed() {
    for &kind in KINDS {
        let stalled = raw(vec![RawReply::StallBeforeHeaders]).await;
        let backup = raw(vec![says("Done.")]).await;
        let llm = FallbackLlm::builder()
            .provider("stalled", client(kind, &stalled.base_url()))
            .provider("backup", client(kind, &backup.base_url()))
            .hedge(Hedge::Fixed(Duration::from_millis(100)))
            .build()
            .unwrap();
        let answer = collect(llm.stream_chat(ask()).await.unwrap())
            .await
            .unwrap();
        assert_eq!(answer.content, "Done.", "{kind:?}");
        assert_eq!(answer.provider.as_deref(), Some("backup"));
        assert!(
            stalled.mock().disconnected_within(PROMPTLY).await,
            "{kind:?}: the loser's connection is closed"
        );
        let stats = llm.stats();
        assert_eq!(
            (stats[1].hedges_won, stats[0].cancelled),
            (1, 1),
            "{kind:?}"
        );
    }
}

#[tokio::test]
async fn a_stream_cut_after_text_is_continued_without_a_repeat_on_both_clients() {
    for &kind in KINDS {
        let cut = raw(vec![RawReply::chunks(
            &[json!({"choices": [{"index": 0, "delta": {"content": "Your transfer "}}]})],
            After::Cut,
        )])
        .await;
        // The next provider starts over with what was already said: it is not said twice.
        let backup = raw(vec![says("Your transfer is booked.")]).await;
        let llm = FallbackLlm::builder()
            .provider("cut", client(kind, &cut.base_url()))
            .provider("backup", client(kind, &backup.base_url()))
            .after_text(AfterText::Continue)
            .build()
            .unwrap();
        let answer = collect(llm.stream_chat(ask()).await.unwrap())
            .await
            .unwrap();
        assert_eq!(answer.content, "Your transfer is booked.", "{kind:?}");
        let asked = backup.mock().raw_requests();
        let messages = asked[0].body["messages"].as_array().unwrap();
        let spoken = &messages[messages.len() - 2];
        assert_eq!(
            (spoken["role"].as_str(), spoken["content"].as_str()),
            (Some("assistant"), Some("Your transfer ")),
            "{kind:?}: the next provider is told what was said"
        );
    }
}

#[tokio::test]
async fn the_breaker_skips_a_dead_provider_on_both_clients() {
    for &kind in KINDS {
        let backup = raw((0..5).map(|_| says("Done.")).collect()).await;
        let llm = FallbackLlm::builder()
            .provider("down", client(kind, &refused_url().await))
            .provider("backup", client(kind, &backup.base_url()))
            .breaker(BreakerConfig {
                consecutive_failures: 2,
                cool_down: Duration::from_secs(60),
                ..BreakerConfig::default()
            })
            .build()
            .unwrap();
        for _ in 0..5 {
            let answer = collect(llm.stream_chat(ask()).await.unwrap())
                .await
                .unwrap();
            assert_eq!(answer.content, "Done.", "{kind:?}");
        }
        let stats = llm.stats();
        assert_eq!(
            (stats[0].requests, stats[0].skipped),
            (2, 3),
            "{kind:?}: asked until its circuit opened, then skipped"
        );
    }
}

#[tokio::test]
async fn the_retry_budget_ends_turns_past_its_share_on_both_clients() {
    for &kind in KINDS {
        let backup = raw(vec![says("Done.")]).await;
        let llm = FallbackLlm::builder()
            .provider("down", client(kind, &refused_url().await))
            .provider("backup", client(kind, &backup.base_url()))
            .breaker(BreakerConfig::disabled())
            .retry_budget(RetryBudget {
                ratio: 0.0,
                min_retries: 1,
                window: Duration::from_secs(60),
            })
            .build()
            .unwrap();
        let first = collect(llm.stream_chat(ask()).await.unwrap()).await;
        assert_eq!(first.unwrap().content, "Done.", "{kind:?}");
        // The budget allowed one failover: the next turn ends with the dead provider's error.
        let second = llm.stream_chat(ask()).await.map(|_| ());
        assert!(
            matches!(second, Err(LlmError::Connect(_))),
            "{kind:?}: {second:?}"
        );
        assert_eq!(backup.mock().request_count(), 1, "{kind:?}");
    }
}
