//! The fault tests' model: the testkit's mock model in raw mode ([`MockLlm::raw_fn`]) answering by the last
//! user message, for fault tests through a whole call (server, session, tool loop and the real
//! `OpenAiClient`).
//!
//! Each request's fault is chosen by the last user message, so one server serves healthy and
//! faulty calls side by side: the message starts with a [`Fault`] keyword (`fault:500 ...`),
//! anything else is answered normally. Every answer closes its connection, so one connection
//! is one attempt, and the fake counts attempts per message and connections still open.
#![allow(dead_code, unreachable_pub)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

// Not every test binary that includes this module uses it.
#[allow(unused_imports)]
pub use crewline_testkit::mock_llm::raw::FLOOD_LIMIT;
use crewline_testkit::mock_llm::{
    MockLlm, RunningMockLlm,
    raw::{After, RawReply, RawRequest},
};
use serde_json::{Value, json};

/// What the fake does with a request, by the prefix of the last user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `fault:500`: HTTP 500 on every attempt.
    Status500,
    /// `fault:429-once`: HTTP 429 on the first attempt for this message, then a normal answer.
    TooManyOnce,
    /// `fault:stall`: reads the request, then sends nothing until the client goes away.
    StallBeforeHeaders,
    /// `fault:stall-mid`: headers and two chunks, then silence until the client goes away.
    StallMidStream,
    /// `fault:cut`: headers and two chunks, then the connection is dropped mid-body.
    Cut,
    /// `fault:error-event`: two chunks, then an OpenAI error event in the stream.
    ErrorEvent,
    /// `fault:echo-key`: HTTP 401 whose message repeats the request's `Authorization` header,
    /// as some proxies do.
    EchoKey,
    /// `fault:endless-line`: two chunks, then one `data:` line that never ends (64 KiB pieces
    /// until the client goes away, at most [`FLOOD_LIMIT`] bytes).
    EndlessLine,
    /// `fault:huge-args`: one tool call whose arguments run to [`HUGE_ARGUMENT_PIECES`] pieces
    /// of 1 MiB, then a normal end (`tool_calls`, `[DONE]`).
    HugeArguments,
    /// `fault:many-calls`: [`MANY_CALLS`] parallel tool calls in one answer.
    ManyCalls,
    /// `fault:huge-error`: HTTP 400 whose body says it is 1 GiB long and never ends.
    HugeError,
    /// `tool:NAME`: calls the tool `NAME` (no arguments) when the last message is the user's;
    /// after the tool result, answers with text that quotes the start of the result.
    Tool,
    /// `tool-hold:NAME`: like `tool:NAME`, but the answer with the call ends at its
    /// `finish_reason`: no `[DONE]`, no end of body, the connection held open until the
    /// client goes away (some proxies do this).
    ToolHold,
    /// Anything else: `echo: <message>` in word chunks.
    None,
}

impl Fault {
    fn of(message: &str) -> Self {
        let keyword = message.split_whitespace().next().unwrap_or_default();
        match keyword {
            "fault:500" => Self::Status500,
            "fault:429-once" => Self::TooManyOnce,
            "fault:stall" => Self::StallBeforeHeaders,
            "fault:stall-mid" => Self::StallMidStream,
            "fault:cut" => Self::Cut,
            "fault:error-event" => Self::ErrorEvent,
            "fault:echo-key" => Self::EchoKey,
            "fault:endless-line" => Self::EndlessLine,
            "fault:huge-args" => Self::HugeArguments,
            "fault:many-calls" => Self::ManyCalls,
            "fault:huge-error" => Self::HugeError,
            _ if keyword.starts_with("tool:") => Self::Tool,
            _ if keyword.starts_with("tool-hold:") => Self::ToolHold,
            _ => Self::None,
        }
    }
}

/// The text a healthy request is answered with.
pub fn echo_answer(message: &str) -> String {
    format!("echo: {message}")
}

/// The text chunks streamed before a mid-stream fault.
pub const PARTIAL: [&str; 2] = ["partial ", "answer "];

type Attempts = Arc<Mutex<HashMap<String, usize>>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running fake; it serves until it is dropped.
pub struct FakeLlm {
    raw: RunningMockLlm,
    attempts: Attempts,
}

impl FakeLlm {
    /// Starts the fake on 127.0.0.1:0.
    pub async fn start() -> Self {
        let attempts = Attempts::default();
        let counted = Arc::clone(&attempts);
        let raw = MockLlm::raw_fn(move |request| respond(request, &counted))
            .start()
            .await
            .expect("the fake LLM binds 127.0.0.1");
        Self { raw, attempts }
    }

    /// The API base URL for the client.
    pub fn base_url(&self) -> String {
        self.raw.base_url()
    }

    /// A builder for the real client pointed at this fake (no environment, a dummy key); the
    /// test sets the limits it needs.
    pub fn client_builder(&self) -> crewline::llm::OpenAiClientBuilder {
        self.raw.client_builder().model("fake")
    }

    /// How many requests carried `message` as their last user message.
    pub fn attempts(&self, message: &str) -> usize {
        lock(&self.attempts).get(message).copied().unwrap_or(0)
    }

    /// Requests received in all.
    pub fn total(&self) -> usize {
        self.raw.mock().request_count()
    }

    /// Bytes of endless lines sent before the client went away.
    pub fn flooded(&self) -> usize {
        self.raw.mock().flooded()
    }

    /// Connections the fake still holds open.
    pub fn open_connections(&self) -> usize {
        self.raw.mock().open_connections()
    }
}

/// The last message of the request and its role, and the last user message.
fn last_messages(body: &Value) -> (String, String, String) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    (
        last["role"].as_str().unwrap_or_default().to_owned(),
        last["content"].as_str().unwrap_or_default().to_owned(),
        user,
    )
}

fn respond(request: &RawRequest, attempts: &Attempts) -> RawReply {
    let (last_role, last_content, user) = last_messages(&request.body);
    let attempt = {
        let mut attempts = lock(attempts);
        let count = attempts.entry(user.clone()).or_insert(0);
        *count += 1;
        *count
    };
    let tool_name = |prefix: &str| {
        user.split_whitespace()
            .next()
            .and_then(|k| k.strip_prefix(prefix))
            .unwrap_or_default()
            .to_owned()
    };
    match Fault::of(&user) {
        Fault::Status500 => status(500, "the model is overloaded (scripted)"),
        Fault::TooManyOnce if attempt == 1 => status(429, "rate limited (scripted)"),
        Fault::EchoKey => {
            let authorization = request
                .headers
                .get("authorization")
                .cloned()
                .unwrap_or_default();
            status(401, &format!("Incorrect API key provided: {authorization}"))
        }
        Fault::StallBeforeHeaders => RawReply::StallBeforeHeaders,
        Fault::StallMidStream => RawReply::Sse(text_chunks(&PARTIAL), After::Stall),
        Fault::Cut => RawReply::Sse(text_chunks(&PARTIAL), After::Cut),
        Fault::ErrorEvent => {
            let mut events = text_chunks(&PARTIAL);
            events.push(
                json!({"error": {"message": "the server had an error (scripted)", "type": "server_error"}})
                    .to_string(),
            );
            finished(events)
        }
        Fault::EndlessLine => RawReply::EndlessLine(text_chunks(&PARTIAL)),
        Fault::HugeArguments if last_role == "user" => huge_arguments(),
        Fault::ManyCalls if last_role == "user" => many_calls(),
        Fault::HugeError => RawReply::EndlessStatus(400, r#"{"error":{"message":""#.to_owned()),
        Fault::HugeArguments | Fault::ManyCalls => {
            finished(text_chunks(&["refused, as it should be"]))
        }
        Fault::Tool if last_role == "user" => finished(tool_call_chunks(&tool_name("tool:"))),
        Fault::ToolHold if last_role == "user" => {
            RawReply::Sse(tool_call_chunks(&tool_name("tool-hold:")), After::Stall)
        }
        Fault::Tool | Fault::ToolHold => {
            // Quote the start of the tool result (what the model would read).
            let quoted: String = last_content.chars().take(120).collect();
            let text = format!("the tool said: {quoted}");
            finished(text_chunks(&[text.as_str()]))
        }
        Fault::TooManyOnce | Fault::None => {
            let answer = echo_answer(&user);
            let words: Vec<&str> = answer.split_inclusive(' ').collect();
            finished(text_chunks(&words))
        }
    }
}

/// The 1 MiB pieces of `fault:huge-args`'s arguments (50 MiB in all).
pub const HUGE_ARGUMENT_PIECES: usize = 50;
/// The tool calls of `fault:many-calls`'s answer.
pub const MANY_CALLS: usize = 100_000;

/// One `lookup` call whose arguments are a 50 MiB string, sent in 1 MiB pieces.
fn huge_arguments() -> RawReply {
    let head = chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_huge", "type": "function",
            "function": {"name": "lookup", "arguments": "{\"q\": \""}}]}),
        None,
    );
    let piece = "a".repeat(1 << 20);
    let event = chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
        None,
    );
    let tail = vec![
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ];
    RawReply::Repeat {
        head: vec![head],
        event,
        times: HUGE_ARGUMENT_PIECES,
        tail,
    }
}

/// [`MANY_CALLS`] `lookup` calls, a thousand to an event.
fn many_calls() -> RawReply {
    let mut events: Vec<String> = (0..MANY_CALLS)
        .collect::<Vec<_>>()
        .chunks(1_000)
        .map(|indices| {
            let calls: Vec<Value> = indices
                .iter()
                .map(|index| {
                    json!({"index": index, "id": format!("call_{index}"), "type": "function",
                        "function": {"name": "lookup", "arguments": "{}"}})
                })
                .collect();
            chunk(json!({"tool_calls": calls}), None)
        })
        .collect();
    events.push(chunk(json!({}), Some("tool_calls")));
    RawReply::Sse(events, After::Done)
}

/// An error answer in OpenAI's shape.
fn status(code: u16, message: &str) -> RawReply {
    let body = json!({"error": {"message": message, "type": "scripted", "code": code}});
    RawReply::Status(code, body.to_string())
}

/// `events`, a final `stop` chunk, `[DONE]` and the body's end.
fn finished(mut events: Vec<String>) -> RawReply {
    events.push(chunk(json!({}), Some("stop")));
    RawReply::Sse(events, After::Done)
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    })
    .to_string()
}

fn text_chunks(pieces: &[&str]) -> Vec<String> {
    pieces
        .iter()
        .map(|piece| chunk(json!({"content": piece}), None))
        .collect()
}

fn tool_call_chunks(name: &str) -> Vec<String> {
    vec![
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_fake_1", "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ]
}

/// Starts `count` healthy calls to `url` in the background, two turns each: every turn must
/// be answered with the echo and no `agent.error`. Await the handles to check them.
pub fn spawn_healthy_calls(url: &str, count: usize) -> Vec<tokio::task::JoinHandle<()>> {
    (0..count)
        .map(|i| {
            let url = url.to_owned();
            tokio::spawn(async move {
                let mut client = crate::common::Client::connect(&url).await;
                client
                    .send(&crate::common::init_frame(&format!("healthy-{i}")))
                    .await;
                assert_eq!(client.recv().await["type"], "agent.ready");
                for turn in 0..2 {
                    let words = format!("hello from call {i} turn {turn}");
                    let (frames, text) = client.turn(&words).await;
                    assert_eq!(text, echo_answer(&words), "{frames:?}");
                    assert!(
                        !crate::common::types(&frames).contains(&"agent.error".to_owned()),
                        "{frames:?}"
                    );
                }
                client.close().await;
            })
        })
        .collect()
}
