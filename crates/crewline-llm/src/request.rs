use std::sync::Arc;

use crewline_core::{Message, ToolDefinition};
use serde_json::{Map, Value};

/// One chat-completion request.
///
/// # Examples
///
/// ```
/// use crewline_core::{Message, ToolDefinition};
/// use crewline_llm::{ChatRequest, LlmClient, RequestOptions, ScriptedLlm, ToolChoice};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), crewline_llm::LlmError> {
/// let weather = ToolDefinition::new(
///     "get_weather",
///     "The weather in a city.",
///     json!({"type": "object", "properties": {"city": {"type": "string"}}}),
/// );
/// let request = ChatRequest::new(vec![
///     Message::system("You are a weather assistant."),
///     Message::user("Weather in Paris?"),
/// ])
/// .with_tools(vec![weather])
/// .with_tool_choice(ToolChoice::Function("get_weather".into()))
/// .with_options(RequestOptions {
///     max_tokens: Some(200),
///     ..RequestOptions::default()
/// });
/// assert_eq!(request.tools[0].name, "get_weather");
/// assert_eq!(
///     request.tool_choice.as_ref().map(ToolChoice::to_openai),
///     Some(json!({"type": "function", "function": {"name": "get_weather"}})),
/// );
///
/// // Any `LlmClient` takes it; the scripted model records what it was sent.
/// let model = ScriptedLlm::new([crewline_llm::Reply::text("Sunny.")]);
/// model.chat(request.clone()).await?;
/// assert_eq!(model.requests(), [request]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// The conversation so far, shared with the context it was made from (a crew's request
    /// does not copy the conversation; [`Arc::make_mut`] gives a private copy to change).
    pub messages: Arc<Vec<Message>>,
    /// The tools the model may call (shared: the same list goes with every round's request).
    pub tools: Arc<[ToolDefinition]>,
    /// Whether (and which) tools the model may call; `None` leaves it to the server.
    pub tool_choice: Option<ToolChoice>,
    /// Per-request overrides of the client's settings.
    pub options: RequestOptions,
}

impl ChatRequest {
    /// A request for `messages` (a `Vec` or a context's shared list) with no tools.
    pub fn new(messages: impl Into<Arc<Vec<Message>>>) -> Self {
        Self {
            messages: messages.into(),
            ..Self::default()
        }
    }

    /// Sets the tools the model may call.
    pub fn with_tools(mut self, tools: impl Into<Arc<[ToolDefinition]>>) -> Self {
        self.tools = tools.into();
        self
    }

    /// Sets the tool choice.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Sets the per-request overrides.
    pub fn with_options(mut self, options: RequestOptions) -> Self {
        self.options = options;
        self
    }
}

/// Whether the model may call tools in this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must answer in text.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this tool.
    Function(String),
}

impl ToolChoice {
    /// The OpenAI `tool_choice` value.
    pub fn to_openai(&self) -> Value {
        // Strings only; the fallback is never taken.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Written in OpenAI's shape: `"auto"`, `"none"`, `"required"`, or
/// `{"type": "function", "function": {"name": ...}}`.
impl serde::Serialize for ToolChoice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Named<'a> {
            r#type: &'static str,
            function: Name<'a>,
        }
        #[derive(serde::Serialize)]
        struct Name<'a> {
            name: &'a str,
        }
        match self {
            Self::Auto => serializer.serialize_str("auto"),
            Self::None => serializer.serialize_str("none"),
            Self::Required => serializer.serialize_str("required"),
            Self::Function(name) => Named {
                r#type: "function",
                function: Name { name },
            }
            .serialize(serializer),
        }
    }
}

/// Settings that one request may override; unset fields keep the client's values.
///
/// # Examples
///
/// ```
/// use crewline_llm::RequestOptions;
/// use serde_json::json;
///
/// let client_defaults = RequestOptions {
///     model: Some("gpt-4o-mini".into()),
///     temperature: Some(0.7),
///     extra: [("seed".to_owned(), json!(1))].into_iter().collect(),
///     ..RequestOptions::default()
/// };
/// let this_turn = RequestOptions {
///     temperature: Some(0.0),
///     extra: [("top_p".to_owned(), json!(0.9))].into_iter().collect(),
///     ..RequestOptions::default()
/// };
///
/// let sent = client_defaults.merged_with(&this_turn);
/// assert_eq!(sent.model.as_deref(), Some("gpt-4o-mini")); // kept
/// assert_eq!(sent.temperature, Some(0.0)); // overridden
/// assert_eq!(sent.extra.len(), 2); // both extras go
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestOptions {
    /// The model name.
    pub model: Option<String>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// The most tokens to generate (sent under the name [`max_tokens_field`](Self::max_tokens_field) says).
    pub max_tokens: Option<u32>,
    /// Which body field carries `max_tokens`; unset means [`MaxTokensField::MaxTokens`].
    /// OpenAI's reasoning models (o1, o3, gpt-5...) refuse `max_tokens` and want
    /// [`MaxTokensField::MaxCompletionTokens`].
    pub max_tokens_field: Option<MaxTokensField>,
    /// Whether the model may call several tools in one turn (`parallel_tool_calls`); sent only
    /// with tools, as OpenAI rejects it without.
    pub parallel_tool_calls: Option<bool>,
    /// The answer's format (`response_format`): text, any JSON object, or JSON by a schema.
    pub response_format: Option<ResponseFormat>,
    /// A seed for (best-effort) deterministic sampling (`seed`).
    pub seed: Option<i64>,
    /// An id of the end user, for the provider's abuse monitoring (`user`).
    pub user: Option<String>,
    /// Key-value tags stored with the completion (`metadata`; OpenAI takes string values).
    pub metadata: Option<Map<String, Value>>,
    /// Whether a streamed answer asks for token usage (`stream_options.include_usage`);
    /// unset means yes. Set `false` for a server that rejects `stream_options` (the default
    /// client also finds this out by itself, once, from the server's 400).
    pub stream_usage: Option<bool>,
    /// Other body fields, sent as they are (`top_p`, vendor extensions...). An extra with the
    /// name of a typed field overrides it.
    pub extra: Map<String, Value>,
}

impl RequestOptions {
    /// These options with `other`'s set fields taking precedence.
    pub fn merged_with(&self, other: &RequestOptions) -> RequestOptions {
        let mut extra = self.extra.clone();
        extra.extend(other.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        RequestOptions {
            model: other.model.clone().or_else(|| self.model.clone()),
            temperature: other.temperature.or(self.temperature),
            max_tokens: other.max_tokens.or(self.max_tokens),
            max_tokens_field: other.max_tokens_field.or(self.max_tokens_field),
            parallel_tool_calls: other.parallel_tool_calls.or(self.parallel_tool_calls),
            response_format: other
                .response_format
                .clone()
                .or_else(|| self.response_format.clone()),
            seed: other.seed.or(self.seed),
            user: other.user.clone().or_else(|| self.user.clone()),
            metadata: other.metadata.clone().or_else(|| self.metadata.clone()),
            stream_usage: other.stream_usage.or(self.stream_usage),
            extra,
        }
    }
}

/// The body field that carries the token limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_tokens`: most servers (vLLM, Ollama, Groq...) and OpenAI's older models.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: OpenAI's reasoning models, which refuse `max_tokens`.
    MaxCompletionTokens,
}

impl MaxTokensField {
    /// The field's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// The format the answer must take (OpenAI's `response_format`).
///
/// # Examples
///
/// ```
/// use crewline_llm::{JsonSchemaFormat, ResponseFormat};
/// use serde_json::json;
///
/// let format = ResponseFormat::JsonSchema {
///     json_schema: JsonSchemaFormat {
///         name: "weather".into(),
///         description: None,
///         schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
///         strict: Some(true),
///     },
/// };
/// assert_eq!(
///     serde_json::to_value(&format).unwrap(),
///     json!({"type": "json_schema", "json_schema": {
///         "name": "weather",
///         "schema": {"type": "object", "properties": {"city": {"type": "string"}}},
///         "strict": true
///     }})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Plain text (the default of every server).
    Text,
    /// Any JSON object ("JSON mode").
    JsonObject,
    /// JSON that follows a schema ("structured outputs").
    JsonSchema {
        /// The schema the answer follows.
        json_schema: JsonSchemaFormat,
    },
}

/// A named JSON schema for [`ResponseFormat::JsonSchema`], sent as `json_schema`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JsonSchemaFormat {
    /// The schema's name (letters, digits, `_` and `-`).
    pub name: String,
    /// What the answer is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON schema.
    pub schema: Value,
    /// Whether the server must follow the schema exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}
