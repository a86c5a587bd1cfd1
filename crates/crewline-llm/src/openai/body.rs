//! Builds the JSON body of a chat-completions request.
//!
//! The body is serialized straight from the request (messages, tools and all) into bytes,
//! without building a `serde_json::Value` tree first: a long conversation is otherwise copied
//! twice per turn.

use std::sync::Arc;

use bytes::Bytes;
use crewline_core::{Message, ToolDefinition};
use serde::{Serialize, Serializer, ser::SerializeMap};
use serde_json::{Map, Value};

use crate::{ChatRequest, LlmError, MaxTokensField, RequestOptions, ResponseFormat, ToolChoice};

/// The fields the client writes itself, in the order they go on the wire.
const FIELDS: [&str; 14] = [
    "model",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "max_tokens",
    "max_completion_tokens",
    "response_format",
    "seed",
    "user",
    "metadata",
    "stream",
    "stream_options",
];

/// A written request body and what it asked for, for reading the server's refusals.
pub(crate) struct Built {
    /// The JSON body.
    pub(crate) bytes: Bytes,
    /// The field the token limit went in, if one was sent.
    pub(crate) token_field: Option<MaxTokensField>,
    /// Whether `stream_options` was sent.
    pub(crate) stream_options: bool,
}

/// The request body for `request`, as JSON bytes, with the client's `defaults` overridden by
/// the request's own options.
///
/// - `tools` is omitted when there are none;
/// - `tool_choice` and `parallel_tool_calls` are sent only when set *and* there are tools:
///   OpenAI rejects either without `tools`, and without tools the model cannot call any anyway;
/// - the token limit goes in `max_tokens` or `max_completion_tokens`, as the options say;
/// - streaming bodies ask for usage (`stream_options.include_usage`) unless the options say
///   not to or `stream_options_allowed` is false (the server refused it before);
/// - extra parameters come last and may override any field but `stream` (and, where the
///   client sends none, `stream_options`), which must match how the answer is read; an
///   overriding parameter takes the overridden field's place.
pub(crate) fn build_body(
    defaults: &RequestOptions,
    request: &ChatRequest,
    stream: bool,
    stream_options_allowed: bool,
) -> Result<Built, LlmError> {
    let body = Body::new(defaults, request, stream, stream_options_allowed)?;
    let bytes = serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| LlmError::config_caused_by("the request cannot be written as JSON", e))?;
    Ok(Built {
        bytes,
        token_field: body.max_tokens.map(|_| body.token_field),
        stream_options: body.stream_options,
    })
}

/// [`build_body`]'s bytes, `stream_options` allowed (the async-openai client's body).
#[cfg(any(test, feature = "async-openai"))]
pub(crate) fn build(
    defaults: &RequestOptions,
    request: &ChatRequest,
    stream: bool,
) -> Result<Bytes, LlmError> {
    build_body(defaults, request, stream, true).map(|built| built.bytes)
}

/// One request body, borrowing everything from the request and the client's defaults.
struct Body<'a> {
    model: &'a str,
    messages: &'a [Message],
    tools: &'a Arc<[ToolDefinition]>,
    tool_choice: Option<&'a ToolChoice>,
    parallel_tool_calls: Option<bool>,
    temperature: Option<f64>,
    max_tokens: Option<u32>,
    token_field: MaxTokensField,
    response_format: Option<&'a ResponseFormat>,
    seed: Option<i64>,
    user: Option<&'a str>,
    metadata: Option<&'a Map<String, Value>>,
    stream: bool,
    /// Whether `stream_options` goes in (streaming, usage wanted, not refused before).
    stream_options: bool,
    /// The merged extra parameters: the request's override the client's, in the client's
    /// order, new ones last (as `Map::extend` orders them).
    extra: ExtraParams<'a>,
}

/// The extra parameters of the defaults and of the request, merged without copying.
struct ExtraParams<'a> {
    defaults: &'a Map<String, Value>,
    request: &'a Map<String, Value>,
}

impl<'a> ExtraParams<'a> {
    /// The merged value of `key`.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.request.get(key).or_else(|| self.defaults.get(key))
    }

    /// The merged parameters in order: the defaults' keys first (with the request's value
    /// when it sets one), then the request's new keys.
    fn iter(&self) -> impl Iterator<Item = (&'a String, &'a Value)> + '_ {
        let request = self.request;
        let defaults = self.defaults;
        defaults
            .iter()
            .map(move |(k, v)| (k, request.get(k).unwrap_or(v)))
            .chain(
                request
                    .iter()
                    .filter(move |(k, _)| !defaults.contains_key(k.as_str())),
            )
    }

    fn is_empty(&self) -> bool {
        self.defaults.is_empty() && self.request.is_empty()
    }
}

impl<'a> Body<'a> {
    fn new(
        defaults: &'a RequestOptions,
        request: &'a ChatRequest,
        stream: bool,
        stream_options_allowed: bool,
    ) -> Result<Self, LlmError> {
        let options = &request.options;
        let model = options
            .model
            .as_deref()
            .or(defaults.model.as_deref())
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| LlmError::config("the request has no model".to_owned()))?;
        let has_tools = !request.tools.is_empty();
        let tool_choice = if has_tools {
            request.tool_choice.as_ref()
        } else {
            if request.tool_choice.is_some() {
                tracing::debug!("tool_choice without tools is not sent");
            }
            None
        };
        let parallel_tool_calls = options
            .parallel_tool_calls
            .or(defaults.parallel_tool_calls)
            .filter(|_| has_tools);
        let temperature = options
            .temperature
            .or(defaults.temperature)
            .map(temperature_number)
            .transpose()?;
        let stream_options = stream
            && stream_options_allowed
            && options
                .stream_usage
                .or(defaults.stream_usage)
                .unwrap_or(true);
        let extra = ExtraParams {
            defaults: &defaults.extra,
            request: &options.extra,
        };
        let body = Self {
            model,
            messages: &request.messages,
            tools: &request.tools,
            tool_choice,
            parallel_tool_calls,
            temperature,
            max_tokens: options.max_tokens.or(defaults.max_tokens),
            token_field: options
                .max_tokens_field
                .or(defaults.max_tokens_field)
                .unwrap_or_default(),
            response_format: options
                .response_format
                .as_ref()
                .or(defaults.response_format.as_ref()),
            seed: options.seed.or(defaults.seed),
            user: options.user.as_deref().or(defaults.user.as_deref()),
            metadata: options.metadata.as_ref().or(defaults.metadata.as_ref()),
            stream,
            stream_options,
            extra,
        };
        if !body.extra.is_empty() {
            for (key, _) in body.extra.iter() {
                if body.is_reserved(key) {
                    tracing::warn!(param = %key, "extra parameter ignored: the client sets it itself");
                }
            }
        }
        Ok(body)
    }

    /// Whether an extra parameter may not override `key`: it decides how the answer is read
    /// (`stream`), or the client sends no `stream_options` (not streaming, usage not wanted,
    /// or the server refused it).
    fn is_reserved(&self, key: &str) -> bool {
        key == "stream" || (!self.stream_options && key == "stream_options")
    }

    /// Whether the client writes `field` itself in this body.
    fn has(&self, field: &str) -> bool {
        match field {
            "model" | "messages" | "stream" => true,
            "tools" => !self.tools.is_empty(),
            "tool_choice" => self.tool_choice.is_some(),
            "parallel_tool_calls" => self.parallel_tool_calls.is_some(),
            "temperature" => self.temperature.is_some(),
            "max_tokens" => {
                self.max_tokens.is_some() && self.token_field == MaxTokensField::MaxTokens
            }
            "max_completion_tokens" => {
                self.max_tokens.is_some() && self.token_field == MaxTokensField::MaxCompletionTokens
            }
            "response_format" => self.response_format.is_some(),
            "seed" => self.seed.is_some(),
            "user" => self.user.is_some(),
            "metadata" => self.metadata.is_some(),
            "stream_options" => self.stream_options,
            _ => false,
        }
    }

    fn write_field<M: SerializeMap>(
        &self,
        map: &mut M,
        field: &'static str,
    ) -> Result<(), M::Error> {
        if !self.is_reserved(field)
            && let Some(value) = self.extra.get(field)
        {
            return map.serialize_entry(field, value);
        }
        match field {
            "model" => map.serialize_entry(field, self.model),
            "messages" => map.serialize_entry(field, self.messages),
            "tools" => map.serialize_entry(field, &Tools(self.tools)),
            "tool_choice" => map.serialize_entry(field, &self.tool_choice),
            "parallel_tool_calls" => map.serialize_entry(field, &self.parallel_tool_calls),
            "temperature" => map.serialize_entry(field, &self.temperature),
            "max_tokens" | "max_completion_tokens" => map.serialize_entry(field, &self.max_tokens),
            "response_format" => map.serialize_entry(field, &self.response_format),
            "seed" => map.serialize_entry(field, &self.seed),
            "user" => map.serialize_entry(field, &self.user),
            "metadata" => map.serialize_entry(field, &self.metadata),
            "stream" => map.serialize_entry(field, &self.stream),
            "stream_options" => map.serialize_entry(field, &StreamOptions),
            _ => Ok(()),
        }
    }
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for field in FIELDS {
            if self.has(field) {
                self.write_field(&mut map, field)?;
            }
        }
        if !self.extra.is_empty() {
            for (key, value) in self.extra.iter() {
                // Overrides went in their field's place above; reserved keys are dropped.
                if !self.is_reserved(key) && !self.has(key) {
                    map.serialize_entry(key, value)?;
                }
            }
        }
        map.end()
    }
}

/// The tools in OpenAI's shape (see [`ToolDefinition::openai`]), as this thread first wrote
/// these definitions (see [`super::schemas`]).
struct Tools<'a>(&'a Arc<[ToolDefinition]>);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match super::schemas::written(self.0) {
            Some(json) => json.serialize(serializer),
            // Not writable as JSON: writing them here reports the error.
            None => serializer.collect_seq(self.0.iter().map(ToolDefinition::openai)),
        }
    }
}

/// `{"include_usage": true}`.
struct StreamOptions;

impl Serialize for StreamOptions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("include_usage", &true)?;
        map.end()
    }
}

/// A temperature as a JSON number: through its shortest decimal form, so `0.7_f32` goes on
/// the wire as `0.7`, not `0.699999988079071`.
fn temperature_number(temperature: f32) -> Result<f64, LlmError> {
    temperature
        .to_string()
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite())
        .ok_or_else(|| {
            LlmError::config(format!(
                "temperature must be a finite number, got {temperature}"
            ))
        })
}

/// Checks that `temperature` can be sent.
pub(crate) fn check_temperature(temperature: f32) -> Result<(), LlmError> {
    temperature_number(temperature).map(|_| ())
}

#[cfg(test)]
mod tests {
    use crewline_core::{Message, ToolDefinition};

    use serde_json::json;

    use super::*;

    /// The old rule: only `stream` (and `stream_options` when not streaming) is reserved.
    fn is_reserved(key: &str, stream: bool) -> bool {
        key == "stream" || (!stream && key == "stream_options")
    }

    /// The body as a JSON value.
    fn build_value(
        defaults: &RequestOptions,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<Value, LlmError> {
        let bytes = build(defaults, request, stream)?;
        Ok(serde_json::from_slice(&bytes).expect("the body is JSON"))
    }

    /// The body as the client built it through a `Value` tree before it wrote it directly:
    /// the new bytes must be the same, key order included.
    fn reference_body(defaults: &RequestOptions, request: &ChatRequest, stream: bool) -> String {
        let options = defaults.merged_with(&request.options);
        let mut body = Map::new();
        body.insert("model".to_owned(), json!(options.model));
        body.insert(
            "messages".to_owned(),
            Value::Array(request.messages.iter().map(|m| m.to_openai()).collect()),
        );
        if !request.tools.is_empty() {
            body.insert(
                "tools".to_owned(),
                Value::Array(request.tools.iter().map(|t| t.to_openai()).collect()),
            );
            if let Some(choice) = &request.tool_choice {
                body.insert("tool_choice".to_owned(), choice.to_openai());
            }
        }
        if let Some(temperature) = options.temperature {
            let number = temperature_number(temperature).expect("finite");
            body.insert("temperature".to_owned(), json!(number));
        }
        if let Some(max_tokens) = options.max_tokens {
            body.insert("max_tokens".to_owned(), Value::from(max_tokens));
        }
        body.insert("stream".to_owned(), Value::Bool(stream));
        if stream {
            body.insert("stream_options".to_owned(), json!({"include_usage": true}));
        }
        for (key, value) in options.extra {
            if !is_reserved(&key, stream) {
                body.insert(key, value);
            }
        }
        Value::Object(body).to_string()
    }

    fn written(defaults: &RequestOptions, request: &ChatRequest, stream: bool) -> String {
        let bytes = build(defaults, request, stream).expect("body");
        String::from_utf8(bytes.to_vec()).expect("UTF-8")
    }

    fn defaults() -> RequestOptions {
        let mut extra = Map::new();
        extra.insert("top_p".to_owned(), json!(0.9));
        extra.insert("seed".to_owned(), json!(1));
        RequestOptions {
            model: Some("gpt-4o-mini".to_owned()),
            temperature: Some(0.7),
            max_tokens: Some(256),
            extra,
            ..RequestOptions::default()
        }
    }

    fn weather_tool() -> ToolDefinition {
        ToolDefinition::new(
            "get_weather",
            "Weather in a city",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        )
    }

    #[test]
    fn streaming_body_has_defaults_messages_and_usage_request() {
        let request = ChatRequest::new(vec![Message::system("Be brief."), Message::user("Hi")]);
        let body = build_value(&defaults(), &request, true).expect("body");
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"}
                ],
                "temperature": 0.7,
                "max_tokens": 256,
                "stream": true,
                "stream_options": {"include_usage": true},
                "top_p": 0.9,
                "seed": 1
            })
        );
    }

    #[test]
    fn request_options_override_client_defaults() {
        let mut extra = Map::new();
        extra.insert("seed".to_owned(), json!(42));
        extra.insert("user".to_owned(), json!("caller-7"));
        let request = ChatRequest::new(vec![Message::user("Hi")]).with_options(RequestOptions {
            model: Some("gpt-4o".to_owned()),
            temperature: Some(0.0),
            max_tokens: None,
            extra,
            ..RequestOptions::default()
        });
        let body = build_value(&defaults(), &request, true).expect("body");
        assert_eq!(body["model"], "gpt-4o");
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["max_tokens"], 256, "unset options keep the default");
        assert_eq!(body["seed"], 42);
        assert_eq!(body["user"], "caller-7");
        assert_eq!(body["top_p"], 0.9);
    }

    #[test]
    fn tools_and_explicit_tool_choice_are_sent_together() {
        let request = ChatRequest::new(vec![Message::user("Weather?")])
            .with_tools(vec![weather_tool()])
            .with_tool_choice(ToolChoice::Function("get_weather".to_owned()));
        let body = build_value(&defaults(), &request, true).expect("body");
        assert_eq!(body["tools"], json!([weather_tool().to_openai()]));
        assert_eq!(
            body["tool_choice"],
            json!({"type": "function", "function": {"name": "get_weather"}})
        );
    }

    #[test]
    fn tools_without_tool_choice_leave_the_choice_to_the_server() {
        let request =
            ChatRequest::new(vec![Message::user("Weather?")]).with_tools(vec![weather_tool()]);
        let body = build_value(&defaults(), &request, true).expect("body");
        assert!(body.get("tools").is_some());
        assert!(body.get("tool_choice").is_none());
    }

    #[test]
    fn no_tools_means_neither_tools_nor_tool_choice() {
        let request =
            ChatRequest::new(vec![Message::user("Hi")]).with_tool_choice(ToolChoice::None);
        let body = build_value(&defaults(), &request, true).expect("body");
        assert!(body.get("tools").is_none());
        assert!(body.get("tool_choice").is_none());
    }

    #[test]
    fn extra_params_cannot_switch_streaming_off() {
        let mut extra = Map::new();
        extra.insert("stream".to_owned(), json!(false));
        extra.insert("stream_options".to_owned(), json!({"include_usage": false}));
        let request = ChatRequest::new(vec![]).with_options(RequestOptions {
            extra,
            ..RequestOptions::default()
        });
        let body = build_value(&defaults(), &request, true).expect("body");
        assert_eq!(body["stream"], true);
        // stream_options is the caller's to tune when streaming.
        assert_eq!(body["stream_options"], json!({"include_usage": false}));

        let body = build_value(&defaults(), &request, false).expect("body");
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn non_streaming_body_has_no_stream_options() {
        let body = build_value(&defaults(), &ChatRequest::new(vec![]), false).expect("body");
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn non_finite_temperature_is_a_config_error() {
        let request = ChatRequest::new(vec![]).with_options(RequestOptions {
            temperature: Some(f32::NAN),
            ..RequestOptions::default()
        });
        let err = build_value(&defaults(), &request, true).expect_err("NaN");
        assert!(
            matches!(err, LlmError::Config(ref m) if m.contains("temperature")),
            "{err}"
        );
    }

    #[test]
    fn a_missing_model_is_a_config_error() {
        let err = build_value(&RequestOptions::default(), &ChatRequest::new(vec![]), true)
            .expect_err("no model");
        assert!(matches!(err, LlmError::Config(_)), "{err}");
    }

    #[test]
    fn bodies_are_written_exactly_as_through_a_value_tree() {
        let call = crewline_core::ToolCall::new("c1", "get_weather", r#"{"city":"Oslo"}"#);
        let messages = vec![
            Message::system("Be brief. \"Quotes\" and ünïcode ✓"),
            Message::user("Weather?"),
            Message::assistant_with_tools("", vec![call.clone()]),
            Message::tool("c1", r#"{"temp":3}"#),
            Message::assistant_with_tools("Checking", vec![call]),
            Message::assistant("It is 3 degrees."),
        ];
        let mut overriding = Map::new();
        overriding.insert("temperature".to_owned(), json!(1.5));
        overriding.insert("messages_note".to_owned(), json!({"b": 1, "a": [2]}));
        overriding.insert("stream".to_owned(), json!(false));
        overriding.insert("stream_options".to_owned(), json!({"include_usage": false}));
        overriding.insert("tool_choice".to_owned(), json!("required"));
        overriding.insert("top_p".to_owned(), json!(0.5));
        let choices = [
            None,
            Some(ToolChoice::Auto),
            Some(ToolChoice::None),
            Some(ToolChoice::Required),
            Some(ToolChoice::Function("get_weather".to_owned())),
        ];
        let client_defaults = [
            defaults(),
            RequestOptions {
                model: Some("m".to_owned()),
                ..RequestOptions::default()
            },
        ];
        for client in &client_defaults {
            for tools in [vec![], vec![weather_tool(), weather_tool()]] {
                for choice in &choices {
                    for extra in [Map::new(), overriding.clone()] {
                        let mut request = ChatRequest::new(messages.clone())
                            .with_tools(tools.clone())
                            .with_options(RequestOptions {
                                max_tokens: Some(9),
                                extra,
                                ..RequestOptions::default()
                            });
                        request.tool_choice = choice.clone();
                        for stream in [true, false] {
                            assert_eq!(
                                written(client, &request, stream),
                                reference_body(client, &request, stream),
                                "tools {} choice {choice:?} stream {stream}",
                                tools.len()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn an_overriding_extra_parameter_keeps_the_field_in_place() {
        let mut extra = Map::new();
        extra.insert("max_tokens".to_owned(), json!(7));
        extra.insert("stream".to_owned(), json!(false));
        let request = ChatRequest::new(vec![Message::user("Hi")]).with_options(RequestOptions {
            extra,
            ..RequestOptions::default()
        });
        let body = written(
            &RequestOptions {
                model: Some("m".to_owned()),
                max_tokens: Some(1),
                ..RequestOptions::default()
            },
            &request,
            true,
        );
        assert_eq!(
            body,
            r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":7,"stream":true,"stream_options":{"include_usage":true}}"#
        );
    }
}
