//! What the executor answers for a call whose caller stopped waiting before it finished.

use crewline_core::{ToolCall, ToolErrorKind, ToolResult};

use super::{
    CallContext, Executor, INTERRUPTED_MESSAGE,
    claims::ClaimKey,
    in_flight::{self, Local},
    validation::CallArguments,
};
use crate::catalog::Catalog;

impl Executor {
    /// The result for a call whose caller stopped waiting before it finished (a barge-in
    /// dropped the turn): the real outcome of a non-cancellable call that has finished,
    /// `StillRunning` for one still running, what a cancellable call's tool said being cut
    /// short means ([`CutShort`](super::CutShort)), `Cancelled` for anything else (a
    /// cancellable call was stopped; a call that had not started never will).
    ///
    /// Synchronous, for drop guards: output guardrails and after-hooks cannot run here, so
    /// with any of them configured a finished outcome is not handed over but left for the
    /// retry (`StillRunning`), which reads it through the whole pipeline.
    pub(crate) fn interrupted(
        &self,
        tools: &Catalog,
        call: &ToolCall,
        context: &CallContext,
    ) -> ToolResult {
        let cancelled = || ToolResult::error(call, ToolErrorKind::Cancelled, INTERRUPTED_MESSAGE);
        // A cancellable call whose tool said what being cut short means (it may have run).
        if let Some(said) = context.cut.take(&call.id) {
            return match said.and_then(|value| self.check_result_size(value)) {
                Ok(value) => ToolResult::from_value(call, value),
                Err(error) => ToolResult::error(call, error.kind, error.message),
            };
        }
        let Some(entry) = tools.entry(&call.name) else {
            return cancelled();
        };
        if entry.tool.policy().cancellable {
            return cancelled();
        }
        let read = CallArguments::parse(&call.arguments);
        let Ok(arguments) = self.validation.validate_read(entry, read) else {
            return cancelled();
        };
        let key = ClaimKey::new(context.scope(), &call.name, &arguments);
        let still_running = || {
            let error = in_flight::still_running();
            ToolResult::error(call, error.kind, error.message)
        };
        if !(self.guardrails.is_empty() && self.after_hooks.is_empty()) {
            return if self.in_flight.contains(&key) {
                still_running()
            } else {
                cancelled()
            };
        }
        match self.in_flight.take(&key) {
            Some(Local::Finished(settled)) => {
                self.mark_received(key);
                match settled.and_then(|value| self.check_result_size(value)) {
                    Ok(value) => ToolResult::from_value(call, value),
                    Err(error) => ToolResult::error(call, error.kind, error.message),
                }
            }
            Some(Local::Running) => still_running(),
            None => cancelled(),
        }
    }
}
