//! The registry that holds and runs an agent's tools.
// SKELETON: the helper owning this file replaces the bodies.

use std::{sync::Arc, time::Duration};

use crewline_core::{ToolCall, ToolDefinition, ToolResult};
use serde_json::Value;

use crate::{RegistryError, Tool, ToolProvider};

/// How many tools run at once by default in a parallel round.
pub const DEFAULT_MAX_CONCURRENCY: usize = 8;

/// One finished tool call: its result and how long it took.
#[derive(Debug, Clone)]
pub struct ToolRun {
    /// The result the model reads.
    pub result: ToolResult,
    /// Time from start to result.
    pub latency: Duration,
}

/// An agent's tools.
#[derive(Default)]
pub struct ToolRegistry {}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool.
    pub fn register(&mut self, _tool: impl Tool + 'static) -> Result<&mut Self, RegistryError> {
        todo!()
    }

    /// Adds a shared tool.
    pub fn register_arc(&mut self, _tool: Arc<dyn Tool>) -> Result<&mut Self, RegistryError> {
        todo!()
    }

    /// Adds every `#[function_tool]` method of `agent`.
    pub fn discover<P: ToolProvider>(
        &mut self,
        _agent: &Arc<P>,
    ) -> Result<&mut Self, RegistryError> {
        todo!()
    }

    /// The tools' definitions, with normalised schemas, in registration order.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        todo!()
    }

    /// The OpenAI tool definitions.
    pub fn get_schemas(&self) -> Vec<Value> {
        todo!()
    }

    /// Runs `calls`, returning one result per call in call order.
    pub async fn execute(&self, _calls: &[ToolCall], _parallel: bool) -> Vec<ToolResult> {
        todo!()
    }
}
