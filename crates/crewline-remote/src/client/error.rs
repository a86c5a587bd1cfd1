//! Why a task API request failed.

use crewline_tools::ExportError;

/// Why a task API request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The configuration cannot work (e.g. the base URL does not parse).
    #[error("invalid task client configuration: {0}")]
    Config(String),
    /// The request did not get an answer (connection refused, reset, timed out).
    #[error("could not reach the task API")]
    Network(#[source] reqwest::Error),
    /// The API answered with an error status.
    #[error("the task API answered {status}: {detail}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The API's explanation.
        detail: String,
    },
    /// The API does not know the task.
    #[error("the task API has no task `{0}`")]
    TaskNotFound(String),
    /// The API refused the key.
    #[error("the task API refused the api key ({status}): {detail}")]
    Unauthorized {
        /// 401 or 403.
        status: u16,
        /// The API's explanation.
        detail: String,
    },
    /// The API sent a response body larger than the client reads
    /// ([`ClientConfig::max_response_bytes`](crate::ClientConfig::max_response_bytes)); it was
    /// not read further. Not retried: the same request would bring the same body.
    #[error("the task API sent a response body over {limit} bytes, the most this client reads")]
    TooLarge {
        /// The limit it went over.
        limit: usize,
    },
    /// A success response did not have the expected shape.
    #[error("the task API sent a body that is not the expected {what}")]
    Decode {
        /// What was expected.
        what: &'static str,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The registry's tools cannot be exported to a remote agent.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// Every attempt failed; the last failure is kept.
    #[error("gave up after {attempts} attempts: {last}")]
    GaveUp {
        /// How many attempts were made.
        attempts: u32,
        /// The last attempt's failure.
        #[source]
        last: Box<ClientError>,
    },
}

impl ClientError {
    /// Whether trying again may help (network errors, 5xx, 408, 429).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Network(_) => true,
            Self::Status { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            _ => false,
        }
    }
}
