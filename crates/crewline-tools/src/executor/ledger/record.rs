//! What the ledger's frame around the stages writes: what the stages learnt about one call
//! ([`Trace`]), the record built from it, the guard that records a call whose future was
//! dropped half-way, and the intent written before a tool with effects starts.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use crewline_core::{ToolCall, ToolErrorKind};
use serde_json::Value;

use super::{
    INTENT_TIMEOUT, LedgerError, LedgerIntent, LedgerRecord, LedgerSink, OUTCOME_TIMEOUT, Outcome,
};
use crate::executor::{
    Executor, IdempotencyKey, ToolCallError,
    cut_short::CutCalls,
    stage::{Call, Trace},
};

/// Writes a `Cancelled` record for a call whose future was dropped before it finished (a
/// barge-in or a shutdown dropped the turn), so the ledger has every call that started.
pub(crate) struct LedgerGuard<'a> {
    pub(crate) ledger: Option<&'a Arc<dyn LedgerSink>>,
    pub(crate) call: &'a ToolCall,
    /// The run's calls cut short, with what their tools said that means.
    pub(crate) cut: &'a CutCalls,
    pub(crate) started: Instant,
    pub(crate) trace: Trace,
    pub(crate) finished: bool,
}

impl Drop for LedgerGuard<'_> {
    fn drop(&mut self) {
        let Some(ledger) = self.ledger else { return };
        if self.finished || self.trace.detached {
            return;
        }
        // The call's tool may have said it could have run all the same (its effect happens
        // out of its future's reach): then it is no cancellation.
        let unknown = self
            .cut
            .find(&self.call.id)
            .is_some_and(|handle| handle.is_outcome_unknown());
        let error = if unknown {
            ToolCallError::new(
                ToolErrorKind::OutcomeUnknown,
                "the call's outcome is unknown",
            )
        } else {
            ToolCallError::new(ToolErrorKind::Cancelled, "the call was cancelled")
        }
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
            tracing::error!(error = %crewline_core::ErrorChain(&error), "the tool ledger could not be written");
        }
    }
}

/// The ledger's record of one call.
pub(crate) fn record(
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
            error.detail.as_deref().map(str::to_owned),
        ),
    };
    // Only the tool's end settles its intent: a caller that stopped waiting (`StillRunning`)
    // or a call whose fate is unknown leaves it pending, for the record of the real outcome
    // (`ran_on`) or for an operator.
    let settled = !matches!(
        error_kind,
        Some(ToolErrorKind::StillRunning | ToolErrorKind::OutcomeUnknown)
    );
    LedgerRecord {
        ran_on: false,
        intent_id: trace.intent_id.filter(|_| settled),
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
        timestamp_ms: now_ms(),
    }
}

/// Writes `record` to `ledger`. A record that settles an intent (a call with effects) is
/// awaited, at most [`OUTCOME_TIMEOUT`], before the call's result returns: a crash once the
/// result is out cannot leave the call pending. Any other record is queued: calls without
/// effects never wait for the ledger.
pub(crate) async fn write_record(ledger: &Arc<dyn LedgerSink>, record: LedgerRecord) {
    if record.intent_id.is_none() {
        if let Err(error) = ledger.record(&record) {
            tracing::error!(error = %crewline_core::ErrorChain(&error), "the tool ledger could not be written");
        }
        return;
    }
    let settling = ledger.settle(&record);
    // Queued instead if this call is dropped while it waits (a barge-in ends the turn).
    let mut unsettled = Unsettled {
        ledger,
        record: Some(record),
    };
    match tokio::time::timeout(OUTCOME_TIMEOUT, settling).await {
        Ok(Ok(())) => unsettled.record = None,
        Ok(Err(error)) => {
            tracing::warn!(error = %crewline_core::ErrorChain(&error), "the outcome could not be stored at once: it is queued");
        }
        Err(_) => {
            tracing::warn!(timeout = ?OUTCOME_TIMEOUT, "the outcome was not stored in time: it is queued");
        }
    }
}

/// An outcome record not yet stored: queued when dropped.
struct Unsettled<'a> {
    ledger: &'a Arc<dyn LedgerSink>,
    record: Option<LedgerRecord>,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if let Some(record) = self.record.take()
            && let Err(error) = self.ledger.record(&record)
        {
            tracing::error!(error = %crewline_core::ErrorChain(&error), "the tool ledger could not be written");
        }
    }
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Executor {
    /// Writes the intent of a call with effects to the ledger before its tool starts, and
    /// names it in the call's outcome records (the trace's and the detached `recorder`'s).
    ///
    /// Refuses the call (the tool does not run) when the intent could not be stored within
    /// [`INTENT_TIMEOUT`] and the sink requires intents; a sink that keeps none
    /// ([`LedgerError::IntentsUnsupported`]) runs it as before.
    pub(crate) async fn write_intent(
        &self,
        call: &mut Call<'_>,
        recorder: Option<&mut Recorder>,
        idempotency_key: &IdempotencyKey,
    ) -> Result<(), ToolCallError> {
        let Some(ledger) = &self.ledger else {
            return Ok(());
        };
        let (context, trace, call) = (call.context, &mut *call.trace, call.call);
        let intent = LedgerIntent {
            intent_id: format!("int_{}", uuid::Uuid::new_v4().simple()),
            idempotency_key: Some(idempotency_key.as_str().to_owned()),
            scope: context.scope().as_str().to_owned(),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: trace
                .arguments
                .clone()
                .unwrap_or_else(|| Value::String(call.arguments.clone())),
            timestamp_ms: now_ms(),
        };
        // Named before the write: if this call is dropped while it waits, its `Cancelled`
        // record settles the intent (the tool never started).
        trace.intent_id = Some(intent.intent_id.clone());
        let stored = match tokio::time::timeout(INTENT_TIMEOUT, ledger.intent(&intent)).await {
            Ok(stored) => stored,
            Err(_) => Err(LedgerError::IntentNotStored {
                reason: format!("not stored within {INTENT_TIMEOUT:?}").into(),
            }),
        };
        match stored {
            Ok(()) => {}
            Err(LedgerError::IntentsUnsupported) => {
                trace.intent_id = None;
                return Ok(());
            }
            Err(error) if ledger.require_intent() => {
                tracing::error!(error = %crewline_core::ErrorChain(&error), "the intent could not be recorded: the tool was not run");
                return Err(ToolCallError::new(
                    ToolErrorKind::ToolError,
                    "the tool was not run because it could not be recorded; nothing happened, \
                     you may try again in a moment",
                )
                .with_detail(format!(
                    "the ledger could not store the intent (require_intent): {}",
                    crewline_core::ErrorChain(&error)
                )));
            }
            Err(error) => {
                tracing::error!(error = %crewline_core::ErrorChain(&error), "the intent could not be recorded; the tool runs anyway");
            }
        }
        if let Some(recorder) = recorder {
            recorder.trace.intent_id.clone_from(&trace.intent_id);
        }
        Ok(())
    }
}

/// What a detached task needs to write its call's record once its waiter is gone.
pub(crate) struct Recorder {
    pub(crate) sink: Arc<dyn LedgerSink>,
    pub(crate) call: crewline_core::ToolCall,
    pub(crate) trace: Trace,
    pub(crate) started: std::time::Instant,
}

impl Recorder {
    /// The record of a call that finished (or was dropped) after its waiter left.
    fn ran_on(self, outcome: Result<Value, ToolCallError>) -> (Arc<dyn LedgerSink>, LedgerRecord) {
        let mut record = record(&self.call, &outcome, self.started.elapsed(), self.trace);
        record.ran_on = true;
        (self.sink, record)
    }

    /// Writes the record of a call that finished (or was dropped) after its waiter left.
    pub(crate) fn write(self, outcome: Result<Value, ToolCallError>) {
        let (sink, record) = self.ran_on(outcome);
        if let Err(error) = sink.record(&record) {
            tracing::error!(error = %crewline_core::ErrorChain(&error), "the tool ledger could not be written");
        }
    }

    /// Stores the record of a call that finished after its waiter left, as the waiter would
    /// have ([`write_record`]): on the tool's task, which a
    /// shutdown waits for.
    pub(crate) async fn settle(self, outcome: Result<Value, ToolCallError>) {
        let (sink, record) = self.ran_on(outcome);
        write_record(&sink, record).await;
    }
}

impl Executor {
    /// Keeps the arguments for the ledger (only when there is one: it costs a clone).
    pub(crate) fn keep_arguments(&self, trace: &mut Trace, arguments: &Value) {
        if self.ledger.is_some() {
            trace.arguments = Some(arguments.clone());
        }
    }
}
