//! Builds an [`Executor`]: which stages run and their settings.

use std::{sync::Arc, time::Duration};

use super::{
    DEFAULT_MAX_RESULT_BYTES, DEFAULT_RETRY_WINDOW, DEFAULT_TIMEOUT, Executor,
    approval::ApprovalPort,
    cache::{CacheConfig, ResultCache},
    guardrails::Guardrail,
    hooks::{AfterHook, BeforeHook},
    inflight::InFlight,
    ledger::LedgerSink,
    limits::RunLimits,
    validation::ValidationConfig,
};

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
