//! What the model reads of a cancellable call cut short (a barge-in dropped the turn, a
//! cancellation token fired, the timeout ran out) when its tool knows better than "cancelled".
//!
//! A cancellable call cut short was stopped, so by default the model reads `Cancelled` (or
//! `Timeout`): it did not happen. A tool whose effect happens out of its future's reach (a
//! remote client runs a call once it took it) says, while it runs, what being cut short from
//! then on means: `OutcomeUnknown` once its call may have reached the client, or the answer
//! it already has. The executor reads it when it cuts the call short itself, and in
//! [`ToolRegistry::interrupted`](crate::ToolRegistry::interrupted) after a barge-in dropped
//! the call's future.

use std::{
    collections::VecDeque,
    future::Future,
    sync::{Arc, Mutex, PoisonError},
};

use serde_json::Value;

use super::ToolCallError;
use crate::ToolError;

tokio::task_local! {
    static CURRENT: CutShort;
}

/// What the call cut short reads, if its tool said.
type Said = Option<Result<Value, ToolCallError>>;

/// What the model reads if the call the current tool runs for is cut short: set by the tool
/// (from [`current`](Self::current)), read by the executor. Cheap to clone; every clone is
/// the same call's.
#[derive(Clone, Default)]
pub struct CutShort(Arc<Mutex<Said>>);

impl std::fmt::Debug for CutShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CutShort").field(&*self.said()).finish()
    }
}

impl CutShort {
    /// The handle of the call the current tool runs for (a cancellable call's); `None`
    /// outside a tool's call. Keep it to update it from a `Drop`.
    ///
    /// # Examples
    ///
    /// ```
    /// use crewline_tools::CutShort;
    ///
    /// // Outside a tool's call there is none.
    /// assert!(CutShort::current().is_none());
    /// ```
    pub fn current() -> Option<Self> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// From now on, the call cut short reads `outcome` instead of the executor's own
    /// `Cancelled` or `Timeout` (an unknown outcome: `ToolError::outcome_unknown`).
    pub fn reads(&self, outcome: Result<Value, ToolError>) {
        *self.said() = Some(outcome.map_err(ToolCallError::from));
    }

    /// From now on, the call cut short reads the executor's own message again.
    pub fn clear(&self) {
        *self.said() = None;
    }

    fn said(&self) -> std::sync::MutexGuard<'_, Said> {
        // Every update is one assignment: a poisoned lock still holds consistent data.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the tool said, taken.
    pub(crate) fn take(&self) -> Said {
        self.said().take()
    }

    /// Whether the tool said the outcome is unknown (for the ledger's record of a call
    /// dropped half-way).
    pub(crate) fn is_outcome_unknown(&self) -> bool {
        matches!(&*self.said(), Some(Err(error))
            if error.kind == crewline_core::ToolErrorKind::OutcomeUnknown)
    }

    /// Runs `future` (a tool's call) with `self` as its [`current`](Self::current) handle.
    pub(crate) async fn scope<F: Future>(self, future: F) -> F::Output {
        CURRENT.scope(self, future).await
    }
}

/// The most calls cut short one run keeps what their tools said for, until
/// [`ToolRegistry::interrupted`](crate::ToolRegistry::interrupted) reads it: far above the
/// calls of one turn; the oldest goes first.
const MAX_KEPT: usize = 64;

/// The calls of one run whose futures were dropped half-way, by call id, with what their
/// tools said (shared by the run's [`CallContext`](super::CallContext) clones).
#[derive(Clone, Default)]
pub(crate) struct CutCalls(Arc<Mutex<VecDeque<(String, CutShort)>>>);

impl std::fmt::Debug for CutCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CutCalls")
            .field("kept", &self.calls().len())
            .finish()
    }
}

impl CutCalls {
    fn calls(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, CutShort)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `call`'s handle: its future was dropped before it finished.
    pub(crate) fn keep(&self, call: &str, handle: CutShort) {
        let mut calls = self.calls();
        if calls.len() >= MAX_KEPT {
            calls.pop_front();
        }
        calls.push_back((call.to_owned(), handle));
    }

    /// The handle kept for `call`, if any.
    pub(crate) fn find(&self, call: &str) -> Option<CutShort> {
        let calls = self.calls();
        calls
            .iter()
            .rev()
            .find(|(id, _)| id == call)
            .map(|(_, handle)| handle.clone())
    }

    /// What `call`'s tool said, taken with its entry.
    pub(crate) fn take(&self, call: &str) -> Said {
        let mut calls = self.calls();
        let at = calls.iter().rposition(|(id, _)| id == call)?;
        calls.remove(at).and_then(|(_, handle)| handle.take())
    }
}

/// Keeps a cancellable call's handle in its run if its future is dropped before the call
/// finished (a barge-in dropped the turn), for `interrupted` to read.
pub(crate) struct KeepIfDropped<'a> {
    pub(crate) calls: &'a CutCalls,
    pub(crate) call: &'a str,
    pub(crate) handle: CutShort,
    pub(crate) finished: bool,
}

impl Drop for KeepIfDropped<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.calls.keep(self.call, self.handle.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewline_core::ToolErrorKind;
    use serde_json::json;

    #[tokio::test]
    async fn a_tool_says_what_being_cut_short_means_and_can_take_it_back() {
        assert!(CutShort::current().is_none());
        let handle = CutShort::default();
        handle
            .clone()
            .scope(async {
                let current = CutShort::current().expect("inside the call");
                current.reads(Err(ToolError::outcome_unknown("may have run")));
            })
            .await;
        assert!(handle.is_outcome_unknown());
        handle
            .clone()
            .scope(async { CutShort::current().map(|c| c.clear()) })
            .await;
        assert_eq!(handle.take(), None);
        handle.reads(Ok(json!("paid")));
        assert_eq!(handle.take(), Some(Ok(json!("paid"))));
    }

    #[test]
    fn a_run_keeps_the_newest_cut_calls_only() {
        let calls = CutCalls::default();
        for n in 0..=MAX_KEPT {
            let handle = CutShort::default();
            handle.reads(Err(ToolError::outcome_unknown(format!("call {n}"))));
            calls.keep(&format!("c{n}"), handle);
        }
        assert_eq!(calls.take("c0"), None, "the oldest went first");
        let newest = calls.take(&format!("c{MAX_KEPT}")).expect("kept");
        assert_eq!(
            newest.map_err(|e| e.kind),
            Err(ToolErrorKind::OutcomeUnknown)
        );
        assert_eq!(calls.take(&format!("c{MAX_KEPT}")), None, "taken once");
    }
}
