use std::time::Duration;

/// Why a chat completion failed.
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
    Connect(String),
    /// The server answered with an error.
    #[error("the LLM server answered {}: {message}", status.map_or_else(|| "an error".to_owned(), |s| format!("HTTP {s}")))]
    Api {
        /// The HTTP status, when there was one (errors can also arrive mid-stream).
        status: Option<u16>,
        /// The server's message.
        message: String,
    },
    /// The server did not answer (or stalled) within the time limit.
    #[error("the LLM server did not answer within {0:?}")]
    Timeout(Duration),
    /// The stream broke off before the model finished.
    #[error("the LLM stream broke off mid-way: {0}")]
    StreamCut(String),
    /// The server's answer could not be read.
    #[error("could not read the LLM server's answer: {0}")]
    InvalidResponse(String),
    /// Part of the server's answer was larger than the client's limit (see
    /// [`OpenAiClientBuilder::max_event_bytes`](crate::OpenAiClientBuilder::max_event_bytes)):
    /// the answer was stopped there, so a runaway or hostile server costs at most the limit.
    #[error("the LLM server's answer is too large: {what} is over the {limit}-byte limit")]
    TooLarge {
        /// What was too large: "a line of the stream", "an event of the stream", "the answer".
        what: &'static str,
        /// The limit, in bytes.
        limit: usize,
    },
    /// A scripted model ran out of script or was told to fail.
    #[error("scripted model: {0}")]
    Script(String),
}
