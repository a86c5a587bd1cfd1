//! The limits stage: limits per run (a turn, or whatever the caller groups calls by).
//!
//! Error kind: [`ToolErrorKind::RunLimitExceeded`]. A call reserves its slot atomically before
//! it runs, so the limits hold exactly under concurrency.

mod stage;

pub(crate) use self::stage::Admit;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use crewline_core::ToolErrorKind;
use tokio_util::sync::CancellationToken;

use super::ToolCallError;

/// The limits of one run; `None` is unlimited (the default: a run may be a whole MCP session;
/// the tool loop caps its turns' calls itself).
///
/// # Examples
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
/// use crewline_core::{ToolCall, ToolErrorKind};
/// use crewline_tools::executor::limits::RunLimits;
/// use crewline_tools::{ExecuteOptions, Executor, ToolRegistry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = RunLimits { max_calls_per_tool: Some(1), ..RunLimits::unlimited() };
/// assert_eq!(limits.calls_left(0), None); // no cap on all tools together
/// let mut tools = ToolRegistry::new().with_executor(Executor::builder().run_limits(limits).build());
/// tools.register(T)?;
///
/// let calls = [
///     ToolCall::new("call_1", "get_weather", r#"{"city": "Paris"}"#),
///     ToolCall::new("call_2", "get_weather", r#"{"city": "Oslo"}"#),
/// ];
/// let runs = tools.execute(&calls, ExecuteOptions::new().sequential()).await;
/// assert!(!runs[0].result.is_error());
/// assert_eq!(runs[1].result.error_kind(), Some(ToolErrorKind::RunLimitExceeded));
///
/// // Each batch (or each `tools.context()`) is a fresh run.
/// let again = tools.execute(&calls[1..], ExecuteOptions::new()).await;
/// assert!(!again[0].result.is_error());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunLimits {
    /// Calls per run, all tools together.
    pub max_calls: Option<u32>,
    /// Calls per run of any one tool.
    pub max_calls_per_tool: Option<u32>,
    /// Total time spent in tools per run.
    pub max_tool_time: Option<Duration>,
}

impl RunLimits {
    /// No limits.
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// How many more calls a run that has admitted `admitted` may make (`None`: no limit).
    pub fn calls_left(&self, admitted: u32) -> Option<u32> {
        self.max_calls.map(|max| max.saturating_sub(admitted))
    }
}

#[derive(Default)]
struct Usage {
    calls: u32,
    per_tool: HashMap<String, u32>,
    tool_time: Duration,
}

struct RunInner {
    limits: RunLimits,
    usage: Mutex<Usage>,
    token: CancellationToken,
}

/// The calls of one run: their shared limits, usage and cancellation token.
///
/// Cloning shares the run.
#[derive(Clone)]
pub struct Run {
    inner: Arc<RunInner>,
}

impl Default for Run {
    fn default() -> Self {
        Self::new(RunLimits::default())
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("limits", &self.inner.limits)
            .field("calls", &self.calls())
            .field("cancelled", &self.inner.token.is_cancelled())
            .finish()
    }
}

impl Run {
    /// A run with these limits and a fresh cancellation token.
    pub fn new(limits: RunLimits) -> Self {
        Self::with_token(limits, CancellationToken::new())
    }

    /// A run with these limits, cancelled by `token` (e.g. a child of the turn's token).
    pub fn with_token(limits: RunLimits, token: CancellationToken) -> Self {
        Self {
            inner: Arc::new(RunInner {
                limits,
                usage: Mutex::default(),
                token,
            }),
        }
    }

    /// The run's limits.
    pub fn limits(&self) -> RunLimits {
        self.inner.limits
    }

    /// The token that cancels the run's cancellable calls.
    pub fn token(&self) -> &CancellationToken {
        &self.inner.token
    }

    /// Cancels the run's running cancellable calls (barge-in).
    pub fn cancel(&self) {
        self.inner.token.cancel();
    }

    /// How many calls the run has admitted.
    pub fn calls(&self) -> u32 {
        self.lock().calls
    }

    /// Total time spent in the run's tools so far.
    pub fn tool_time(&self) -> Duration {
        self.lock().tool_time
    }

    /// Admits one call of `tool`, or says which limit it would exceed. On success, returns the
    /// tool time the run has left, if limited.
    pub(crate) fn admit(&self, tool: &str) -> Result<Option<Duration>, ToolCallError> {
        let limits = self.inner.limits;
        let mut usage = self.lock();
        if let Some(max) = limits.max_calls
            && usage.calls >= max
        {
            return Err(calls_exceeded(max));
        }
        let used = usage.per_tool.get(tool).copied().unwrap_or(0);
        if let Some(max) = limits.max_calls_per_tool
            && used >= max
        {
            return Err(exceeded(format!(
                "`{tool}` was already called {max} times this turn; do not call it again"
            )));
        }
        let remaining = match limits.max_tool_time {
            Some(max) if usage.tool_time >= max => {
                return Err(exceeded(
                    "this turn has used up its time for tools; answer with what you have",
                ));
            }
            Some(max) => Some(max - usage.tool_time),
            None => None,
        };
        usage.calls += 1;
        *usage.per_tool.entry(tool.to_owned()).or_insert(0) += 1;
        Ok(remaining)
    }

    /// Adds the time one call spent in its tool.
    pub(crate) fn spend(&self, elapsed: Duration) {
        let mut usage = self.lock();
        usage.tool_time = usage.tool_time.saturating_add(elapsed);
    }

    fn lock(&self) -> MutexGuard<'_, Usage> {
        // Counters stay consistent under a poisoned lock (each update is one statement).
        self.inner
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The error for a call past the run's call limit (`max` calls).
pub fn calls_exceeded(max: u32) -> ToolCallError {
    exceeded(format!(
        "this turn already made its {max} allowed tool calls; answer with what you have"
    ))
}

/// The error for a call over a run limit.
pub(crate) fn exceeded(message: impl Into<String>) -> ToolCallError {
    ToolCallError::new(ToolErrorKind::RunLimitExceeded, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_limited_overall_and_per_tool() {
        let run = Run::new(RunLimits {
            max_calls: Some(3),
            max_calls_per_tool: Some(2),
            max_tool_time: None,
        });
        assert!(run.admit("a").is_ok());
        assert!(run.admit("a").is_ok());
        assert_eq!(
            run.admit("a").err().map(|e| e.kind),
            Some(ToolErrorKind::RunLimitExceeded)
        );
        assert!(run.admit("b").is_ok());
        assert!(run.admit("c").is_err());
        assert_eq!(run.calls(), 3);
    }

    #[test]
    fn calls_left_counts_down_to_zero() {
        let limits = RunLimits {
            max_calls: Some(32),
            ..RunLimits::default()
        };
        assert_eq!(limits.calls_left(30), Some(2));
        assert_eq!(limits.calls_left(40), Some(0));
        assert_eq!(RunLimits::unlimited().calls_left(40), None);
    }

    #[test]
    fn tool_time_is_a_budget() {
        let run = Run::new(RunLimits {
            max_tool_time: Some(Duration::from_secs(10)),
            ..RunLimits::default()
        });
        assert_eq!(run.admit("a").ok().flatten(), Some(Duration::from_secs(10)));
        run.spend(Duration::from_secs(4));
        assert_eq!(run.admit("a").ok().flatten(), Some(Duration::from_secs(6)));
        run.spend(Duration::from_secs(6));
        assert!(run.admit("a").is_err());
    }
}
