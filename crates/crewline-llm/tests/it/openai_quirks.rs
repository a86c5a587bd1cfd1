//! `OpenAiClient` and the differences between providers: typed request settings, the
//! token-limit field, servers that refuse `stream_options`, reasoning deltas.

use std::time::Duration;

use crewline_core::{Message, ToolDefinition};
use crewline_llm::{
    ChatRequest, JsonSchemaFormat, LlmClient, LlmError, LlmStream, MaxTokensField, OpenAiClient,
    OpenAiClientBuilder, RequestOptions, ResponseFormat, StreamItem, ToolChoice, Usage,
};
use crewline_testkit::mock_llm::{
    MockLlm, RunningMockLlm,
    raw::{After, RawReply as Reply},
};
use futures::StreamExt;
use serde_json::{Value, json};

fn client_for(server: &RunningMockLlm) -> OpenAiClientBuilder {
    OpenAiClient::builder()
        .model("gpt-test")
        .api_key("sk-test")
        .base_url(server.base_url())
        .read_env(false)
        .max_retries(0)
}

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Hello?")])
}

fn weather_tool() -> ToolDefinition {
    ToolDefinition::new(
        "get_weather",
        "Weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )
}

fn text_answer() -> Reply {
    Reply::chunks(
        &[
            json!({"choices": [{"index": 0, "delta": {"content": "Hi"}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ],
        After::Done,
    )
}

async fn drain(stream: LlmStream) -> Vec<Result<StreamItem, LlmError>> {
    tokio::time::timeout(Duration::from_secs(20), stream.collect::<Vec<_>>())
        .await
        .expect("the stream ends")
}

/// The bodies the server was sent, in order.
fn bodies(server: &RunningMockLlm) -> Vec<Value> {
    server
        .mock()
        .raw_requests()
        .into_iter()
        .map(|r| r.body)
        .collect()
}

#[tokio::test]
async fn typed_settings_go_in_the_body() {
    let server = MockLlm::raw(vec![text_answer()])
        .start()
        .await
        .expect("the mock binds");
    let client = client_for(&server)
        .max_tokens(300)
        .max_tokens_field(MaxTokensField::MaxCompletionTokens)
        .defaults(RequestOptions {
            user: Some("caller-42".into()),
            seed: Some(1),
            ..RequestOptions::default()
        })
        .build()
        .expect("client");
    let metadata = [("call_id".to_owned(), json!("c-1"))].into_iter().collect();
    let request = hello()
        .with_tools(vec![weather_tool()])
        .with_tool_choice(ToolChoice::Function("get_weather".into()))
        .with_options(RequestOptions {
            parallel_tool_calls: Some(false),
            response_format: Some(ResponseFormat::JsonSchema {
                json_schema: JsonSchemaFormat {
                    name: "answer".into(),
                    description: None,
                    schema: json!({"type": "object"}),
                    strict: Some(true),
                },
            }),
            seed: Some(7),
            metadata: Some(metadata),
            ..RequestOptions::default()
        });

    drain(client.stream_chat(request).await.expect("stream")).await;

    assert_eq!(
        bodies(&server),
        [json!({
            "model": "gpt-test",
            "messages": [{"role": "user", "content": "Hello?"}],
            "tools": [weather_tool().to_openai()],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": false,
            "max_completion_tokens": 300,
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "answer", "schema": {"type": "object"}, "strict": true
            }},
            "seed": 7,
            "user": "caller-42",
            "metadata": {"call_id": "c-1"},
            "stream": true,
            "stream_options": {"include_usage": true}
        })]
    );
}

#[tokio::test]
async fn parallel_tool_calls_is_not_sent_without_tools() {
    let server = MockLlm::raw(vec![Reply::Json(json!({
        "choices": [{"message": {"content": "Hi"}, "finish_reason": "stop"}]
    }))])
    .start()
    .await
    .expect("the mock binds");
    let client = client_for(&server)
        .max_tokens(50)
        .defaults(RequestOptions {
            parallel_tool_calls: Some(true),
            response_format: Some(ResponseFormat::JsonObject),
            ..RequestOptions::default()
        })
        .build()
        .expect("client");

    client.chat(hello()).await.expect("answer");

    assert_eq!(
        bodies(&server),
        [json!({
            "model": "gpt-test",
            "messages": [{"role": "user", "content": "Hello?"}],
            "max_tokens": 50,
            "response_format": {"type": "json_object"},
            "stream": false
        })]
    );
}

// The refusals both clients work around (`stream_options`, the token field) are in
// tests/it/conformance.rs, run on both.

#[tokio::test]
async fn stream_usage_off_never_sends_stream_options() {
    let server = MockLlm::raw(vec![text_answer(), text_answer()])
        .start()
        .await
        .expect("the mock binds");
    let client = client_for(&server)
        .stream_usage(false)
        .build()
        .expect("client");

    drain(client.stream_chat(hello()).await.expect("stream")).await;
    let per_request = hello().with_options(RequestOptions {
        stream_usage: Some(false),
        ..RequestOptions::default()
    });
    let default_client = client_for(&server).build().expect("client");
    drain(
        default_client
            .stream_chat(per_request)
            .await
            .expect("stream"),
    )
    .await;

    assert_eq!(server.mock().raw_requests().len(), 2);
    assert!(
        bodies(&server)
            .iter()
            .all(|body| body.get("stream_options").is_none())
    );
}

#[tokio::test]
async fn other_refusals_are_not_retried() {
    let server =
        MockLlm::raw_fn(|_| Reply::Status(400, r#"{"error":{"message":"invalid model"}}"#.into()))
            .start()
            .await
            .expect("the mock binds");
    let client = client_for(&server).build().expect("client");

    let error = client.stream_chat(hello()).await.err();

    assert!(matches!(
        error,
        Some(LlmError::Api {
            status: Some(400),
            ..
        })
    ));
    assert_eq!(server.mock().raw_requests().len(), 1);
}

#[tokio::test]
async fn reasoning_deltas_are_their_own_items_and_counted_in_usage() {
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 30, "total_tokens": 40,
                       "completion_tokens_details": {"reasoning_tokens": 22}});
    let server = MockLlm::raw(vec![Reply::chunks(
        &[
            // DeepSeek and vLLM: `reasoning_content`, with `content: null` while thinking.
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "reasoning_content": "Paris is "}}]}),
            // OpenRouter: `reasoning`.
            json!({"choices": [{"index": 0, "delta": {"content": "", "reasoning": "in France."}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Sunny.", "reasoning_content": null}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": usage}),
        ],
        After::Done,
    )])
    .start()
    .await
    .expect("the mock binds");
    let client = client_for(&server).build().expect("client");

    let items: Vec<StreamItem> = drain(client.stream_chat(hello()).await.expect("stream"))
        .await
        .into_iter()
        .map(|item| item.expect("no error"))
        .collect();

    assert_eq!(
        items,
        [
            StreamItem::Reasoning("Paris is ".into()),
            StreamItem::Reasoning("in France.".into()),
            StreamItem::Text("Sunny.".into()),
            StreamItem::Finish(crewline_llm::FinishReason::Stop),
            StreamItem::Usage(Usage {
                prompt_tokens: 10,
                completion_tokens: 30,
                total_tokens: 40,
                reasoning_tokens: 22,
                cached_tokens: 0,
            }),
        ]
    );
}

#[tokio::test]
async fn a_whole_answer_keeps_its_reasoning_out_of_the_content() {
    let server = MockLlm::raw(vec![Reply::Json(json!({
        "choices": [{"message": {"content": "Sunny.", "reasoning_content": "Paris, so..."},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2,
                  "completion_tokens_details": {"reasoning_tokens": 1.0}}
    }))])
    .start()
    .await
    .expect("the mock binds");
    let client = client_for(&server).build().expect("client");

    let answer = client.chat(hello()).await.expect("answer");

    assert_eq!(answer.content, "Sunny.");
    assert_eq!(answer.reasoning, "Paris, so...");
    assert_eq!(answer.usage.map(|u| u.reasoning_tokens), Some(1));
}

#[tokio::test]
async fn azure_deployments_get_their_url_key_header_and_content_filter_fields() {
    let filters = json!({"hate": {"filtered": false, "severity": "safe"},
                         "violence": {"filtered": false, "severity": "safe"}});
    let server = MockLlm::raw(vec![Reply::chunks(
        &[
            // Azure's first chunk: no choices, the prompt's filter results.
            json!({"choices": [], "created": 0, "id": "", "model": "", "object": "",
                   "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": filters}]}),
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "content_filter_results": {}, "finish_reason": null}],
                   "created": 1717000000, "id": "chatcmpl-1", "model": "gpt-4o",
                   "object": "chat.completion.chunk", "system_fingerprint": "fp_1"}),
            json!({"choices": [{"index": 0, "delta": {"content": "Sunny"},
                                "content_filter_results": filters, "finish_reason": null}]}),
            // The filter stopped the answer.
            json!({"choices": [{"index": 0, "delta": {}, "content_filter_results": filters,
                                "finish_reason": "content_filter"}]}),
        ],
        After::Done,
    )])
    .start()
    .await
    .expect("the mock binds");
    let endpoint = server.base_url().trim_end_matches("/v1").to_owned() + "/";
    let client = OpenAiClient::builder()
        .azure(endpoint, "gpt-4o-prod", "2024-10-21")
        .api_key("azure-key")
        .read_env(false)
        .build()
        .expect("client");

    let items: Vec<StreamItem> = drain(client.stream_chat(hello()).await.expect("stream"))
        .await
        .into_iter()
        .map(|item| item.expect("no error"))
        .collect();

    assert_eq!(
        items,
        [
            StreamItem::Text("Sunny".into()),
            StreamItem::Finish(crewline_llm::FinishReason::ContentFilter),
        ]
    );
    let request = &server.mock().raw_requests()[0];
    assert_eq!(
        request.path,
        "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(
        request.headers.get("api-key").map(String::as_str),
        Some("azure-key")
    );
    assert!(!request.headers.contains_key("authorization"));
    assert_eq!(request.body["model"], "gpt-4o-prod");
}
