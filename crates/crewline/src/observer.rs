//! Hooks through which a session reports what happens, for metrics.

use std::time::Duration;

use crewline_core::ToolErrorKind;
use crewline_protocol::Severity;

use crate::turn::TurnReport;

/// Receives a session's measurements; the server turns them into Prometheus metrics.
///
/// Every method has an empty default, and all are called on the hot path: keep them cheap
/// (atomics, no locks, no allocation).
pub trait Observer: Send + Sync + 'static {
    /// An output node started answering an LLM request.
    fn turn_started(&self) {}

    /// The first chunk of a turn left the node, `latency` after the request arrived.
    fn first_chunk(&self, _latency: Duration) {}

    /// A turn ended: completed, interrupted, or failed.
    fn turn_finished(&self, _outcome: TurnOutcome, _report: Option<&TurnReport>) {}

    /// A tool call finished.
    fn tool_finished(&self, _tool: &str, _latency: Duration, _error: Option<ToolErrorKind>) {}

    /// Node code failed; the platform got an `agent.error`.
    fn node_error(&self, _node: &str, _severity: Severity) {}

    /// An inbound event was dropped (a full inbox, or a session that is ending).
    fn event_dropped(&self, _reason: &'static str) {}
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The answer was streamed to its end.
    Completed,
    /// The caller barged in.
    Interrupted,
    /// The model or the agent failed; the platform got `agent.error` (fatal).
    Failed,
}

impl TurnOutcome {
    /// The outcome as metrics and traces spell it: `completed`, `interrupted` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Interrupted => "interrupted",
            Self::Failed => "failed",
        }
    }
}

/// An observer that records nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopObserver;

impl Observer for NoopObserver {}
