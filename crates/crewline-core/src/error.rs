use std::fmt;

use serde::{Deserialize, Serialize};

/// Errors raised while reading the shared vocabulary from outside input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// A chat message could not be read from JSON.
    #[error("invalid chat message: {0}")]
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

/// `error` and each of its sources, joined by ": ", for a log line or an operator's detail.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
