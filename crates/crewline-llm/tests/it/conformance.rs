//! One list of tests, run against both clients: the default `OpenAiClient` and (with the
//! `async-openai` feature) `AsyncOpenAiClient`, each against the raw-wire mock model: odd chunk
//! shapes, tool calls assembled, usage, HTTP error statuses, cuts, timeouts and cancellation
//! must come out the same from both.
//!
//! A case is written once in `cases`, as a function of a client factory; `conformance!` makes
//! a test of each case for each client.

use std::{fmt, sync::Arc, time::Duration};

use crewline_llm::{LlmClient, OpenAiClient};

/// A client under test (`Debug`, so a test can check that no secret shows in it).
trait Model: LlmClient + fmt::Debug {}
impl<T: LlmClient + fmt::Debug> Model for T {}

/// Makes a client for the server at a base URL (`http://127.0.0.1:PORT/v1`).
type Factory = fn(&str, Limits) -> Arc<dyn Model>;

/// The time limits a case sets; `None` keeps the client's default.
#[derive(Debug, Clone, Copy, Default)]
struct Limits {
    first_byte: Option<Duration>,
    idle: Option<Duration>,
}

/// The key every client is given (a server may echo it; it must never show).
const KEY: &str = "sk-test-0123456789";

/// The default client, as a crew builds it.
fn default_client(base_url: &str, limits: Limits) -> Arc<dyn Model> {
    let mut builder = OpenAiClient::builder()
        .model("gpt-test")
        .api_key(KEY)
        .base_url(base_url)
        .read_env(false);
    if let Some(limit) = limits.first_byte {
        builder = builder.first_byte_timeout(limit);
    }
    if let Some(limit) = limits.idle {
        builder = builder.idle_timeout(limit);
    }
    Arc::new(builder.build().expect("client"))
}

/// The async-openai client over a plain `async_openai::Client<OpenAIConfig>`.
#[cfg(feature = "async-openai")]
fn async_openai_client(base_url: &str, limits: Limits) -> Arc<dyn Model> {
    use async_openai::{Client, config::OpenAIConfig};
    let config = OpenAIConfig::new()
        .with_api_base(base_url)
        .with_api_key(KEY);
    let mut client = crewline_llm::AsyncOpenAiClient::new(Client::with_config(config), "gpt-test");
    if let Some(limit) = limits.first_byte {
        client = client.with_first_byte_timeout(limit);
    }
    if let Some(limit) = limits.idle {
        client = client.with_idle_timeout(limit);
    }
    Arc::new(client)
}

/// A test of each case for the client `$factory` makes.
macro_rules! conformance {
    ($factory:path) => {
        conformance!(@cases $factory:
            odd_chunk_shapes_still_yield_text_finish_and_usage,
            error_object_mid_stream_is_an_api_error_after_the_text,
            tool_calls_split_over_chunks_sharing_a_chunk_and_starting_at_index_1,
            tool_call_deltas_without_index_and_object_arguments_are_assembled,
            tool_calls_and_their_finish_reason_on_a_connection_left_open_end_the_answer,
            rate_limit_429_is_retried_and_the_turn_succeeds,
            an_exhausted_quota_429_is_not_retried,
            server_error_500_is_retried_and_the_turn_succeeds,
            bad_request_400_is_an_api_error_with_the_server_message_and_no_retry,
            an_echoed_api_key_never_reaches_the_error_message,
            unreachable_server_is_a_connect_error,
            stream_cut_mid_way_gives_the_text_then_stream_cut_and_no_retry,
            stream_closed_cleanly_without_finish_reason_is_a_cut,
            server_silent_before_headers_is_a_first_byte_timeout,
            headers_without_any_event_is_a_first_byte_timeout,
            stall_mid_stream_is_an_idle_timeout_and_lets_the_connection_go,
            dropping_the_stream_closes_the_connection,
            non_streaming_chat_reads_the_whole_answer,
            non_streaming_chat_reports_http_errors_with_status,
            stream_options_is_dropped_once_a_server_refuses_it,
            a_refused_token_field_says_which_setting_to_change,
            a_strict_tool_is_sent_with_strict_true_and_any_other_without_the_key,
        );
    };
    (@cases $factory:path: $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                crate::conformance::cases::$case($factory).await;
            }
        )*
    };
}

/// The default client.
mod openai_client {
    conformance!(crate::conformance::default_client);
}

/// The async-openai client.
#[cfg(feature = "async-openai")]
mod async_openai_client {
    conformance!(crate::conformance::async_openai_client);
}

/// The cases, each a function of the client factory.
mod cases {
    use std::time::{Duration, Instant};

    use crewline_core::{Message, ToolCall, ToolDefinition};
    use crewline_llm::{ChatRequest, FinishReason, LlmError, LlmStream, StreamItem, Usage};
    use crewline_testkit::mock_llm::{
        MockLlm, RunningMockLlm,
        raw::{After, RawReply as Reply},
    };
    use futures::StreamExt;
    use serde_json::{Value, json};

    use super::{Factory, KEY, Limits};

    /// Generous upper bound for anything that should happen "at once" on a loaded CI machine.
    const PROMPTLY: Duration = Duration::from_secs(5);
    /// Short limits for the timeout tests: the server stalls forever, so only the limit matters.
    const SHORT: Duration = Duration::from_millis(200);

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

    pub(crate) async fn odd_chunk_shapes_still_yield_text_finish_and_usage(client: Factory) {
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
        let client = client(&server.base_url(), Limits::default());

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
                    reasoning_tokens: 0,
                    cached_tokens: 0,
                }),
            ]
        );
    }

    pub(crate) async fn error_object_mid_stream_is_an_api_error_after_the_text(client: Factory) {
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
        let client = client(&server.base_url(), Limits::default());

        let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

        assert_eq!(items.len(), 2, "{items:?}");
        assert_eq!(
            items[0].as_ref().ok(),
            Some(&StreamItem::Text("Let me".into()))
        );
        assert!(
            matches!(&items[1], Err(LlmError::Api { status: None, message, .. }) if message.contains("overloaded")),
            "{items:?}"
        );
        assert_eq!(server.mock().request_count(), 1);
    }

    pub(crate) async fn tool_calls_split_over_chunks_sharing_a_chunk_and_starting_at_index_1(
        client: Factory,
    ) {
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
        let client = client(&server.base_url(), Limits::default());

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

    pub(crate) async fn tool_call_deltas_without_index_and_object_arguments_are_assembled(
        client: Factory,
    ) {
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
        let client = client(&server.base_url(), Limits::default());

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

    pub(crate) async fn tool_calls_and_their_finish_reason_on_a_connection_left_open_end_the_answer(
        client: Factory,
    ) {
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
        let client = client(&server.base_url(), Limits::default());

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

    pub(crate) async fn rate_limit_429_is_retried_and_the_turn_succeeds(client: Factory) {
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
        let client = client(&server.base_url(), Limits::default());

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

    pub(crate) async fn an_exhausted_quota_429_is_not_retried(client: Factory) {
        let server = serve(vec![Reply::Status(
            429,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#
                .into(),
        )])
        .await
    .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());

        let err = client.stream_chat(hello()).await.err().expect("an error");

        assert!(
            matches!(&err, LlmError::Api { status: Some(429), message, .. } if message.contains("quota")),
            "{err:?}"
        );
        assert_eq!(server.mock().request_count(), 1);
    }

    pub(crate) async fn server_error_500_is_retried_and_the_turn_succeeds(client: Factory) {
        let server = serve(vec![
            Reply::Status(500, "upstream exploded".into()),
            Reply::chunks(&[content("Hi"), finish("stop")], After::Done),
        ])
        .await
        .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());

        let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

        assert_eq!(items[0].as_ref().ok(), Some(&StreamItem::Text("Hi".into())));
        assert_eq!(server.mock().request_count(), 2);
    }

    pub(crate) async fn bad_request_400_is_an_api_error_with_the_server_message_and_no_retry(
        client: Factory,
    ) {
        let server = serve(vec![Reply::Status(
            400,
            r#"{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","param":"temperature","code":null}}"#
                .into(),
        )])
        .await
    .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());

        let err = client.stream_chat(hello()).await.err().expect("an error");

        assert!(
            matches!(&err, LlmError::Api { status: Some(400), message, .. } if message == "Invalid value for 'temperature'"),
            "{err:?}"
        );
        assert!(err.to_string().contains("HTTP 400"), "{err}");
        assert_eq!(server.mock().request_count(), 1);
    }

    pub(crate) async fn an_echoed_api_key_never_reaches_the_error_message(client: Factory) {
        let server = serve(vec![Reply::Status(
            401,
            format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#),
        )])
        .await
        .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());

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

    pub(crate) async fn unreachable_server_is_a_connect_error(client: Factory) {
        // Bound but never listening: connecting is refused, and no other test can take the port
        // meanwhile (a port freed by dropping a listener could be reused by a concurrent test's server).
        let refusing = tokio::net::TcpSocket::new_v4().expect("socket");
        refusing.bind(([127, 0, 0, 1], 0).into()).expect("bind");
        let addr = refusing.local_addr().expect("addr");
        let client = client(&format!("http://{addr}/v1"), Limits::default());

        let err = client.stream_chat(hello()).await.err().expect("an error");

        assert!(matches!(err, LlmError::Connect(_)), "{err:?}");
    }

    pub(crate) async fn stream_cut_mid_way_gives_the_text_then_stream_cut_and_no_retry(
        client: Factory,
    ) {
        let server = serve(vec![
            Reply::chunks(&[content("The weather"), content(" in Oslo")], After::Cut),
            // Would be used by a (wrong) retry.
            Reply::chunks(&[content("retried"), finish("stop")], After::Done),
        ])
        .await
        .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());

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

    pub(crate) async fn stream_closed_cleanly_without_finish_reason_is_a_cut(client: Factory) {
        let server = serve(vec![Reply::chunks(&[content("Half an answ")], After::Eof)])
            .await
            .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());

        let result =
            crewline_llm::collect(client.stream_chat(hello()).await.expect("stream")).await;

        assert!(
            matches!(&result, Err(LlmError::StreamCut(m)) if m.message().contains("finish_reason")),
            "{result:?}"
        );
    }

    pub(crate) async fn server_silent_before_headers_is_a_first_byte_timeout(client: Factory) {
        let server = serve(vec![Reply::StallBeforeHeaders])
            .await
            .expect("the mock model binds 127.0.0.1");
        let client = client(
            &server.base_url(),
            Limits {
                first_byte: Some(SHORT),
                ..Limits::default()
            },
        );

        let started = Instant::now();
        let err = client.stream_chat(hello()).await.err().expect("an error");

        assert!(matches!(err, LlmError::Timeout(d) if d == SHORT), "{err:?}");
        assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
        assert!(server.mock().disconnected_within(PROMPTLY).await);
        assert_eq!(server.mock().request_count(), 1, "timeouts are not retried");
    }

    pub(crate) async fn headers_without_any_event_is_a_first_byte_timeout(client: Factory) {
        let server = serve(vec![Reply::Sse(vec![], After::Stall)])
            .await
            .expect("the mock model binds 127.0.0.1");
        let client = client(
            &server.base_url(),
            Limits {
                first_byte: Some(SHORT),
                ..Limits::default()
            },
        );

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

    pub(crate) async fn stall_mid_stream_is_an_idle_timeout_and_lets_the_connection_go(
        client: Factory,
    ) {
        let server = serve(vec![Reply::chunks(&[content("Hel")], After::Stall)])
            .await
            .expect("the mock model binds 127.0.0.1");
        let client = client(
            &server.base_url(),
            Limits {
                idle: Some(SHORT),
                ..Limits::default()
            },
        );

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

    pub(crate) async fn dropping_the_stream_closes_the_connection(client: Factory) {
        let server = serve(vec![Reply::chunks(&[content("Hel")], After::Stall)])
            .await
            .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());

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

    pub(crate) async fn non_streaming_chat_reads_the_whole_answer(client: Factory) {
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
        let client = client(&server.base_url(), Limits::default());

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
                reasoning_tokens: 0,
                cached_tokens: 0,
            })
        );
        let body = &server.mock().raw_requests()[0].body;
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none(), "{body}");
    }

    pub(crate) async fn non_streaming_chat_reports_http_errors_with_status(client: Factory) {
        let server = serve(vec![Reply::Status(
            404,
            r#"{"error":{"message":"The model `gpt-test` does not exist"}}"#.into(),
        )])
        .await
        .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());

        let err = client.chat(hello()).await.expect_err("an error");

        assert!(
            matches!(&err, LlmError::Api { status: Some(404), message, .. } if message.contains("does not exist")),
            "{err:?}"
        );
        assert_eq!(server.mock().request_count(), 1);
    }

    /// A server that refuses any body with `stream_options` (as some older proxies do).
    fn refusing_stream_options() -> MockLlm {
        MockLlm::raw_fn(|request| {
            if request.body.get("stream_options").is_some() {
                Reply::Status(
                    400,
                    r#"{"error":{"message":"Unrecognized request argument supplied: stream_options"}}"#
                        .into(),
                )
            } else {
                Reply::chunks(&[content("Hi"), finish("stop")], After::Done)
            }
        })
    }

    pub(crate) async fn stream_options_is_dropped_once_a_server_refuses_it(client: Factory) {
        let server = refusing_stream_options()
            .start()
            .await
            .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());

        for _ in 0..2 {
            let items = drain(client.stream_chat(hello()).await.expect("stream")).await;
            assert_eq!(oks(&items)[0], StreamItem::Text("Hi".into()));
        }

        let sent: Vec<bool> = server
            .mock()
            .raw_requests()
            .iter()
            .map(|request| request.body.get("stream_options").is_some())
            .collect();
        // Refused once, retried at once without it, and never sent again.
        assert_eq!(sent, [true, false, false]);
    }

    pub(crate) async fn a_refused_token_field_says_which_setting_to_change(client: Factory) {
        let refusal = r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#;
        let server = serve(vec![
            Reply::Status(400, refusal.into()),
            Reply::Status(400, refusal.into()),
        ])
        .await
        .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());
        let limited = || {
            hello().with_options(crewline_llm::RequestOptions {
                max_tokens: Some(100),
                ..Default::default()
            })
        };

        for error in [
            client.stream_chat(limited()).await.err(),
            client.chat(limited()).await.err(),
        ] {
            match error {
                Some(LlmError::Api {
                    status: Some(400),
                    message,
                    ..
                }) => {
                    assert!(message.contains("Unsupported parameter"), "{message}");
                    assert!(
                        message.contains("max_tokens_field(MaxTokensField::MaxCompletionTokens)"),
                        "{message}"
                    );
                }
                other => panic!("expected the API error, got {other:?}"),
            }
        }
    }

    pub(crate) async fn a_strict_tool_is_sent_with_strict_true_and_any_other_without_the_key(
        client: Factory,
    ) {
        let streamed = Reply::chunks(&[content("Hi"), finish("stop")], After::Done);
        let whole = Reply::Json(json!({"choices": [{"index": 0,
            "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]}));
        let server = serve(vec![streamed, whole])
            .await
            .expect("the mock model binds 127.0.0.1");
        let client = client(&server.base_url(), Limits::default());
        let schema = json!({
            "type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"], "additionalProperties": false
        });
        let strict = ToolDefinition::new("get_weather", "Weather in a city", schema.clone())
            .with_strict(true);
        let plain = ToolDefinition::new("hang_up", "Ends the call", schema);
        let request = hello().with_tools(vec![strict, plain]);

        drain(client.stream_chat(request.clone()).await.expect("stream")).await;
        client.chat(request).await.expect("answer");

        let requests = server.mock().raw_requests();
        assert_eq!(requests.len(), 2);
        for sent in requests {
            let tools = &sent.body["tools"];
            assert_eq!(tools[0]["function"]["strict"], json!(true), "{tools}");
            assert_eq!(tools[0]["function"]["name"], "get_weather");
            let plain = tools[1]["function"].as_object().expect("a function");
            assert!(!plain.contains_key("strict"), "{tools}");
        }
    }
}
