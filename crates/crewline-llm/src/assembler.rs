//! Assembles streamed tool-call deltas into whole tool calls.
// SKELETON: the helper owning this file replaces the bodies.

use crewline_core::ToolCall;

/// One tool-call fragment from one streamed chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCallDelta {
    /// The call's position in the turn, when the server sent one.
    pub index: Option<u32>,
    /// The call's id, when this fragment carries it.
    pub id: Option<String>,
    /// The tool name, when this fragment carries it (possibly in pieces).
    pub name: Option<String>,
    /// A piece of the arguments' JSON text.
    pub arguments: Option<String>,
}

/// Puts streamed [`ToolCallDelta`]s together into [`ToolCall`]s.
#[derive(Debug, Default)]
pub struct ToolCallAssembler {}

impl ToolCallAssembler {
    /// An assembler with no calls yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one fragment.
    pub fn push(&mut self, _delta: ToolCallDelta) {
        todo!()
    }

    /// Whether no fragment has been added.
    pub fn is_empty(&self) -> bool {
        todo!()
    }

    /// The assembled calls, in the order they first appeared.
    pub fn finish(self) -> Vec<ToolCall> {
        todo!()
    }
}
