use std::{error::Error as StdError, fmt, sync::Arc};

use serde::{Deserialize, Serialize};

/// Errors raised while reading the shared vocabulary from outside input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// A chat message could not be read from JSON.
    #[error("invalid chat message")]
    InvalidMessage(#[from] serde_json::Error),
}

/// Why a tool call failed, as the model is told.
///
/// The model sees `{"error": {"kind": "<kind>", "message": "..."}}` in the tool message, so it
/// can tell a typo in its own arguments (retry) from a tool that is down (apologise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The model named a tool that is not registered.
    UnknownTool,
    /// The arguments were not JSON, or did not match the tool's schema.
    ToolArgsInvalid,
    /// The tool ran and reported a failure (or panicked).
    ToolError,
    /// The call was refused by the approver.
    ApprovalDenied,
    /// The call waits for an approval that has not arrived yet.
    ApprovalPending,
    /// A guardrail blocked the call or its result.
    GuardrailBlocked,
    /// A per-run limit (calls, time) was reached.
    RunLimitExceeded,
    /// The tool did not finish within its time limit.
    Timeout,
    /// The call was cancelled, usually because the caller interrupted.
    Cancelled,
    /// A tool that must not be cut off half-way (a payment) is still running after its
    /// caller stopped waiting: it must not be started again. Calling it again with the same
    /// arguments waits for the running call and gives its outcome.
    StillRunning,
    /// A tool with effects may or may not have run (its replica died mid-call, its store
    /// could not be reached after the call was handed out): it must not be retried, and the
    /// caller must not be told it failed. An operator reconciles it from the ledger.
    OutcomeUnknown,
}

impl ToolErrorKind {
    /// The kind's name as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownTool => "UnknownTool",
            Self::ToolArgsInvalid => "ToolArgsInvalid",
            Self::ToolError => "ToolError",
            Self::ApprovalDenied => "ApprovalDenied",
            Self::ApprovalPending => "ApprovalPending",
            Self::GuardrailBlocked => "GuardrailBlocked",
            Self::RunLimitExceeded => "RunLimitExceeded",
            Self::Timeout => "Timeout",
            Self::Cancelled => "Cancelled",
            Self::StillRunning => "StillRunning",
            Self::OutcomeUnknown => "OutcomeUnknown",
        }
    }
}

impl fmt::Display for ToolErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `error` and each of its causes, joined by ": ", for a log line, an operator's detail or the
/// CLI's last word: the one chain printer every crewline crate uses at its edges.
///
/// Each crewline error's `Display` says only its own layer and leaves the rest to
/// [`source`](std::error::Error::source), as reqwest's do; this puts the layers back together,
/// each once. A foreign error that does print its cause in its own message is not repeated: a
/// cause whose text the previous layer's already ends with is skipped. An [`ErrorDetail`] ends
/// the chain, since its words already say its causes (with secrets scrubbed out).
pub fn error_chain(error: &(dyn StdError + 'static)) -> String {
    ErrorChain(error).to_string()
}

/// Displays an error with its causes, each once, joined by ": " (see [`error_chain`]); for a
/// `tracing` field (`error = %ErrorChain(&error)`) without building a string first.
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn StdError + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut previous = self.0.to_string();
        f.write_str(&previous)?;
        let mut layer = self.0;
        while let Some(cause) = layer.source() {
            // An `ErrorDetail`'s words already hold its causes', scrubbed: printing the causes
            // again would repeat them, and could print a secret the scrubber removed.
            if layer.is::<ErrorDetail>() {
                break;
            }
            let text = cause.to_string();
            if !text.is_empty() && !previous.ends_with(&text) {
                f.write_str(": ")?;
                f.write_str(&text)?;
            }
            previous = text;
            layer = cause;
        }
        Ok(())
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What went wrong below a crewline error, in words, and the error that caused it when there
/// was one (reachable through [`std::error::Error::source`], for code that inspects it).
///
/// The words already say the cause's (a model server's reply, scrubbed of the API key, cut to
/// a bound), so [`error_chain`] prints them and stops: the cause is kept for code that
/// inspects it (`downcast_ref::<std::io::Error>()`), not for printing. It is `Clone` (the cause
/// is shared) so that the errors that hold it can be too: a fallback model hands one failure to
/// several waiters.
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

    /// A message caused by `source`; the message should say the cause's words.
    pub fn caused_by(
        message: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// A message caused by a boxed error (a tool's detail); the message should say its words.
    pub fn caused_by_boxed(
        message: impl Into<String>,
        source: Box<dyn StdError + Send + Sync>,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Arc::from(source)),
        }
    }

    /// `source` as the detail, its words being its whole chain (see [`error_chain`]).
    pub fn from_error(source: impl StdError + Send + Sync + 'static) -> Self {
        Self::caused_by(error_chain(&source), source)
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same cause with its message changed (to scrub a secret out of it).
    pub fn map_message(self, map: impl FnOnce(String) -> String) -> Self {
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

/// Two details are equal when their words are (the causes are not comparable): a stored
/// outcome read back equals the one written.
impl PartialEq for ErrorDetail {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for ErrorDetail {}

impl std::ops::Deref for ErrorDetail {
    type Target = str;

    /// The message, so a detail reads like the string it replaced (`detail.contains(..)`).
    fn deref(&self) -> &str {
        &self.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("could not load the crew")]
        Load(#[source] Middle),
    }

    #[derive(Debug, thiserror::Error)]
    #[error("could not read crew.yaml")]
    struct Middle(#[source] std::io::Error);

    /// A foreign error that prints its cause in its own message.
    #[derive(Debug, thiserror::Error)]
    #[error("wrapped: {0}")]
    struct Embeds(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("the model refused")]
    struct Detailed(#[source] ErrorDetail);

    fn io() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")
    }

    #[test]
    fn the_chain_prints_each_layer_once() {
        let error = Outer::Load(Middle(io()));
        assert_eq!(error.to_string(), "could not load the crew");
        assert_eq!(
            error_chain(&error),
            "could not load the crew: could not read crew.yaml: no such file"
        );
        assert_eq!(ErrorChain(&error).to_string(), error_chain(&error));
    }

    #[test]
    fn a_cause_the_layer_already_printed_is_not_repeated() {
        assert_eq!(error_chain(&Embeds(io())), "wrapped: no such file");
    }

    #[test]
    fn a_core_error_does_not_repeat_its_cause() {
        let error = crate::Message::from_json(serde_json::json!({"role": 7})).unwrap_err();
        assert_eq!(error.to_string(), "invalid chat message");
        let chain = error_chain(&error);
        assert!(chain.starts_with("invalid chat message: "), "{chain}");
        assert_eq!(chain.matches("invalid chat message").count(), 1, "{chain}");
    }

    #[test]
    fn a_detail_ends_the_chain_with_its_own_words() {
        let secret = std::io::Error::other("key sk-secret refused");
        let detail = ErrorDetail::caused_by("key <redacted> refused", secret);
        let error = Outer::Load(Middle(std::io::Error::other(Detailed(detail))));
        assert_eq!(
            error_chain(&error),
            "could not load the crew: could not read crew.yaml: the model refused: \
             key <redacted> refused"
        );
    }
}
