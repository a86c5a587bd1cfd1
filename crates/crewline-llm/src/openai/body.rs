//! Builds the JSON body of a chat-completions request.

use serde_json::{Map, Number, Value, json};

use crate::{ChatRequest, LlmError, RequestOptions};

/// The request body for `request`, with the client's `defaults` overridden by the request's
/// own options.
///
/// - `tools` is omitted when there are none;
/// - `tool_choice` is sent only when it was set *and* there are tools: OpenAI rejects a
///   `tool_choice` without `tools`, and without tools the model cannot call any anyway;
/// - streaming bodies ask for usage (`stream_options.include_usage`);
/// - extra parameters come last and may override any field but `stream` (and, for a
///   non-streaming body, `stream_options`), which must match how the answer is read.
pub(crate) fn build(
    defaults: &RequestOptions,
    request: &ChatRequest,
    stream: bool,
) -> Result<Value, LlmError> {
    let options = defaults.merged_with(&request.options);
    let model = options
        .model
        .as_deref()
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| LlmError::Config("the request has no model".to_owned()))?;

    let mut body = Map::new();
    body.insert("model".to_owned(), Value::from(model));
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
    } else if request.tool_choice.is_some() {
        tracing::debug!("tool_choice without tools is not sent");
    }
    if let Some(temperature) = options.temperature {
        body.insert("temperature".to_owned(), temperature_value(temperature)?);
    }
    if let Some(max_tokens) = options.max_tokens {
        body.insert("max_tokens".to_owned(), Value::from(max_tokens));
    }
    body.insert("stream".to_owned(), Value::Bool(stream));
    if stream {
        body.insert("stream_options".to_owned(), json!({"include_usage": true}));
    }
    for (key, value) in options.extra {
        let reserved = key == "stream" || (!stream && key == "stream_options");
        if reserved {
            tracing::warn!(param = %key, "extra parameter ignored: the client sets it itself");
            continue;
        }
        body.insert(key, value);
    }
    Ok(Value::Object(body))
}

/// A temperature as JSON: through its shortest decimal form, so `0.7_f32` goes on the wire as
/// `0.7`, not `0.699999988079071`.
pub(crate) fn temperature_value(temperature: f32) -> Result<Value, LlmError> {
    temperature
        .to_string()
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
        .ok_or_else(|| {
            LlmError::Config(format!(
                "temperature must be a finite number, got {temperature}"
            ))
        })
}

#[cfg(test)]
mod tests {
    use crewline_core::{Message, ToolDefinition};

    use super::*;
    use crate::ToolChoice;

    fn defaults() -> RequestOptions {
        let mut extra = Map::new();
        extra.insert("top_p".to_owned(), json!(0.9));
        extra.insert("seed".to_owned(), json!(1));
        RequestOptions {
            model: Some("gpt-4o-mini".to_owned()),
            temperature: Some(0.7),
            max_tokens: Some(256),
            extra,
        }
    }

    fn weather_tool() -> ToolDefinition {
        ToolDefinition {
            name: "get_weather".to_owned(),
            description: "Weather in a city".to_owned(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }
    }

    #[test]
    fn streaming_body_has_defaults_messages_and_usage_request() {
        let request = ChatRequest::new(vec![Message::system("Be brief."), Message::user("Hi")]);
        let body = build(&defaults(), &request, true).expect("body");
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
        });
        let body = build(&defaults(), &request, true).expect("body");
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
        let body = build(&defaults(), &request, true).expect("body");
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
        let body = build(&defaults(), &request, true).expect("body");
        assert!(body.get("tools").is_some());
        assert!(body.get("tool_choice").is_none());
    }

    #[test]
    fn no_tools_means_neither_tools_nor_tool_choice() {
        let request =
            ChatRequest::new(vec![Message::user("Hi")]).with_tool_choice(ToolChoice::None);
        let body = build(&defaults(), &request, true).expect("body");
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
        let body = build(&defaults(), &request, true).expect("body");
        assert_eq!(body["stream"], true);
        // stream_options is the caller's to tune when streaming.
        assert_eq!(body["stream_options"], json!({"include_usage": false}));

        let body = build(&defaults(), &request, false).expect("body");
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn non_streaming_body_has_no_stream_options() {
        let body = build(&defaults(), &ChatRequest::new(vec![]), false).expect("body");
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn non_finite_temperature_is_a_config_error() {
        let request = ChatRequest::new(vec![]).with_options(RequestOptions {
            temperature: Some(f32::NAN),
            ..RequestOptions::default()
        });
        let err = build(&defaults(), &request, true).expect_err("NaN");
        assert!(
            matches!(err, LlmError::Config(ref m) if m.contains("temperature")),
            "{err}"
        );
    }

    #[test]
    fn a_missing_model_is_a_config_error() {
        let err = build(&RequestOptions::default(), &ChatRequest::new(vec![]), true)
            .expect_err("no model");
        assert!(matches!(err, LlmError::Config(_)), "{err}");
    }
}
