//! The mock's script: which reply each request gets, in the format of `reference/mock_llm.py`.

use std::time::Duration;

use axum::body::Bytes;
use serde_json::{Map, Value, json};

/// Why a script could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid mock LLM script: {0}")]
pub struct ScriptError(String);

/// A whole script: `{"model"?: str, "replies": [{"when"?: {...}, "reply": {...}}, ...]}`.
///
/// The first rule whose `when` matches a request wins; a rule without `when` always matches;
/// when none matches, the answer is the text `OK.` (as in the Python mock).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Script {
    /// The model name written into every chunk (default: the request's `model`).
    pub model: Option<String>,
    /// The rules, in order.
    pub rules: Vec<Rule>,
}

/// One rule of a script.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// When the rule applies.
    pub when: When,
    /// What is answered then.
    pub reply: Reply,
}

/// The conditions of a rule; all that are set must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct When {
    /// The request's index since the script was loaded (any JSON value; only an equal
    /// integer matches, like the Python mock's `!=`).
    pub request_index: Option<Value>,
    /// The role of the last message (`"tool"`, `"user"`...).
    pub last_role: Option<Value>,
    /// Text that the last user message's string content must contain.
    pub last_user_contains: Option<Value>,
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedCall {
    /// The call's id (`call_...`).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The argument fragments, one delta each.
    pub arguments_chunks: Vec<String>,
}

/// What one request is answered with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    /// Text deltas, one chunk each.
    pub content_chunks: Vec<String>,
    /// Tool calls, streamed after the text.
    pub tool_calls: Vec<ScriptedCall>,
    /// Put every call header in one delta (instead of one delta per call).
    pub tool_calls_in_one_chunk: bool,
    /// Call the first tool of the request instead of `tool_calls`, with arguments made from
    /// its JSON schema; `tool_calls` are sent only to a request that offers no tool.
    pub call_first_tool: bool,
    /// Answer a request that asks for JSON by a schema (`response_format` `json_schema`) with
    /// a value made from that schema (a typed answer that parses), instead of
    /// `content_chunks`; other requests get the reply as it is.
    pub answer_schema: bool,
    /// The finish reason (default `tool_calls` with calls, else `stop`).
    pub finish_reason: Option<String>,
    /// A pause before every SSE event.
    pub chunk_delay: Duration,
    /// A pause before the response headers (a stalled server).
    pub first_byte_delay: Duration,
    /// The usage object (default: made-up token counts).
    pub usage: Option<Value>,
    /// Answer with this HTTP status and a JSON error body instead of a completion.
    pub http_status: Option<u16>,
    /// The JSON error body for `http_status` (default: OpenAI's error shape).
    pub error_body: Option<Value>,
    /// A `Retry-After` header (in seconds) sent with `http_status`.
    pub retry_after_secs: Option<u64>,
    /// Abort the TCP connection after this many SSE events (an incomplete chunked body).
    pub cut_after_chunks: Option<usize>,
    /// A recorded SSE body (a provider's stream, byte for byte) streamed instead of the
    /// scripted content: cut into its events, paced and cut like them. Only streamed
    /// requests play it; a plain request gets an empty completion.
    pub sse_body: Option<Bytes>,
}

/// The largest recorded SSE body a script may hold, in bytes.
pub const MAX_SSE_BODY_BYTES: usize = 1024 * 1024;

/// The body of a recorded stream in the transcript format of crewline-llm's provider corpus
/// (`tests/providers/<provider>/<case>.sse`): `#` lines naming its sources, one blank line,
/// then the HTTP body exactly as the provider sent it. A file that does not start with `#`
/// is all body.
pub fn sse_transcript_body(transcript: &[u8]) -> Result<&[u8], ScriptError> {
    if !transcript.starts_with(b"#") {
        return Ok(transcript);
    }
    let mut rest = transcript;
    loop {
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Err(ScriptError(
                "a recorded stream's `#` header ends with a blank line, and this one never does"
                    .to_owned(),
            ));
        };
        let line = &rest[..end];
        rest = &rest[end + 1..];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return Ok(rest);
        }
        if !line.starts_with(b"#") {
            return Err(ScriptError(format!(
                "a recorded stream's header line does not start with #: {:?}",
                String::from_utf8_lossy(line)
            )));
        }
    }
}

impl Script {
    /// Reads a script from its JSON form (unknown keys are ignored, as in the Python mock).
    pub fn from_json(value: &Value) -> Result<Self, ScriptError> {
        let Some(object) = value.as_object() else {
            return match value {
                // The Python mock treats a null or empty script as "no rules".
                Value::Null => Ok(Self::default()),
                _ => Err(ScriptError("the script must be a JSON object".to_owned())),
            };
        };
        let model = match object.get("model") {
            None | Some(Value::Null) => None,
            Some(Value::String(model)) if model.is_empty() => None,
            Some(Value::String(model)) => Some(model.clone()),
            Some(_) => return Err(ScriptError("`model` must be a string".to_owned())),
        };
        let rules = match object.get("replies") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(rules)) => rules
                .iter()
                .enumerate()
                .map(|(i, rule)| {
                    Rule::from_json(rule).map_err(|e| ScriptError(format!("replies[{i}]: {}", e.0)))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(ScriptError("`replies` must be an array".to_owned())),
        };
        Ok(Self { model, rules })
    }

    /// Reads a script from JSON text.
    pub fn from_json_str(text: &str) -> Result<Self, ScriptError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| ScriptError(format!("not JSON: {e}")))?;
        Self::from_json(&value)
    }

    /// A script that answers every request with `chunks` text deltas, `chunk_delay` apart.
    pub fn text(chunks: usize, chunk_delay: Duration) -> Self {
        Self {
            model: None,
            rules: vec![Rule::always(Reply::text_chunks(chunks, chunk_delay))],
        }
    }

    /// A load-test script: the first request of a turn calls `get_weather`, the request after
    /// the tool result answers with `chunks` text deltas.
    pub fn weather_tool(chunks: usize, chunk_delay: Duration) -> Self {
        let call = Reply {
            tool_calls: vec![ScriptedCall {
                id: "call_mock_weather".to_owned(),
                name: "get_weather".to_owned(),
                arguments_chunks: vec!["{\"location\":".to_owned(), " \"Paris\"}".to_owned()],
            }],
            chunk_delay,
            ..Reply::default()
        };
        Self {
            model: None,
            rules: vec![
                Rule {
                    when: When {
                        last_role: Some(Value::from("tool")),
                        ..When::default()
                    },
                    reply: Reply::text_chunks(chunks, chunk_delay),
                },
                Rule::always(call),
            ],
        }
    }

    /// A script for any crew: the first request of a turn calls the first tool the request
    /// offers, with arguments made from the tool's JSON schema (`get_weather` for Paris when
    /// it offers none); the request after the tool result answers with `chunks` text deltas.
    pub fn first_tool(chunks: usize, chunk_delay: Duration) -> Self {
        let mut script = Self::weather_tool(chunks, chunk_delay);
        for rule in &mut script.rules {
            if !rule.reply.tool_calls.is_empty() {
                rule.reply.call_first_tool = true;
            }
        }
        script
    }

    /// The reply for the request numbered `index` whose JSON body is `body`.
    pub fn pick(&self, index: usize, body: &Value) -> &Reply {
        self.reply(self.pick_rule(index, body))
    }

    /// The position of the first rule matching the request numbered `index` with `body`.
    pub fn pick_rule(&self, index: usize, body: &Value) -> Option<usize> {
        let messages = body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        self.rules
            .iter()
            .position(|rule| rule.when.matches(index, messages))
    }

    /// The reply of the rule at `rule` (from [`pick_rule`](Self::pick_rule)); `OK.` for none.
    pub fn reply(&self, rule: Option<usize>) -> &Reply {
        rule.and_then(|i| self.rules.get(i))
            .map_or(&*DEFAULT_REPLY, |rule| &rule.reply)
    }
}

/// The answer when no rule matches: `OK.`
static DEFAULT_REPLY: std::sync::LazyLock<Reply> =
    std::sync::LazyLock::new(|| Reply::text(["OK."]));

impl Rule {
    /// A rule that always applies.
    pub fn always(reply: Reply) -> Self {
        Self {
            when: When::default(),
            reply,
        }
    }

    fn from_json(value: &Value) -> Result<Self, ScriptError> {
        let object = value
            .as_object()
            .ok_or_else(|| ScriptError("a rule must be an object".to_owned()))?;
        let when = match object.get("when") {
            None | Some(Value::Null) => When::default(),
            Some(Value::Object(when)) => When {
                request_index: when.get("request_index").cloned(),
                last_role: when.get("last_role").cloned(),
                last_user_contains: when.get("last_user_contains").cloned(),
            },
            Some(_) => return Err(ScriptError("`when` must be an object".to_owned())),
        };
        let reply = match object.get("reply") {
            // Like the Python mock, a rule without a reply answers `OK.`
            None | Some(Value::Null) => DEFAULT_REPLY.clone(),
            Some(reply) => Reply::from_json(reply)?,
        };
        Ok(Self { when, reply })
    }
}

impl When {
    /// Whether a request numbered `index` with `messages` satisfies every condition.
    pub fn matches(&self, index: usize, messages: &[Value]) -> bool {
        if let Some(expected) = &self.request_index
            && expected.as_u64() != u64::try_from(index).ok()
        {
            return false;
        }
        if let Some(expected) = &self.last_role {
            let role = messages.last().and_then(|m| m.get("role"));
            if role != Some(expected) {
                return false;
            }
        }
        if let Some(expected) = &self.last_user_contains {
            let content = messages
                .iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .and_then(|m| m.get("content"))
                .and_then(Value::as_str);
            match (content, expected.as_str()) {
                (Some(content), Some(needle)) if content.contains(needle) => {}
                _ => return false,
            }
        }
        true
    }
}

impl Reply {
    /// This reply as sent to a request with `body`: with `answer_schema`, a JSON answer by the
    /// request's `response_format` schema; with `call_first_tool`, one call to the request's
    /// first tool (`None`: the reply is sent as it is).
    pub fn for_request(&self, body: &Value) -> Option<Self> {
        if self.answer_schema
            && let Some(answer) = super::schema_args::answer_for_response_format(body)
        {
            return Some(Self {
                content_chunks: vec![answer.to_string()],
                tool_calls: Vec::new(),
                call_first_tool: false,
                ..self.clone()
            });
        }
        if !self.call_first_tool {
            return None;
        }
        let (name, arguments) = super::schema_args::first_tool_call(body)?;
        Some(Self {
            tool_calls: vec![ScriptedCall {
                id: format!("call_mock_{name}"),
                name,
                arguments_chunks: vec![arguments.to_string()],
            }],
            ..self.clone()
        })
    }

    /// A text reply of these deltas.
    pub fn text<I, S>(chunks: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            content_chunks: chunks.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// A text reply of `chunks` deltas (`tok0 `, `tok1 `...), `chunk_delay` apart.
    pub fn text_chunks(chunks: usize, chunk_delay: Duration) -> Self {
        Self {
            chunk_delay,
            ..Self::text((0..chunks).map(|i| format!("tok{i} ")))
        }
    }

    /// The finish reason sent in the last chunk.
    pub fn finish_reason(&self) -> &str {
        match &self.finish_reason {
            Some(reason) if !reason.is_empty() => reason,
            _ if !self.tool_calls.is_empty() => "tool_calls",
            _ => "stop",
        }
    }

    /// The usage object reported for the request numbered `index`.
    pub fn usage(&self, index: usize) -> Value {
        match &self.usage {
            Some(usage) if !is_falsy(usage) => usage.clone(),
            _ => {
                let prompt = 10 * (index + 1);
                let completion = self.content_chunks.len().max(1) + 5 * self.tool_calls.len();
                json!({
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                })
            }
        }
    }

    /// The error body sent with `http_status`.
    pub fn error_body(&self) -> Value {
        match &self.error_body {
            Some(body) if !is_falsy(body) => body.clone(),
            _ => json!({
                "error": {
                    "message": "mock upstream failure",
                    "type": "server_error",
                    "param": null,
                    "code": null,
                }
            }),
        }
    }

    fn from_json(value: &Value) -> Result<Self, ScriptError> {
        let object = value
            .as_object()
            .ok_or_else(|| ScriptError("`reply` must be an object".to_owned()))?;
        let tool_calls = match object.get("tool_calls") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(calls)) => calls
                .iter()
                .map(ScriptedCall::from_json)
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(ScriptError("`tool_calls` must be an array".to_owned())),
        };
        let http_status = match object.get("http_status") {
            None | Some(Value::Null) => None,
            Some(value) => match value.as_u64() {
                // 0 is falsy in the Python mock: no error.
                Some(0) => None,
                Some(status @ 100..=999) => Some(status as u16),
                _ => {
                    return Err(ScriptError(
                        "`http_status` must be an HTTP status code".to_owned(),
                    ));
                }
            },
        };
        let cut_after_chunks = match object.get("cut_after_chunks") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| {
                        ScriptError("`cut_after_chunks` must be a non-negative integer".to_owned())
                    })?,
            ),
        };
        let retry_after_secs = match object.get("retry_after_secs") {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_u64().ok_or_else(|| {
                ScriptError("`retry_after_secs` must be a non-negative integer".to_owned())
            })?),
        };
        let finish_reason = match object.get("finish_reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(reason)) => Some(reason.clone()),
            Some(_) => return Err(ScriptError("`finish_reason` must be a string".to_owned())),
        };
        let sse_body = match object.get("sse_body") {
            None | Some(Value::Null) => None,
            Some(Value::String(body)) if body.len() > MAX_SSE_BODY_BYTES => {
                return Err(ScriptError(format!(
                    "`sse_body` is {} bytes; at most {MAX_SSE_BODY_BYTES}",
                    body.len()
                )));
            }
            Some(Value::String(body)) => Some(Bytes::from(body.clone().into_bytes())),
            Some(_) => return Err(ScriptError("`sse_body` must be a string".to_owned())),
        };
        Ok(Self {
            sse_body,
            content_chunks: strings(object, "content_chunks")?,
            tool_calls,
            tool_calls_in_one_chunk: truthy(object.get("tool_calls_in_one_chunk")),
            call_first_tool: truthy(object.get("call_first_tool")),
            answer_schema: truthy(object.get("answer_schema")),
            finish_reason,
            chunk_delay: millis(object, "chunk_delay_ms")?,
            first_byte_delay: millis(object, "first_byte_delay_ms")?,
            usage: object.get("usage").filter(|u| !u.is_null()).cloned(),
            http_status,
            error_body: object.get("error_body").filter(|b| !b.is_null()).cloned(),
            retry_after_secs,
            cut_after_chunks,
        })
    }
}

impl ScriptedCall {
    fn from_json(value: &Value) -> Result<Self, ScriptError> {
        let object = value
            .as_object()
            .ok_or_else(|| ScriptError("a tool call must be an object".to_owned()))?;
        let text = |key: &str| match object.get(key) {
            Some(Value::String(text)) => Ok(text.clone()),
            _ => Err(ScriptError(format!("a tool call needs a string `{key}`"))),
        };
        Ok(Self {
            id: text("id")?,
            name: text("name")?,
            arguments_chunks: strings(object, "arguments_chunks")?,
        })
    }
}

/// A list of strings under `key` (missing or null: empty).
fn strings(object: &Map<String, Value>, key: &str) -> Result<Vec<String>, ScriptError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ScriptError(format!("`{key}` must hold strings")))
            })
            .collect(),
        Some(_) => Err(ScriptError(format!("`{key}` must be an array of strings"))),
    }
}

/// A duration given in (possibly fractional) milliseconds under `key`.
fn millis(object: &Map<String, Value>, key: &str) -> Result<Duration, ScriptError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(Duration::ZERO),
        Some(value) => value
            .as_f64()
            .filter(|ms| ms.is_finite() && *ms >= 0.0 && *ms < 1e12)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
            .ok_or_else(|| ScriptError(format!("`{key}` must be a non-negative number"))),
    }
}

/// Python truthiness of an optional JSON value.
fn truthy(value: Option<&Value>) -> bool {
    value.is_some_and(|v| !is_falsy(v))
}

fn is_falsy(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(value: Value) -> Script {
        Script::from_json(&value).unwrap()
    }

    #[test]
    fn the_first_matching_rule_wins_and_the_default_is_ok() {
        let s = script(json!({"replies": [
            {"when": {"last_role": "tool"}, "reply": {"content_chunks": ["after tool"]}},
            {"when": {"request_index": 1}, "reply": {"content_chunks": ["second"]}},
            {"when": {"last_user_contains": "Paris"}, "reply": {"content_chunks": ["paris"]}},
        ]}));
        let user = |text: &str| json!({"messages": [{"role": "user", "content": text}]});
        assert_eq!(s.pick(0, &user("Paris?")).content_chunks, ["paris"]);
        assert_eq!(s.pick(1, &user("Paris?")).content_chunks, ["second"]);
        assert_eq!(s.pick(0, &user("Rome?")).content_chunks, ["OK."]);
        let tool = json!({"messages": [
            {"role": "user", "content": "Paris?"},
            {"role": "tool", "tool_call_id": "c", "content": "{}"}
        ]});
        assert_eq!(s.pick(1, &tool).content_chunks, ["after tool"]);
        assert_eq!(s.pick(0, &json!({})).content_chunks, ["OK."]);
    }

    #[test]
    fn replies_read_every_key() {
        let s = script(json!({"model": "m", "replies": [{"reply": {
            "content_chunks": ["a"], "tool_calls": [{"id": "c1", "name": "f", "arguments_chunks": ["{}"]}],
            "tool_calls_in_one_chunk": true, "chunk_delay_ms": 2.5, "first_byte_delay_ms": 10,
            "http_status": 429, "cut_after_chunks": 3, "finish_reason": "length",
            "usage": {"total_tokens": 1}, "error_body": {"error": {"message": "slow down"}}
        }}]}));
        let reply = &s.rules[0].reply;
        assert_eq!(s.model.as_deref(), Some("m"));
        assert!(reply.tool_calls_in_one_chunk);
        assert_eq!(reply.chunk_delay, Duration::from_micros(2500));
        assert_eq!(reply.first_byte_delay, Duration::from_millis(10));
        assert_eq!(reply.http_status, Some(429));
        assert_eq!(reply.cut_after_chunks, Some(3));
        assert_eq!(reply.finish_reason(), "length");
        assert_eq!(reply.usage(0), json!({"total_tokens": 1}));
        assert_eq!(reply.error_body()["error"]["message"], "slow down");
    }

    #[test]
    fn defaults_follow_the_python_mock() {
        let reply = Reply {
            tool_calls: vec![ScriptedCall {
                id: "c".into(),
                name: "f".into(),
                arguments_chunks: vec![],
            }],
            ..Reply::text(["a", "b"])
        };
        assert_eq!(reply.finish_reason(), "tool_calls");
        assert_eq!(
            reply.usage(1),
            json!({"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27})
        );
        assert_eq!(reply.error_body()["error"]["type"], "server_error");
        assert_eq!(Reply::text(["x"]).finish_reason(), "stop");
    }

    #[test]
    fn bad_scripts_are_errors_not_panics() {
        for bad in [
            json!([]),
            json!({"replies": 3}),
            json!({"replies": [{"reply": {"content_chunks": [1]}}]}),
            json!({"replies": [{"reply": {"http_status": "500"}}]}),
            json!({"replies": [{"reply": {"chunk_delay_ms": -1}}]}),
            json!({"replies": [{"reply": {"tool_calls": [{"name": "f"}]}}]}),
        ] {
            assert!(Script::from_json(&bad).is_err(), "{bad}");
        }
        assert_eq!(script(Value::Null), Script::default());
    }

    #[test]
    fn a_recorded_stream_is_read_from_its_transcript() {
        let transcript =
            b"# source: a provider's docs\r\n# source: another\n\ndata: {}\n\ndata: [DONE]\n\n";
        assert_eq!(
            sse_transcript_body(transcript).unwrap(),
            b"data: {}\n\ndata: [DONE]\n\n"
        );
        assert_eq!(sse_transcript_body(b"data: x\n\n").unwrap(), b"data: x\n\n");
        assert!(sse_transcript_body(b"# no blank line\ndata: x").is_err());
        assert!(sse_transcript_body(b"# header\ndata: x\n\n").is_err());
        let s = script(json!({"replies": [{"reply": {"sse_body": "data: [DONE]\n\n"}}]}));
        assert_eq!(
            s.rules[0].reply.sse_body.as_deref(),
            Some(&b"data: [DONE]\n\n"[..])
        );
        let huge = "x".repeat(MAX_SSE_BODY_BYTES + 1);
        assert!(Script::from_json(&json!({"replies": [{"reply": {"sse_body": huge}}]})).is_err());
        assert!(Script::from_json(&json!({"replies": [{"reply": {"sse_body": 3}}]})).is_err());
    }

    #[test]
    fn load_test_scripts_call_the_tool_then_answer() {
        let s = Script::weather_tool(3, Duration::ZERO);
        let first = json!({"messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(s.pick(0, &first).tool_calls[0].name, "get_weather");
        let after = json!({"messages": [{"role": "tool", "content": "{}"}]});
        assert_eq!(s.pick(1, &after).content_chunks.len(), 3);
        assert_eq!(
            Script::text(2, Duration::ZERO)
                .pick(5, &first)
                .content_chunks,
            ["tok0 ", "tok1 "]
        );
    }
}
