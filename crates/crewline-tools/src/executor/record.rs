//! Stage 9's input: what the pipeline learnt about one call ([`Trace`]), the ledger record
//! built from it, and the guard that records a call whose future was dropped half-way.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use crewline_core::{ToolCall, ToolErrorKind};
use serde_json::Value;

use super::{
    ToolCallError,
    approval::ApprovalRecord,
    ledger::{LedgerRecord, LedgerSink, Outcome},
};

/// What the pipeline learnt about one call, for the ledger.
#[derive(Default)]
pub(crate) struct Trace {
    pub(super) arguments: Option<Value>,
    pub(super) approval: Option<ApprovalRecord>,
    pub(super) cache_hit: bool,
    /// While a detached (non-cancellable) tool runs: its task or waiter writes the record if
    /// the call's future is dropped.
    pub(super) detached: bool,
}

/// Writes a `Cancelled` record for a call whose future was dropped before it finished (a
/// barge-in or a shutdown dropped the turn), so the ledger has every call that started.
pub(super) struct LedgerGuard<'a> {
    pub(super) ledger: Option<&'a Arc<dyn LedgerSink>>,
    pub(super) call: &'a ToolCall,
    pub(super) started: Instant,
    pub(super) trace: Trace,
    pub(super) finished: bool,
}

impl Drop for LedgerGuard<'_> {
    fn drop(&mut self) {
        let Some(ledger) = self.ledger else { return };
        if self.finished || self.trace.detached {
            return;
        }
        let error = ToolCallError::new(ToolErrorKind::Cancelled, "the call was cancelled")
            .with_detail(
                "the caller stopped waiting (a barge-in or a shutdown) before the call finished",
            );
        let record = record(
            self.call,
            &Err(error),
            self.started.elapsed(),
            std::mem::take(&mut self.trace),
        );
        tracing::info!(tool = %self.call.name, "a call was dropped before it finished");
        if let Err(error) = ledger.record(&record) {
            tracing::error!(%error, "the tool ledger could not be written");
        }
    }
}

/// Stage 9's record of one call.
pub(super) fn record(
    call: &ToolCall,
    outcome: &Result<Value, ToolCallError>,
    latency: Duration,
    trace: Trace,
) -> LedgerRecord {
    let arguments = trace
        .arguments
        .unwrap_or_else(|| Value::String(call.arguments.clone()));
    let (outcome, error_kind, message, detail) = match outcome {
        Ok(_) => (Outcome::Ok, None, None, None),
        Err(error) => (
            Outcome::Error,
            Some(error.kind),
            Some(error.message.clone()),
            error.detail.clone(),
        ),
    };
    LedgerRecord {
        ran_on: false,
        call_id: call.id.clone(),
        tool: call.name.clone(),
        arguments,
        outcome,
        error_kind,
        message,
        detail,
        latency_us: u64::try_from(latency.as_micros()).unwrap_or(u64::MAX),
        approval: trace.approval,
        cache_hit: trace.cache_hit,
        timestamp_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    }
}
