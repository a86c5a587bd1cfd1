//! The per-call context: the run and the session a call belongs to.

use tokio_util::sync::CancellationToken;

use super::{SessionScope, cut_short::CutCalls, limits::Run};

/// The per-call context: the session and the run the call belongs to, whether the caller can
/// wait, and an optional token of the call's own.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub(super) run: Run,
    pub(super) scope: SessionScope,
    pub(super) can_wait: bool,
    pub(super) call_token: Option<CancellationToken>,
    /// The run's calls cut short half-way, with what their tools said that means.
    pub(super) cut: CutCalls,
}

impl Default for CallContext {
    fn default() -> Self {
        Self::new(Run::default())
    }
}

impl CallContext {
    /// A context for calls of `run`, whose caller can wait for approvals, in a fresh session
    /// scope of its own (it shares nothing with any other context until
    /// [`with_scope`](Self::with_scope) names the session).
    pub fn new(run: Run) -> Self {
        Self {
            run,
            scope: SessionScope::new(),
            can_wait: true,
            call_token: None,
            cut: CutCalls::default(),
        }
    }

    /// The same context for calls of the session `scope`: cached results, approvals and
    /// non-cancellable calls still running are kept per scope. Whoever owns the session (a
    /// voice call, an MCP session, a remote task) mints the scope once and passes it on every
    /// turn's context.
    pub fn with_scope(mut self, scope: SessionScope) -> Self {
        self.scope = scope;
        self
    }

    /// The session the calls belong to.
    pub fn scope(&self) -> &SessionScope {
        &self.scope
    }

    /// The same context for a call that `token` cancels too (a request its client
    /// cancelled, a caller that went away), without cancelling the rest of the run.
    ///
    /// Like the run's token, it stops cancellable tools only: a tool with
    /// `cancellable = false` runs on to completion in its own task.
    pub fn with_call_token(mut self, token: CancellationToken) -> Self {
        self.call_token = Some(token);
        self
    }

    /// The call's own cancellation token, if it has one.
    pub fn call_token(&self) -> Option<&CancellationToken> {
        self.call_token.as_ref()
    }

    /// The same context for a caller that cannot wait: deferred approvals answer
    /// `ApprovalPending` at once.
    pub fn without_waiting(mut self) -> Self {
        self.can_wait = false;
        self
    }

    /// The run the calls belong to.
    pub fn run(&self) -> &Run {
        &self.run
    }

    /// Whether the caller can wait for an approval.
    pub fn can_wait(&self) -> bool {
        self.can_wait
    }
}
