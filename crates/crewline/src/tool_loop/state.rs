//! What a turn has not yet written into the conversation, written whatever happens.

use crewline_core::{Context, Message, ToolCall, ToolResult};
use crewline_tools::{CallContext, ToolRegistry};

/// What a turn has said and asked for but not yet written into the context.
///
/// Everything reaches the context through here, and `Drop` writes whatever is pending, so a
/// turn dropped at any await point (barge-in) still leaves a valid conversation.
pub(super) struct TurnState<'a> {
    pub(super) context: &'a mut Context,
    /// What a call cut short is answered with (see [`ToolRegistry::interrupted`]).
    tools: &'a ToolRegistry,
    run: CallContext,
    /// Text of the current round not yet in the context.
    pub(super) text: String,
    /// Tool calls of the current round, while they run.
    calls: Vec<ToolCall>,
    /// Their results, by call position, as they finish.
    results: Vec<Option<ToolResult>>,
}

impl<'a> TurnState<'a> {
    pub(super) fn new(context: &'a mut Context, tools: &'a ToolRegistry, run: CallContext) -> Self {
        Self {
            context,
            tools,
            run,
            text: String::new(),
            calls: Vec::new(),
            results: Vec::new(),
        }
    }

    pub(super) fn commit_text(&mut self) {
        if !self.text.is_empty() {
            self.context
                .add(Message::assistant(std::mem::take(&mut self.text)));
        }
    }

    pub(super) fn begin_tools(&mut self, calls: Vec<ToolCall>) {
        self.results = vec![None; calls.len()];
        self.calls = calls;
    }

    /// Keeps the result of the call at `index`.
    pub(super) fn record(&mut self, index: usize, result: &ToolResult) {
        if let Some(slot) = self.results.get_mut(index) {
            *slot = Some(result.clone());
        }
    }

    /// Writes the round's assistant message and one result per call, in call order; calls
    /// without a result (the turn was dropped) are answered by the executor: `Cancelled`,
    /// or for a non-cancellable tool that runs on, its real outcome or `StillRunning` (the
    /// model must not start it again).
    pub(super) fn commit_tools(&mut self) {
        let calls = std::mem::take(&mut self.calls);
        let results = std::mem::take(&mut self.results);
        let text = std::mem::take(&mut self.text);
        let mut answers: Vec<Message> = calls
            .iter()
            .zip(results)
            .map(|(call, result)| {
                result
                    .unwrap_or_else(|| self.tools.interrupted(call, &self.run))
                    .into_message()
            })
            .collect();
        let asked = Message::assistant_with_tools(text, calls);
        // The context keeps its newest turn whole, whatever its size: the round must fit its
        // bound by itself, or every later request would be past it.
        let asked_bytes = asked.text().map_or(0, str::len)
            + asked
                .tool_calls()
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                .sum::<usize>();
        let ids: usize = answers.iter().map(|m| tool_call_id(m).len()).sum();
        let budget = self
            .context
            .limits()
            .max_bytes
            .saturating_sub(asked_bytes)
            .saturating_sub(ids);
        fit_results(&mut answers, budget);
        self.context.add(asked);
        self.context.add_many(answers);
    }
}

/// The id a tool message answers (empty for other messages).
fn tool_call_id(message: &Message) -> &str {
    match message {
        Message::Tool { tool_call_id, .. } => tool_call_id,
        _ => "",
    }
}

/// What a result cut by [`fit_results`] ends with.
const CUT_NOTE: &str = "… [result cut: too large for the conversation]";

/// Cuts the largest tool results until their contents together fit `budget` bytes: each is
/// kept whole up to an equal share of it, larger ones are cut on a character boundary and
/// say so, so the model knows it read part of a result.
fn fit_results(answers: &mut [Message], budget: usize) {
    let total: usize = answers.iter().map(|m| m.text().map_or(0, str::len)).sum();
    if total <= budget || answers.is_empty() {
        return;
    }
    let share = budget / answers.len();
    let keep = share.saturating_sub(CUT_NOTE.len());
    for answer in answers.iter_mut() {
        if let Message::Tool { content, .. } = answer
            && content.len() > share
        {
            let end = crewline_core::prefix(content, keep).len();
            content.truncate(end);
            if share >= CUT_NOTE.len() {
                content.push_str(CUT_NOTE);
            }
        }
    }
}

impl Drop for TurnState<'_> {
    fn drop(&mut self) {
        if self.calls.is_empty() {
            self.commit_text();
        } else {
            self.commit_tools();
        }
    }
}
