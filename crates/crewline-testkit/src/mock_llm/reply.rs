//! Turning a scripted [`Reply`] into OpenAI's wire shapes: SSE chunk frames, a plain JSON
//! completion, and the stream that plays the frames with the scripted pauses and faults.

use std::{
    pin::Pin,
    task::{Context, Poll, ready},
    time::Duration,
};

use axum::body::Bytes;
use futures::Stream;
use serde_json::{Value, json};
use tokio::time::{Instant, Sleep};

use super::{Recorder, script::Reply};

/// The `created` of every answer: fixed, so recordings are deterministic.
pub(crate) const CREATED: u64 = 1_700_000_000;

/// The completion id of the request numbered `index`.
fn completion_id(index: usize) -> String {
    format!("chatcmpl-mock-{index}")
}

/// The non-streaming answer: one `chat.completion` object.
pub(crate) fn completion(reply: &Reply, model: &str, index: usize) -> Value {
    let content = reply.content_chunks.concat();
    let mut message = json!({
        "role": "assistant",
        "content": if content.is_empty() { Value::Null } else { Value::String(content) },
    });
    if !reply.tool_calls.is_empty() {
        message["tool_calls"] = reply
            .tool_calls
            .iter()
            .map(|call| {
                json!({
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_chunks.concat()},
                })
            })
            .collect();
    }
    json!({
        "id": completion_id(index),
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": reply.finish_reason()}],
        "usage": reply.usage(index),
    })
}

/// Writes the SSE frames of a streamed answer, `data: {chunk}\n\n` each, ending with
/// `data: [DONE]`; the usage chunk is included when `include_usage`.
///
/// The shape follows OpenAI (and the Python mock): a first delta with the role (and
/// `content: ""` for text), one delta per text piece; per tool call a header delta (`index`,
/// `id`, `type`, `function.name`, empty `arguments`) then argument-fragment deltas with only
/// `index` and `function.arguments`; an empty delta with the finish reason; the usage chunk
/// (`choices: []`); `[DONE]`.
pub(crate) fn sse_frames(
    reply: &Reply,
    model: &str,
    index: usize,
    include_usage: bool,
) -> Vec<Bytes> {
    if let Some(body) = &reply.sse_body {
        return recorded_frames(body);
    }
    let writer = ChunkWriter::new(&completion_id(index), model);
    let chunk =
        |delta: Value, finish: Option<&str>| writer.frame(|out| write_json(out, &delta), finish);
    let calls = &reply.tool_calls;
    let mut frames = Vec::with_capacity(
        reply.content_chunks.len()
            + calls
                .iter()
                .map(|c| c.arguments_chunks.len() + 1)
                .sum::<usize>()
            + 4,
    );
    let has_text = !reply.content_chunks.is_empty();
    if has_text || calls.is_empty() {
        frames.push(chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            None,
        ));
    }
    for text in &reply.content_chunks {
        // The hot path of load tests: written straight into the frame, no JSON tree.
        frames.push(writer.frame(
            |out| {
                out.extend_from_slice(b"{\"content\":");
                write_str(out, text);
                out.push(b'}');
            },
            None,
        ));
    }
    if !calls.is_empty() {
        let header = |i: usize| {
            json!({
                "index": i,
                "id": calls[i].id,
                "type": "function",
                "function": {"name": calls[i].name, "arguments": ""},
            })
        };
        // Without text, the role arrives with the first tool-call delta.
        let with_role = |tool_calls: Value, first: bool| {
            if first && !has_text {
                json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": tool_calls})
            } else {
                json!({"tool_calls": tool_calls})
            }
        };
        let fragments = |frames: &mut Vec<Bytes>, i: usize| {
            for fragment in &calls[i].arguments_chunks {
                frames.push(chunk(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": fragment}}]}),
                    None,
                ));
            }
        };
        if reply.tool_calls_in_one_chunk {
            let headers: Vec<Value> = (0..calls.len()).map(header).collect();
            frames.push(chunk(with_role(Value::Array(headers), true), None));
            for i in 0..calls.len() {
                fragments(&mut frames, i);
            }
        } else {
            for i in 0..calls.len() {
                frames.push(chunk(with_role(json!([header(i)]), i == 0), None));
                fragments(&mut frames, i);
            }
        }
    }
    frames.push(chunk(json!({}), Some(reply.finish_reason())));
    if include_usage {
        frames.push(frame(&json!({
            "id": completion_id(index),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_mock",
            "choices": [],
            "usage": reply.usage(index),
        })));
    }
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames
}

/// A recorded body cut into its SSE events, each with the blank line that ends it (LF or
/// CRLF, as recorded); bytes after the last blank line are a last piece of their own.
fn recorded_frames(body: &Bytes) -> Vec<Bytes> {
    let mut frames = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at < body.len() {
        let end = if body[at..].starts_with(b"\r\n\r\n") {
            Some(at + 4)
        } else if body[at..].starts_with(b"\n\n") {
            Some(at + 2)
        } else {
            None
        };
        match end {
            Some(end) => {
                frames.push(body.slice(start..end));
                start = end;
                at = end;
            }
            None => at += 1,
        }
    }
    if start < body.len() {
        frames.push(body.slice(start..));
    }
    frames
}

/// Writes the chunk frames of one answer: the envelope before the delta is serialised once,
/// and each frame is one buffer, sized up front.
struct ChunkWriter {
    /// `data: {"id":..,"object":..,"created":..,"model":..,"system_fingerprint":..,"choices":[{"index":0,"delta":`
    prefix: Vec<u8>,
}

impl ChunkWriter {
    fn new(id: &str, model: &str) -> Self {
        let mut prefix = Vec::with_capacity(160 + id.len() + model.len());
        prefix.extend_from_slice(b"data: {\"id\":");
        write_str(&mut prefix, id);
        prefix.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
        prefix.extend_from_slice(CREATED.to_string().as_bytes());
        prefix.extend_from_slice(b",\"model\":");
        write_str(&mut prefix, model);
        prefix.extend_from_slice(
            b",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":",
        );
        Self { prefix }
    }

    /// One chunk: the envelope, the delta `write_delta` writes, and the finish reason.
    fn frame(&self, write_delta: impl FnOnce(&mut Vec<u8>), finish: Option<&str>) -> Bytes {
        let mut out = Vec::with_capacity(self.prefix.len() + 160);
        out.extend_from_slice(&self.prefix);
        write_delta(&mut out);
        out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
        match finish {
            Some(reason) => write_str(&mut out, reason),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b"}]}\n\n");
        Bytes::from(out)
    }
}

/// Appends `value` as compact JSON.
fn write_json(out: &mut Vec<u8>, value: &Value) {
    // Serialising a JSON value into a Vec cannot fail.
    let _ = serde_json::to_writer(out, value);
}

/// Appends `text` as a JSON string.
fn write_str(out: &mut Vec<u8>, text: &str) {
    // Serialising a string into a Vec cannot fail.
    let _ = serde_json::to_writer(out, text);
}

/// One SSE event carrying `value`.
fn frame(value: &Value) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"data: ");
    // Writing a `Value` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, value);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// How long a stream pauses before a scripted cut, so the events before it reach the client.
const CUT_FLUSH_GRACE: Duration = Duration::from_millis(20);

/// The error a stream yields to make the server abort the connection.
fn cut_error() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "mock LLM: connection cut by script",
    )
}

/// Plays prepared SSE frames: an optional pause before each, an abort after
/// `cut_after` frames, and the request's outcome recorded when it ends.
///
/// Yielding an error makes hyper drop the connection without the terminating zero-length
/// chunk, so the client sees an incomplete chunked body, like the Python mock's
/// `transport.abort()`. The pause timer is allocated once per stream and reset per frame.
pub(crate) struct ReplyStream {
    frames: std::vec::IntoIter<Bytes>,
    sent: usize,
    cut_after: Option<usize>,
    delay: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    waiting: bool,
    recorder: Recorder,
    finished: bool,
}

impl ReplyStream {
    pub(crate) fn new(
        frames: Vec<Bytes>,
        delay: Duration,
        cut_after: Option<usize>,
        recorder: Recorder,
    ) -> Self {
        Self {
            frames: frames.into_iter(),
            sent: 0,
            cut_after,
            delay,
            sleep: None,
            waiting: false,
            recorder,
            finished: false,
        }
    }

    /// Waits `delay` (the timer is armed on the first poll and reused across frames).
    fn pause(&mut self, delay: Duration, cx: &mut Context<'_>) -> Poll<()> {
        if !self.waiting {
            let deadline = Instant::now() + delay;
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(deadline),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.waiting = true;
        }
        if let Some(sleep) = &mut self.sleep {
            ready!(sleep.as_mut().poll(cx));
        }
        self.waiting = false;
        Poll::Ready(())
    }

    fn finish(&mut self, outcome: String) {
        self.finished = true;
        self.recorder.set_outcome(outcome);
    }
}

impl Stream for ReplyStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.finished {
            return Poll::Ready(None);
        }
        if this.cut_after.is_some_and(|n| this.sent >= n) {
            // Pause first so the server flushes what was already yielded: the client must
            // see those events, then the broken body.
            ready!(this.pause(CUT_FLUSH_GRACE, cx));
            let outcome = format!("cut_by_script_after_{}_chunks", this.sent);
            this.finish(outcome);
            return Poll::Ready(Some(Err(cut_error())));
        }
        if this.frames.as_slice().is_empty() {
            // The body ends right after its last frame (`[DONE]`), as a real server's does:
            // no pause before the terminating chunk.
            this.finish("completed".to_owned());
            return Poll::Ready(None);
        }
        if !this.delay.is_zero() {
            ready!(this.pause(this.delay, cx));
        }
        match this.frames.next() {
            Some(frame) => {
                this.sent += 1;
                Poll::Ready(Some(Ok(frame)))
            }
            None => {
                this.finish("completed".to_owned());
                Poll::Ready(None)
            }
        }
    }
}

impl Drop for ReplyStream {
    fn drop(&mut self) {
        if !self.finished {
            self.recorder.set_outcome("client_disconnected".to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock_llm::script::ScriptedCall;

    fn parse(frames: &[Bytes]) -> Vec<Value> {
        frames
            .iter()
            .map(|f| {
                let text = std::str::from_utf8(f).unwrap();
                let payload = text
                    .strip_prefix("data: ")
                    .unwrap()
                    .strip_suffix("\n\n")
                    .unwrap();
                if payload == "[DONE]" {
                    Value::from("[DONE]")
                } else {
                    serde_json::from_str(payload).unwrap()
                }
            })
            .collect()
    }

    fn two_calls(in_one_chunk: bool) -> Reply {
        let call = |id: &str, city: &str| ScriptedCall {
            id: id.into(),
            name: "get_weather".into(),
            arguments_chunks: vec!["{\"location\": ".into(), format!("\"{city}\"}}")],
        };
        Reply {
            tool_calls: vec![call("call_a", "Paris"), call("call_b", "Tokyo")],
            tool_calls_in_one_chunk: in_one_chunk,
            ..Reply::default()
        }
    }

    #[test]
    fn text_streams_role_pieces_finish_usage_and_done() {
        let frames = sse_frames(&Reply::text(["Hel", "lo\u{b0}\""]), "m", 2, true);
        assert_eq!(
            std::str::from_utf8(&frames[1]).unwrap(),
            "data: {\"id\":\"chatcmpl-mock-2\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\
             \"model\":\"m\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\
             \"delta\":{\"content\":\"Hel\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
        );
        let events = parse(&frames);
        assert_eq!(events[2]["choices"][0]["delta"]["content"], "lo\u{b0}\"");
        assert_eq!(events.len(), 6);
        assert_eq!(
            events[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": "", "refusal": null})
        );
        assert_eq!(events[1]["choices"][0]["delta"], json!({"content": "Hel"}));
        assert_eq!(events[1]["object"], "chat.completion.chunk");
        assert_eq!(events[1]["id"], "chatcmpl-mock-2");
        assert_eq!(events[3]["choices"][0]["delta"], json!({}));
        assert_eq!(events[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(events[4]["choices"], json!([]));
        assert_eq!(events[4]["usage"]["prompt_tokens"], 30);
        assert_eq!(events[5], "[DONE]");
        let without_usage = parse(&sse_frames(&Reply::text(["x"]), "m", 0, false));
        assert_eq!(without_usage.len(), 4);
    }

    #[test]
    fn tool_calls_get_a_header_then_fragments() {
        let events = parse(&sse_frames(&two_calls(false), "m", 0, false));
        let deltas: Vec<&Value> = events[..events.len() - 2]
            .iter()
            .map(|e| &e["choices"][0]["delta"])
            .collect();
        assert_eq!(deltas.len(), 6);
        assert_eq!(deltas[0]["role"], "assistant");
        assert_eq!(deltas[0]["content"], Value::Null);
        assert_eq!(deltas[0]["tool_calls"][0]["id"], "call_a");
        assert_eq!(deltas[0]["tool_calls"][0]["function"]["arguments"], "");
        assert_eq!(
            deltas[1],
            &json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"location\": "}}]})
        );
        assert_eq!(deltas[3]["tool_calls"][0]["index"], 1);
        assert!(deltas[3].get("role").is_none());
        assert_eq!(events[6]["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn headers_can_share_one_delta() {
        let events = parse(&sse_frames(&two_calls(true), "m", 0, false));
        let first = &events[0]["choices"][0]["delta"]["tool_calls"];
        assert_eq!(first.as_array().unwrap().len(), 2);
        assert_eq!(first[1]["id"], "call_b");
        assert_eq!(events.len(), 1 + 4 + 2);
    }

    #[test]
    fn non_streaming_answers_join_the_pieces() {
        let body = completion(&two_calls(false), "m", 0);
        assert_eq!(body["object"], "chat.completion");
        let message = &body["choices"][0]["message"];
        assert_eq!(message["content"], Value::Null);
        assert_eq!(
            message["tool_calls"][1]["function"]["arguments"],
            "{\"location\": \"Tokyo\"}"
        );
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
        let text = completion(&Reply::text(["a", "b"]), "m", 0);
        assert_eq!(text["choices"][0]["message"]["content"], "ab");
    }

    #[test]
    fn a_recorded_body_is_played_byte_for_byte_one_event_a_frame() {
        let body = "data: {\"a\":1}\r\n\r\n: keep-alive\n\ndata: é\n\ndata: [DONE]\n\ntrailing";
        let reply = Reply {
            sse_body: Some(Bytes::from(body)),
            ..Reply::text(["ignored"])
        };
        let frames = sse_frames(&reply, "m", 0, true);
        assert_eq!(frames.len(), 5);
        assert_eq!(&frames[0][..], b"data: {\"a\":1}\r\n\r\n");
        assert_eq!(&frames[1][..], b": keep-alive\n\n");
        assert_eq!(frames.concat(), body.as_bytes());
    }
}
