//! Why one call failed: the kind and message the model reads, and the operator's detail.

use crewline_core::{ErrorDetail, ToolErrorKind, ToolFailure, error_chain};
use serde_json::Value;

use crate::ToolError;

/// Why one call failed: its kind, the message the model reads, and the operator's detail.
///
/// Its `Display` is the kind and the model's message; the operator's detail is its
/// [`source`](std::error::Error::source), printed by [`error_chain`]. `Clone` and `PartialEq`
/// because a stored outcome is handed to every caller of the same key and compared in tests:
/// the detail keeps its cause behind an `Arc` and compares by its words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ToolCallError {
    /// The kind the model is told.
    pub kind: ToolErrorKind,
    /// The message written for the model.
    pub message: String,
    /// The full chain for the operator (logs, ledger), with the error that caused it when
    /// there is one; never shown to the model.
    #[source]
    pub detail: Option<ErrorDetail>,
}

impl ToolCallError {
    /// A failure with a message for the model.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            detail: None,
        }
    }

    /// Attaches the operator's detail.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(ErrorDetail::new(detail));
        self
    }
}

impl From<ToolError> for ToolCallError {
    fn from(error: ToolError) -> Self {
        let kind = if error.is_outcome_unknown() {
            ToolErrorKind::OutcomeUnknown
        } else if error.is_invalid_arguments() {
            ToolErrorKind::ToolArgsInvalid
        } else {
            ToolErrorKind::ToolError
        };
        let (message, detail) = error.into_parts();
        Self {
            kind,
            message,
            detail: detail
                .map(|detail| ErrorDetail::caused_by_boxed(error_chain(&*detail), detail)),
        }
    }
}

impl From<ToolCallError> for ToolFailure {
    /// What the model is told; the detail stays with the operator.
    fn from(error: ToolCallError) -> Self {
        ToolFailure {
            kind: error.kind,
            message: error.message,
        }
    }
}

/// A call's outcome as the stages, its waiter and its detached task hand it on.
pub(crate) type Settled = Result<Value, ToolCallError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_errors_keep_the_detail_chain_for_the_operator() {
        let error = ToolCallError::from(
            ToolError::new("weather is down").with_detail(std::io::Error::other("503")),
        );
        assert_eq!(error.kind, ToolErrorKind::ToolError);
        assert_eq!(error.message, "weather is down");
        assert_eq!(error.detail.as_deref(), Some("503"));
        // The cause is kept, not only its words; printed once, after the model's message.
        let cause = std::error::Error::source(&error).and_then(std::error::Error::source);
        assert!(cause.is_some_and(|cause| cause.is::<std::io::Error>()));
        assert_eq!(error.to_string(), "ToolError: weather is down");
        assert_eq!(error_chain(&error), "ToolError: weather is down: 503");
        let invalid = ToolCallError::from(ToolError::invalid_arguments("bad date"));
        assert_eq!(invalid.kind, ToolErrorKind::ToolArgsInvalid);
        let unknown = ToolCallError::from(ToolError::outcome_unknown("may have run"));
        assert_eq!(unknown.kind, ToolErrorKind::OutcomeUnknown);
    }
}
