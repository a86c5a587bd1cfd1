//! Builds an [`Executor`]: which stages run and their settings.

use std::{sync::Arc, time::Duration};

use super::{
    DEFAULT_MAX_RESULT_BYTES, DEFAULT_RETRY_WINDOW, DEFAULT_TIMEOUT, Executor,
    approval::ApprovalPort,
    cache::{CacheConfig, ResultCache},
    claims::{ClaimStore, DEFAULT_CLAIM_LEASE, MemoryClaims},
    guardrails::Guardrail,
    hooks::{AfterHook, BeforeHook},
    in_flight::InFlight,
    ledger::LedgerSink,
    limits::RunLimits,
    validation::ValidationConfig,
};

/// Builds an [`Executor`].
///
/// Every stage is off until it is added, but validation, the 30 s default timeout, the
/// 1 MiB result limit and the (per-session) result cache.
///
/// # Examples
///
/// A guardrail, a hook that fills in a default, a cap on calls per run and a ledger:
///
/// ```
/// # use async_trait::async_trait;
/// # use crewline_tools::{Tool, ToolError, ToolPolicy};
/// # use serde_json::{Value, json};
/// # struct T;
/// # #[async_trait]
/// # impl Tool for T {
/// #     fn name(&self) -> &str { "get_weather" }
/// #     fn description(&self) -> &str { "A tool." }
/// #     fn parameters(&self) -> Value {
/// #         json!({"type": "object", "properties": {"city": {"type": "string"}}})
/// #     }
/// #     async fn call(&self, args: Value) -> Result<Value, ToolError> {
/// #         Ok(json!({"city": args["city"], "sky": "sunny"}))
/// #     }
/// # }
/// use std::{sync::Arc, time::Duration};
///
/// use crewline_core::{ToolCall, ToolErrorKind};
/// use crewline_tools::executor::{
///     guardrails::{Guardrail, Verdict},
///     hooks::{FnBeforeHook, HookAction},
///     ledger::{MemoryLedger, Outcome},
///     limits::RunLimits,
/// };
/// use crewline_tools::{ExecuteOptions, Executor, ToolRegistry};
///
/// struct NoMoscow;
///
/// #[async_trait]
/// impl Guardrail for NoMoscow {
///     fn name(&self) -> &str {
///         "no_moscow"
///     }
///     async fn check_input(&self, _call: &ToolCall, args: &Value) -> Verdict {
///         match args["city"].as_str() {
///             Some("Moscow") => Verdict::block("I can't look that city up."),
///             _ => Verdict::Allow,
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ledger = Arc::new(MemoryLedger::new());
/// let executor = Executor::builder()
///     .default_timeout(Duration::from_secs(5))
///     .before_hook(FnBeforeHook(|_call: &ToolCall, args: &mut Value| {
///         args.as_object_mut().map(|a| a.entry("city").or_insert(json!("Paris")));
///         HookAction::Continue
///     }))
///     .guardrail(NoMoscow)
///     .run_limits(RunLimits { max_calls: Some(1), ..RunLimits::default() })
///     .ledger(ledger.clone())
///     .build();
/// let mut tools = ToolRegistry::new().with_executor(executor);
/// tools.register(T)?;
///
/// let calls = [
///     ToolCall::new("call_1", "get_weather", "{}"),
///     ToolCall::new("call_2", "get_weather", r#"{"city": "Moscow"}"#),
///     ToolCall::new("call_3", "get_weather", r#"{"city": "Oslo"}"#),
/// ];
/// let runs = tools.execute(&calls, ExecuteOptions::new().sequential()).await;
/// assert_eq!(runs[0].result.value(), Some(&json!({"city": "Paris", "sky": "sunny"})));
/// assert_eq!(runs[1].result.error_kind(), Some(ToolErrorKind::GuardrailBlocked));
/// // Stages run in order: the blocked call never reached the limits, the third did.
/// assert_eq!(runs[2].result.error_kind(), Some(ToolErrorKind::RunLimitExceeded));
///
/// // The operator's record of each call, in order.
/// let outcomes: Vec<Outcome> = ledger.records().iter().map(|r| r.outcome).collect();
/// assert_eq!(outcomes, [Outcome::Ok, Outcome::Error, Outcome::Error]);
/// # Ok(()) }
/// ```
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
                claims: Arc::new(MemoryClaims::new()),
                claim_lease: DEFAULT_CLAIM_LEASE,
                retry_window: DEFAULT_RETRY_WINDOW,
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
    ///
    /// The same window keeps an unknown outcome (`OutcomeUnknown`), and a received success
    /// ("already done"), from an identical call (see [`claims`](super::claims)).
    pub fn retry_window(mut self, window: Duration) -> Self {
        self.executor.in_flight = InFlight::new(window);
        self.executor.retry_window = window;
        self
    }

    /// Where non-cancellable calls are claimed and their outcomes kept (default: this
    /// process's memory, [`MemoryClaims`]); a store every replica shares makes a retry on
    /// any replica join the running call or read its outcome.
    pub fn claims(mut self, store: Arc<dyn ClaimStore>) -> Self {
        self.executor.claims = store;
        self
    }

    /// How long a claim holds without renewal (default [`DEFAULT_CLAIM_LEASE`]): a call
    /// whose replica died reads `OutcomeUnknown` this long after its last renewal. Renewed
    /// every third of it while the tool runs.
    pub fn claim_lease(mut self, lease: Duration) -> Self {
        self.executor.claim_lease = lease;
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
