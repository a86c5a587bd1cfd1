//! A classification step: a typed answer, asked at the start of a sub-agent's turn, that
//! writes to the router's state so the transitions can pick the sub-agent that answers.

use std::sync::Arc;

use async_trait::async_trait;
use crewline_core::{Message, Role};
use crewline_llm::LlmClient;
use schemars::JsonSchema;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

use crate::structured::{Structured, StructuredError};

/// What a [`StructuredStep`] writes to the state from its answer.
type Record<T> = Arc<dyn Fn(&T) -> Map<String, Value> + Send + Sync>;

/// A typed classification the router asks for at the start of each turn of one sub-agent
/// (see [`RouterBuilder::classify`](super::RouterBuilder::classify)).
///
/// The model reads the conversation under the step's own instruction (not the sub-agent's
/// prompt) and answers a `T`; the answer's fields are merged into the router's state
/// (or what [`record`](Self::record) makes of it), and the transitions out of the sub-agent
/// are tried at once, so the sub-agent they pick answers this very turn. When none holds, the
/// sub-agent itself answers (say, to ask the caller what they need).
///
/// # Examples
///
/// ```
/// use crewline::router::StructuredStep;
///
/// #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// #[serde(rename_all = "snake_case")]
/// enum Desk { Billing, TechSupport, Unclear }
///
/// #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// struct Intent { desk: Desk }
///
/// // The state gets `{"desk": "billing"}`; `when::equals("desk", "billing")` routes on it.
/// let step = StructuredStep::<Intent>::new("Which desk does the caller need?");
/// # drop(step);
/// ```
pub struct StructuredStep<T> {
    instruction: String,
    ask: Structured<T>,
    record: Record<T>,
}

impl<T: JsonSchema + Serialize + DeserializeOwned + Send + Sync + 'static> StructuredStep<T> {
    /// A step asking for a `T` under `instruction`, its answer's fields merged into the state.
    pub fn new(instruction: impl Into<String>) -> Self {
        Self {
            instruction: instruction.into(),
            ask: Structured::new(),
            record: Arc::new(fields_of),
        }
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> StructuredStep<T> {
    /// Asks with these settings (a name, a cap, retries, a cheaper model in its options).
    pub fn with_structured(mut self, ask: Structured<T>) -> Self {
        self.ask = ask;
        self
    }

    /// Writes `record(answer)` to the state instead of the answer's fields.
    pub fn record(
        mut self,
        record: impl Fn(&T) -> Map<String, Value> + Send + Sync + 'static,
    ) -> Self {
        self.record = Arc::new(record);
        self
    }
}

/// The answer's fields (a value that is not an object is kept under `answer`).
fn fields_of<T: Serialize>(answer: &T) -> Map<String, Value> {
    match serde_json::to_value(answer) {
        Ok(Value::Object(fields)) => fields,
        Ok(other) => Map::from_iter([("answer".to_owned(), other)]),
        Err(error) => {
            tracing::error!(%error, "a typed answer did not serialize: nothing recorded");
            Map::new()
        }
    }
}

/// A [`StructuredStep`] with its type erased, as the router keeps it.
#[async_trait]
pub(super) trait Classify: Send + Sync {
    /// The schema's name, for logs.
    fn name(&self) -> &str;

    /// Asks for the answer over the conversation; what to write to the state.
    async fn classify(
        &self,
        llm: &dyn LlmClient,
        conversation: &[Message],
    ) -> Result<Map<String, Value>, StructuredError>;
}

#[async_trait]
impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Classify for StructuredStep<T> {
    fn name(&self) -> &str {
        self.ask.schema_name()
    }

    async fn classify(
        &self,
        llm: &dyn LlmClient,
        conversation: &[Message],
    ) -> Result<Map<String, Value>, StructuredError> {
        // What was said, without the sub-agents' prompts and tool traffic: the request offers
        // no tools, and some servers refuse tool messages without them.
        let mut messages = Vec::with_capacity(conversation.len() + 1);
        messages.push(Message::system(self.instruction.clone()));
        messages.extend(
            conversation
                .iter()
                .filter_map(|m| match (m.role(), m.text()) {
                    (Role::User, _) => Some(m.clone()),
                    (Role::Assistant, Some(text)) if !text.is_empty() => {
                        Some(Message::assistant(text))
                    }
                    _ => None,
                }),
        );
        let answer = self.ask.ask(llm, messages).await?;
        Ok((self.record)(&answer))
    }
}
