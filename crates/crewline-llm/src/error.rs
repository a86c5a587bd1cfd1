use std::{error::Error as StdError, fmt, sync::Arc, time::Duration};

/// Why a chat completion failed.
///
/// A failure that came from below (the network, a decoder, another client's own error) keeps
/// it: walk [`std::error::Error::source`] from the error to reach it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// No API key was given and `OPENAI_API_KEY` is not set.
    #[error("no API key: set OPENAI_API_KEY or pass one with OpenAiClient::builder().api_key(..)")]
    MissingApiKey,
    /// The client's settings are unusable.
    #[error("invalid LLM client configuration: {0}")]
    Config(String),
    /// The server could not be reached.
    #[error("could not reach the LLM server: {0}")]
    Connect(#[source] ErrorDetail),
    /// The server answered with an error.
    #[error("the LLM server answered {}: {message}", status.map_or_else(|| "an error".to_owned(), |s| format!("HTTP {s}")))]
    Api {
        /// The HTTP status, when there was one (errors can also arrive mid-stream).
        status: Option<u16>,
        /// The server's message.
        message: String,
        /// How long the server asked to wait before asking again (its `Retry-After`), when
        /// it said.
        retry_after: Option<Duration>,
    },
    /// The server did not answer (or stalled) within the time limit.
    #[error("the LLM server did not answer within {0:?}")]
    Timeout(Duration),
    /// The stream broke off before the model finished.
    #[error("the LLM stream broke off mid-way: {0}")]
    StreamCut(#[source] ErrorDetail),
    /// The server's answer could not be read.
    #[error("could not read the LLM server's answer: {0}")]
    InvalidResponse(#[source] ErrorDetail),
    /// Part of the server's answer was larger than the client's limit (see
    /// [`OpenAiClientBuilder::max_event_bytes`](crate::OpenAiClientBuilder::max_event_bytes)
    /// and [`AnswerLimits`](crate::AnswerLimits)): the answer was stopped there, so a runaway
    /// or hostile server costs at most the limit.
    #[error("the LLM server's answer is too large: {what} is over the {limit}-byte limit")]
    TooLarge {
        /// What was too large: "a line of the stream", "an event of the stream", "the answer",
        /// "a tool call".
        what: &'static str,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The model's answer asked for more tool calls than the client's or the tool loop's
    /// [`AnswerLimits::max_tool_calls`](crate::AnswerLimits::max_tool_calls): the answer was
    /// stopped there and none of its calls run.
    #[error("the LLM server's answer has too many tool calls: over the limit of {limit}")]
    TooManyToolCalls {
        /// The limit, in calls.
        limit: usize,
    },
    /// Another client's own failure (a custom model, the scripted one), in its words: see
    /// [`LlmError::other`].
    #[error("{0}")]
    Other(#[source] ErrorDetail),
}

impl LlmError {
    /// How long the server asked to wait before another request (`Retry-After` on a 429 or
    /// 503), when it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A client's own failure, keeping `error` as its cause (its message is the error's).
    pub fn other(error: impl StdError + Send + Sync + 'static) -> Self {
        Self::Other(ErrorDetail::caused_by(error.to_string(), error))
    }
}

/// What went wrong, in words, and the error that caused it when there was one (reachable
/// through [`std::error::Error::source`]).
///
/// The message already holds the cause's words, so logging the [`LlmError`] alone says it
/// all; the cause is kept for code that inspects it (`downcast_ref::<std::io::Error>()`).
#[derive(Clone)]
pub struct ErrorDetail {
    message: String,
    source: Option<Arc<dyn StdError + Send + Sync>>,
}

impl ErrorDetail {
    /// A message with no cause.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// A message caused by `source`.
    pub fn caused_by(
        message: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same cause with its message changed (to scrub a secret out of it).
    pub(crate) fn map_message(self, map: impl FnOnce(String) -> String) -> Self {
        Self {
            message: map(self.message),
            source: self.source,
        }
    }
}

impl fmt::Debug for ErrorDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The message's own `Debug`, as the variants held a bare string before, with the cause
        // only when there is one.
        match &self.source {
            None => fmt::Debug::fmt(&self.message, f),
            Some(source) => f
                .debug_struct("ErrorDetail")
                .field("message", &self.message)
                .field("source", source)
                .finish(),
        }
    }
}

impl fmt::Display for ErrorDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for ErrorDetail {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn StdError + 'static))
    }
}

impl From<String> for ErrorDetail {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for ErrorDetail {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}
