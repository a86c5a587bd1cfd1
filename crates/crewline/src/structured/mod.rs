//! Typed answers: ask the model for JSON that follows a Rust type's schema, and get the type.
//!
//! A classification step ("which desk does this caller need?") or a tool that pulls fields out
//! of what the caller said wants a value, not prose. [`Structured<T>`] sends the request with
//! OpenAI's `response_format: {"type": "json_schema", "strict": true, ...}`, the schema
//! generated from `T` by `schemars` and rewritten the way strict mode wants it (every property
//! required, objects closed: the same normaliser as tool parameters, [`normalize_schema`]).
//! A `T` that is not a struct (an enum of intents, a list, a number) is asked for inside an
//! object, `{"answer": ...}`, since strict mode takes only an object at the top level, and
//! unwrapped when it is parsed; the crew sees only its `T`.
//! The answer is parsed into `T`; an answer that does not parse is asked for once more with
//! the parse error in the messages, and then fails with a typed [`StructuredError`] holding
//! the parse error and the raw text.
//!
//! An answer is read up to a cap ([`DEFAULT_MAX_ANSWER_BYTES`]): a model that runs on past any
//! real answer is an error, not memory.
//!
//! ```
//! use crewline::{llm::{Reply, ScriptedLlm}, structured, types::Message};
//!
//! #[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
//! struct Intent {
//!     /// What the caller wants.
//!     topic: Topic,
//! }
//!
//! #[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
//! #[serde(rename_all = "snake_case")]
//! enum Topic { Billing, TechSupport, Other }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), structured::StructuredError> {
//! let llm = ScriptedLlm::new([Reply::text(r#"{"topic": "billing"}"#)]);
//! let messages = vec![
//!     Message::system("Classify the caller's request."),
//!     Message::user("I was charged twice this month."),
//! ];
//! let intent: Intent = structured::ask(&llm, messages).await?;
//! assert_eq!(intent, Intent { topic: Topic::Billing });
//!
//! // The request carried the strict schema.
//! let sent = &llm.requests()[0];
//! let format = serde_json::to_value(&sent.options.response_format).unwrap();
//! assert_eq!(format["type"], "json_schema");
//! assert_eq!(format["json_schema"]["strict"], true);
//! assert_eq!(format["json_schema"]["schema"]["required"], serde_json::json!(["topic"]));
//! # Ok(()) }
//! ```

mod error;

use std::{fmt, marker::PhantomData, sync::Arc};

use crewline_core::Message;
use crewline_llm::{
    ChatRequest, FinishReason, JsonSchemaFormat, LlmClient, RequestOptions, ResponseFormat,
    StreamItem,
};
use crewline_tools::{normalize_schema, schema_for};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use error::StructuredError;

/// The longest answer read by default, in bytes: far above any real typed answer (a handful
/// of fields), far below what a runaway model would stream.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 16 * 1024;

/// How much of an unparsable answer a [`StructuredError::Invalid`] keeps, in bytes.
pub const MAX_RAW_BYTES: usize = 2 * 1024;

/// The name of the `agent.log` entry a crew sends when a typed answer fails (a router's
/// classification step does; see [`StructuredError::to_log`]).
pub const STRUCTURED_ERROR_LOG: &str = "agent.structured_error";

/// How many times an answer that does not parse is asked for again by default.
pub const DEFAULT_RETRIES: u32 = 1;

/// Asks `llm` for a `T` over `messages`, with the default settings of [`Structured`].
///
/// A `T` that is not a struct is asked for as `{"answer": T}` and unwrapped (see the module's
/// docs).
pub async fn ask<T: JsonSchema + DeserializeOwned>(
    llm: &(impl LlmClient + ?Sized),
    messages: impl Into<Arc<Vec<Message>>>,
) -> Result<T, StructuredError> {
    Structured::<T>::new().ask(llm, messages).await
}

/// How to ask for a typed answer `T`: its schema, its cap, its retries and request options.
///
/// Cheap to clone; build it once (the schema is generated in [`new`](Self::new)) and ask with
/// it as often as needed.
///
/// # Examples
///
/// ```
/// use crewline::{llm::{Reply, ScriptedLlm}, structured::{Structured, StructuredError}, types::Message};
///
/// #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
/// struct Address { street: String, city: String, postcode: Option<String> }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let llm = ScriptedLlm::new([
///     Reply::text("Sure! The street is Main St."),         // not JSON
///     Reply::text(r#"{"street": "Main St", "city": 7}"#), // the retry: still wrong
/// ]);
/// let extract = Structured::<Address>::new().description("The caller's new address.");
/// let error = extract
///     .ask(&llm, vec![Message::user("I moved to Main St, Springfield.")])
///     .await
///     .unwrap_err();
/// assert!(matches!(error, StructuredError::Invalid { attempts: 2, .. }));
/// assert_eq!(error.raw(), Some(r#"{"street": "Main St", "city": 7}"#));
/// // The retry told the model what was wrong.
/// let retry = &llm.requests()[1];
/// let last = retry.messages.last().and_then(|m| m.text()).unwrap_or_default();
/// assert!(last.contains("not valid"), "{last}");
/// # }
/// ```
pub struct Structured<T> {
    format: JsonSchemaFormat,
    /// Whether `T` is asked for inside [`WRAPPER_PROPERTY`] (it is not an object).
    wrapped: bool,
    max_answer_bytes: usize,
    retries: u32,
    options: RequestOptions,
    answer: PhantomData<fn() -> T>,
}

impl<T> Clone for Structured<T> {
    fn clone(&self) -> Self {
        Self {
            format: self.format.clone(),
            wrapped: self.wrapped,
            max_answer_bytes: self.max_answer_bytes,
            retries: self.retries,
            options: self.options.clone(),
            answer: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Structured<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Structured")
            .field("name", &self.format.name)
            .field("max_answer_bytes", &self.max_answer_bytes)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl<T: JsonSchema + DeserializeOwned> Default for Structured<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: JsonSchema + DeserializeOwned> Structured<T> {
    /// A typed answer named after `T`, strict, capped at [`DEFAULT_MAX_ANSWER_BYTES`], retried
    /// [`DEFAULT_RETRIES`] time.
    pub fn new() -> Self {
        let (schema, wrapped) = top_level_object(schema_for::<T>());
        Self {
            format: JsonSchemaFormat {
                name: schema_name(&T::schema_name()),
                description: None,
                schema: normalize_schema(schema),
                strict: Some(true),
            },
            wrapped,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            retries: DEFAULT_RETRIES,
            options: RequestOptions::default(),
            answer: PhantomData,
        }
    }
}

impl<T: DeserializeOwned> Structured<T> {
    /// Names the schema (letters, digits, `_` and `-`; anything else becomes `_`).
    pub fn name(mut self, name: &str) -> Self {
        self.format.name = schema_name(name);
        self
    }

    /// Says what the answer is for (sent with the schema).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.format.description = Some(description.into());
        self
    }

    /// Caps the answer's length in bytes (at least 1).
    pub fn max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer_bytes = bytes.max(1);
        self
    }

    /// How many times an answer that does not parse is asked for again (0: never).
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Request options of every ask (a cheaper model, a temperature); the response format is
    /// always this answer's.
    pub fn options(mut self, options: RequestOptions) -> Self {
        self.options = options;
        self
    }

    /// The schema's name.
    pub fn schema_name(&self) -> &str {
        &self.format.name
    }

    /// The `response_format` sent with every ask.
    pub fn response_format(&self) -> ResponseFormat {
        ResponseFormat::JsonSchema {
            json_schema: self.format.clone(),
        }
    }

    /// The request that asks for the answer over `messages`.
    pub fn request(&self, messages: impl Into<Arc<Vec<Message>>>) -> ChatRequest {
        ChatRequest::new(messages).with_options(RequestOptions {
            response_format: Some(self.response_format()),
            ..self.options.clone()
        })
    }

    /// Asks `llm` for the answer over `messages` and parses it; an answer that does not parse
    /// is asked for again (up to [`retries`](Self::retries) times) with the error appended.
    pub async fn ask(
        &self,
        llm: &(impl LlmClient + ?Sized),
        messages: impl Into<Arc<Vec<Message>>>,
    ) -> Result<T, StructuredError> {
        let mut messages = messages.into();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let text = self.read_answer(llm, Arc::clone(&messages)).await?;
            let error = match self.parse(&text) {
                Ok(answer) => return Ok(answer),
                Err(error) => error,
            };
            if attempts > self.retries {
                return Err(StructuredError::Invalid {
                    name: self.format.name.clone(),
                    attempts,
                    raw: cut(&text, MAX_RAW_BYTES).to_owned(),
                    source: error,
                });
            }
            tracing::warn!(
                schema = %self.format.name,
                attempt = attempts,
                %error,
                "typed answer did not parse: asking again"
            );
            let retry = Arc::make_mut(&mut messages);
            retry.push(Message::assistant(text));
            retry.push(Message::user(format!(
                "That answer is not valid JSON for the schema `{}`: {error}. Answer again with \
                 only the JSON object.",
                self.format.name
            )));
        }
    }

    /// Parses an answer's text into `T`: the JSON itself, or inside a Markdown code fence.
    ///
    /// Strict mode sends `null` for a property that is optional in `T`; a null that `T` does
    /// not take is read as the property left out (so `#[serde(default)]` applies).
    pub fn parse(&self, text: &str) -> Result<T, serde_json::Error> {
        let body = unfence(text);
        if self.wrapped {
            return parse_wrapped(body);
        }
        let first = match serde_json::from_str::<T>(body) {
            Ok(answer) => return Ok(answer),
            Err(error) => error,
        };
        let Ok(mut value) = serde_json::from_str::<Value>(body) else {
            return Err(first);
        };
        if !strip_nulls(&mut value) {
            return Err(first);
        }
        serde_json::from_value(value).map_err(|_| first)
    }

    /// Streams one answer's text, up to the cap.
    async fn read_answer(
        &self,
        llm: &(impl LlmClient + ?Sized),
        messages: Arc<Vec<Message>>,
    ) -> Result<String, StructuredError> {
        let llm_error = |source| StructuredError::Llm {
            name: self.format.name.clone(),
            source,
        };
        let mut stream = llm
            .stream_chat(self.request(messages))
            .await
            .map_err(llm_error)?;
        let mut text = String::new();
        let mut finish = None;
        while let Some(item) = stream.next().await {
            match item.map_err(llm_error)? {
                StreamItem::Text(piece) => {
                    if text.len() + piece.len() > self.max_answer_bytes {
                        return Err(StructuredError::TooLarge {
                            name: self.format.name.clone(),
                            limit: self.max_answer_bytes,
                        });
                    }
                    text.push_str(&piece);
                }
                StreamItem::Finish(reason) => finish = Some(reason),
                _ => {}
            }
        }
        if text.trim().is_empty() {
            return Err(StructuredError::NoAnswer {
                name: self.format.name.clone(),
                finish: finish_name(finish.as_ref()),
            });
        }
        Ok(text)
    }
}

/// The property a non-object `T` is asked for in: `{"answer": ...}`.
pub const WRAPPER_PROPERTY: &str = "answer";

/// `schema` with an object at its top level, and whether it had to be wrapped in one.
///
/// Strict mode rejects any other top level (an enum's `{"type": "string", "enum": ..}`, a
/// tagged enum's `oneOf`, an array), so such a schema becomes the one required property
/// [`WRAPPER_PROPERTY`] of an object; its definitions stay at the root, where its `$ref`s
/// point.
fn top_level_object(schema: Value) -> (Value, bool) {
    if schema.get("type").and_then(Value::as_str) == Some("object") {
        return (schema, false);
    }
    let mut inner = match schema {
        Value::Object(inner) => inner,
        other => return (wrap(other, None), true),
    };
    let definitions = inner.remove("$defs");
    for noise in ["$schema", "title"] {
        inner.remove(noise);
    }
    (wrap(Value::Object(inner), definitions), true)
}

/// `{"type": "object", "properties": {"answer": inner}, "required": ["answer"], "$defs": ..}`.
fn wrap(inner: Value, definitions: Option<Value>) -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert(WRAPPER_PROPERTY.to_owned(), inner);
    let mut outer = serde_json::Map::new();
    outer.insert("type".to_owned(), Value::from("object"));
    outer.insert("properties".to_owned(), Value::Object(properties));
    outer.insert("required".to_owned(), Value::from(vec![WRAPPER_PROPERTY]));
    if let Some(definitions) = definitions {
        outer.insert("$defs".to_owned(), definitions);
    }
    Value::Object(outer)
}

/// Parses a wrapped answer, `{"answer": T}`; a model that answered the bare `T` (no strict
/// mode) is taken as well.
fn parse_wrapped<T: DeserializeOwned>(body: &str) -> Result<T, serde_json::Error> {
    let value: Value = serde_json::from_str(body)?;
    match value {
        Value::Object(mut outer) if outer.len() == 1 && outer.contains_key(WRAPPER_PROPERTY) => {
            let mut inner = outer.remove(WRAPPER_PROPERTY).unwrap_or(Value::Null);
            match serde_json::from_value::<T>(inner.clone()) {
                Ok(answer) => Ok(answer),
                Err(first) if strip_nulls(&mut inner) => {
                    serde_json::from_value(inner).map_err(|_| first)
                }
                Err(first) => Err(first),
            }
        }
        bare => serde_json::from_value(bare),
    }
}

/// The wire name of a finish reason, for errors.
fn finish_name(finish: Option<&FinishReason>) -> String {
    match finish {
        None => "none".to_owned(),
        Some(FinishReason::Stop) => "stop".to_owned(),
        Some(FinishReason::Length) => "length".to_owned(),
        Some(FinishReason::ToolCalls) => "tool_calls".to_owned(),
        Some(FinishReason::ContentFilter) => "content_filter".to_owned(),
        Some(FinishReason::Other(other)) => other.clone(),
    }
}

/// A schema name OpenAI takes: `[a-zA-Z0-9_-]{1,64}`.
fn schema_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "answer".to_owned()
    } else {
        cleaned
    }
}

/// The JSON inside a Markdown code fence (models without strict mode like to add one).
fn unfence(text: &str) -> &str {
    let text = text.trim();
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    // The info string (`json`) runs to the end of the first line.
    let rest = rest.split_once('\n').map_or("", |(_, body)| body);
    rest.trim_end().strip_suffix("```").unwrap_or(rest).trim()
}

/// Removes every `null` property of every object in `value`; whether one was removed.
fn strip_nulls(value: &mut Value) -> bool {
    match value {
        Value::Object(map) => {
            let before = map.len();
            map.retain(|_, v| !v.is_null());
            let mut removed = map.len() != before;
            for v in map.values_mut() {
                removed |= strip_nulls(v);
            }
            removed
        }
        Value::Array(items) => items.iter_mut().fold(false, |acc, v| strip_nulls(v) | acc),
        _ => false,
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
    struct Fields {
        name: String,
        #[serde(default)]
        tags: Vec<String>,
        age: Option<u8>,
    }

    #[test]
    fn the_schema_is_strict_and_named_for_the_type() {
        let ask = Structured::<Fields>::new();
        let ResponseFormat::JsonSchema { json_schema } = ask.response_format() else {
            panic!("a json_schema format");
        };
        assert_eq!(json_schema.name, "Fields");
        assert_eq!(json_schema.strict, Some(true));
        assert_eq!(
            json_schema.schema["required"],
            serde_json::json!(["name", "tags", "age"])
        );
        assert_eq!(json_schema.schema["additionalProperties"], false);
    }

    #[test]
    fn nulls_for_defaulted_fields_and_fences_parse() {
        let ask = Structured::<Fields>::new();
        let fenced = "```json\n{\"name\": \"Ada\", \"tags\": null, \"age\": null}\n```";
        assert_eq!(
            ask.parse(fenced).ok(),
            Some(Fields {
                name: "Ada".into(),
                tags: Vec::new(),
                age: None
            })
        );
        assert!(
            ask.parse("{\"name\": null}").is_err(),
            "a required null stays wrong"
        );
    }

    #[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "snake_case")]
    enum Desk {
        Billing,
        TechSupport,
    }

    #[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Step {
        Transfer { desk: Desk },
        Answer { text: String },
    }

    #[test]
    fn an_object_type_is_not_wrapped() {
        let ask = Structured::<Fields>::new();
        let ResponseFormat::JsonSchema { json_schema } = ask.response_format() else {
            panic!("a json_schema format");
        };
        assert!(
            json_schema.schema["properties"]
                .get(WRAPPER_PROPERTY)
                .is_none()
        );
    }

    #[test]
    fn an_enum_is_asked_for_inside_an_object_and_unwrapped() {
        let ask = Structured::<Desk>::new();
        let ResponseFormat::JsonSchema { json_schema } = ask.response_format() else {
            panic!("a json_schema format");
        };
        // Strict mode takes only an object at the top level.
        assert_eq!(json_schema.schema["type"], "object");
        assert_eq!(
            json_schema.schema["required"],
            serde_json::json!(["answer"])
        );
        assert_eq!(json_schema.schema["additionalProperties"], false);
        assert_eq!(
            json_schema.schema["properties"]["answer"]["enum"],
            serde_json::json!(["billing", "tech_support"])
        );
        assert_eq!(
            ask.parse(r#"{"answer": "tech_support"}"#).ok(),
            Some(Desk::TechSupport)
        );
        // A model without strict mode may answer the bare value.
        assert_eq!(ask.parse(r#""billing""#).ok(), Some(Desk::Billing));
        assert!(ask.parse(r#"{"answer": "sales"}"#).is_err());
    }

    #[test]
    fn a_tagged_enum_and_a_list_keep_their_definitions_when_wrapped() {
        let step = Structured::<Step>::new();
        let ResponseFormat::JsonSchema { json_schema } = step.response_format() else {
            panic!("a json_schema format");
        };
        let text = json_schema.schema.to_string();
        assert!(!text.contains("$ref") && !text.contains("oneOf"), "{text}");
        assert_eq!(
            step.parse(r#"{"answer": {"kind": "transfer", "desk": "billing"}}"#)
                .ok(),
            Some(Step::Transfer {
                desk: Desk::Billing
            })
        );

        let list = Structured::<Vec<Fields>>::new();
        assert_eq!(
            list.parse(r#"{"answer": [{"name": "Ada", "tags": null, "age": 36}]}"#)
                .ok(),
            Some(vec![Fields {
                name: "Ada".into(),
                tags: Vec::new(),
                age: Some(36)
            }])
        );
    }

    #[tokio::test]
    async fn a_wrapped_answer_that_does_not_parse_is_retried_with_the_error() {
        let llm = crewline_llm::ScriptedLlm::new([
            crewline_llm::Reply::text(r#"{"answer": "sales"}"#),
            crewline_llm::Reply::text(r#"{"answer": "billing"}"#),
        ]);
        let desk = Structured::<Desk>::new()
            .ask(&llm, vec![Message::user("I was charged twice.")])
            .await
            .ok();
        assert_eq!(desk, Some(Desk::Billing));
        assert_eq!(llm.requests().len(), 2);
    }

    #[tokio::test]
    async fn an_answer_past_the_cap_is_an_error_and_is_not_asked_again() {
        let llm = crewline_llm::ScriptedLlm::new([crewline_llm::Reply::text(format!(
            "{{\"name\": \"{}\"}}",
            "a".repeat(100)
        ))]);
        let error = Structured::<Fields>::new()
            .max_answer_bytes(64)
            .ask(&llm, vec![Message::user("hi")])
            .await
            .err();
        assert!(
            matches!(error, Some(StructuredError::TooLarge { limit: 64, .. })),
            "{error:?}"
        );
        assert_eq!(llm.requests().len(), 1, "no retry");
    }

    #[tokio::test]
    async fn no_answer_and_a_failed_model_are_typed_errors() {
        let llm = crewline_llm::ScriptedLlm::new([
            crewline_llm::Reply::text("  "),
            crewline_llm::Reply::Fail(crewline_llm::LlmError::Timeout(
                std::time::Duration::from_secs(1),
            )),
        ]);
        let ask = Structured::<Fields>::new();
        let empty = ask.ask(&llm, vec![Message::user("hi")]).await.err();
        assert_eq!(empty.as_ref().map(StructuredError::kind), Some("no_answer"));
        let failed = ask.ask(&llm, vec![Message::user("hi")]).await.err();
        assert_eq!(failed.as_ref().map(StructuredError::kind), Some("llm"));
        let log = failed.map(|e| e.to_log("extract")).unwrap_or_default();
        assert_eq!(log["step"], "extract");
        assert_eq!(log["schema"], "Fields");
        assert_eq!(log["raw"], Value::Null);
    }

    #[test]
    fn names_and_raw_text_are_bounded() {
        assert_eq!(schema_name("Vec<Intent>"), "Vec_Intent_");
        assert_eq!(schema_name(&"x".repeat(100)).len(), 64);
        assert_eq!(schema_name(""), "answer");
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("hello", 10), "hello");
    }
}
