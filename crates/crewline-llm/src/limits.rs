//! How large one model answer may be: its bytes, its tool calls, one call.

/// The bounds of one model answer, held while it is read (by the clients and the
/// [`ToolCallAssembler`](crate::ToolCallAssembler)) and again before it enters a conversation
/// (by crewline's tool loop).
///
/// A line or an event of the stream has its own limit (`max_event_bytes`); these bound the
/// whole answer, which a server can otherwise grow without end in small, valid pieces (50 MB
/// of tool-call arguments in 1 MiB events, or 100,000 parallel calls). An answer past any of
/// them fails with [`LlmError::TooLarge`](crate::LlmError::TooLarge) or
/// [`LlmError::TooManyToolCalls`](crate::LlmError::TooManyToolCalls) as soon as it is, and
/// nothing more of it is kept.
///
/// The defaults are far above real answers (a spoken answer is a few hundred bytes, a real
/// call's arguments rarely pass a few KiB, and models ask for a handful of calls at once)
/// and keep one answer in memory under about 1 MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerLimits {
    /// Most bytes of one answer: its text, its reasoning and its tool calls' ids, names and
    /// arguments together (default [`AnswerLimits::DEFAULT_MAX_ANSWER_BYTES`], 1 MiB).
    pub max_answer_bytes: usize,
    /// Most tool calls one answer may hold, counted as they open, before any is assembled
    /// (default [`AnswerLimits::DEFAULT_MAX_TOOL_CALLS`], 128). Fewer of them run: the tool
    /// loop's `max_calls_per_answer` refuses the rest with a short result.
    pub max_tool_calls: usize,
    /// Most bytes of one tool call: its id, name and arguments (default
    /// [`AnswerLimits::DEFAULT_MAX_CALL_BYTES`], 256 KiB).
    pub max_call_bytes: usize,
}

impl AnswerLimits {
    /// The default of [`AnswerLimits::max_answer_bytes`]: 1 MiB.
    pub const DEFAULT_MAX_ANSWER_BYTES: usize = 1 << 20;
    /// The default of [`AnswerLimits::max_tool_calls`]: 128.
    pub const DEFAULT_MAX_TOOL_CALLS: usize = 128;
    /// The default of [`AnswerLimits::max_call_bytes`]: 256 KiB.
    pub const DEFAULT_MAX_CALL_BYTES: usize = 256 << 10;

    /// No bound at all (for trusted, offline input such as a test's script).
    pub fn unbounded() -> Self {
        Self {
            max_answer_bytes: usize::MAX,
            max_tool_calls: usize::MAX,
            max_call_bytes: usize::MAX,
        }
    }
}

impl Default for AnswerLimits {
    fn default() -> Self {
        Self {
            max_answer_bytes: Self::DEFAULT_MAX_ANSWER_BYTES,
            max_tool_calls: Self::DEFAULT_MAX_TOOL_CALLS,
            max_call_bytes: Self::DEFAULT_MAX_CALL_BYTES,
        }
    }
}
