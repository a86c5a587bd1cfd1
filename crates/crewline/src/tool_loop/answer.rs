//! One model answer read against the turn's bounds.

use crewline_core::ToolCall;
use crewline_llm::{AnswerLimits, LlmError};

/// The most bytes of a model error's text a log line carries: the server writes it.
const MAX_LOGGED_ERROR_BYTES: usize = 2_048;

/// A model error as a log line shows it: its text up to [`MAX_LOGGED_ERROR_BYTES`].
pub(super) struct ErrorExcerpt<'a>(pub(super) &'a LlmError);

impl std::fmt::Display for ErrorExcerpt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = crewline_core::error_chain(self.0);
        if text.len() <= MAX_LOGGED_ERROR_BYTES {
            return f.write_str(&text);
        }
        let head = crewline_core::prefix(&text, MAX_LOGGED_ERROR_BYTES);
        write!(f, "{head}… ({} bytes in all)", text.len())
    }
}

/// Whether `error` refused an answer past its limits (see [`ToolLoopConfig::answer_limits`]).
pub(super) fn is_answer_limit(error: &LlmError) -> bool {
    matches!(
        error,
        LlmError::TooLarge { .. } | LlmError::TooManyToolCalls { .. }
    )
}

/// Counts one answer against the loop's [`AnswerLimits`], bounded by what the conversation
/// keeps: an answer the context could not hold as its newest turn would make every later
/// request larger than [`ContextLimits`](crewline_core::ContextLimits) allow.
pub(super) struct AnswerMeter {
    max_bytes: usize,
    max_calls: usize,
    max_call_bytes: usize,
    bytes: usize,
    calls: usize,
}

impl AnswerMeter {
    pub(super) fn new(limits: AnswerLimits, context: crewline_core::ContextLimits) -> Self {
        Self {
            max_bytes: limits.max_answer_bytes.min(context.max_bytes),
            // The answer's message and one result per call, beside at least the prompt.
            max_calls: limits
                .max_tool_calls
                .min(context.max_messages.saturating_sub(2)),
            max_call_bytes: limits.max_call_bytes,
            bytes: 0,
            calls: 0,
        }
    }

    fn add(&mut self, bytes: usize) -> Result<(), LlmError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > self.max_bytes {
            return Err(LlmError::TooLarge {
                what: "the answer",
                limit: self.max_bytes,
            });
        }
        Ok(())
    }

    /// A piece of text or reasoning.
    pub(super) fn text(&mut self, text: &str) -> Result<(), LlmError> {
        self.add(text.len())
    }

    /// Assembled calls, as the context counts their bytes.
    pub(super) fn calls(&mut self, calls: &[ToolCall]) -> Result<(), LlmError> {
        self.calls = self.calls.saturating_add(calls.len());
        if self.calls > self.max_calls {
            return Err(LlmError::TooManyToolCalls {
                limit: self.max_calls,
            });
        }
        for call in calls {
            let bytes = call.id.len() + call.name.len() + call.arguments.len();
            if bytes > self.max_call_bytes {
                return Err(LlmError::TooLarge {
                    what: "a tool call",
                    limit: self.max_call_bytes,
                });
            }
            self.add(bytes)?;
        }
        Ok(())
    }
}
