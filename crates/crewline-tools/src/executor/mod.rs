//! The executor: one pipeline for every tool call, whoever makes it.
//!
//! Each call goes through, in order: [validation], before-[hooks], input [guardrails], a
//! joined run of the same non-cancellable call, [approval] (for `confirm` tools), run [limits],
//! the result [cache] (for tools with a `cache_ttl`), the call itself under its timeout and the
//! cancellation tokens of the run and of the call ([`CallContext::with_call_token`]), output
//! guardrails and after-hooks; the [ledger] records every call, whichever stage ended it.
//! Each stage is a folder of the same shape, and their order is written once, with why each
//! stands where it does, in the executor's `pipeline.rs`.
//!
//! What the executor keeps between calls is kept per session ([`SessionScope`], carried on
//! every [`CallContext`]): cached results, approvals, and non-cancellable calls that run on
//! after their caller stopped waiting. Such a call answers `StillRunning`, and a retry with
//! the same validated arguments in the same session joins it (or reads its outcome) instead
//! of running the tool again: a non-cancellable call claims its run in a [claims] store
//! first (this process's memory by default, or a store every replica shares), and carries an
//! [`IdempotencyKey`] its tool can hand on. Every failure becomes a
//! [`ToolResult`] error the model can read (`{"error": {"kind", "message"}}`); the operator gets
//! the full detail in `tracing` and in the ledger.

// The stages, each a folder of the same shape (see `stage`), in the order `pipeline` runs them.
pub mod approval;
pub mod cache;
mod call;
pub mod guardrails;
pub mod hooks;
mod in_flight;
pub mod ledger;
pub mod limits;
pub mod validation;

mod builder;
pub mod claims;
mod context;
mod cut_short;
mod detached_tasks;
mod error;
mod fingerprint;
mod idempotency;
mod interrupted;
mod pipeline;
pub mod progress;
mod result_size;
mod scope;
mod stage;
mod sync;

use std::{fmt, sync::Arc, time::Duration};

use crewline_core::ToolResult;
use tokio_util::sync::CancellationToken;

use self::{
    approval::ApprovalPort,
    cache::ResultCache,
    claims::ClaimStore,
    guardrails::Guardrail,
    hooks::{AfterHook, BeforeHook},
    in_flight::InFlight,
    ledger::LedgerSink,
    limits::{Run, RunLimits},
    validation::ValidationConfig,
};
pub use self::{
    builder::ExecutorBuilder,
    context::CallContext,
    cut_short::CutShort,
    detached_tasks::DetachedTasks,
    error::ToolCallError,
    idempotency::IdempotencyKey,
    progress::{BackgroundRecord, Progress, ToolNotice, ToolNotices},
    scope::SessionScope,
    sync::{RunSyncError, run_sync},
};

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

/// Runs tool calls through the pipeline.
///
/// A [`ToolRegistry`](crate::ToolRegistry) runs its calls through one: a default one of its
/// own, or the one it is given with
/// [`with_executor`](crate::ToolRegistry::with_executor) (several registries may share one;
/// nothing is shared across the process). What it keeps between calls is kept per session.
///
/// Calls must run inside a Tokio runtime with its time driver enabled (timeouts).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use crewline_tools::{Executor, ToolRegistry, executor::limits::RunLimits};
///
/// let executor = Executor::builder()
///     .default_timeout(Duration::from_secs(5))
///     .run_limits(RunLimits::default())
///     .build();
/// let tools = ToolRegistry::new().with_executor(executor);
/// assert_eq!(tools.executor().default_timeout(), Duration::from_secs(5));
/// ```
pub struct Executor {
    pub(super) default_timeout: Duration,
    pub(super) max_result_bytes: Option<usize>,
    pub(super) validation: ValidationConfig,
    pub(super) before_hooks: Vec<Arc<dyn BeforeHook>>,
    pub(super) after_hooks: Vec<Arc<dyn AfterHook>>,
    pub(super) guardrails: Vec<Arc<dyn Guardrail>>,
    pub(super) approval: Option<Arc<dyn ApprovalPort>>,
    pub(super) run_limits: RunLimits,
    pub(super) cache: Option<ResultCache>,
    pub(super) ledger: Option<Arc<dyn LedgerSink>>,
    pub(super) in_flight: InFlight,
    pub(super) claims: Arc<dyn ClaimStore>,
    pub(super) claim_lease: Duration,
    pub(super) retry_window: Duration,
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
            .field("claim_lease", &self.claim_lease)
            .field("retry_window", &self.retry_window)
            .finish_non_exhaustive()
    }
}

impl Default for Executor {
    fn default() -> Self {
        ExecutorBuilder::default().build()
    }
}

impl Executor {
    /// A builder with every stage off but validation, the 30 s default timeout and the cache.
    pub fn builder() -> ExecutorBuilder {
        ExecutorBuilder::default()
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

    /// The executor's largest accepted tool result, in bytes (`None`: no limit).
    pub fn max_result_bytes(&self) -> Option<usize> {
        self.max_result_bytes
    }
}

/// One finished tool call: its result and how long it took.
#[derive(Debug, Clone)]
pub struct ToolRun {
    /// The call's outcome, structured until it becomes the model's message.
    pub result: ToolResult,
    /// Time from start to result.
    pub latency: Duration,
}
