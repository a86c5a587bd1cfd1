//! Turns parsed chunks into [`StreamItem`]s, and a whole answer into a [`ChatResponse`].

use std::collections::VecDeque;

use crate::{
    AnswerLimits, ChatResponse, FinishReason, LlmError, StreamItem, ToolCallAssembler, Usage,
};

use super::wire::{Choice, Chunk, error_message, snippet};

/// What the stream reader should do after a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Read on.
    Continue,
    /// The chunk ended the answer with an error; stop reading.
    Stop,
}

/// The items one streamed answer has produced but not handed out yet.
pub(crate) type Pending = VecDeque<Result<StreamItem, LlmError>>;

/// The state of one streamed answer: the tool calls being put together, the bytes it has
/// brought, and whether the model has finished.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    tools: ToolCallAssembler,
    limits: AnswerLimits,
    /// The bytes of text and reasoning handed out so far (the calls count theirs).
    text_bytes: usize,
    finished: bool,
    last_usage: Option<Usage>,
    /// Whether a chunk since the last [`Decoder::take_progress`] carried anything: text, a
    /// tool-call delta, the finish reason or new usage (not a role alone, an empty delta or a
    /// vendor's bookkeeping).
    progress: bool,
}

impl Decoder {
    /// A decoder at the start of an answer, under the default [`AnswerLimits`].
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A decoder at the start of an answer under `limits`.
    pub(crate) fn with_limits(limits: AnswerLimits) -> Self {
        Self {
            tools: ToolCallAssembler::with_limits(limits),
            limits,
            ..Self::default()
        }
    }

    /// Counts `bytes` more of text or reasoning against the answer's limit.
    fn spend(&mut self, bytes: usize) -> Result<(), LlmError> {
        self.text_bytes = self.text_bytes.saturating_add(bytes);
        if self.text_bytes.saturating_add(self.tools.bytes()) > self.limits.max_answer_bytes {
            return Err(LlmError::TooLarge {
                what: "the answer",
                limit: self.limits.max_answer_bytes,
            });
        }
        Ok(())
    }

    /// Whether the model has said why it stopped.
    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    /// Whether the chunks read since the last call carried anything (see `progress`).
    pub(crate) fn take_progress(&mut self) -> bool {
        std::mem::take(&mut self.progress)
    }

    /// Reads one chunk, appending what it yields to `out` in the contract's order: text, then
    /// (on finish) the tool calls and the finish reason, then usage.
    pub(crate) fn push(&mut self, chunk: Chunk, out: &mut Pending) -> Flow {
        if let Some(message) = chunk.error.as_ref().and_then(error_message) {
            out.push_back(Err(LlmError::Api {
                status: None,
                message,
                retry_after: None,
            }));
            return Flow::Stop;
        }
        let usage = chunk.usage();
        if let Some(choice) = first_choice(chunk.choices)
            && let Err(error) = self.push_choice(choice, out)
        {
            // Past a limit: the answer ends here, and nothing more of it is kept.
            self.tools = ToolCallAssembler::with_limits(self.limits);
            out.push_back(Err(error));
            return Flow::Stop;
        }
        if let Some(usage) = usage
            // Some servers repeat the running usage on every chunk; say it once per value.
            && self.last_usage != Some(usage)
        {
            self.last_usage = Some(usage);
            self.progress = true;
            out.push_back(Ok(StreamItem::Usage(usage)));
        }
        Flow::Continue
    }

    /// Reads an SSE `error` event (llama.cpp's mid-stream failure): the answer ends with the
    /// server's message.
    pub(crate) fn push_error_event(&mut self, data: &str, out: &mut Pending) {
        let message = serde_json::from_str::<serde_json::Value>(data)
            .ok()
            .and_then(|value| {
                // `{"message": ..}` as llama.cpp writes it, or OpenAI's `{"error": {..}}`.
                let inner = value
                    .get("error")
                    .filter(|e| !e.is_null())
                    .unwrap_or(&value);
                error_message(inner)
            })
            .unwrap_or_else(|| snippet(data, 500));
        out.push_back(Err(LlmError::Api {
            status: None,
            message,
            retry_after: None,
        }));
    }

    /// Reads the choice's delta; fails when it takes the answer past a limit.
    fn push_choice(&mut self, choice: Choice, out: &mut Pending) -> Result<(), LlmError> {
        let reason = choice
            .finish_reason
            .as_deref()
            .and_then(FinishReason::parse);
        let body = choice.into_body();
        if self.finished {
            // The contract puts text and calls before `Finish`; a server that sends more after
            // it is not followed.
            if body.is_some_and(|b| b.content.as_deref().is_some_and(|t| !t.is_empty())) {
                tracing::debug!("text after finish_reason ignored");
            }
            return Ok(());
        }
        if let Some(mut body) = body {
            // Reasoning goes out on its own, never as text: it is not to be spoken. It counts
            // as progress, so a model that thinks for long does not look stalled.
            if let Some(reasoning) = body.take_reasoning() {
                self.progress = true;
                self.spend(reasoning.len())?;
                out.push_back(Ok(StreamItem::Reasoning(reasoning)));
            }
            if let Some(text) = body.content.filter(|t| !t.is_empty()) {
                self.progress = true;
                self.spend(text.len())?;
                out.push_back(Ok(StreamItem::Text(text)));
            }
            for call in body.tool_calls {
                self.progress = true;
                self.tools.push(call.into_delta(None))?;
            }
            // The calls' bytes count against the whole answer too.
            self.spend(0)?;
        }
        if let Some(reason) = reason {
            self.finish(reason, out);
        }
        Ok(())
    }

    fn finish(&mut self, reason: FinishReason, out: &mut Pending) {
        self.finished = true;
        self.progress = true;
        let tools = std::mem::replace(&mut self.tools, ToolCallAssembler::with_limits(self.limits));
        if !tools.is_empty() {
            out.push_back(Ok(StreamItem::ToolCalls(tools.finish())));
        }
        out.push_back(Ok(StreamItem::Finish(reason)));
    }

    /// Ends the answer when the server closed the stream cleanly: without a finish reason the
    /// answer was cut (a real server always sends one), and half-streamed tool calls are not
    /// handed out, since their arguments may be truncated.
    pub(crate) fn end(&mut self, out: &mut Pending) {
        if self.finished {
            return;
        }
        let dropped_calls = if self.tools.is_empty() {
            String::new()
        } else {
            "; unfinished tool calls were dropped".to_owned()
        };
        out.push_back(Err(LlmError::StreamCut(
            format!(
                "the server closed the stream before the model finished (no finish_reason){dropped_calls}"
            )
            .into(),
        )));
    }
}

/// The choice at index 0 (a missing index counts as 0).
fn first_choice(choices: Vec<Choice>) -> Option<Choice> {
    choices.into_iter().find(|c| c.position() == 0)
}

/// Reads a whole non-streamed answer, under `limits`.
pub(crate) fn response(chunk: Chunk, limits: AnswerLimits) -> Result<ChatResponse, LlmError> {
    if let Some(message) = chunk.error.as_ref().and_then(error_message) {
        return Err(LlmError::Api {
            status: None,
            message,
            retry_after: None,
        });
    }
    let usage = chunk.usage();
    let choice = first_choice(chunk.choices)
        .ok_or_else(|| LlmError::InvalidResponse("the answer has no choice at index 0".into()))?;
    let finish_reason = choice
        .finish_reason
        .as_deref()
        .and_then(FinishReason::parse);
    let mut response = ChatResponse {
        finish_reason,
        usage,
        ..ChatResponse::default()
    };
    if let Some(mut message) = choice.message.or(choice.delta) {
        response.reasoning = message.take_reasoning().unwrap_or_default();
        response.content = message.content.unwrap_or_default();
        // Whole calls go through the assembler too, so ids, names and empty arguments follow
        // the same rules as streamed ones, and so do the limits.
        let mut tools = ToolCallAssembler::with_limits(limits);
        for (position, call) in message.tool_calls.into_iter().enumerate() {
            tools.push(call.into_delta(u32::try_from(position).ok()))?;
        }
        let bytes = response.reasoning.len() + response.content.len() + tools.bytes();
        if bytes > limits.max_answer_bytes {
            return Err(LlmError::TooLarge {
                what: "the answer",
                limit: limits.max_answer_bytes,
            });
        }
        response.tool_calls = tools.finish();
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use crewline_core::ToolCall;
    use serde_json::{Value, json};

    use super::*;

    /// Decodes a whole stream of JSON chunks, as if the server closed it cleanly afterwards.
    fn decode(chunks: &[Value]) -> Vec<Result<StreamItem, LlmError>> {
        let mut decoder = Decoder::new();
        let mut out = Pending::new();
        for value in chunks {
            let chunk: Chunk = serde_json::from_value(value.clone()).expect("chunk");
            if decoder.push(chunk, &mut out) == Flow::Stop {
                return out.into();
            }
        }
        decoder.end(&mut out);
        out.into()
    }

    fn text(t: &str) -> StreamItem {
        StreamItem::Text(t.to_owned())
    }

    fn usage(p: u32, c: u32) -> StreamItem {
        StreamItem::Usage(Usage {
            prompt_tokens: p,
            completion_tokens: c,
            total_tokens: p + c,
            reasoning_tokens: 0,
            cached_tokens: 0,
        })
    }

    fn ok_items(items: Vec<Result<StreamItem, LlmError>>) -> Vec<StreamItem> {
        items.into_iter().map(|i| i.expect("no error")).collect()
    }

    #[test]
    fn text_finish_and_usage_in_order() {
        let items = decode(&[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}),
        ]);
        assert_eq!(
            ok_items(items),
            vec![
                StreamItem::Text("Hel".into()),
                StreamItem::Text("lo".into()),
                StreamItem::Finish(FinishReason::Stop),
                StreamItem::Usage(Usage {
                    prompt_tokens: 5,
                    completion_tokens: 2,
                    total_tokens: 7,
                    reasoning_tokens: 0,
                    cached_tokens: 0,
                }),
            ]
        );
    }

    #[test]
    fn every_odd_shape_still_yields_the_turn() {
        let items = decode(&[
            json!({"created": 1.7e9, "choices": [{"delta": null}]}),
            json!({"choices": [{"delta": {"content": null}, "finish_reason": ""}]}),
            json!({"choices": [{"delta": {"content": "Hi"}, "finish_reason": ""}], "usage": {}}),
            json!({"choices": null, "usage": null, "x_vendor": true}),
            json!({"choices": [{"index": 1, "delta": {"content": "other choice"}}]}),
            json!({"choices": [{"delta": {"content": " there"}, "finish_reason": "length"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}),
        ]);
        assert_eq!(
            items
                .into_iter()
                .map(|i| i.expect("ok"))
                .collect::<Vec<_>>(),
            vec![
                StreamItem::Text("Hi".into()),
                StreamItem::Text(" there".into()),
                StreamItem::Finish(FinishReason::Length),
                StreamItem::Usage(Usage {
                    prompt_tokens: 1,
                    completion_tokens: 2,
                    total_tokens: 3,
                    reasoning_tokens: 0,
                    cached_tokens: 0,
                }),
            ]
        );
    }

    #[test]
    fn tool_calls_come_before_finish() {
        let items = decode(&[
            json!({"choices": [{"delta": {"content": "Checking."}}]}),
            json!({"choices": [{"delta": {"tool_calls": [
                {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": ""}},
                {"index": 1, "id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}
            ]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\":"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        ]);
        assert_eq!(
            ok_items(items),
            vec![
                StreamItem::Text("Checking.".into()),
                StreamItem::ToolCalls(vec![
                    ToolCall::new("a", "f", r#"{"x":1}"#),
                    ToolCall::new("b", "g", "{}"),
                ]),
                StreamItem::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn index_less_deltas_and_object_arguments() {
        let items = decode(&[
            json!({"choices": [{"delta": {"tool_calls": [
                {"id": "c1", "function": {"name": "lookup", "arguments": {"q": "x"}}}
            ]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        ]);
        assert_eq!(
            ok_items(items),
            vec![
                StreamItem::ToolCalls(vec![ToolCall::new("c1", "lookup", r#"{"q":"x"}"#)]),
                StreamItem::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn a_stream_without_finish_reason_is_cut() {
        let items = decode(&[json!({"choices": [{"delta": {"content": "Hal"}}]})]);
        assert_eq!(items[0].as_ref().ok(), Some(&text("Hal")));
        assert!(
            matches!(&items[1], Err(LlmError::StreamCut(m)) if m.message().contains("finish_reason")),
            "{items:?}"
        );
        assert_eq!(items.len(), 2);
    }

    #[test]
    fn unfinished_tool_calls_are_not_handed_out_on_a_cut() {
        let items = decode(&[json!({"choices": [{"delta": {"tool_calls": [
            {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{\"x\""}}
        ]}}]})]);
        assert_eq!(items.len(), 1);
        assert!(
            matches!(&items[0], Err(LlmError::StreamCut(_))),
            "{items:?}"
        );
    }

    #[test]
    fn an_error_mid_stream_is_an_api_error_without_status() {
        let items = decode(&[
            json!({"choices": [{"delta": {"content": "Hi"}}]}),
            json!({"error": {"message": "The server had an error", "type": "server_error"}}),
            json!({"choices": [{"delta": {"content": "never read"}}]}),
        ]);
        assert_eq!(items[0].as_ref().ok(), Some(&text("Hi")));
        assert!(
            matches!(&items[1], Err(LlmError::Api { status: None, message, .. }) if message == "The server had an error"),
            "{items:?}"
        );
        assert_eq!(items.len(), 2);
    }

    #[test]
    fn groq_usage_in_x_groq_is_read_and_plain_usage_wins() {
        let groq = |usage: Value| json!({"choices": [], "x_groq": {"id": "req_1", "usage": usage}});
        let items = decode(&[
            json!({"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}]}),
            groq(json!({"queue_time": 0.05, "prompt_tokens": 4.0, "completion_tokens": 2})),
        ]);
        assert_eq!(
            ok_items(items),
            vec![
                text("a"),
                StreamItem::Finish(FinishReason::Stop),
                usage(4, 2)
            ]
        );
        let mut both = groq(json!({"prompt_tokens": 40, "completion_tokens": 20}));
        both["usage"] = json!({"prompt_tokens": 4, "completion_tokens": 2});
        let chunk: Chunk = serde_json::from_value(both).expect("chunk");
        assert_eq!(chunk.usage().map(|u| u.prompt_tokens), Some(4));
    }

    #[test]
    fn cached_prompt_tokens_are_read_strictly_and_leniently() {
        let strict: Chunk = serde_json::from_value(json!({"choices": [], "usage": {
            "prompt_tokens": 900, "completion_tokens": 12, "total_tokens": 912,
            "prompt_tokens_details": {"cached_tokens": 768, "audio_tokens": 0}}}))
        .expect("chunk");
        assert_eq!(strict.usage().map(|u| u.cached_tokens), Some(768));
        // A float count sends the chunk down the lenient path; the cached count survives it.
        let items = decode(&[
            json!({"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 900.0, "completion_tokens": 12,
                "prompt_tokens_details": {"cached_tokens": 768.0}}}),
        ]);
        let usage = ok_items(items).into_iter().find_map(|item| match item {
            StreamItem::Usage(usage) => Some(usage),
            _ => None,
        });
        assert_eq!(
            usage.map(|u| (u.prompt_tokens, u.cached_tokens)),
            Some((900, 768))
        );
    }

    #[test]
    fn an_sse_error_event_is_an_api_error_with_the_servers_message() {
        let mut decoder = Decoder::new();
        let mut out = Pending::new();
        decoder.push_error_event(
            r#"{"code":500,"message":"Failed to parse tool call arguments as JSON","type":"server_error"}"#,
            &mut out,
        );
        decoder.push_error_event(r#"{"error":{"message":"overloaded"}}"#, &mut out);
        decoder.push_error_event("plain words", &mut out);
        let messages: Vec<String> = out
            .into_iter()
            .map(|item| match item {
                Err(LlmError::Api {
                    status: None,
                    message,
                    ..
                }) => message,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            messages,
            [
                "Failed to parse tool call arguments as JSON",
                "overloaded",
                "plain words"
            ]
        );
    }

    #[test]
    fn repeated_running_usage_is_reported_once_per_value() {
        let items = decode(&[
            json!({"choices": [{"delta": {"content": "a"}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
            json!({"choices": [{"delta": {}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
            json!({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}),
        ]);
        assert_eq!(
            ok_items(items),
            vec![
                text("a"),
                usage(1, 1),
                StreamItem::Finish(FinishReason::Stop),
                usage(1, 2),
            ]
        );
    }

    #[test]
    fn finish_is_said_once_and_later_text_is_ignored() {
        let items = decode(&[
            json!({"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}]}),
            json!({"choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}]}),
        ]);
        assert_eq!(
            ok_items(items),
            vec![text("a"), StreamItem::Finish(FinishReason::Stop)]
        );
    }

    #[test]
    fn whole_answer_is_read_leniently() {
        let chunk: Chunk = serde_json::from_value(json!({
            "id": "x", "object": "chat.completion", "created": 1.5,
            "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
                {"function": {"name": "g", "arguments": {"b": 2}}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
        }))
        .expect("chunk");
        let response = response(chunk, AnswerLimits::default()).expect("response");
        assert_eq!(response.content, "");
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall::new("c1", "f", r#"{"a":1}"#),
                ToolCall::new("call_1", "g", r#"{"b":2}"#),
            ]
        );
        assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(response.usage.map(|u| u.total_tokens), Some(12));
    }

    #[test]
    fn whole_answer_errors() {
        let chunk: Chunk =
            serde_json::from_value(json!({"error": {"message": "nope"}})).expect("chunk");
        assert!(matches!(
            response(chunk, AnswerLimits::default()),
            Err(LlmError::Api { status: None, .. })
        ));
        let chunk: Chunk = serde_json::from_value(json!({"choices": []})).expect("chunk");
        assert!(matches!(
            response(chunk, AnswerLimits::default()),
            Err(LlmError::InvalidResponse(_))
        ));
    }

    /// What a chunk yields, through the stream decoder and as a whole answer.
    fn outcome(chunk: Chunk, again: Chunk) -> String {
        let mut decoder = Decoder::new();
        let mut out = Pending::new();
        let flow = decoder.push(chunk, &mut out);
        decoder.end(&mut out);
        format!(
            "{flow:?} {out:?} {:?}",
            response(again, AnswerLimits::default())
        )
    }

    #[test]
    fn strict_and_lenient_readings_agree_on_every_chunk_shape() {
        use super::super::wire::{decode_chunk, strict_chunk};

        // (chunk, whether the strict reading takes it)
        let corpus: &[(&str, bool)] = &[
            (
                r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
                true,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"content":"He said \"hi\"\n \u00e9 ✓"}}]}"#,
                true,
            ),
            (
                r#" {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]} "#,
                true,
            ),
            (
                r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0}}}"#,
                true,
            ),
            (r#"{"choices":[],"usage":{"prompt_tokens":9}}"#, true),
            // Groq without stream_options: usage only in `x_groq` (its times are floats).
            (
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"x_groq":{"id":"req_1","usage":{"queue_time":0.05,"prompt_tokens":44,"completion_tokens":11,"total_tokens":55}}}"#,
                true,
            ),
            (
                r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1},"x_groq":{"usage":{"prompt_tokens":44}}}"#,
                true,
            ),
            (
                r#"{"choices":[],"x_groq":{"usage":{"prompt_tokens":4.0}}}"#,
                false,
            ),
            (r#"{"choices":[],"x_groq":"req_1"}"#, false),
            (
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
                true,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}"#,
                true,
            ),
            (
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}},{"index":1,"id":"b","function":{"name":"g","arguments":null}}]},"finish_reason":"tool_calls"}]}"#,
                true,
            ),
            (
                r#"{"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"first"}}]}"#,
                true,
            ),
            (
                r#"{"choices":[{"delta":null,"finish_reason":""}],"error":null}"#,
                true,
            ),
            (
                r#"{"choices":[{"delta":{"content":null,"tool_calls":null},"finish_reason":"length"}]}"#,
                true,
            ),
            (r#"{"created":1.7e9,"choices":null,"usage":null}"#, true),
            (
                r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Whole","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#,
                true,
            ),
            ("{}", true),
            // Shapes only the lenient reading takes.
            (
                r#"{"choices":[{"delta":{"content":[{"type":"text","text":"Hel"},{"text":"lo"}]}}]}"#,
                false,
            ),
            (
                r#"{"choices":[{"delta":{"tool_calls":[{"id":"c1","function":{"name":"lookup","arguments":{"q":"x"}}}]}}]}"#,
                false,
            ),
            (
                r#"{"choices":[],"usage":{"prompt_tokens":3.0,"completion_tokens":4}}"#,
                false,
            ),
            (
                r#"{"choices":[],"usage":{"prompt_tokens":5000000000}}"#,
                false,
            ),
            (
                r#"{"choices":[{"index":-1,"delta":{"content":"x"}}]}"#,
                false,
            ),
            (
                r#"{"choices":[{"finish_reason":5,"delta":{"content":"x"}}]}"#,
                false,
            ),
            (
                r#"{"choices":[7,{"index":0,"delta":{"content":"ok"}}]}"#,
                false,
            ),
            (r#"{"choices":"nope","x_vendor":{"a":1}}"#, false),
            (r#"{"choices":[],"usage":{}}"#, true),
            (r#"{"usage":5}"#, false),
            (
                r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
                false,
            ),
            (r#"{"error":"boom"}"#, false),
            (r#"{"error":{}}"#, false),
            (
                r#"{"choices":[{"delta":{"content":"a"},"delta":{"content":"b"}}]}"#,
                false,
            ),
            ("[]", false),
            ("[[],null,null]", false),
        ];
        for (text, strict) in corpus {
            let bytes = text.as_bytes();
            let lenient = serde_json::from_slice::<Chunk>(bytes);
            assert_eq!(
                strict_chunk(bytes).is_some(),
                *strict,
                "strict reading of {text}"
            );
            match (strict_chunk(bytes), strict_chunk(bytes)) {
                (Some(fast), Some(again)) => {
                    let lenient =
                        lenient.expect("the lenient reading takes what the strict one does");
                    let lenient_again = serde_json::from_slice::<Chunk>(bytes).expect("chunk");
                    assert_eq!(
                        outcome(fast, again),
                        outcome(lenient, lenient_again),
                        "{text}"
                    );
                }
                _ => {
                    // The fallback is the lenient reading itself, errors included.
                    match (decode_chunk(bytes), lenient) {
                        (Ok(a), Ok(b)) => {
                            let again = serde_json::from_slice::<Chunk>(bytes).expect("chunk");
                            let again2 = serde_json::from_slice::<Chunk>(bytes).expect("chunk");
                            assert_eq!(outcome(a, again), outcome(b, again2), "{text}");
                        }
                        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
                        (a, b) => panic!("{text}: {a:?} vs {b:?}"),
                    }
                }
            }
        }
    }
}
