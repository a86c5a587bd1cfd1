//! Tool faults for evals: a tool of the crew fails or times out at a given turn of every
//! call, so `crewline eval` can check that the crew copes (says it could not look it up, does
//! not run it twice, goes on).
//!
//! Off unless whoever starts the process turns it on: [`Agent::with_tool_faults`] in Rust, or
//! the [`ENV_VAR`] environment variable (`crewline eval` sets it for a crew it starts), read
//! when an [`Agent`] is built. Nothing a caller sends over the wire reaches it: the plan is
//! fixed when the process starts, and a call only counts its own turns.
//!
//! A faulted call goes through the executor like any other: an `error` fault is the tool
//! returning an error (the model reads it as a tool error), a `timeout` fault is the tool not
//! finishing, so the executor's own timeout stops it (the model reads a `Timeout` error).
//!
//! [`Agent`]: crate::Agent
//! [`Agent::with_tool_faults`]: crate::Agent::with_tool_faults

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline_tools::{RegistryError, Tool, ToolError, ToolPolicy, ToolRegistry};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The environment variable holding a process's tool faults, as JSON (a [`ToolFault`] list).
pub const ENV_VAR: &str = "CREWLINE_EVAL_TOOL_FAULTS";

/// The longest [`ENV_VAR`] read, in bytes.
pub const MAX_PLAN_BYTES: usize = 64 * 1024;

/// The most faults in one plan.
pub const MAX_FAULTS: usize = 256;

/// The longest a `timeout` fault may shorten a tool's timeout to, in ms.
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// What an `error` fault's tool says when the fault gives no message.
pub const DEFAULT_ERROR_MESSAGE: &str = "The service is unavailable right now.";

/// How a faulted tool call goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolFaultKind {
    /// The tool returns an error without running.
    Error,
    /// The tool does not finish: the executor's timeout for it stops the call.
    Timeout,
}

/// One tool fault: calls of `tool` in a call's turn `on_turn` go wrong as `kind` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFault {
    /// The tool's name.
    pub tool: String,
    /// How its calls go wrong.
    pub kind: ToolFaultKind,
    /// The turn of each call in which the tool fails (1: the first time the crew is asked
    /// to answer, `system.llm.request`, in the call); `None`: every turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_turn: Option<u32>,
    /// With `error`: what the tool says (default [`DEFAULT_ERROR_MESSAGE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// With `timeout`: the tool's timeout for the faulted calls, in ms (default: its own, or
    /// the executor's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Why a tool fault plan was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolFaultError {
    /// [`ENV_VAR`] is not valid JSON of a fault list.
    #[error("{ENV_VAR} is not a list of tool faults")]
    Parse(#[source] serde_json::Error),
    /// The plan is too large, or a fault says something impossible.
    #[error("{ENV_VAR}: {0}")]
    Invalid(String),
    /// A tool could not be wrapped in its faulty twin.
    #[error("a tool could not take its faults")]
    Registry(#[source] RegistryError),
}

/// A process's tool faults: which tools go wrong, how and when.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFaults {
    faults: Arc<[ToolFault]>,
}

impl ToolFaults {
    /// A plan of `faults`, checked.
    pub fn new(faults: Vec<ToolFault>) -> Result<Self, ToolFaultError> {
        if faults.len() > MAX_FAULTS {
            return Err(ToolFaultError::Invalid(format!(
                "{} faults; at most {MAX_FAULTS}",
                faults.len()
            )));
        }
        for fault in &faults {
            if fault.tool.trim().is_empty() {
                return Err(ToolFaultError::Invalid("a fault names no tool".to_owned()));
            }
            if fault.on_turn == Some(0) {
                return Err(ToolFaultError::Invalid(format!(
                    "the fault of {} is on turn 0; turns count from 1",
                    fault.tool
                )));
            }
            if let Some(ms) = fault.timeout_ms
                && !(1..=MAX_TIMEOUT_MS).contains(&ms)
            {
                return Err(ToolFaultError::Invalid(format!(
                    "the fault of {}: timeout_ms must be 1 to {MAX_TIMEOUT_MS}",
                    fault.tool
                )));
            }
        }
        Ok(Self {
            faults: faults.into(),
        })
    }

    /// The plan in JSON text (what [`ENV_VAR`] holds), checked.
    pub fn from_json(text: &str) -> Result<Self, ToolFaultError> {
        if text.len() > MAX_PLAN_BYTES {
            return Err(ToolFaultError::Invalid(format!(
                "{} bytes; at most {MAX_PLAN_BYTES}",
                text.len()
            )));
        }
        Self::new(serde_json::from_str(text).map_err(ToolFaultError::Parse)?)
    }

    /// The plan in [`ENV_VAR`], `None` when it is unset or empty.
    pub fn from_env() -> Result<Option<Self>, ToolFaultError> {
        match std::env::var(ENV_VAR) {
            Ok(text) if !text.trim().is_empty() => Self::from_json(&text).map(Some),
            _ => Ok(None),
        }
    }

    /// The plan as JSON text, for [`ENV_VAR`].
    pub fn to_json(&self) -> String {
        serde_json::to_string(&*self.faults).unwrap_or_else(|_| "[]".to_owned())
    }

    /// The faults.
    pub fn faults(&self) -> &[ToolFault] {
        &self.faults
    }

    /// Whether there is no fault.
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }

    /// A registry like `tools` (the same executor and settings) whose faulted tools go wrong
    /// at the turns `turns` counts (one counter per call); tools without a fault are the same.
    pub(crate) fn wrap(
        &self,
        tools: &ToolRegistry,
        turns: &CallTurns,
    ) -> Result<ToolRegistry, ToolFaultError> {
        // An empty subset is an empty registry with the same executor and settings.
        let mut wrapped = tools.subset(&[]).map_err(ToolFaultError::Registry)?;
        for name in tools.names() {
            let Some(tool) = tools.get(name) else {
                continue;
            };
            let faults: Vec<ToolFault> = self
                .faults
                .iter()
                .filter(|fault| fault.tool == name)
                .cloned()
                .collect();
            let tool = if faults.is_empty() {
                Arc::clone(tool)
            } else {
                Arc::new(FaultyTool {
                    inner: Arc::clone(tool),
                    faults: faults.into(),
                    turns: turns.clone(),
                    default_timeout: tools.executor().default_timeout(),
                })
            };
            wrapped
                .register_arc(tool)
                .map_err(ToolFaultError::Registry)?;
        }
        Ok(wrapped)
    }
}

/// The turns of one call so far, counted by its agent as it is asked to answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallTurns(Arc<AtomicU32>);

impl CallTurns {
    /// A turn starts.
    pub(crate) fn next(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn current(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A tool that goes wrong as its faults say, and otherwise is the tool it wraps.
struct FaultyTool {
    inner: Arc<dyn Tool>,
    faults: Arc<[ToolFault]>,
    turns: CallTurns,
    /// The executor's timeout, for a tool whose policy names none.
    default_timeout: Duration,
}

impl FaultyTool {
    /// The fault of the current turn, if any.
    fn fault_now(&self) -> Option<&ToolFault> {
        let turn = self.turns.current();
        self.faults
            .iter()
            .find(|fault| fault.on_turn.is_none_or(|on| on == turn))
    }
}

#[async_trait]
impl Tool for FaultyTool {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn parameters(&self) -> Value {
        self.inner.parameters()
    }

    fn result_schema(&self) -> Option<Value> {
        self.inner.result_schema()
    }

    fn policy(&self) -> ToolPolicy {
        let policy = self.inner.policy();
        // The executor reads the policy once per call, so a faulted call gets the fault's
        // timeout and the others the tool's own.
        match self.fault_now() {
            Some(ToolFault {
                kind: ToolFaultKind::Timeout,
                timeout_ms: Some(ms),
                ..
            }) => policy.timeout(Duration::from_millis(*ms)),
            _ => policy,
        }
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let Some(fault) = self.fault_now() else {
            return self.inner.call(arguments).await;
        };
        tracing::info!(tool = %fault.tool, kind = ?fault.kind, turn = self.turns.current(), "an eval tool fault");
        match fault.kind {
            ToolFaultKind::Error => Err(ToolError::new(
                fault
                    .message
                    .clone()
                    .unwrap_or_else(|| DEFAULT_ERROR_MESSAGE.to_owned()),
            )),
            ToolFaultKind::Timeout => {
                // Past the executor's limit for this call, which stops waiting first (a
                // cancellable tool is dropped there); bounded, so a tool the executor runs
                // to completion in a task of its own still ends.
                let limit = fault
                    .timeout_ms
                    .map(Duration::from_millis)
                    .or(self.inner.policy().timeout)
                    .unwrap_or(self.default_timeout);
                tokio::time::sleep(limit + Duration::from_secs(1)).await;
                Err(ToolError::new("the tool did not finish in time"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_reads_from_json_and_refuses_what_cannot_be() {
        let plan = ToolFaults::from_json(
            r#"[{"tool": "get_weather", "kind": "timeout", "on_turn": 2, "timeout_ms": 100}]"#,
        )
        .unwrap();
        assert_eq!(plan.faults()[0].kind, ToolFaultKind::Timeout);
        assert_eq!(ToolFaults::from_json(&plan.to_json()).unwrap(), plan);
        for bad in [
            r#"[{"tool": "t", "kind": "explode"}]"#,
            r#"[{"tool": "t", "kind": "error", "on_turn": 0}]"#,
            r#"[{"tool": "", "kind": "error"}]"#,
            r#"[{"tool": "t", "kind": "timeout", "timeout_ms": 0}]"#,
            r#"[{"tool": "t", "kind": "error", "when": 1}]"#,
        ] {
            assert!(ToolFaults::from_json(bad).is_err(), "{bad}");
        }
    }
}
