//! `OpenAiClient` against a real local HTTP server: odd chunk shapes, tool calls, retries,
//! cuts, timeouts, size limits, cancellation and the request it sends.

use std::time::{Duration, Instant};

use crewline_core::{Message, ToolCall, ToolDefinition};
use crewline_llm::{
    ChatRequest, FinishReason, LlmClient, LlmError, LlmStream, OpenAiClient, OpenAiClientBuilder,
    RequestOptions, StreamItem, ToolChoice, Usage,
};
use crewline_testkit::mock_llm::{
    MockLlm, RunningMockLlm,
    raw::{After, FLOOD_LIMIT, RawReply as Reply},
};
use futures::StreamExt;
use serde_json::{Value, json};

/// Generous upper bound for anything that should happen "at once" on a loaded CI machine.
const PROMPTLY: Duration = Duration::from_secs(5);
/// Short limits for the timeout tests: the server stalls forever, so only the limit matters.
const SHORT: Duration = Duration::from_millis(200);

const KEY: &str = "sk-test-0123456789";

fn client_for(server: &RunningMockLlm) -> OpenAiClientBuilder {
    OpenAiClient::builder()
        .model("gpt-test")
        .api_key(KEY)
        .base_url(server.base_url())
        .read_env(false)
}

/// The one mock model in raw mode, answering with `replies` in order, on 127.0.0.1.
async fn serve(replies: Vec<Reply>) -> std::io::Result<RunningMockLlm> {
    MockLlm::raw(replies).start().await
}

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Hello?")])
}

fn content(text: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
}

fn finish(reason: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

/// Every item of a stream, errors included, with a bound on how long it may take.
async fn drain(stream: LlmStream) -> Vec<Result<StreamItem, LlmError>> {
    tokio::time::timeout(Duration::from_secs(20), stream.collect::<Vec<_>>())
        .await
        .expect("the stream ends")
}

fn oks(items: &[Result<StreamItem, LlmError>]) -> Vec<StreamItem> {
    items
        .iter()
        .map(|i| i.as_ref().expect("no error item").clone())
        .collect()
}

#[tokio::test]
async fn odd_chunk_shapes_still_yield_text_finish_and_usage() {
    let server = serve(vec![Reply::chunks(
        &[
            // No `object`, role-only delta, `finish_reason: ""`.
            json!({"choices": [{"delta": {"role": "assistant"}, "finish_reason": ""}]}),
            // Float `created`, `delta: null`.
            json!({"id": "x", "object": "chat.completion.chunk", "created": 1717000000.25,
                   "choices": [{"index": 0, "delta": null}]}),
            // `content: null`, `usage: null`.
            json!({"choices": [{"index": 0, "delta": {"content": null}}], "usage": null}),
            // No `index`, `usage: {}`.
            json!({"choices": [{"delta": {"content": "Hello"}, "finish_reason": ""}], "usage": {}}),
            // Unknown fields everywhere, another choice that does not matter.
            json!({"x_top": 1, "choices": [
                {"index": 0, "delta": {"content": ", world", "x_delta": [1]}, "logprobs": null},
                {"index": 1, "delta": {"content": "IGNORED"}}
            ]}),
            finish("stop"),
            // Usage-only chunk.
            json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}),
        ],
        After::Done,
    )])
    .await
.expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(
        oks(&items),
        vec![
            StreamItem::Text("Hello".into()),
            StreamItem::Text(", world".into()),
            StreamItem::Finish(FinishReason::Stop),
            StreamItem::Usage(Usage {
                prompt_tokens: 12,
                completion_tokens: 3,
                total_tokens: 15,
                reasoning_tokens: 0
            }),
        ]
    );
}

#[tokio::test]
async fn finished_answers_leave_the_connection_for_the_next_turn() {
    // The server sends the body's end 20 ms after `[DONE]`, in a write of its own. A client
    // that lets the body go at `[DONE]` closes the connection, and every turn pays a new
    // TCP (and, against a real provider, TLS) handshake. The next turn comes 100 ms later,
    // as when a caller speaks again.
    let answer = || Reply::chunks(&[content("Hi"), finish("stop")], After::DoneKeepAlive);
    let server = serve(vec![answer(), answer(), answer()])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    for turn in 0..3 {
        let items = drain(client.stream_chat(hello()).await.expect("stream")).await;
        assert_eq!(
            oks(&items),
            vec![
                StreamItem::Text("Hi".into()),
                StreamItem::Finish(FinishReason::Stop)
            ],
            "turn {turn}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    assert_eq!(server.mock().request_count(), 3);
    assert_eq!(
        server.mock().connections(),
        1,
        "all three turns on one connection"
    );
}

#[tokio::test]
async fn error_object_mid_stream_is_an_api_error_after_the_text() {
    let server = serve(vec![Reply::chunks(
        &[
            content("Let me"),
            json!({"error": {"message": "The model is overloaded", "type": "server_error", "code": 503}}),
            content("never seen"),
        ],
        After::Done,
    )])
    .await
.expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(
        items[0].as_ref().ok(),
        Some(&StreamItem::Text("Let me".into()))
    );
    assert!(
        matches!(&items[1], Err(LlmError::Api { status: None, message }) if message.contains("overloaded")),
        "{items:?}"
    );
    assert_eq!(server.mock().request_count(), 1);
}

#[tokio::test]
async fn tool_calls_split_over_chunks_sharing_a_chunk_and_starting_at_index_1() {
    let server = serve(vec![Reply::chunks(
        &[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
                {"index": 1, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ""}},
                {"index": 2, "id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\":"}}
            ]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": "{\"city\":"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": "\"Oslo\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 2, "function": {"arguments": "\"CET\"}"}}]}}]}),
            finish("tool_calls"),
        ],
        After::Done,
    )])
    .await
.expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(
        oks(&items),
        vec![
            StreamItem::ToolCalls(vec![
                ToolCall::new("call_a", "get_weather", r#"{"city":"Oslo"}"#),
                ToolCall::new("call_b", "get_time", r#"{"tz":"CET"}"#),
            ]),
            StreamItem::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn tool_call_deltas_without_index_and_object_arguments_are_assembled() {
    let server = serve(vec![Reply::chunks(
        &[
            json!({"choices": [{"delta": {"tool_calls": [
                {"id": "c1", "function": {"name": "lookup", "arguments": "{\"q\":"}}
            ]}}]}),
            // Neither index nor id: continues the previous call.
            json!({"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "\"x\"}"}}]}}]}),
            // A second call, arguments sent as an object.
            json!({"choices": [{"delta": {"tool_calls": [
                {"id": "c2", "function": {"name": "hang_up", "arguments": {"reason": "done"}}}
            ]}}]}),
            finish("tool_calls"),
        ],
        After::Done,
    )])
    .await
.expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let response = client
        .stream_chat(hello())
        .await
        .map(crewline_llm::collect)
        .expect("stream")
        .await
        .expect("turn");

    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("c1", "lookup", r#"{"q":"x"}"#),
            ToolCall::new("c2", "hang_up", r#"{"reason":"done"}"#),
        ]
    );
    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn rate_limit_429_is_retried_and_the_turn_succeeds() {
    let server = serve(vec![
        Reply::Status(
            429,
            r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#
                .into(),
        ),
        Reply::chunks(&[content("Hi"), finish("stop")], After::Done),
    ])
    .await
.expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(
        oks(&items),
        vec![
            StreamItem::Text("Hi".into()),
            StreamItem::Finish(FinishReason::Stop)
        ]
    );
    assert_eq!(server.mock().request_count(), 2);
}

#[tokio::test]
async fn rate_limit_429_in_other_servers_shapes_is_retried_too() {
    // vLLM writes a numeric `code`; proxies answer in plain text.
    let server = serve(vec![
        Reply::Status(
            429,
            r#"{"object":"error","message":"slow down","type":"TooManyRequests","code":429}"#
                .into(),
        ),
        Reply::Status(
            429,
            r#"{"error":{"message":"slow down","code":429}}"#.into(),
        ),
        Reply::chunks(&[content("Hi"), finish("stop")], After::Done),
    ])
    .await
    .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).max_retries(2).build().expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(items[0].as_ref().ok(), Some(&StreamItem::Text("Hi".into())));
    assert_eq!(server.mock().request_count(), 3);
}

#[tokio::test]
async fn an_exhausted_quota_429_is_not_retried() {
    let server = serve(vec![Reply::Status(
        429,
        r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#
            .into(),
    )])
    .await
.expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let err = client.stream_chat(hello()).await.err().expect("an error");

    assert!(
        matches!(&err, LlmError::Api { status: Some(429), message } if message.contains("quota")),
        "{err:?}"
    );
    assert_eq!(server.mock().request_count(), 1);
}

#[tokio::test]
async fn server_error_500_is_retried_and_the_turn_succeeds() {
    let server = serve(vec![
        Reply::Status(500, "upstream exploded".into()),
        Reply::chunks(&[content("Hi"), finish("stop")], After::Done),
    ])
    .await
    .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(items[0].as_ref().ok(), Some(&StreamItem::Text("Hi".into())));
    assert_eq!(server.mock().request_count(), 2);
}

#[tokio::test]
async fn retries_stop_after_max_retries_with_the_last_status() {
    let busy = || Reply::Status(503, r#"{"error":{"message":"busy"}}"#.into());
    let server = serve(vec![busy(), busy(), busy(), busy()])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).max_retries(2).build().expect("client");

    let err = client.stream_chat(hello()).await.err().expect("an error");

    assert!(
        matches!(&err, LlmError::Api { status: Some(503), message } if message == "busy"),
        "{err:?}"
    );
    assert_eq!(server.mock().request_count(), 3, "1 request + 2 retries");
}

#[tokio::test]
async fn bad_request_400_is_an_api_error_with_the_server_message_and_no_retry() {
    let server = serve(vec![Reply::Status(
        400,
        r#"{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":null}}"#
            .into(),
    )])
    .await
.expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let err = client.stream_chat(hello()).await.err().expect("an error");

    assert!(
        matches!(&err, LlmError::Api { status: Some(400), message } if message == "Invalid value for 'temperature'"),
        "{err:?}"
    );
    assert!(err.to_string().contains("HTTP 400"), "{err}");
    assert_eq!(server.mock().request_count(), 1);
}

#[tokio::test]
async fn non_openai_error_bodies_keep_their_status_and_message() {
    // vLLM's shape: no `error` wrapper and a numeric `code`.
    let server = serve(vec![Reply::Status(
        400,
        r#"{"object":"error","message":"This model's maximum context length is 4096 tokens","type":"BadRequestError","param":null,"code":400}"#
            .into(),
    )])
    .await
.expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let err = client.stream_chat(hello()).await.err().expect("an error");

    assert!(
        matches!(&err, LlmError::Api { status: Some(400), message } if message.contains("maximum context length")),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_echoed_api_key_never_reaches_the_error_message() {
    let server = serve(vec![Reply::Status(
        401,
        format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#),
    )])
    .await
    .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let err = client.stream_chat(hello()).await.err().expect("an error");

    assert!(
        matches!(
            err,
            LlmError::Api {
                status: Some(401),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.to_string().contains(KEY), "{err}");
    assert!(!format!("{err:?} {client:?}").contains(KEY));
}

#[tokio::test]
async fn unreachable_server_is_a_connect_error() {
    // A port that was just free: nothing listens there any more.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let client = OpenAiClient::builder()
        .model("gpt-test")
        .api_key(KEY)
        .base_url(format!("http://{addr}/v1"))
        .read_env(false)
        .max_retries(1)
        .build()
        .expect("client");

    let err = client.stream_chat(hello()).await.err().expect("an error");

    assert!(matches!(err, LlmError::Connect(_)), "{err:?}");
}

#[tokio::test]
async fn stream_cut_mid_way_gives_the_text_then_stream_cut_and_no_retry() {
    let server = serve(vec![
        Reply::chunks(&[content("The weather"), content(" in Oslo")], After::Cut),
        // Would be used by a (wrong) retry.
        Reply::chunks(&[content("retried"), finish("stop")], After::Done),
    ])
    .await
    .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(
        oks(&items[..2]),
        vec![
            StreamItem::Text("The weather".into()),
            StreamItem::Text(" in Oslo".into())
        ]
    );
    assert!(matches!(items[2], Err(LlmError::StreamCut(_))), "{items:?}");
    assert_eq!(server.mock().request_count(), 1);
}

#[tokio::test]
async fn stream_closed_cleanly_without_finish_reason_is_a_cut() {
    let server = serve(vec![Reply::chunks(&[content("Half an answ")], After::Eof)])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let result = crewline_llm::collect(client.stream_chat(hello()).await.expect("stream")).await;

    assert!(
        matches!(&result, Err(LlmError::StreamCut(m)) if m.message().contains("finish_reason")),
        "{result:?}"
    );
}

#[tokio::test]
async fn server_silent_before_headers_is_a_first_byte_timeout() {
    let server = serve(vec![Reply::StallBeforeHeaders])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server)
        .first_byte_timeout(SHORT)
        .build()
        .expect("client");

    let started = Instant::now();
    let err = client.stream_chat(hello()).await.err().expect("an error");

    assert!(matches!(err, LlmError::Timeout(d) if d == SHORT), "{err:?}");
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    assert!(server.mock().disconnected_within(PROMPTLY).await);
    assert_eq!(server.mock().request_count(), 1, "timeouts are not retried");
}

#[tokio::test]
async fn headers_without_any_event_is_a_first_byte_timeout() {
    let server = serve(vec![Reply::Sse(vec![], After::Stall)])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server)
        .first_byte_timeout(SHORT)
        .build()
        .expect("client");

    let started = Instant::now();
    // Normally the headers arrive in time and the timeout is the stream's only item; on a
    // very loaded machine even the headers may miss the limit. Either way the turn fails with
    // the first-byte timeout.
    let items = match client.stream_chat(hello()).await {
        Ok(stream) => drain(stream).await,
        Err(err) => vec![Err(err)],
    };

    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        matches!(items[0], Err(LlmError::Timeout(d)) if d == SHORT),
        "{items:?}"
    );
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    assert!(server.mock().disconnected_within(PROMPTLY).await);
}

#[tokio::test]
async fn stall_mid_stream_is_an_idle_timeout_and_lets_the_connection_go() {
    let server = serve(vec![Reply::chunks(&[content("Hel")], After::Stall)])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server)
        .idle_timeout(SHORT)
        .build()
        .expect("client");

    let started = Instant::now();
    let mut stream = client.stream_chat(hello()).await.expect("stream");
    let first = stream.next().await.expect("an item").expect("text");
    let second = stream.next().await.expect("an item");

    assert_eq!(first, StreamItem::Text("Hel".into()));
    assert!(
        matches!(second, Err(LlmError::Timeout(d)) if d == SHORT),
        "{second:?}"
    );
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    // The stream is over, and the connection is closed without waiting for the caller to drop
    // the stream.
    assert!(stream.next().await.is_none());
    assert!(server.mock().disconnected_within(PROMPTLY).await);
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let server = serve(vec![Reply::chunks(&[content("Hel")], After::Stall)])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let mut stream = client.stream_chat(hello()).await.expect("stream");
    let first = stream.next().await.expect("an item").expect("text");
    assert_eq!(first, StreamItem::Text("Hel".into()));
    assert_eq!(
        server.mock().disconnects(),
        0,
        "the connection is open while streaming"
    );

    drop(stream);

    assert!(
        server.mock().disconnected_within(PROMPTLY).await,
        "the server still holds an open connection after the stream was dropped"
    );
}

#[tokio::test]
async fn the_request_carries_model_tools_overrides_extras_and_the_key() {
    let server = serve(vec![Reply::chunks(
        &[content("ok"), finish("stop")],
        After::Done,
    )])
    .await
    .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server)
        .temperature(0.5)
        .max_tokens(100)
        .extra("top_p", json!(0.9))
        .extra("seed", json!(7))
        .build()
        .expect("client");
    let tool = ToolDefinition {
        name: "get_weather".into(),
        description: "Weather in a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    };
    let mut extra = serde_json::Map::new();
    extra.insert("seed".into(), json!(8));
    let request = ChatRequest::new(vec![
        Message::system("Be brief."),
        Message::user("Weather?"),
    ])
    .with_tools(vec![tool.clone()])
    .with_tool_choice(ToolChoice::Required)
    .with_options(RequestOptions {
        model: Some("gpt-override".into()),
        temperature: Some(0.1),
        max_tokens: None,
        extra,
        ..RequestOptions::default()
    });

    drain(client.stream_chat(request).await.expect("stream")).await;

    let requests = server.mock().raw_requests();
    assert_eq!(requests.len(), 1);
    let captured = &requests[0];
    assert_eq!(captured.path, "/v1/chat/completions");
    assert_eq!(
        captured.headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        captured.body,
        json!({
            "model": "gpt-override",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather?"}
            ],
            "tools": [tool.to_openai()],
            "tool_choice": "required",
            "temperature": 0.1,
            "max_tokens": 100,
            "top_p": 0.9,
            "seed": 8,
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}

#[tokio::test]
async fn missing_api_key_fails_at_build() {
    let result = OpenAiClient::builder()
        .model("gpt-test")
        .read_env(false)
        .build();

    assert!(matches!(result, Err(LlmError::MissingApiKey)), "{result:?}");
}

#[tokio::test]
async fn missing_model_fails_at_build_with_a_clear_error() {
    let result = OpenAiClient::builder().api_key(KEY).read_env(false).build();

    assert!(
        matches!(&result, Err(LlmError::Config(m)) if m.contains("model")),
        "{result:?}"
    );
}

#[tokio::test]
async fn non_streaming_chat_reads_the_whole_answer() {
    let server = serve(vec![Reply::Json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1717000000.5,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "It is sunny.",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "log", "arguments": {"level": "info"}}}]},
            "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}
    }))])
    .await
    .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let response = client.chat(hello()).await.expect("answer");

    assert_eq!(response.content, "It is sunny.");
    assert_eq!(
        response.tool_calls,
        vec![ToolCall::new("c1", "log", r#"{"level":"info"}"#)]
    );
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        response.usage,
        Some(Usage {
            prompt_tokens: 20,
            completion_tokens: 4,
            total_tokens: 24,
            reasoning_tokens: 0
        })
    );
    let body = &server.mock().raw_requests()[0].body;
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none(), "{body}");
}

#[tokio::test]
async fn non_streaming_chat_reports_http_errors_with_status() {
    let server = serve(vec![Reply::Status(
        404,
        r#"{"error":{"message":"The model `gpt-test` does not exist"}}"#.into(),
    )])
    .await
    .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let err = client.chat(hello()).await.expect_err("an error");

    assert!(
        matches!(&err, LlmError::Api { status: Some(404), message } if message.contains("does not exist")),
        "{err:?}"
    );
    assert_eq!(server.mock().request_count(), 1);
}

/// The client's default limit on one line or event of a stream, and on a whole answer.
const DEFAULT_MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

#[tokio::test]
async fn an_endless_line_fails_with_too_large_once_past_the_limit() {
    let server = serve(vec![Reply::EndlessLine(vec![content("Hel").to_string()])])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(items.len(), 2, "{items:?}");
    assert!(
        matches!(&items[0], Ok(StreamItem::Text(t)) if t == "Hel"),
        "{items:?}"
    );
    assert!(
        matches!(
            &items[1],
            Err(LlmError::TooLarge {
                limit: DEFAULT_MAX_EVENT_BYTES,
                ..
            })
        ),
        "{items:?}"
    );
    assert!(server.mock().disconnected_within(PROMPTLY).await);
    // The client let go near the limit (socket buffers hold a few MiB more), long before the
    // server would have stopped.
    assert!(
        server.mock().flooded() < FLOOD_LIMIT / 2,
        "the client read {} bytes of the line",
        server.mock().flooded()
    );
}

#[tokio::test]
async fn a_line_just_under_a_configured_limit_passes_and_one_over_fails() {
    let long = "y".repeat(10_000);
    let server = serve(vec![
        Reply::chunks(&[content(&long), finish("stop")], After::Done),
        Reply::chunks(&[content(&long), finish("stop")], After::Done),
    ])
    .await
    .expect("the mock model binds 127.0.0.1");
    let event = content(&long).to_string().len();

    let roomy = client_for(&server)
        .max_event_bytes(event)
        .build()
        .expect("client");
    let items = drain(roomy.stream_chat(hello()).await.expect("stream")).await;
    assert_eq!(
        oks(&items),
        vec![
            StreamItem::Text(long.clone()),
            StreamItem::Finish(FinishReason::Stop)
        ]
    );

    let tight = client_for(&server)
        .max_event_bytes(event - 1)
        .build()
        .expect("client");
    let items = drain(tight.stream_chat(hello()).await.expect("stream")).await;
    assert!(
        matches!(&items[..], [Err(LlmError::TooLarge { limit, .. })] if *limit == event - 1),
        "{items:?}"
    );
}

#[tokio::test]
async fn a_huge_error_body_is_cut_at_the_limit() {
    let start = r#"{"error":{"message":"bad request: "#;
    let server = serve(vec![Reply::EndlessStatus(400, start.into())])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server)
        .first_byte_timeout(Duration::from_secs(15))
        .build()
        .expect("client");

    let started = Instant::now();
    let err = client.stream_chat(hello()).await.err().expect("an error");

    // The body's start is the message (cut short), not a timeout waiting for its end.
    let LlmError::Api {
        status: Some(400),
        message,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert!(message.starts_with(start), "{message}");
    assert!(message.chars().count() <= 501, "{} chars", message.len());
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    assert!(server.mock().disconnected_within(PROMPTLY).await);
    assert!(
        server.mock().flooded() < FLOOD_LIMIT / 2,
        "the client read {} bytes of the body",
        server.mock().flooded()
    );
    assert_eq!(server.mock().request_count(), 1, "a 400 is not retried");
}

#[tokio::test]
async fn a_non_streamed_answer_over_the_limit_is_too_large() {
    let server = serve(vec![Reply::Json(json!({
        "choices": [{"index": 0, "message": {"content": "z".repeat(10_000)}, "finish_reason": "stop"}]
    }))])
    .await
.expect("the mock model binds 127.0.0.1");
    let client = client_for(&server)
        .max_event_bytes(4096)
        .build()
        .expect("client");

    let err = client.chat(hello()).await.expect_err("too large");

    assert!(
        matches!(
            err,
            LlmError::TooLarge {
                what: "the answer",
                limit: 4096
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn tool_calls_and_their_finish_reason_on_a_connection_left_open_end_the_answer() {
    // The model is done, but the server sends neither usage nor `[DONE]` nor the body's end.
    let server = serve(vec![Reply::chunks(
        &[
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":"}}
            ]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"Oslo\"}"}}]}}]}),
            finish("tool_calls"),
        ],
        After::Stall,
    )])
    .await
.expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let started = Instant::now();
    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(
        oks(&items),
        vec![
            StreamItem::ToolCalls(vec![ToolCall::new(
                "call_a",
                "get_weather",
                r#"{"city":"Oslo"}"#
            )]),
            StreamItem::Finish(FinishReason::ToolCalls),
        ]
    );
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    assert!(server.mock().disconnected_within(PROMPTLY).await);
}
