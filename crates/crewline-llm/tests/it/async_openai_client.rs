//! `AsyncOpenAiClient`'s own behaviour: the team's async-openai configuration (Azure's URL,
//! `api-version` and `api-key`, custom headers) is what reaches the server, the body is the
//! default client's, and where async-openai's HTTP layer differs (error bodies it cannot read)
//! the kind stays the same. What both clients do alike is in `conformance.rs`.
#![cfg(feature = "async-openai")]

use async_openai::{
    Client,
    config::{AzureConfig, OpenAIConfig},
};
use crewline_core::{Message, ToolDefinition};
use crewline_llm::{
    AsyncOpenAiClient, ChatRequest, FinishReason, LlmClient, LlmError, OpenAiClient,
    RequestOptions, StreamItem, ToolChoice,
};
use crewline_testkit::mock_llm::{
    MockLlm, RunningMockLlm,
    raw::{After, FLOOD_LIMIT, RawReply as Reply},
};
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;

/// Generous upper bound for anything that should happen "at once" on a loaded CI machine.
const PROMPTLY: Duration = Duration::from_secs(5);

const KEY: &str = "sk-test-0123456789";

/// The one mock model in raw mode, answering with `replies` in order, on 127.0.0.1.
async fn serve(replies: Vec<Reply>) -> std::io::Result<RunningMockLlm> {
    MockLlm::raw(replies).start().await
}

fn hi_then_stop() -> Reply {
    Reply::chunks(
        &[
            json!({"choices": [{"index": 0, "delta": {"content": "Hi"}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ],
        After::Done,
    )
}

async fn items(client: &impl LlmClient, request: ChatRequest) -> Vec<StreamItem> {
    client
        .stream_chat(request)
        .await
        .expect("stream")
        .map(|item| item.expect("no error"))
        .collect()
        .await
}

#[tokio::test]
async fn an_azure_client_calls_its_deployment_with_its_version_and_key() {
    let server = serve(vec![hi_then_stop()])
        .await
        .expect("the mock model binds 127.0.0.1");
    let base = server.base_url();
    let azure = AzureConfig::new()
        .with_api_base(base.trim_end_matches("/v1"))
        .with_deployment_id("voice-gpt")
        .with_api_version("2024-10-21")
        .with_api_key(KEY);
    let client = AsyncOpenAiClient::new(Client::with_config(azure), "gpt-4o-mini");

    let answer = items(&client, ChatRequest::new(vec![Message::user("Hello?")])).await;

    assert_eq!(
        answer,
        vec![
            StreamItem::Text("Hi".into()),
            StreamItem::Finish(FinishReason::Stop)
        ]
    );
    let request = &server.mock().raw_requests()[0];
    assert_eq!(
        request.path,
        "/openai/deployments/voice-gpt/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(
        request.headers.get("api-key").map(String::as_str),
        Some(KEY)
    );
    assert!(
        !request.headers.contains_key("authorization"),
        "{request:?}"
    );
    assert!(!format!("{client:?}").contains(KEY));
}

#[tokio::test]
async fn the_teams_headers_reach_the_server() {
    let server = serve(vec![hi_then_stop()])
        .await
        .expect("the mock model binds 127.0.0.1");
    let config = OpenAIConfig::new()
        .with_api_base(server.base_url())
        .with_api_key(KEY)
        .with_header("x-team-proxy", "voice")
        .expect("a header");
    let client = AsyncOpenAiClient::new(Client::with_config(config), "gpt-test");

    items(&client, ChatRequest::new(vec![Message::user("Hello?")])).await;

    let request = &server.mock().raw_requests()[0];
    assert_eq!(
        request.headers.get("x-team-proxy").map(String::as_str),
        Some("voice")
    );
    assert_eq!(
        request.headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {KEY}").as_str())
    );
}

#[tokio::test]
async fn the_body_sent_is_the_default_clients() {
    let server = serve(vec![hi_then_stop(), hi_then_stop()])
        .await
        .expect("the mock model binds 127.0.0.1");
    let defaults = RequestOptions {
        temperature: Some(0.3),
        ..RequestOptions::default()
    };
    let default_client = OpenAiClient::builder()
        .model("gpt-test")
        .api_key(KEY)
        .base_url(server.base_url())
        .temperature(0.3)
        .read_env(false)
        .build()
        .expect("client");
    let config = OpenAIConfig::new()
        .with_api_base(server.base_url())
        .with_api_key(KEY);
    let client =
        AsyncOpenAiClient::new(Client::with_config(config), "gpt-test").with_defaults(defaults);
    let mut extra = serde_json::Map::new();
    extra.insert("seed".into(), json!(7));
    let request = ChatRequest::new(vec![Message::system("Be brief."), Message::user("Hi")])
        .with_tools(vec![ToolDefinition::new(
            "hang_up",
            "Ends the call.",
            json!({"type": "object", "properties": {}}),
        )])
        .with_tool_choice(ToolChoice::Auto)
        .with_options(RequestOptions {
            max_tokens: Some(64),
            extra,
            ..RequestOptions::default()
        });

    items(&default_client, request.clone()).await;
    items(&client, request).await;

    let requests = server.mock().raw_requests();
    assert_eq!(requests[0].body, requests[1].body);
    assert_eq!(requests[1].body["stream"], true);
    assert_eq!(requests[1].body["stream_options"]["include_usage"], true);
    assert_eq!(requests[1].body["seed"], 7);
    assert_eq!(requests[1].path, "/v1/chat/completions");
}

#[tokio::test]
async fn an_error_body_async_openai_cannot_read_is_still_an_api_error_with_its_message() {
    // vLLM's shape (no `error` wrapper, a numeric `code`): async-openai drops the status of
    // an error answer it cannot read, so only the message is left (the default client keeps
    // both).
    let server = serve(vec![Reply::Status(
        400,
        r#"{"object":"error","message":"This model's maximum context length is 4096 tokens","type":"BadRequestError","param":null,"code":400}"#
            .into(),
    )])
    .await
    .expect("the mock model binds 127.0.0.1");
    let config = OpenAIConfig::new()
        .with_api_base(server.base_url())
        .with_api_key(KEY);
    let client = AsyncOpenAiClient::new(Client::with_config(config), "gpt-test");

    let err = client
        .stream_chat(ChatRequest::new(vec![Message::user("Hello?")]))
        .await
        .err()
        .expect("an error");

    assert!(
        matches!(&err, LlmError::Api { status: None, message, .. } if message.contains("maximum context length")),
        "{err:?}"
    );
    assert_eq!(server.mock().request_count(), 1);
}

#[tokio::test]
async fn a_model_set_per_request_wins_over_the_clients() {
    let server = serve(vec![hi_then_stop()])
        .await
        .expect("the mock model binds 127.0.0.1");
    let config = OpenAIConfig::new()
        .with_api_base(server.base_url())
        .with_api_key(KEY);
    let client = AsyncOpenAiClient::new(Client::with_config(config), "gpt-test");
    let request = ChatRequest::new(vec![Message::user("Hello?")]).with_options(RequestOptions {
        model: Some("per-request".into()),
        ..RequestOptions::default()
    });

    items(&client, request).await;

    let body: &Value = &server.mock().raw_requests()[0].body;
    assert_eq!(body["model"], "per-request");
}

#[tokio::test]
async fn a_whole_answers_error_body_async_openai_cannot_read_is_an_api_error_too() {
    let server = serve(vec![Reply::Status(
        400,
        r#"{"object":"error","message":"Unknown model mock-7b","type":"BadRequestError","code":400}"#
            .into(),
    )])
    .await
    .expect("the mock model binds 127.0.0.1");
    let config = OpenAIConfig::new()
        .with_api_base(server.base_url())
        .with_api_key(KEY);
    let client = AsyncOpenAiClient::new(Client::with_config(config), "gpt-test");

    let err = client
        .chat(ChatRequest::new(vec![Message::user("Hello?")]))
        .await
        .expect_err("an error");

    assert!(
        matches!(&err, LlmError::Api { status: None, message, .. } if message == "Unknown model mock-7b"),
        "{err:?}"
    );
}

/// A client for `server` built with [`AsyncOpenAiClient::bounded_client`].
fn bounded(server: &RunningMockLlm) -> AsyncOpenAiClient<OpenAIConfig> {
    let config = OpenAIConfig::new()
        .with_api_base(server.base_url())
        .with_api_key(KEY);
    AsyncOpenAiClient::new(
        AsyncOpenAiClient::bounded_client(config, reqwest::Client::new()),
        "gpt-test",
    )
}

#[tokio::test]
async fn a_huge_error_body_is_read_only_to_the_limit_by_a_bounded_client() {
    // Issue 30: a 400 whose body says 1 GiB took a plain async-openai client to 3.1 GiB and
    // logged the body in one ERROR line. The mock stops at 64 MiB.
    let server = serve(vec![Reply::EndlessStatus(
        400,
        r#"{"error": {"message": ""#.into(),
    )])
    .await
    .expect("the mock model binds 127.0.0.1");
    let client = bounded(&server);

    let err = tokio::time::timeout(
        Duration::from_secs(20),
        client.stream_chat(ChatRequest::new(vec![Message::user("Hello?")])),
    )
    .await
    .expect("answered at once")
    .err()
    .expect("an error");

    assert!(
        matches!(&err, LlmError::Api { message, .. } if message.len() <= 2_100),
        "{}",
        crewline_llm_error_head(&err)
    );
    assert!(server.mock().disconnected_within(PROMPTLY).await);
    assert!(
        server.mock().flooded() < FLOOD_LIMIT / 2,
        "async-openai read {} bytes of the body",
        server.mock().flooded()
    );
}

#[tokio::test]
async fn an_endless_line_is_too_large_at_the_limit_for_a_bounded_client() {
    let first = json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]});
    let server = serve(vec![Reply::EndlessLine(vec![first.to_string()])])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = bounded(&server);

    let stream = client
        .stream_chat(ChatRequest::new(vec![Message::user("Hello?")]))
        .await
        .expect("stream");
    let items: Vec<_> = tokio::time::timeout(Duration::from_secs(20), stream.collect())
        .await
        .expect("the stream ends");

    assert!(
        matches!(&items[..], [Ok(StreamItem::Text(t)), Err(LlmError::TooLarge { what: "a line of the stream", limit })]
            if t == "Hel" && *limit == 4 << 20),
        "{items:?}"
    );
    assert!(server.mock().disconnected_within(PROMPTLY).await);
    assert!(
        server.mock().flooded() < FLOOD_LIMIT / 2,
        "async-openai read {} bytes of the line",
        server.mock().flooded()
    );
}

/// The start of an error's text, for a failed assertion's message.
fn crewline_llm_error_head(error: &LlmError) -> String {
    error.to_string().chars().take(300).collect()
}
