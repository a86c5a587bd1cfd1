//! A whole streamed answer, as the default client reads it: SSE framing, chunk decoding and
//! tool-call assembly over many events, the body cut anywhere. Never panics, and what comes
//! out holds the client's limits: at most one error and nothing after it, text within the
//! answer's bytes, at most the answer's calls, each within a call's bytes.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use bytes::Bytes;
use crewline_llm::{AnswerLimits, LlmError, OpenAiClient, StreamItem};
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

/// Small limits, so inputs of a few KiB reach every one of them.
const LIMITS: AnswerLimits = AnswerLimits {
    max_answer_bytes: 4096,
    max_tool_calls: 8,
    max_call_bytes: 1024,
};
const MAX_EVENT_BYTES: usize = 2048;

/// One piece of an answer's body.
#[derive(Debug, Arbitrary)]
enum Piece {
    /// A text delta.
    Text(String),
    /// Reasoning.
    Reasoning(String),
    /// A tool-call delta; small indexes so calls collide and continue.
    Call {
        index: Option<u8>,
        id: Option<String>,
        name: Option<String>,
        arguments: Option<String>,
    },
    /// Several calls in one chunk, each opening a call of its own.
    ManyCalls(u8),
    /// The finish reason.
    Finish(u8),
    /// Usage.
    Usage(u32, u32),
    /// An error chunk.
    Error(String),
    /// `[DONE]`.
    Done,
    /// A keepalive, a comment, a blank line.
    Noise(u8),
    /// Any bytes at all.
    Raw(Vec<u8>),
}

impl Piece {
    fn render(&self, out: &mut Vec<u8>) {
        let event = |value: serde_json::Value| format!("data: {value}\n\n");
        let text = match self {
            Self::Text(text) => {
                event(json!({"choices": [{"index": 0, "delta": {"content": text}}]}))
            }
            Self::Reasoning(text) => {
                event(json!({"choices": [{"index": 0, "delta": {"reasoning_content": text}}]}))
            }
            Self::Call {
                index,
                id,
                name,
                arguments,
            } => {
                let mut call = json!({"function": {}});
                if let Some(index) = index {
                    call["index"] = json!(index);
                }
                if let Some(id) = id {
                    call["id"] = json!(id);
                }
                if let Some(name) = name {
                    call["function"]["name"] = json!(name);
                }
                if let Some(arguments) = arguments {
                    call["function"]["arguments"] = json!(arguments);
                }
                event(json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}))
            }
            Self::ManyCalls(count) => {
                let calls: Vec<_> = (0..*count)
                    .map(|i| {
                        json!({"index": 100 + u32::from(i), "id": format!("m{i}"),
                        "function": {"name": "f", "arguments": "{}"}})
                    })
                    .collect();
                event(json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]}))
            }
            Self::Finish(reason) => {
                let reason = ["stop", "tool_calls", "length", ""][usize::from(*reason % 4)];
                event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}))
            }
            Self::Usage(prompt, completion) => event(json!({"choices": [],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})),
            Self::Error(message) => event(json!({"error": {"message": message}})),
            Self::Done => "data: [DONE]\n\n".to_owned(),
            Self::Noise(kind) => match kind % 3 {
                0 => "event: keepalive\ndata: {}\n\n".to_owned(),
                1 => ": comment\n".to_owned(),
                _ => "\n".to_owned(),
            },
            Self::Raw(bytes) => {
                out.extend_from_slice(bytes);
                return;
            }
        };
        out.extend_from_slice(text.as_bytes());
    }
}

#[derive(Debug, Arbitrary)]
struct Answer {
    pieces: Vec<Piece>,
    /// Where the body is cut into the parts the client receives.
    cuts: Vec<u16>,
}

fn client() -> &'static OpenAiClient {
    static CLIENT: OnceLock<OpenAiClient> = OnceLock::new();
    CLIENT.get_or_init(|| {
        OpenAiClient::builder()
            .model("fuzz")
            .api_key("sk-fuzz-0123456789")
            .base_url("http://127.0.0.1:9/v1")
            .read_env(false)
            .max_event_bytes(MAX_EVENT_BYTES)
            .answer_limits(LIMITS)
            .build()
            .expect("a valid client")
    })
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime")
    })
}

fuzz_target!(|answer: Answer| {
    let mut body = Vec::new();
    for piece in &answer.pieces {
        piece.render(&mut body);
    }
    let mut points: Vec<usize> = answer
        .cuts
        .iter()
        .map(|&cut| usize::from(cut) % (body.len() + 1))
        .collect();
    points.sort_unstable();
    let mut parts = Vec::with_capacity(points.len() + 1);
    let mut start = 0;
    for point in points {
        parts.push(Bytes::copy_from_slice(&body[start..point]));
        start = point;
    }
    parts.push(Bytes::copy_from_slice(&body[start..]));

    let client = client();
    let items: Vec<Result<StreamItem, LlmError>> = runtime().block_on(async {
        let _guard = tokio::runtime::Handle::current().enter();
        client.read_body_for_fuzzing(parts).collect().await
    });

    let mut bytes = 0;
    let mut finished = false;
    for (position, item) in items.iter().enumerate() {
        match item {
            Err(_) => assert_eq!(
                position + 1,
                items.len(),
                "nothing after an error: {items:?}"
            ),
            Ok(StreamItem::Text(text) | StreamItem::Reasoning(text)) => {
                assert!(!finished, "no text after the finish reason");
                bytes += text.len();
            }
            Ok(StreamItem::ToolCalls(calls)) => {
                assert!(!finished, "calls come before the finish reason");
                assert!(
                    calls.len() <= LIMITS.max_tool_calls,
                    "{} calls",
                    calls.len()
                );
                for call in calls {
                    let size = call.id.len() + call.name.len() + call.arguments.len();
                    // A call with no arguments is handed out with `{}`; a synthesised id is
                    // short.
                    assert!(size <= LIMITS.max_call_bytes + 32, "a call of {size} bytes");
                    bytes += call.name.len() + call.arguments.len();
                }
            }
            Ok(StreamItem::Finish(_)) => finished = true,
            Ok(StreamItem::Usage(_)) => {}
        }
    }
    assert!(
        bytes <= LIMITS.max_answer_bytes + 32 * LIMITS.max_tool_calls,
        "{bytes} bytes handed out"
    );
});
