//! Lenient serde types for what OpenAI-compatible servers send back. Kept hand-written on
//! purpose: no crate's types read every server's odd shapes, and the strict-first reading
//! below was measured on the chunk path (the tests pin each shape).
//!
//! Servers that call themselves OpenAI-compatible differ in small ways, and none of those ways
//! may break a voice turn. Every field here is optional and defaulted, unknown fields are
//! ignored, and a field of the wrong type is read as absent instead of failing the whole chunk:
//!
//! - `choices` missing, `null` or `[]` (a usage-only chunk); a malformed choice is skipped;
//! - choice `index` missing (read as 0), `delta` / `message` / `content` `null`;
//! - `content` as a string or as an array of `{"text": ..}` parts;
//! - `finish_reason` `""` or `null` (not finished yet);
//! - tool-call deltas without `index` or `id`, `arguments` as a JSON string or as an object;
//! - `usage` `null` or `{}` (ignored), or with only some of the counts;
//! - `object`, `created` (sometimes a float), `model`, `id`... are never read;
//! - an `error` object (or string) mid-stream or in a 200 answer.
//!
//! Reading every field through a `serde_json::Value` costs a map and a copy per object, on
//! every chunk. So a chunk is first read strictly, straight into the same types, in the shape
//! OpenAI and most servers send ([`decode_chunk`]); only when that fails (an odd shape, an
//! `error`) is it read again leniently. Both readings agree wherever the strict one succeeds.

use std::{fmt, marker::PhantomData};

use serde::{
    Deserialize, Deserializer,
    de::{DeserializeOwned, IgnoredAny, SeqAccess, Visitor},
};
use serde_json::Value;

use crate::{ToolCallDelta, Usage};

/// One streamed chunk, or a whole non-streamed answer (same envelope).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Chunk {
    /// The choices; only index 0 is used.
    #[serde(deserialize_with = "lenient_vec")]
    pub(crate) choices: Vec<Choice>,
    /// Token counts, usually in a last chunk with no choices.
    #[serde(deserialize_with = "lenient")]
    pub(crate) usage: Option<WireUsage>,
    /// An error the server reports in place of (or in the middle of) an answer.
    #[serde(deserialize_with = "lenient")]
    pub(crate) error: Option<Value>,
    /// Groq's extension object: its `usage` is the only usage Groq sends without
    /// `stream_options`.
    #[serde(deserialize_with = "lenient")]
    pub(crate) x_groq: Option<XGroq>,
}

/// Groq's `x_groq` object of a chunk; only its usage is read.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct XGroq {
    #[serde(deserialize_with = "lenient")]
    usage: Option<WireUsage>,
}

impl Chunk {
    /// The chunk's token usage: `usage`, else Groq's `x_groq.usage`.
    pub(crate) fn usage(&self) -> Option<Usage> {
        self.usage
            .as_ref()
            .and_then(WireUsage::to_usage)
            .or_else(|| self.x_groq.as_ref()?.usage.as_ref()?.to_usage())
    }
}

/// One choice of a chunk (`delta`) or of a whole answer (`message`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Choice {
    /// The choice's position; missing means 0.
    #[serde(deserialize_with = "lenient")]
    pub(crate) index: Option<u32>,
    /// What this chunk adds (streaming).
    #[serde(deserialize_with = "lenient")]
    pub(crate) delta: Option<Delta>,
    /// The whole message (non-streaming; a few servers also stream it this way).
    #[serde(deserialize_with = "lenient")]
    pub(crate) message: Option<Delta>,
    /// Why the model stopped; `""` means it has not.
    #[serde(deserialize_with = "lenient")]
    pub(crate) finish_reason: Option<String>,
}

impl Choice {
    /// The choice's position, 0 when the server left it out.
    pub(crate) fn position(&self) -> u32 {
        self.index.unwrap_or(0)
    }

    /// The delta, or the message when a server streams that instead.
    pub(crate) fn into_body(self) -> Option<Delta> {
        self.delta.or(self.message)
    }
}

/// The text and tool calls a chunk adds (or a whole message holds).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Delta {
    /// The text, as a string or as content parts.
    #[serde(deserialize_with = "lenient_text")]
    pub(crate) content: Option<String>,
    /// Tool-call fragments (whole calls in a non-streamed answer).
    #[serde(deserialize_with = "lenient_vec")]
    pub(crate) tool_calls: Vec<WireToolCall>,
    /// Reasoning text, under DeepSeek's and vLLM's name.
    #[serde(deserialize_with = "lenient_text")]
    reasoning_content: Option<String>,
    /// Reasoning text, under OpenRouter's (and newer vLLM's) name.
    #[serde(deserialize_with = "lenient_text")]
    reasoning: Option<String>,
}

impl Delta {
    /// The reasoning text, under either name (`reasoning_content` first: a server that sends
    /// both sends the same text twice).
    pub(crate) fn take_reasoning(&mut self) -> Option<String> {
        self.reasoning_content
            .take()
            .or_else(|| self.reasoning.take())
            .filter(|t| !t.is_empty())
    }
}

/// One tool-call fragment.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WireToolCall {
    #[serde(deserialize_with = "lenient")]
    index: Option<u32>,
    #[serde(deserialize_with = "lenient")]
    id: Option<String>,
    #[serde(deserialize_with = "lenient")]
    function: Option<WireFunction>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireFunction {
    #[serde(deserialize_with = "lenient")]
    name: Option<String>,
    #[serde(deserialize_with = "lenient")]
    arguments: Option<Value>,
}

impl WireToolCall {
    /// The fragment for the [`crate::ToolCallAssembler`]; `fallback_index` stands in for a
    /// missing `index` when the caller knows the position (whole, non-streamed calls).
    pub(crate) fn into_delta(self, fallback_index: Option<u32>) -> ToolCallDelta {
        let (name, arguments) = match self.function {
            Some(function) => (function.name, function.arguments.and_then(arguments_text)),
            None => (None, None),
        };
        ToolCallDelta {
            index: self.index.or(fallback_index),
            id: self.id,
            name,
            arguments,
        }
    }
}

/// Arguments as JSON text: strings as they are, objects (sent by some servers) re-encoded.
fn arguments_text(value: Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(text) => Some(text),
        other => Some(other.to_string()),
    }
}

/// Token counts as sent; any of them may be missing.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WireUsage {
    #[serde(deserialize_with = "lenient_count")]
    prompt_tokens: Option<u32>,
    #[serde(deserialize_with = "lenient_count")]
    completion_tokens: Option<u32>,
    #[serde(deserialize_with = "lenient_count")]
    total_tokens: Option<u32>,
    #[serde(deserialize_with = "lenient")]
    completion_tokens_details: Option<WireCompletionDetails>,
    #[serde(deserialize_with = "lenient")]
    prompt_tokens_details: Option<WirePromptDetails>,
}

/// The breakdown of the prompt tokens (OpenAI, Azure, DeepSeek through OpenRouter).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WirePromptDetails {
    #[serde(deserialize_with = "lenient_count")]
    cached_tokens: Option<u32>,
}

/// The breakdown of the completion tokens (OpenAI, DeepSeek, OpenRouter).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WireCompletionDetails {
    #[serde(deserialize_with = "lenient_count")]
    reasoning_tokens: Option<u32>,
}

impl WireUsage {
    /// The usage, or `None` when the object carries no counts at all (`"usage": {}`).
    pub(crate) fn to_usage(&self) -> Option<Usage> {
        if self.prompt_tokens.is_none()
            && self.completion_tokens.is_none()
            && self.total_tokens.is_none()
        {
            return None;
        }
        let prompt_tokens = self.prompt_tokens.unwrap_or(0);
        let completion_tokens = self.completion_tokens.unwrap_or(0);
        Some(Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: self
                .total_tokens
                .unwrap_or_else(|| prompt_tokens.saturating_add(completion_tokens)),
            reasoning_tokens: self
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
            cached_tokens: self
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
        })
    }
}

/// Reads a chunk (or a whole answer): strictly typed first, leniently when that fails.
///
/// The error is the lenient reading's, so an unreadable chunk is reported as before.
pub(crate) fn decode_chunk(data: &[u8]) -> Result<Chunk, serde_json::Error> {
    match strict_chunk(data) {
        Some(chunk) => Ok(chunk),
        None => read(data),
    }
}

/// `data` read as JSON: as text when it is UTF-8 (every chunk a server sends), so that serde
/// does not check each string's UTF-8 again, which was 3 % of a text turn's instructions.
fn read<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Result<T, serde_json::Error> {
    match std::str::from_utf8(data) {
        Ok(text) => serde_json::from_str(text),
        // serde's own reading reports where the bytes go wrong.
        Err(_) => serde_json::from_slice(data),
    }
}

/// The chunk read strictly, or `None` when it is not in the common shape.
pub(crate) fn strict_chunk(data: &[u8]) -> Option<Chunk> {
    // Only objects take the strict path: serde also reads structs from arrays, which the
    // lenient path must judge alone.
    if data.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let strict = read::<StrictChunk>(data).ok()?;
    if strict.error.is_some() {
        return None;
    }
    // Groq's usage is read into `usage` here, so the lenient `x_groq` stays empty.
    let usage = strict.usage.or(strict.x_groq.and_then(|x| x.usage));
    Some(Chunk {
        choices: strict.choices,
        usage: usage.map(WireUsage::from),
        error: None,
        x_groq: None,
    })
}

/// The common chunk shape, every field of its one expected type (or `null`, or missing).
#[derive(Deserialize)]
struct StrictChunk {
    #[serde(default, deserialize_with = "strict_vec::<_, StrictChoice, Choice>")]
    choices: Vec<Choice>,
    usage: Option<StrictUsage>,
    /// Any `error` sends the chunk down the lenient path, which reads its many shapes.
    error: Option<IgnoredAny>,
    x_groq: Option<StrictXGroq>,
}

/// Groq's `x_groq` (its `id`, timings and the rest are skipped unread).
#[derive(Deserialize)]
struct StrictXGroq {
    usage: Option<StrictUsage>,
}

#[derive(Deserialize)]
struct StrictChoice {
    index: Option<u32>,
    delta: Option<StrictDelta>,
    message: Option<StrictDelta>,
    finish_reason: Option<String>,
}

impl From<StrictChoice> for Choice {
    fn from(choice: StrictChoice) -> Self {
        Self {
            index: choice.index,
            delta: choice.delta.map(Delta::from),
            message: choice.message.map(Delta::from),
            finish_reason: choice.finish_reason,
        }
    }
}

#[derive(Deserialize)]
struct StrictDelta {
    /// A plain string; content parts take the lenient path.
    content: Option<String>,
    #[serde(
        default,
        deserialize_with = "strict_vec::<_, StrictToolCall, WireToolCall>"
    )]
    tool_calls: Vec<WireToolCall>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
}

impl From<StrictDelta> for Delta {
    fn from(delta: StrictDelta) -> Self {
        Self {
            content: delta.content,
            tool_calls: delta.tool_calls,
            reasoning_content: delta.reasoning_content,
            reasoning: delta.reasoning,
        }
    }
}

#[derive(Deserialize)]
struct StrictToolCall {
    index: Option<u32>,
    id: Option<String>,
    function: Option<StrictFunction>,
}

#[derive(Deserialize)]
struct StrictFunction {
    name: Option<String>,
    /// JSON text; arguments sent as an object take the lenient path.
    arguments: Option<String>,
}

impl From<StrictToolCall> for WireToolCall {
    fn from(call: StrictToolCall) -> Self {
        Self {
            index: call.index,
            id: call.id,
            function: call.function.map(|f| WireFunction {
                name: f.name,
                arguments: f.arguments.map(Value::String),
            }),
        }
    }
}

/// Whole-number counts; floats and out-of-range counts take the lenient path.
#[derive(Deserialize)]
struct StrictUsage {
    prompt_tokens: Option<u32>,
    completion_tokens: Option<u32>,
    total_tokens: Option<u32>,
    completion_tokens_details: Option<StrictCompletionDetails>,
    prompt_tokens_details: Option<StrictPromptDetails>,
}

#[derive(Deserialize)]
struct StrictCompletionDetails {
    reasoning_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct StrictPromptDetails {
    cached_tokens: Option<u32>,
}

impl From<StrictUsage> for WireUsage {
    fn from(usage: StrictUsage) -> Self {
        Self {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens,
            completion_tokens_details: usage.completion_tokens_details.map(|d| {
                WireCompletionDetails {
                    reasoning_tokens: d.reasoning_tokens,
                }
            }),
            prompt_tokens_details: usage.prompt_tokens_details.map(|d| WirePromptDetails {
                cached_tokens: d.cached_tokens,
            }),
        }
    }
}

/// Reads `null` or an array of `S`, converting each element as it is read (no second `Vec`);
/// any element of another shape fails the whole strict reading.
fn strict_vec<'de, D, S, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    S: Deserialize<'de>,
    T: From<S>,
{
    struct Items<S, T>(PhantomData<fn(S) -> T>);

    impl<'de, S: Deserialize<'de>, T: From<S>> Visitor<'de> for Items<S, T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array or null")
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Vec<T>, E> {
            Ok(Vec::new())
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<T>, E> {
            Ok(Vec::new())
        }

        fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<T>, D::Error> {
            deserializer.deserialize_seq(self)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(1).min(16));
            while let Some(item) = seq.next_element::<S>()? {
                items.push(T::from(item));
            }
            Ok(items)
        }
    }

    deserializer.deserialize_option(Items(PhantomData))
}

/// The message of an `error` value, or `None` when it is empty (`null`, `{}`, `""`).
pub(crate) fn error_message(error: &Value) -> Option<String> {
    let message = match error {
        Value::Null => return None,
        Value::String(text) => text.clone(),
        Value::Object(fields) if fields.is_empty() => return None,
        Value::Object(fields) => match fields.get("message") {
            Some(Value::String(text)) => text.clone(),
            _ => error.to_string(),
        },
        other => other.to_string(),
    };
    (!message.trim().is_empty()).then_some(message)
}

/// Reads an HTTP error body the way different servers write it: OpenAI's
/// `{"error": {"message"}}`, `{"error": "..."}`, vLLM's top-level `{"message"}`, FastAPI's
/// `{"detail"}`, or plain text. Returns `None` for an empty body.
pub(crate) fn error_body_message(body: &[u8]) -> Option<String> {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let found = value
            .get("error")
            .and_then(error_message)
            .or_else(|| value.get("message").and_then(error_message))
            .or_else(|| value.get("detail").and_then(error_message));
        if found.is_some() {
            return found;
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| snippet(text, 500))
}

/// At most `max` characters of `text`, marked when cut.
pub(crate) fn snippet(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Reads a value of type `T`, or `None` when it is `null` or of another shape.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).ok())
}

/// Reads an array, skipping elements of another shape; anything but an array is empty.
fn lenient_vec<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    Ok(match Value::deserialize(deserializer)? {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|item| serde_json::from_value(item).ok())
            .collect(),
        _ => Vec::new(),
    })
}

/// Reads content sent as a string or as an array of parts with `text`.
fn lenient_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::String(text) => Some(text),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|part| match part {
                    Value::String(text) => Some(text.as_str()),
                    other => other.get("text").and_then(Value::as_str),
                })
                .collect(),
        ),
        _ => None,
    })
}

/// Reads a token count sent as an integer or a float.
fn lenient_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::Number(number) => number
            .as_u64()
            .or_else(|| {
                // Float counts (`12.0`) come from servers that do their maths in floats.
                number
                    .as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn chunk(value: Value) -> Chunk {
        serde_json::from_value(value).expect("every JSON object is a chunk")
    }

    #[test]
    fn chunks_read_as_text_and_bytes_that_are_not_utf8_are_refused_with_their_place() {
        let text = r#"{"choices":[{"index":0,"delta":{"content":"caf\u00e9 \"ok\" é"}}]}"#;
        let chunk = decode_chunk(text.as_bytes()).expect("a chunk");
        let delta = chunk.choices[0].delta.as_ref().expect("delta");
        assert_eq!(delta.content.as_deref(), Some("café \"ok\" é"));
        let mut broken = br#"{"choices":[{"delta":{"content":"x"#.to_vec();
        broken.extend_from_slice(&[0xff, 0xfe]);
        broken.extend_from_slice(br#""}}]}"#);
        let error = decode_chunk(&broken).expect_err("not UTF-8");
        assert!(error.to_string().contains("line 1"), "{error}");
        assert!(strict_chunk(&broken).is_none());
    }

    #[test]
    fn openai_shape_is_read() {
        let c = chunk(json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
            "model": "gpt-4o", "system_fingerprint": "fp",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"},
                         "logprobs": null, "finish_reason": null}]
        }));
        assert_eq!(c.choices.len(), 1);
        let body = c.choices[0].delta.as_ref().expect("delta");
        assert_eq!(body.content.as_deref(), Some("Hi"));
        assert_eq!(c.choices[0].finish_reason, None);
        assert!(c.usage.is_none() && c.error.is_none());
    }

    #[test]
    fn odd_envelopes_are_read_as_absent_fields() {
        // No `object`, float `created`, `choices: null`, `usage: {}`.
        let c = chunk(json!({"created": 1.7e9, "choices": null, "usage": {}}));
        assert!(c.choices.is_empty());
        assert_eq!(c.usage.and_then(|u| u.to_usage()), None);

        let c = chunk(json!({"choices": [], "usage": null}));
        assert!(c.choices.is_empty() && c.usage.is_none());

        // `choices` of the wrong type, unknown fields everywhere.
        let c = chunk(json!({"choices": "nope", "x_vendor": {"a": 1}}));
        assert!(c.choices.is_empty());
    }

    #[test]
    fn choice_without_index_and_null_delta_is_read() {
        let c = chunk(json!({"choices": [{"delta": null, "finish_reason": ""}]}));
        let choice = &c.choices[0];
        assert_eq!(choice.position(), 0);
        assert!(choice.delta.as_ref().is_none());
        assert_eq!(choice.finish_reason.as_deref(), Some(""));

        let c = chunk(json!({"choices": [{"index": 0, "delta": {"content": null}}]}));
        assert_eq!(
            c.choices[0].delta.as_ref().and_then(|d| d.content.clone()),
            None
        );
    }

    #[test]
    fn a_malformed_choice_is_skipped_not_fatal() {
        let c = chunk(json!({"choices": [7, {"index": 0, "delta": {"content": "ok"}}]}));
        assert_eq!(c.choices.len(), 1);
        assert_eq!(
            c.choices[0]
                .delta
                .as_ref()
                .and_then(|d| d.content.as_deref()),
            Some("ok")
        );
    }

    #[test]
    fn content_parts_are_joined() {
        let c = chunk(json!({"choices": [{"delta": {"content": [
            {"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}
        ]}}]}));
        assert_eq!(
            c.choices[0]
                .delta
                .as_ref()
                .and_then(|d| d.content.as_deref()),
            Some("Hello")
        );
    }

    #[test]
    fn tool_call_arguments_as_object_become_json_text() {
        let c = chunk(json!({"choices": [{"delta": {"tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
        ]}}]}));
        let mut c = c;
        let delta = c
            .choices
            .remove(0)
            .delta
            .expect("delta")
            .tool_calls
            .remove(0);
        let delta = delta.into_delta(None);
        assert_eq!(delta.index, None, "no index on the wire stays absent");
        assert_eq!(delta.id.as_deref(), Some("c1"));
        assert_eq!(delta.name.as_deref(), Some("get_weather"));
        assert_eq!(delta.arguments.as_deref(), Some(r#"{"city":"Oslo"}"#));
    }

    #[test]
    fn tool_call_fallback_index_only_fills_a_missing_one() {
        let with: WireToolCall = serde_json::from_value(json!({"index": 3})).expect("call");
        assert_eq!(with.into_delta(Some(0)).index, Some(3));
        let without: WireToolCall = serde_json::from_value(json!({})).expect("call");
        assert_eq!(without.into_delta(Some(1)).index, Some(1));
    }

    #[test]
    fn usage_counts_are_read_leniently() {
        let usage = |v: Value| {
            serde_json::from_value::<WireUsage>(v)
                .expect("usage")
                .to_usage()
        };
        assert_eq!(
            usage(json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})),
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 4,
                total_tokens: 7,
                reasoning_tokens: 0,
                cached_tokens: 0,
            })
        );
        // Floats, and a missing total computed from the parts.
        assert_eq!(
            usage(json!({"prompt_tokens": 3.0, "completion_tokens": 4})),
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 4,
                total_tokens: 7,
                reasoning_tokens: 0,
                cached_tokens: 0,
            })
        );
        assert_eq!(usage(json!({})), None);
        assert_eq!(usage(json!({"prompt_tokens": "many"})), None);
    }

    #[test]
    fn error_objects_strings_and_empties() {
        assert_eq!(
            error_message(&json!({"message": "overloaded", "type": "server_error"})),
            Some("overloaded".to_owned())
        );
        assert_eq!(error_message(&json!("boom")), Some("boom".to_owned()));
        assert_eq!(
            error_message(&json!({"code": 500})),
            Some(r#"{"code":500}"#.to_owned())
        );
        assert_eq!(error_message(&json!({})), None);
        assert_eq!(error_message(&Value::Null), None);
        let c = chunk(json!({"error": {"message": "rate limited mid-stream"}}));
        assert_eq!(
            c.error.as_ref().and_then(error_message).as_deref(),
            Some("rate limited mid-stream")
        );
    }

    #[test]
    fn http_error_bodies_of_every_server_style() {
        let read = |body: &str| error_body_message(body.as_bytes());
        assert_eq!(
            read(r#"{"error": {"message": "bad model", "type": "invalid_request_error"}}"#),
            Some("bad model".to_owned())
        );
        assert_eq!(
            read(r#"{"object": "error", "message": "too long", "code": 400}"#),
            Some("too long".to_owned())
        );
        assert_eq!(
            read(r#"{"detail": "Not Found"}"#),
            Some("Not Found".to_owned())
        );
        assert_eq!(
            read("upstream connect error"),
            Some("upstream connect error".to_owned())
        );
        assert_eq!(read("  "), None);
    }

    #[test]
    fn snippet_cuts_on_char_boundaries() {
        assert_eq!(snippet("héllo", 2), "hé…");
        assert_eq!(snippet("hi", 5), "hi");
    }
}
