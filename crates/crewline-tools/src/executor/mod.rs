//! The executor: one pipeline for every tool call, whoever makes it.
//!
//! Each call goes through, in order: [validation], before-[hooks], input [guardrails],
//! [approval] (for `confirm` tools), run [limits], the result [cache] (for tools with a
//! `cache_ttl`), the call itself under its timeout and the cancellation tokens of the run and
//! of the call ([`CallContext::with_call_token`]), output guardrails and after-hooks, and
//! finally the [ledger].
//!
//! What the executor keeps between calls is kept per session ([`SessionScope`], carried on
//! every [`CallContext`]): cached results, approvals, and non-cancellable calls that run on
//! after their caller stopped waiting. Such a call answers `StillRunning`, and a retry with
//! the same validated arguments in the same session joins it (or reads its outcome) instead
//! of running the tool again. Every failure becomes a
//! [`ToolResult`] error the model can read (`{"error": {"kind", "message"}}`); the operator gets
//! the full detail in `tracing` and in the ledger.

pub mod approval;
pub mod cache;
mod detached;
mod fingerprint;
pub mod guardrails;
pub mod hooks;
mod inflight;
pub mod ledger;
pub mod limits;
mod scope;
pub mod validation;

pub use self::scope::SessionScope;

use std::{
    any::Any,
    borrow::Cow,
    fmt,
    panic::AssertUnwindSafe,
    sync::{Arc, OnceLock},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use futures::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use self::detached::detached_tasks;
use self::{
    approval::{ApprovalDecision, ApprovalOutcome, ApprovalPort, ApprovalRecord, ApprovalRequest},
    cache::{CacheConfig, ResultCache},
    guardrails::{Guardrail, Side},
    hooks::{AfterHook, BeforeHook, HookAction},
    inflight::{InFlight, Joined},
    ledger::{LedgerRecord, LedgerSink, Outcome},
    limits::{Run, RunLimits},
    validation::ValidationConfig,
};
use crate::{ToolError, ToolPolicy, ToolRegistry, ToolRun, registry::Entry};

/// The time limit of tools that set none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest tool result accepted by default: 1 MiB of content (the result as the model
/// reads it: a string as is, any other value as JSON).
///
/// A result goes to the model in the next request and to the platform in the
/// `tool_call_end` log; a tool that returns megabytes (a whole file, a runaway query) would
/// blow the model's context and send a frame of that size to the platform. Larger results
/// become a `ToolError` the model can read instead.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 20;

/// What the model reads for a call that a barge-in cut short before it finished.
pub const INTERRUPTED_MESSAGE: &str =
    "The caller interrupted before this tool finished, so it was cancelled.";

/// How long the outcome of a non-cancellable call whose caller stopped waiting is kept by
/// default, for a retry of the same call in the same session to read instead of running the
/// tool again.
pub const DEFAULT_RETRY_WINDOW: Duration = Duration::from_secs(120);

/// What the model reads when a tool panics (kind `ToolError`); the payload itself goes to the
/// operator only. Callers that must tell a panic from an ordinary tool error match on it.
pub const PANIC_MESSAGE: &str = "the tool failed unexpectedly";

/// Why one call failed: its kind, the message the model reads, and the operator's detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ToolCallError {
    /// The kind the model is told.
    pub kind: ToolErrorKind,
    /// The message written for the model.
    pub message: String,
    /// The full chain for the operator (logs, ledger); never shown to the model.
    pub detail: Option<String>,
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
        self.detail = Some(detail.into());
        self
    }
}

impl From<ToolError> for ToolCallError {
    fn from(error: ToolError) -> Self {
        let kind = if error.is_invalid_arguments() {
            ToolErrorKind::ToolArgsInvalid
        } else {
            ToolErrorKind::ToolError
        };
        Self {
            kind,
            message: error.message().to_owned(),
            detail: error.detail().map(|detail| error_chain(detail)),
        }
    }
}

/// Why the executor could not be configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecutorError {
    /// [`Executor::set_default`] was called after the default was set or first used.
    #[error("the default executor is already set (or was already used)")]
    DefaultAlreadySet,
}

/// The per-call context: the session and the run the call belongs to, whether the caller can
/// wait, and an optional token of the call's own.
#[derive(Debug, Clone)]
pub struct CallContext {
    run: Run,
    scope: SessionScope,
    can_wait: bool,
    call_token: Option<CancellationToken>,
}

impl Default for CallContext {
    fn default() -> Self {
        Self::new(Run::default())
    }
}

impl CallContext {
    /// A context for calls of `run`, whose caller can wait for approvals, in a fresh session
    /// scope of its own (it shares nothing with any other context until
    /// [`with_scope`](Self::with_scope) names the session).
    pub fn new(run: Run) -> Self {
        Self {
            run,
            scope: SessionScope::new(),
            can_wait: true,
            call_token: None,
        }
    }

    /// The same context for calls of the session `scope`: cached results, approvals and
    /// non-cancellable calls still running are kept per scope. Whoever owns the session (a
    /// voice call, an MCP session, a remote task) mints the scope once and passes it on every
    /// turn's context.
    pub fn with_scope(mut self, scope: SessionScope) -> Self {
        self.scope = scope;
        self
    }

    /// The session the calls belong to.
    pub fn scope(&self) -> &SessionScope {
        &self.scope
    }

    /// The same context for a call that `token` cancels too (a request its client
    /// cancelled, a caller that went away), without cancelling the rest of the run.
    ///
    /// Like the run's token, it stops cancellable tools only: a tool with
    /// `cancellable = false` runs on to completion in its own task.
    pub fn with_call_token(mut self, token: CancellationToken) -> Self {
        self.call_token = Some(token);
        self
    }

    /// The call's own cancellation token, if it has one.
    pub fn call_token(&self) -> Option<&CancellationToken> {
        self.call_token.as_ref()
    }

    /// The same context for a caller that cannot wait: deferred approvals answer
    /// `ApprovalPending` at once.
    pub fn without_waiting(mut self) -> Self {
        self.can_wait = false;
        self
    }

    /// The run the calls belong to.
    pub fn run(&self) -> &Run {
        &self.run
    }

    /// Whether the caller can wait for an approval.
    pub fn can_wait(&self) -> bool {
        self.can_wait
    }
}

/// What the pipeline learnt about one call, for the ledger.
#[derive(Default)]
struct Trace {
    arguments: Option<Value>,
    approval: Option<ApprovalRecord>,
    cache_hit: bool,
    /// While a detached (non-cancellable) tool runs: its task or waiter writes the record if
    /// the call's future is dropped.
    detached: bool,
}

/// Writes a `Cancelled` record for a call whose future was dropped before it finished (a
/// barge-in or a shutdown dropped the turn), so the ledger has every call that started.
struct LedgerGuard<'a> {
    ledger: Option<&'a Arc<dyn LedgerSink>>,
    call: &'a ToolCall,
    started: Instant,
    trace: Trace,
    finished: bool,
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
            Err(error),
            self.started.elapsed(),
            std::mem::take(&mut self.trace),
        );
        tracing::info!(tool = %self.call.name, "a call was dropped before it finished");
        if let Err(error) = ledger.record(&record) {
            tracing::error!(%error, "the tool ledger could not be written");
        }
    }
}

/// Runs tool calls through the pipeline; shared by every caller.
///
/// Calls must run inside a Tokio runtime with its time driver enabled (timeouts).
pub struct Executor {
    default_timeout: Duration,
    max_result_bytes: Option<usize>,
    validation: ValidationConfig,
    before_hooks: Vec<Arc<dyn BeforeHook>>,
    after_hooks: Vec<Arc<dyn AfterHook>>,
    guardrails: Vec<Arc<dyn Guardrail>>,
    approval: Option<Arc<dyn ApprovalPort>>,
    run_limits: RunLimits,
    cache: Option<ResultCache>,
    ledger: Option<Arc<dyn LedgerSink>>,
    in_flight: InFlight,
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("default_timeout", &self.default_timeout)
            .field("max_result_bytes", &self.max_result_bytes)
            .field("before_hooks", &self.before_hooks.len())
            .field("after_hooks", &self.after_hooks.len())
            .field("guardrails", &self.guardrails.len())
            .field("approval", &self.approval.is_some())
            .field("run_limits", &self.run_limits)
            .field("cache", &self.cache.is_some())
            .field("ledger", &self.ledger.is_some())
            .finish()
    }
}

impl Default for Executor {
    fn default() -> Self {
        ExecutorBuilder::default().build()
    }
}

static DEFAULT_EXECUTOR: OnceLock<Arc<Executor>> = OnceLock::new();

impl Executor {
    /// A builder with every stage off but validation, the 30 s default timeout and the cache.
    pub fn builder() -> ExecutorBuilder {
        ExecutorBuilder::default()
    }

    /// The process-wide default executor (what a new [`ToolRegistry`] uses).
    pub fn default_executor() -> Arc<Executor> {
        Arc::clone(DEFAULT_EXECUTOR.get_or_init(|| Arc::new(Executor::default())))
    }

    /// Sets the process-wide default, once, before any registry uses it.
    pub fn set_default(executor: Executor) -> Result<(), ExecutorError> {
        DEFAULT_EXECUTOR
            .set(Arc::new(executor))
            .map_err(|_| ExecutorError::DefaultAlreadySet)
    }

    /// A context for a new run with the executor's run limits.
    pub fn context(&self) -> CallContext {
        CallContext::new(Run::new(self.run_limits))
    }

    /// A context for a new run cancelled by `token`.
    pub fn context_with_token(&self, token: CancellationToken) -> CallContext {
        CallContext::new(Run::with_token(self.run_limits, token))
    }

    /// The executor's time limit for tools that set none.
    pub fn default_timeout(&self) -> Duration {
        self.default_timeout
    }

    /// Runs one call of a tool in `tools` through the pipeline; never fails: failures are
    /// error results.
    ///
    /// A call with an empty id gets a fresh `call_...` id, which its result carries.
    pub async fn execute(
        &self,
        tools: &ToolRegistry,
        call: &ToolCall,
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
        let span = tracing::info_span!("tool.call", tool = %call.name, call_id = %call.id);
        async {
            let started = Instant::now();
            let mut guard = LedgerGuard {
                ledger: self.ledger.as_ref(),
                call: &call,
                started,
                trace: Trace::default(),
                finished: false,
            };
            let outcome = self
                .pipeline(tools, &call, context, &mut guard.trace, started)
                .await;
            guard.finished = true;
            let trace = std::mem::take(&mut guard.trace);
            drop(guard);
            let latency = started.elapsed();
            let result = match &outcome {
                Ok(value) => {
                    tracing::debug!(?latency, outcome = "ok", "tool call finished");
                    ToolResult::from_value(&call, value)
                }
                Err(error) => {
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
                    ToolResult::error(&call, error.kind, error.message.clone())
                }
            };
            if let Some(ledger) = &self.ledger {
                let record = record(&call, outcome, latency, trace);
                if let Err(error) = ledger.record(&record) {
                    tracing::error!(%error, "the tool ledger could not be written");
                }
            }
            ToolRun { result, latency }
        }
        .instrument(span)
        .await
    }

    /// Runs [`execute`](Self::execute) from synchronous code (see [`run_sync`]).
    pub fn execute_sync(
        &self,
        tools: &ToolRegistry,
        call: &ToolCall,
        context: &CallContext,
    ) -> Result<ToolRun, RunSyncError> {
        run_sync(self.execute(tools, call, context))
    }

    /// Stages 1 to 8.
    async fn pipeline(
        &self,
        tools: &ToolRegistry,
        call: &ToolCall,
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
        let mut arguments = self.validation.validate_text(entry, &call.arguments)?;
        for hook in &self.before_hooks {
            if let HookAction::Respond(value) = hook.before(call, &mut arguments).await {
                self.keep_arguments(trace, &arguments);
                return Ok(value);
            }
        }
        self.keep_arguments(trace, &arguments);
        guardrails::check(&self.guardrails, Side::Input, call, &arguments).await?;
        let policy = entry.tool.policy();
        // A retry of a non-cancellable call still running in this session (or finished
        // without its caller hearing the outcome) joins it: nothing new runs, so nothing is
        // approved or counted again.
        let joined = if policy.cancellable {
            None
        } else {
            self.in_flight
                .join(&inflight::Key::new(context, tools, call, &arguments))
        };
        let mut outcome = match joined {
            Some(joined) => {
                tracing::info!("joined the same call, still running or not yet told");
                let limit = policy.timeout.unwrap_or(self.default_timeout);
                self.settle(joined, limit).await
            }
            None => {
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
        tools: &ToolRegistry,
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
            let raced = call_tool(entry, arguments, limit, context).await;
            context.run.spend(started.elapsed());
            match raced {
                Raced::Done(Ok(value)) => self.check_result_size(value),
                Raced::Done(Err(error)) => Err(error),
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
            // A tool that must not be cut off half-way (a payment, a booking) runs as a task of
            // its own: neither barge-in nor the timeout stops it, they only stop the waiting.
            // An identical call of the same session started meanwhile joins this one.
            // The tool's task is tracked (shutdown waits for it) and writes the ledger record
            // itself if this waiter goes away before the outcome (a barge-in, a timeout).
            let key = inflight::Key::new(context, tools, call, &arguments);
            trace.detached = true;
            let joined = self
                .in_flight
                .start(key, guarded_call(entry, arguments), recorder);
            let outcome = self.settle(joined, limit).await;
            trace.detached = false;
            context.run.spend(started.elapsed());
            outcome
        };
        if let (Ok(value), Some((cache, key, ttl))) = (&outcome, cached) {
            cache.insert(key, value.clone(), ttl);
        }
        outcome
    }

    /// The outcome of a non-cancellable call this caller waits for at most `limit`: the
    /// tool's own, or `StillRunning` (the call runs on and must not be started again).
    async fn settle(&self, joined: Joined, limit: Duration) -> Result<Value, ToolCallError> {
        let settled = match joined {
            Joined::Finished(settled) => settled,
            Joined::Running(waiter) => match waiter.wait(limit).await {
                Some(settled) => settled,
                None => {
                    tracing::info!(?limit, "stopped waiting; the tool runs on to completion");
                    return Err(inflight::still_running());
                }
            },
        };
        settled.and_then(|value| self.check_result_size(value))
    }

    /// The result for a call whose caller stopped waiting before it finished (a barge-in
    /// dropped the turn): the real outcome of a non-cancellable call that has finished,
    /// `StillRunning` for one still running, `Cancelled` for anything else (a cancellable
    /// call was stopped; a call that had not started never will).
    ///
    /// Synchronous, for drop guards: output guardrails and after-hooks cannot run here, so
    /// with any of them configured a finished outcome is not handed over but left for the
    /// retry (`StillRunning`), which reads it through the whole pipeline.
    pub fn interrupted(
        &self,
        tools: &ToolRegistry,
        call: &ToolCall,
        context: &CallContext,
    ) -> ToolResult {
        let cancelled = || ToolResult::error(call, ToolErrorKind::Cancelled, INTERRUPTED_MESSAGE);
        let Some(entry) = tools.entry(&call.name) else {
            return cancelled();
        };
        if entry.tool.policy().cancellable {
            return cancelled();
        }
        let Ok(arguments) = self.validation.validate_text(entry, &call.arguments) else {
            return cancelled();
        };
        let key = inflight::Key::new(context, tools, call, &arguments);
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
        match self.in_flight.join(&key) {
            Some(Joined::Finished(settled)) => {
                match settled.and_then(|value| self.check_result_size(value)) {
                    Ok(value) => ToolResult::from_value(call, &value),
                    Err(error) => ToolResult::error(call, error.kind, error.message),
                }
            }
            Some(Joined::Running(_)) => still_running(),
            None => cancelled(),
        }
    }
}

impl Executor {
    /// The executor's largest accepted tool result, in bytes (`None`: no limit).
    pub fn max_result_bytes(&self) -> Option<usize> {
        self.max_result_bytes
    }

    /// `value`, or a `ToolError` when its content is over the result size limit.
    fn check_result_size(&self, value: Value) -> Result<Value, ToolCallError> {
        let Some(max) = self.max_result_bytes else {
            return Ok(value);
        };
        match result_size(&value, max) {
            Some(_) => Ok(value),
            None => Err(ToolCallError::new(
                ToolErrorKind::ToolError,
                format!(
                    "the tool's result is larger than the {max} bytes this crew accepts; \
                     ask for less (a narrower query, fewer items)"
                ),
            )
            .with_detail(format!(
                "result over max_result_bytes ({max}); {}",
                match &value {
                    Value::String(text) => format!("a string of {} bytes", text.len()),
                    _ => "a JSON value".to_owned(),
                }
            ))),
        }
    }
}

/// The size of `value`'s content as the model reads it (a string as is, anything else as
/// JSON), or `None` once it passes `max`: a huge result is not serialised twice.
fn result_size(value: &Value, max: usize) -> Option<usize> {
    /// Counts bytes and gives up past the limit.
    struct Counter {
        bytes: usize,
        max: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.bytes = self.bytes.saturating_add(buf.len());
            if self.bytes > self.max {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    if let Value::String(text) = value {
        return (text.len() <= max).then_some(text.len());
    }
    let mut counter = Counter { bytes: 0, max };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.bytes)
}

/// How the call itself ended.
enum Raced {
    Done(Result<Value, ToolCallError>),
    TimedOut,
    Cancelled(CancelledBy),
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
                .with_detail(format!("panic: {}", panic_text(payload.as_ref())))),
        })
}

/// Stage 7 for a cancellable tool: runs it under `limit` and the run's and the call's tokens.
async fn call_tool(
    entry: &Entry,
    arguments: Value,
    limit: Duration,
    context: &CallContext,
) -> Raced {
    let guarded = guarded_call(entry, arguments);
    // Dropping the tool's future is what stops it, on timeout and on cancellation alike.
    tokio::select! {
        biased;
        () = context.run.token().cancelled() => Raced::Cancelled(CancelledBy::Run),
        () = call_cancelled(context.call_token.as_ref()) => Raced::Cancelled(CancelledBy::Call),
        done = tokio::time::timeout(limit, guarded) => done.map_or(Raced::TimedOut, Raced::Done),
    }
}

/// Stage 9's record of one call.
fn record(
    call: &ToolCall,
    outcome: Result<Value, ToolCallError>,
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
            Some(error.message),
            error.detail,
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

/// Builds an [`Executor`].
pub struct ExecutorBuilder {
    executor: Executor,
}

impl Default for ExecutorBuilder {
    fn default() -> Self {
        Self {
            executor: Executor {
                default_timeout: DEFAULT_TIMEOUT,
                max_result_bytes: Some(DEFAULT_MAX_RESULT_BYTES),
                validation: ValidationConfig::default(),
                before_hooks: Vec::new(),
                after_hooks: Vec::new(),
                guardrails: Vec::new(),
                approval: None,
                run_limits: RunLimits::default(),
                cache: Some(ResultCache::new(CacheConfig::default())),
                ledger: None,
                in_flight: InFlight::new(DEFAULT_RETRY_WINDOW),
            },
        }
    }
}

impl ExecutorBuilder {
    /// The time limit of tools that set none (default 30 s).
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.executor.default_timeout = timeout;
        self
    }

    /// The largest tool result accepted, in bytes of content (default
    /// [`DEFAULT_MAX_RESULT_BYTES`]); a larger one reaches the model as a `ToolError`.
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.executor.max_result_bytes = Some(bytes);
        self
    }

    /// Accepts tool results of any size.
    pub fn no_result_limit(mut self) -> Self {
        self.executor.max_result_bytes = None;
        self
    }

    /// How validation failures are reported.
    pub fn validation(mut self, config: ValidationConfig) -> Self {
        self.executor.validation = config;
        self
    }

    /// Adds a before-hook (they run in the order added).
    pub fn before_hook(mut self, hook: impl BeforeHook + 'static) -> Self {
        self.executor.before_hooks.push(Arc::new(hook));
        self
    }

    /// Adds an after-hook (they run in the order added).
    pub fn after_hook(mut self, hook: impl AfterHook + 'static) -> Self {
        self.executor.after_hooks.push(Arc::new(hook));
        self
    }

    /// Adds a guardrail (they run in the order added; the first block wins).
    pub fn guardrail(mut self, guardrail: impl Guardrail + 'static) -> Self {
        self.executor.guardrails.push(Arc::new(guardrail));
        self
    }

    /// The approver of `confirm` tools (without one, they are denied).
    pub fn approval(mut self, approver: Arc<dyn ApprovalPort>) -> Self {
        self.executor.approval = Some(approver);
        self
    }

    /// The limits of runs created by [`Executor::context`] (and so by the registry).
    pub fn run_limits(mut self, limits: RunLimits) -> Self {
        self.executor.run_limits = limits;
        self
    }

    /// The result cache's size and sharing (on by default, each result served only to the
    /// session that caused it; only tools with a `cache_ttl` use it).
    pub fn cache(mut self, config: CacheConfig) -> Self {
        self.executor.cache = Some(ResultCache::new(config));
        self
    }

    /// Turns the result cache off.
    pub fn no_cache(mut self) -> Self {
        self.executor.cache = None;
        self
    }

    /// How long the outcome of a non-cancellable call whose caller stopped waiting (a
    /// timeout, a barge-in) is kept for a retry of the same call in the same session, which
    /// then reads it instead of running the tool again (default [`DEFAULT_RETRY_WINDOW`]).
    pub fn retry_window(mut self, window: Duration) -> Self {
        self.executor.in_flight = InFlight::new(window);
        self
    }

    /// Where each call's record goes.
    pub fn ledger(mut self, sink: Arc<dyn LedgerSink>) -> Self {
        self.executor.ledger = Some(sink);
        self
    }

    /// The executor.
    pub fn build(self) -> Executor {
        self.executor
    }
}

/// Why [`run_sync`] could not give the future's output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunSyncError {
    /// No runtime could be built.
    #[error("could not start a runtime for the tool call: {0}")]
    Runtime(#[from] std::io::Error),
    /// The future panicked.
    #[error("the tool call panicked")]
    Panicked,
}

/// Runs `future` to completion from synchronous code.
///
/// With no runtime on this thread, on a new current-thread runtime. Inside a runtime (where
/// blocking on it would deadlock or panic), on a separate thread with its own runtime while
/// this thread waits. The future must not depend on being polled by the caller's runtime.
///
/// Cancelling whatever waits on this call does not stop that thread: the tool's timeout does.
pub fn run_sync<F>(future: F) -> Result<F::Output, RunSyncError>
where
    F: Future + Send,
    F::Output: Send,
{
    fn block_on<F: Future>(future: F) -> Result<F::Output, RunSyncError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(runtime.block_on(future))
    }
    if tokio::runtime::Handle::try_current().is_err() {
        return block_on(future);
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| block_on(future))
            .join()
            .map_err(|_| RunSyncError::Panicked)?
    })
}

/// A fresh id for an approval request (never the model's call id, which models repeat).
fn fresh_approval_id() -> String {
    format!("apr_{}", uuid::Uuid::new_v4().simple())
}

/// A fresh call id for callers that gave none.
fn fresh_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

/// An error and its sources, for the operator.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A duration as the model reads it ("5s", "250ms").
fn human_duration(duration: Duration) -> String {
    if duration.as_millis().is_multiple_of(1000) {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

/// A panic's message, for the operator.
fn panic_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic without a message)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_are_unique_call_ids() {
        let (a, b) = (fresh_call_id(), fresh_call_id());
        assert!(a.starts_with("call_") && a != b, "{a} {b}");
    }

    #[test]
    fn tool_errors_keep_the_detail_chain_for_the_operator() {
        let error = ToolCallError::from(
            ToolError::new("weather is down").with_detail(std::io::Error::other("503")),
        );
        assert_eq!(error.kind, ToolErrorKind::ToolError);
        assert_eq!(error.message, "weather is down");
        assert_eq!(error.detail.as_deref(), Some("503"));
        let invalid = ToolCallError::from(ToolError::invalid_arguments("bad date"));
        assert_eq!(invalid.kind, ToolErrorKind::ToolArgsInvalid);
    }

    #[test]
    fn result_sizes_count_strings_as_is_and_other_values_as_json() {
        assert_eq!(result_size(&Value::from("héllo"), 10), Some(6));
        assert_eq!(result_size(&Value::from("héllo"), 5), None);
        assert_eq!(
            result_size(&serde_json::json!({"a": [1, 2]}), 100),
            Some(11)
        );
        assert_eq!(result_size(&serde_json::json!({"a": [1, 2]}), 10), None);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_secs(5)), "5s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn run_sync_works_without_a_runtime() {
        let out = run_sync(async { 1 + 1 }).ok();
        assert_eq!(out, Some(2));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn run_sync_inside_a_runtime_does_not_deadlock() {
        let out = run_sync(async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            3
        })
        .ok();
        assert_eq!(out, Some(3));
    }
}
