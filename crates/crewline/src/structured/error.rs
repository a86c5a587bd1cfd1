//! Why a typed answer could not be had.

use crewline_llm::LlmError;
use serde_json::{Map, Value};

/// Why [`Structured::ask`](super::Structured::ask) returned no value.
///
/// Every variant is an answer the crew can act on (say sorry, ask again, move on); none is a
/// panic. [`Invalid`](Self::Invalid) keeps the parse error as its source and the model's raw
/// text (cut to [`MAX_RAW_BYTES`](super::MAX_RAW_BYTES)) for the logs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StructuredError {
    /// The model could not be asked, or its stream broke off.
    #[error("the model was not reachable for the typed answer `{name}`")]
    Llm {
        /// The answer's schema name.
        name: String,
        /// The client's error.
        #[source]
        source: LlmError,
    },
    /// The answer grew past the cap: no real answer is that long, so it is not read further.
    #[error("the typed answer `{name}` is longer than {limit} bytes")]
    TooLarge {
        /// The answer's schema name.
        name: String,
        /// The cap, in bytes.
        limit: usize,
    },
    /// The model refused, was filtered, or stopped at its token limit without an answer.
    #[error("the model gave no typed answer `{name}` (finish reason: {finish})")]
    NoAnswer {
        /// The answer's schema name.
        name: String,
        /// Why the model stopped.
        finish: String,
    },
    /// Every attempt's text failed to parse as the type.
    #[error("the model's answer does not parse as `{name}` after {attempts} attempts")]
    Invalid {
        /// The answer's schema name.
        name: String,
        /// How many answers were read (the first and its retries).
        attempts: u32,
        /// The last answer's text, cut to [`MAX_RAW_BYTES`](super::MAX_RAW_BYTES).
        raw: String,
        /// The last parse error.
        #[source]
        source: serde_json::Error,
    },
}

impl StructuredError {
    /// A short, stable name of the kind of failure (`llm`, `too_large`, `no_answer`, `invalid`),
    /// for logs and `agent.log` entries.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Llm { .. } => "llm",
            Self::TooLarge { .. } => "too_large",
            Self::NoAnswer { .. } => "no_answer",
            Self::Invalid { .. } => "invalid",
        }
    }

    /// The name of the schema that was asked for.
    pub fn schema(&self) -> &str {
        match self {
            Self::Llm { name, .. }
            | Self::TooLarge { name, .. }
            | Self::NoAnswer { name, .. }
            | Self::Invalid { name, .. } => name,
        }
    }

    /// The error and its causes, one after the other (`a: b: c`).
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }

    /// The payload of an `agent.log` [`STRUCTURED_ERROR_LOG`](super::STRUCTURED_ERROR_LOG)
    /// entry for this failure in `step` (a sub-agent's or a tool's name):
    /// `{step, schema, kind, error, raw}`.
    pub fn to_log(&self, step: &str) -> Map<String, Value> {
        let mut payload = Map::new();
        payload.insert("step".into(), Value::from(step));
        payload.insert("schema".into(), Value::from(self.schema()));
        payload.insert("kind".into(), Value::from(self.kind()));
        payload.insert("error".into(), Value::from(self.chain()));
        payload.insert("raw".into(), self.raw().map_or(Value::Null, Value::from));
        payload
    }

    /// The model's raw text when it did not parse.
    pub fn raw(&self) -> Option<&str> {
        match self {
            Self::Invalid { raw, .. } => Some(raw),
            _ => None,
        }
    }
}
