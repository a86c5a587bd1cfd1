//! The pipeline one call goes through, stage by stage (see the [module docs](super)).

use std::{
    borrow::Cow,
    panic::AssertUnwindSafe,
    sync::Arc,
    time::{Duration, Instant},
};

use crewline_core::{ToolCall, ToolErrorKind, ToolFailure, ToolResult};
use futures::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{
    CallContext, Executor, INTERRUPTED_MESSAGE, PANIC_MESSAGE, ToolCallError, ToolRun,
    approval::{self, ApprovalDecision, ApprovalOutcome, ApprovalRecord, ApprovalRequest},
    claims::ClaimKey,
    cut_short::{CutShort, KeepIfDropped},
    detached, fingerprint,
    guardrails::{self, Side},
    hooks::HookAction,
    inflight::{self, Local},
    limits,
    record::{LedgerGuard, Trace, record, write_record},
    run_once::Claimed,
    validation::CallArguments,
};
use crate::{
    ToolPolicy,
    catalog::{Catalog, Entry},
};

impl Executor {
    /// Runs one call of a tool in `tools` through the pipeline; never fails: failures are
    /// error results.
    ///
    /// A call with an empty id gets a fresh `call_...` id, which its result carries.
    /// `arguments` are the call's, read once by the caller (its text is not parsed again).
    pub(crate) async fn execute(
        &self,
        tools: &Catalog,
        call: &ToolCall,
        arguments: CallArguments,
        context: &CallContext,
    ) -> ToolRun {
        let call = if call.id.is_empty() {
            Cow::Owned(ToolCall {
                id: fresh_call_id(),
                ..call.clone()
            })
        } else {
            Cow::Borrowed(call)
        };
        let span = tracing::info_span!(
            "tool.call",
            tool = %call.name,
            call_id = %call.id,
            error = tracing::field::Empty
        );
        async {
            let started = Instant::now();
            let mut guard = LedgerGuard {
                ledger: self.ledger.as_ref(),
                call: &call,
                cut: &context.cut,
                started,
                trace: Trace::default(),
                finished: false,
            };
            let outcome = self
                .pipeline(tools, &call, arguments, context, &mut guard.trace, started)
                .await;
            guard.finished = true;
            let trace = std::mem::take(&mut guard.trace);
            drop(guard);
            let latency = started.elapsed();
            match &outcome {
                Ok(_) => tracing::debug!(?latency, outcome = "ok", "tool call finished"),
                Err(error) => {
                    tracing::Span::current().record("error", error.kind.as_str());
                    tracing::warn!(
                        ?latency,
                        kind = %error.kind,
                        // Messages and details may carry a result or the arguments.
                        message = %crewline_core::excerpt(&error.message),
                        detail = error
                            .detail
                            .as_deref()
                            .map(|d| tracing::field::display(crewline_core::excerpt(d))),
                        "tool call failed"
                    );
                }
            }
            if let Some(ledger) = &self.ledger {
                write_record(ledger, record(&call, &outcome, latency, trace)).await;
            }
            // The outcome stays a value: it becomes text once, in the model's message.
            let result = ToolResult::new(&call, outcome.map_err(ToolFailure::from));
            ToolRun { result, latency }
        }
        .instrument(span)
        .await
    }

    /// Stages 1 to 8.
    async fn pipeline(
        &self,
        tools: &Catalog,
        call: &ToolCall,
        arguments: CallArguments,
        context: &CallContext,
        trace: &mut Trace,
        started: Instant,
    ) -> Result<Value, ToolCallError> {
        let Some(entry) = tools.entry(&call.name) else {
            return Err(ToolCallError::new(
                ToolErrorKind::UnknownTool,
                tools.unknown_tool_message(&call.name),
            ));
        };
        let mut arguments = self.validation.validate_read(entry, arguments)?;
        for hook in &self.before_hooks {
            if let HookAction::Respond(value) = hook.before(call, &mut arguments).await {
                self.keep_arguments(trace, &arguments);
                return Ok(value);
            }
        }
        self.keep_arguments(trace, &arguments);
        guardrails::check(&self.guardrails, Side::Input, call, &arguments).await?;
        let policy = entry.tool.policy();
        // A retry of a non-cancellable call of this session (the platform's call, on any
        // replica sharing the claim store) that runs, or finished, or whose replica died,
        // reads what its claim says (see `claims`): nothing new runs, so nothing is approved
        // or counted again.
        let claim_key =
            (!policy.cancellable).then(|| ClaimKey::new(context.scope(), &call.name, &arguments));
        let joined = match &claim_key {
            Some(key) => self.join_claim(key, policy).await?,
            None => None,
        };
        let mut outcome = match (joined, claim_key) {
            (Some(joined), Some(key)) => {
                let limit = policy.timeout.unwrap_or(self.default_timeout);
                self.read_claim(joined, &key, policy, limit).await
            }
            _ => {
                if policy.confirm {
                    arguments = self.approve(entry, call, arguments, context, trace).await?;
                    self.keep_arguments(trace, &arguments);
                }
                let remaining = context.run.admit(&call.name)?;
                self.invoke(
                    tools, entry, call, arguments, policy, context, remaining, trace, started,
                )
                .await
            }
        };
        if let Ok(value) = &outcome
            && let Err(error) = guardrails::check(&self.guardrails, Side::Output, call, value).await
        {
            outcome = Err(error);
        }
        for hook in &self.after_hooks {
            hook.after(call, &mut outcome).await;
        }
        outcome
    }

    /// Keeps the arguments for the ledger (only when there is one: it costs a clone).
    fn keep_arguments(&self, trace: &mut Trace, arguments: &Value) {
        if self.ledger.is_some() {
            trace.arguments = Some(arguments.clone());
        }
    }

    /// Stage 4: asks the approver; returns the arguments to run with.
    async fn approve(
        &self,
        entry: &Entry,
        call: &ToolCall,
        arguments: Value,
        context: &CallContext,
        trace: &mut Trace,
    ) -> Result<Value, ToolCallError> {
        let Some(approver) = &self.approval else {
            // Fail closed: a tool that asks for confirmation never runs unconfirmed.
            trace.approval = Some(ApprovalRecord::Denied);
            return Err(approval::denied("no one is available to approve it")
                .with_detail("the tool needs confirmation but the executor has no approver"));
        };
        // The request's id is minted here, never taken from the model (which repeats ids);
        // a decision is bound to the session, the tool and the arguments' hash.
        let request = ApprovalRequest {
            id: fresh_approval_id(),
            scope: context.scope.clone(),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments_hash: fingerprint::arguments_hash(&arguments),
            arguments,
            can_wait: context.can_wait,
        };
        match approver.request(&request).await {
            ApprovalOutcome::Decided(ApprovalDecision::Approve) => {
                trace.approval = Some(ApprovalRecord::Approved);
                Ok(request.arguments)
            }
            ApprovalOutcome::Decided(ApprovalDecision::ApproveWithEdits { arguments }) => {
                trace.approval = Some(ApprovalRecord::ApprovedWithEdits);
                self.validation
                    .validate_value(entry, arguments)
                    .map_err(|error| {
                        let detail = format!("the approver's edited arguments: {}", error.message);
                        ToolCallError::new(
                            ToolErrorKind::ToolArgsInvalid,
                            "the arguments the approver edited are not valid for this tool",
                        )
                        .with_detail(detail)
                    })
            }
            ApprovalOutcome::Decided(ApprovalDecision::Deny { reason }) => {
                trace.approval = Some(ApprovalRecord::Denied);
                Err(approval::denied(&reason))
            }
            ApprovalOutcome::Pending => {
                trace.approval = Some(ApprovalRecord::Pending);
                Err(approval::pending())
            }
        }
    }

    /// Stages 6 and 7: the cache, then the tool under its timeout and the cancellation tokens.
    #[allow(clippy::too_many_arguments)]
    async fn invoke(
        &self,
        tools: &Catalog,
        entry: &Entry,
        call: &ToolCall,
        arguments: Value,
        policy: ToolPolicy,
        context: &CallContext,
        remaining: Option<Duration>,
        trace: &mut Trace,
        call_started: Instant,
    ) -> Result<Value, ToolCallError> {
        let cached = match (&self.cache, policy.cache_ttl) {
            (Some(cache), Some(ttl)) => {
                let key = cache.key_for(&context.scope, tools.id(), &call.name, &arguments);
                if let Some(value) = cache.get(&key) {
                    trace.cache_hit = true;
                    return Ok(value);
                }
                Some((cache, key, ttl))
            }
            _ => None,
        };

        let timeout = policy.timeout.unwrap_or(self.default_timeout);
        // The run's remaining tool time caps this call too; running out of it is a run limit.
        let (limit, by_budget) = match remaining {
            Some(left) if left < timeout => (left, true),
            _ => (timeout, false),
        };
        // A detached tool's task writes the record itself if this call's waiter goes away.
        let recorder = match &self.ledger {
            Some(sink) if !policy.cancellable => Some(detached::Recorder {
                sink: Arc::clone(sink),
                call: call.clone(),
                trace: Trace {
                    arguments: trace.arguments.clone(),
                    approval: trace.approval,
                    ..Trace::default()
                },
                started: call_started,
            }),
            _ => None,
        };
        let started = tokio::time::Instant::now();
        let outcome = if policy.cancellable {
            let raced = call_tool(entry, call, arguments, limit, context).await;
            context.run.spend(started.elapsed());
            match raced {
                Raced::Done(Ok(value)) => self.check_result_size(value),
                Raced::Done(Err(error)) => Err(error),
                // The tool said what being cut short means for its call (it may have run).
                Raced::Said(said) => said.and_then(|value| self.check_result_size(value)),
                Raced::TimedOut if by_budget => Err(limits::exceeded(
                    "this turn ran out of time for tools while the tool was running",
                )
                .with_detail(format!("stopped after the run's remaining {limit:?}"))),
                Raced::TimedOut => Err(ToolCallError::new(
                    ToolErrorKind::Timeout,
                    format!(
                        "the tool did not finish within {}; try again later or without it",
                        human_duration(limit)
                    ),
                )),
                Raced::Cancelled(by) => Err(ToolCallError::new(
                    ToolErrorKind::Cancelled,
                    "the call was cancelled",
                )
                .with_detail(match by {
                    CancelledBy::Run => "the run's cancellation token fired",
                    CancelledBy::Call => "the call's cancellation token fired",
                })),
            }
        } else {
            let mut recorder = recorder;
            // A tool that must not be cut off half-way (a payment, a booking) runs as a task of
            // its own: neither barge-in nor the timeout stops it, they only stop the waiting.
            // An identical call of the same session started meanwhile joins this one.
            // The tool's task is tracked (shutdown waits for it) and writes the ledger record
            // itself if this waiter goes away before the outcome (a barge-in, a timeout).
            // Claimed first (set-if-absent with a lease, on every replica sharing the
            // store): a retry that got here meanwhile joins this run instead.
            let key = ClaimKey::new(context.scope(), &call.name, &arguments);
            let outcome = match self.claim_run(&key, policy).await {
                Err(refused) => Err(refused),
                Ok(Claimed::Other(claim)) => self.read_claim(claim, &key, policy, limit).await,
                Ok(Claimed::Won {
                    token,
                    idempotency_key,
                }) => {
                    // The claim is this call's. Its intent is recorded before the tool starts
                    // (a crash from here on leaves it pending in the ledger); one that cannot
                    // be recorded settles the claim as a failure, so a retry may run.
                    if let Err(refused) = self
                        .write_intent(call, context, trace, recorder.as_mut(), &idempotency_key)
                        .await
                    {
                        self.release_unrun(&key, &token, &refused).await;
                        return Err(refused);
                    }
                    // The tool starts now, under its key.
                    trace.detached = true;
                    let tool = guarded_call(entry, arguments);
                    let waiter = self.in_flight.start(
                        key.clone(),
                        |waiting| self.claimed_call(tool, key, token, idempotency_key, waiting),
                        recorder,
                    );
                    let outcome = match waiter.wait(limit).await {
                        Some(settled) => settled.and_then(|value| self.check_result_size(value)),
                        None => {
                            tracing::info!(?limit, "stopped waiting; the tool runs on");
                            Err(inflight::still_running())
                        }
                    };
                    trace.detached = false;
                    outcome
                }
            };
            context.run.spend(started.elapsed());
            outcome
        };
        if let (Ok(value), Some((cache, key, ttl))) = (&outcome, cached) {
            cache.insert(key, value.clone(), ttl);
        }
        outcome
    }

    /// The result for a call whose caller stopped waiting before it finished (a barge-in
    /// dropped the turn): the real outcome of a non-cancellable call that has finished,
    /// `StillRunning` for one still running, what a cancellable call's tool said being cut
    /// short means ([`CutShort`]), `Cancelled` for anything else (a cancellable call was
    /// stopped; a call that had not started never will).
    ///
    /// Synchronous, for drop guards: output guardrails and after-hooks cannot run here, so
    /// with any of them configured a finished outcome is not handed over but left for the
    /// retry (`StillRunning`), which reads it through the whole pipeline.
    pub(crate) fn interrupted(
        &self,
        tools: &Catalog,
        call: &ToolCall,
        context: &CallContext,
    ) -> ToolResult {
        let cancelled = || ToolResult::error(call, ToolErrorKind::Cancelled, INTERRUPTED_MESSAGE);
        // A cancellable call whose tool said what being cut short means (it may have run).
        if let Some(said) = context.cut.take(&call.id) {
            return match said.and_then(|value| self.check_result_size(value)) {
                Ok(value) => ToolResult::from_value(call, value),
                Err(error) => ToolResult::error(call, error.kind, error.message),
            };
        }
        let Some(entry) = tools.entry(&call.name) else {
            return cancelled();
        };
        if entry.tool.policy().cancellable {
            return cancelled();
        }
        let read = CallArguments::parse(&call.arguments);
        let Ok(arguments) = self.validation.validate_read(entry, read) else {
            return cancelled();
        };
        let key = ClaimKey::new(context.scope(), &call.name, &arguments);
        let still_running = || {
            let error = inflight::still_running();
            ToolResult::error(call, error.kind, error.message)
        };
        if !(self.guardrails.is_empty() && self.after_hooks.is_empty()) {
            return if self.in_flight.contains(&key) {
                still_running()
            } else {
                cancelled()
            };
        }
        match self.in_flight.take(&key) {
            Some(Local::Finished(settled)) => {
                self.mark_received(key);
                match settled.and_then(|value| self.check_result_size(value)) {
                    Ok(value) => ToolResult::from_value(call, value),
                    Err(error) => ToolResult::error(call, error.kind, error.message),
                }
            }
            Some(Local::Running) => still_running(),
            None => cancelled(),
        }
    }

    /// `value`, or a `ToolError` when its content is over the result size limit.
    pub(crate) fn check_result_size(&self, value: Value) -> Result<Value, ToolCallError> {
        let Some(max) = self.max_result_bytes else {
            return Ok(value);
        };
        match result_size(&value, max) {
            Some(_) => Ok(value),
            None => Err(oversize(
                max,
                match &value {
                    Value::String(text) => format!("a string of {} bytes", text.len()),
                    _ => "a JSON value".to_owned(),
                },
            )),
        }
    }
}

/// The error for a result over the `max` bytes accepted; `what` describes it.
pub(crate) fn oversize(max: usize, what: String) -> ToolCallError {
    ToolCallError::new(
        ToolErrorKind::ToolError,
        format!(
            "the tool's result is larger than the {max} bytes this crew accepts; ask for less \
             (a narrower query, fewer items)"
        ),
    )
    .with_detail(format!("result over max_result_bytes ({max}); {what}"))
}

/// The size of `value`'s content as the model reads it (a string as is, anything else as
/// JSON), or `None` once it passes `max`: a huge result is not serialised twice.
pub(crate) fn result_size(value: &Value, max: usize) -> Option<usize> {
    if let Value::String(text) = value {
        return (text.len() <= max).then_some(text.len());
    }
    crewline_core::json_len_within(value, max)
}

/// How the call itself ended.
enum Raced {
    Done(Result<Value, ToolCallError>),
    TimedOut,
    Cancelled(CancelledBy),
    /// Cut short (cancelled or timed out), and its tool said what that means.
    Said(Result<Value, ToolCallError>),
}

/// Which token cancelled a call.
enum CancelledBy {
    Run,
    Call,
}

/// Completes when the call's own token fires; never without one.
async fn call_cancelled(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// The tool's call with its arguments, a panic caught and turned into a `ToolError`.
fn guarded_call(
    entry: &Entry,
    arguments: Value,
) -> impl Future<Output = Result<Value, ToolCallError>> + Send + 'static {
    let tool = Arc::clone(&entry.tool);
    // The future is created inside the guarded block too, so a hand-written `call` that
    // panics before returning its future is caught as well.
    AssertUnwindSafe(async move { tool.call(arguments).await })
        .catch_unwind()
        .map(|done| match done {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(ToolCallError::from(error)),
            Err(payload) => Err(ToolCallError::new(ToolErrorKind::ToolError, PANIC_MESSAGE)
                .with_detail(format!(
                    "panic: {}",
                    crewline_core::panic_message(payload.as_ref())
                ))),
        })
}

/// Stage 7 for a cancellable tool: runs it under `limit` and the run's and the call's tokens.
async fn call_tool(
    entry: &Entry,
    call: &ToolCall,
    arguments: Value,
    limit: Duration,
    context: &CallContext,
) -> Raced {
    let handle = CutShort::default();
    // If this future is dropped half-way (a barge-in dropped the turn), what the tool said
    // being cut short means is kept for `interrupted`.
    let mut kept = KeepIfDropped {
        calls: &context.cut,
        call: &call.id,
        handle: handle.clone(),
        finished: false,
    };
    // A key of its own, minted only if the tool asks for it (no store is involved).
    let guarded =
        super::IdempotencyKey::lazily(handle.clone().scope(guarded_call(entry, arguments)));
    // Dropping the tool's future is what stops it, on timeout and on cancellation alike.
    let raced = tokio::select! {
        biased;
        () = context.run.token().cancelled() => Raced::Cancelled(CancelledBy::Run),
        () = call_cancelled(context.call_token.as_ref()) => Raced::Cancelled(CancelledBy::Call),
        done = tokio::time::timeout(limit, guarded) => done.map_or(Raced::TimedOut, Raced::Done),
    };
    kept.finished = true;
    // The tool's future is dropped by now: what its drop said counts too.
    match raced {
        Raced::Cancelled(_) | Raced::TimedOut => handle.take().map_or(raced, Raced::Said),
        done => done,
    }
}

/// A fresh id for an approval request (never the model's call id, which models repeat).
fn fresh_approval_id() -> String {
    format!("apr_{}", uuid::Uuid::new_v4().simple())
}

/// A fresh call id for callers that gave none.
fn fresh_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

/// A duration as the model reads it ("5s", "250ms").
fn human_duration(duration: Duration) -> String {
    if duration.as_millis().is_multiple_of(1000) {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests;
