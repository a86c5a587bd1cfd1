use std::{error::Error as StdError, time::Duration};

pub use crewline_core::ErrorDetail;

/// Why a chat completion failed.
///
/// Each variant's `Display` says only what failed at this layer; what came from below (the
/// network, a decoder, another client's own error) is its [`source`](std::error::Error::source),
/// an [`ErrorDetail`] whose words (scrubbed of the API key) say the cause. Print the whole of it
/// with [`crewline_core::error_chain`].
///
/// `Clone` because a fallback model and a shared stream hand one failure to several waiters:
/// the causes are kept behind an `Arc` in [`ErrorDetail`] for that reason.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// No API key was given and `OPENAI_API_KEY` is not set.
    #[error("no API key: set OPENAI_API_KEY or pass one with OpenAiClient::builder().api_key(..)")]
    MissingApiKey,
    /// The client's settings are unusable.
    ///
    /// The detail's words say which setting and why: they are this layer's own, so they are
    /// part of its `Display` (the chain printer does not repeat them); its source is what
    /// refused the setting (serde's error, the URL parser's), for code that inspects it.
    #[error("invalid LLM client configuration: {0}")]
    Config(#[source] ErrorDetail),
    /// The server could not be reached.
    #[error("could not reach the LLM server")]
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
    #[error("the LLM stream broke off mid-way")]
    StreamCut(#[source] ErrorDetail),
    /// The server's answer could not be read.
    #[error("could not read the LLM server's answer")]
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
    /// [`LlmError::other`]. Its words are the whole error (there is no layer of ours to
    /// add), so the printer does not repeat them.
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

    /// A client's own failure, keeping `error` as its cause (its message is the error's
    /// chain).
    pub fn other(error: impl StdError + Send + Sync + 'static) -> Self {
        Self::Other(ErrorDetail::from_error(error))
    }

    /// The client's settings are unusable, for the reason `message` says.
    pub fn config(message: impl Into<String>) -> Self {
        Self::Config(ErrorDetail::new(message))
    }

    /// The client's settings are unusable: `message` says which, `source` why.
    pub fn config_caused_by(
        message: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        let message = format!(
            "{}: {}",
            message.into(),
            crewline_core::error_chain(&source)
        );
        Self::Config(ErrorDetail::caused_by(message, source))
    }
}
