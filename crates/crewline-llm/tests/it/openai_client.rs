//! `OpenAiClient` against a real local HTTP server: what is its own (retry counts, size
//! limits, connection reuse, the request it sends). What both clients must do alike (chunk
//! shapes, tool calls, error kinds, cuts, timeouts, cancellation) is in `conformance.rs`.

use std::time::{Duration, Instant};

use crewline_core::{Message, ToolDefinition};
use crewline_llm::{
    AnswerLimits, ChatRequest, FinishReason, LlmClient, LlmError, LlmStream, OpenAiClient,
    OpenAiClientBuilder, RequestOptions, StreamItem, ToolChoice,
};
use crewline_testkit::mock_llm::{
    MockLlm, RunningMockLlm,
    raw::{After, FLOOD_LIMIT, RawReply as Reply},
};
use futures::StreamExt;
use serde_json::{Value, json};

/// Generous upper bound for anything that should happen "at once" on a loaded CI machine.
const PROMPTLY: Duration = Duration::from_secs(5);

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
async fn retries_stop_after_max_retries_with_the_last_status() {
    let busy = || Reply::Status(503, r#"{"error":{"message":"busy"}}"#.into());
    let server = serve(vec![busy(), busy(), busy(), busy()])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).max_retries(2).build().expect("client");

    let err = client.stream_chat(hello()).await.err().expect("an error");

    assert!(
        matches!(&err, LlmError::Api { status: Some(503), message, .. } if message == "busy"),
        "{err:?}"
    );
    assert_eq!(server.mock().request_count(), 3, "1 request + 2 retries");
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
        matches!(&err, LlmError::Api { status: Some(400), message, .. } if message.contains("maximum context length")),
        "{err:?}"
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
    let tool = ToolDefinition::new(
        "get_weather",
        "Weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    );
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
        ..
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

/// One tool-call delta of call `index`: its head (id and name) when `head`, and `arguments`.
fn call_delta(index: usize, head: bool, arguments: &str) -> Value {
    let mut call = json!({"index": index, "function": {"arguments": arguments}});
    if head {
        call["id"] = json!(format!("call_{index}"));
        call["function"]["name"] = json!("get_weather");
    }
    json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]})
}

#[tokio::test]
async fn megabytes_of_tool_call_arguments_in_pieces_fail_at_the_calls_limit() {
    // Eight 1 MiB pieces of one call's arguments, each within the event limit: without an
    // answer limit the client held all of it and handed out an 8 MiB call.
    let piece = "x".repeat(1 << 20);
    let mut chunks = vec![call_delta(0, true, "{\"city\":\"")];
    chunks.extend((0..8).map(|_| call_delta(0, false, &piece)));
    chunks.push(call_delta(0, false, "\"}"));
    chunks.push(finish("tool_calls"));
    let server = serve(vec![Reply::chunks(&chunks, After::Done)])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(items.len(), 1, "no call is handed out: {items:?}");
    assert!(
        matches!(
            &items[0],
            Err(LlmError::TooLarge {
                what: "a tool call",
                limit
            }) if *limit == AnswerLimits::DEFAULT_MAX_CALL_BYTES
        ),
        "{items:?}"
    );
}

#[tokio::test]
async fn an_answer_of_a_thousand_tool_calls_fails_at_the_count_limit() {
    // 1,000 small calls, 100 to a chunk: without a limit all of them were assembled and
    // every one reached the conversation.
    let chunks: Vec<Value> = (0..10)
        .map(|chunk| {
            let calls: Vec<Value> = (0..100)
                .map(|i| {
                    let index = chunk * 100 + i;
                    json!({"index": index, "id": format!("call_{index}"),
                        "function": {"name": "get_weather", "arguments": "{}"}})
                })
                .collect();
            json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]})
        })
        .chain([finish("tool_calls")])
        .collect();
    let server = serve(vec![Reply::chunks(&chunks, After::Done)])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    assert_eq!(items.len(), 1, "no call is handed out: {items:?}");
    assert!(
        matches!(&items[0], Err(LlmError::TooManyToolCalls { limit }) if *limit == AnswerLimits::DEFAULT_MAX_TOOL_CALLS),
        "{items:?}"
    );
}

#[tokio::test]
async fn text_past_the_answers_limit_ends_the_answer_with_too_large() {
    // 64 KiB text deltas, each well within the event limit, four of them over a 200 KiB
    // answer limit.
    let piece = "y".repeat(64 << 10);
    let chunks = vec![
        content(&piece),
        content(&piece),
        content(&piece),
        content(&piece),
        finish("stop"),
    ];
    let server = serve(vec![Reply::chunks(&chunks, After::Done)])
        .await
        .expect("the mock model binds 127.0.0.1");
    let limits = AnswerLimits {
        max_answer_bytes: 200 << 10,
        ..AnswerLimits::default()
    };
    let client = client_for(&server)
        .answer_limits(limits)
        .build()
        .expect("client");

    let items = drain(client.stream_chat(hello()).await.expect("stream")).await;

    let texts = items
        .iter()
        .filter(|i| matches!(i, Ok(StreamItem::Text(_))))
        .count();
    assert_eq!(texts, 3, "the text within the limit went out as it came");
    assert!(
        matches!(
            items.last(),
            Some(Err(LlmError::TooLarge {
                what: "the answer",
                limit
            })) if *limit == 200 << 10
        ),
        "{items:?}"
    );
}

#[tokio::test]
async fn a_non_streamed_answer_with_too_many_calls_is_refused() {
    let calls: Vec<Value> = (0..1_000)
        .map(|i| {
            json!({"id": format!("c{i}"), "type": "function",
            "function": {"name": "f", "arguments": "{}"}})
        })
        .collect();
    let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant",
        "tool_calls": calls}, "finish_reason": "tool_calls"}]});
    let server = serve(vec![Reply::Json(answer)])
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client_for(&server).build().expect("client");

    let result = client.chat(hello()).await;

    assert!(
        matches!(result, Err(LlmError::TooManyToolCalls { limit: 128 })),
        "{result:?}"
    );
}
