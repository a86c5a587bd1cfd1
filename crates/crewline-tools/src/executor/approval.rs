//! Stage 4: human (or programmatic) approval of `confirm` tools.
//!
//! Error kinds: [`ToolErrorKind::ApprovalDenied`] and [`ToolErrorKind::ApprovalPending`].
//! Arguments edited by the approver are validated again by the executor.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::ToolErrorKind;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;

use super::CallError;

/// What the approver decided.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ApprovalDecision {
    /// Run the call as asked.
    Approve,
    /// Do not run it; `reason` is shown to the model.
    Deny {
        /// Why, for the model.
        reason: String,
    },
    /// Run it with these arguments instead (validated again).
    ApproveWithEdits {
        /// The replacement arguments object.
        arguments: Value,
    },
}

/// The approval decision as the ledger records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalRecord {
    /// Approved as asked.
    Approved,
    /// Approved with edited arguments.
    ApprovedWithEdits,
    /// Denied.
    Denied,
    /// No decision yet.
    Pending,
}

/// What the executor asks the approver about.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// The call's id (the key a deferred decision is given under).
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The validated arguments.
    pub arguments: Value,
    /// Whether the caller can wait for a decision (false: answer at once or say pending).
    pub can_wait: bool,
}

/// The approver's answer to one request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ApprovalOutcome {
    /// Decided.
    Decided(ApprovalDecision),
    /// Not decided yet; the caller gets `ApprovalPending`.
    Pending,
}

/// Decides whether `confirm` tools may run.
#[async_trait]
pub trait ApprovalPort: Send + Sync {
    /// Decides on one call, or says the decision is pending.
    async fn request(&self, request: &ApprovalRequest) -> ApprovalOutcome;
}

/// Why a deferred decision could not be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// No call with this id waits for a decision.
    #[error("no call `{0}` is waiting for approval")]
    UnknownCall(String),
}

/// An approver deciding at once through a closure.
pub struct CallbackApproval<F>(F);

impl<F> CallbackApproval<F>
where
    F: Fn(&ApprovalRequest) -> ApprovalDecision + Send + Sync,
{
    /// An approver that calls `decide` for every request.
    pub fn new(decide: F) -> Self {
        Self(decide)
    }
}

#[async_trait]
impl<F> ApprovalPort for CallbackApproval<F>
where
    F: Fn(&ApprovalRequest) -> ApprovalDecision + Send + Sync,
{
    async fn request(&self, request: &ApprovalRequest) -> ApprovalOutcome {
        ApprovalOutcome::Decided((self.0)(request))
    }
}

/// A parked call: its request, and the waiter to wake if the caller is still waiting.
struct Parked {
    request: ApprovalRequest,
    waiter: Option<oneshot::Sender<ApprovalDecision>>,
}

#[derive(Default)]
struct DeferredState {
    parked: HashMap<String, Parked>,
    /// Decisions given while no caller was waiting, collected when the call is made again
    /// with the same id.
    decided: HashMap<String, ApprovalDecision>,
}

/// An approver that parks each call until [`decide`](Self::decide) is called from elsewhere
/// (a UI, an operator's API).
///
/// With `wait(false)`, or when the wait times out, the call returns `ApprovalPending` at once;
/// the decision given later is collected when the same call (same id) is executed again.
/// Cloning shares the parked calls.
#[derive(Clone)]
pub struct DeferredApproval {
    state: Arc<Mutex<DeferredState>>,
    wait: bool,
    wait_timeout: Option<Duration>,
}

impl Default for DeferredApproval {
    fn default() -> Self {
        Self::new()
    }
}

impl DeferredApproval {
    /// An approver whose callers wait for the decision without a time limit.
    pub fn new() -> Self {
        Self {
            state: Arc::default(),
            wait: true,
            wait_timeout: None,
        }
    }

    /// Whether callers wait for the decision (`false`: `ApprovalPending` at once).
    pub fn wait(mut self, wait: bool) -> Self {
        self.wait = wait;
        self
    }

    /// How long a caller waits before getting `ApprovalPending`.
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = Some(timeout);
        self
    }

    /// The calls waiting for a decision.
    pub fn pending(&self) -> Vec<ApprovalRequest> {
        self.lock()
            .parked
            .values()
            .map(|p| p.request.clone())
            .collect()
    }

    /// Decides on the parked call `call_id`: wakes its caller, or keeps the decision for when
    /// the call is made again.
    pub fn decide(&self, call_id: &str, decision: ApprovalDecision) -> Result<(), ApprovalError> {
        let mut state = self.lock();
        let parked = state
            .parked
            .remove(call_id)
            .ok_or_else(|| ApprovalError::UnknownCall(call_id.to_owned()))?;
        let undelivered = match parked.waiter {
            Some(waiter) => waiter.send(decision).err(),
            None => Some(decision),
        };
        if let Some(decision) = undelivered {
            // The caller stopped waiting (pending, timed out or dropped): keep it for later.
            state.decided.insert(call_id.to_owned(), decision);
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, DeferredState> {
        // A panic while holding this lock cannot leave the maps inconsistent (single inserts
        // and removes), so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl ApprovalPort for DeferredApproval {
    async fn request(&self, request: &ApprovalRequest) -> ApprovalOutcome {
        let receiver = {
            let mut state = self.lock();
            if let Some(decision) = state.decided.remove(&request.call_id) {
                return ApprovalOutcome::Decided(decision);
            }
            if !(self.wait && request.can_wait) {
                state.parked.insert(
                    request.call_id.clone(),
                    Parked {
                        request: request.clone(),
                        waiter: None,
                    },
                );
                return ApprovalOutcome::Pending;
            }
            let (sender, receiver) = oneshot::channel();
            state.parked.insert(
                request.call_id.clone(),
                Parked {
                    request: request.clone(),
                    waiter: Some(sender),
                },
            );
            receiver
        };
        let received = match self.wait_timeout {
            Some(limit) => tokio::time::timeout(limit, receiver).await.ok(),
            None => Some(receiver.await),
        };
        match received {
            Some(Ok(decision)) => ApprovalOutcome::Decided(decision),
            _ => {
                // Timed out: the call stays parked without a waiter (a decision given now is
                // kept for later), unless it was decided in the meantime.
                let mut state = self.lock();
                if let Some(decision) = state.decided.remove(&request.call_id) {
                    return ApprovalOutcome::Decided(decision);
                }
                if let Some(parked) = state.parked.get_mut(&request.call_id) {
                    parked.waiter = None;
                }
                ApprovalOutcome::Pending
            }
        }
    }
}

/// The error for a denied call.
pub(crate) fn denied(reason: &str) -> CallError {
    CallError::new(
        ToolErrorKind::ApprovalDenied,
        format!("the call was not approved: {reason}"),
    )
}

/// The error for a call still waiting for approval.
pub(crate) fn pending() -> CallError {
    CallError::new(
        ToolErrorKind::ApprovalPending,
        "the call is waiting for approval; tell the user it needs their confirmation",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(id: &str, can_wait: bool) -> ApprovalRequest {
        ApprovalRequest {
            call_id: id.to_owned(),
            tool: "pay".to_owned(),
            arguments: json!({}),
            can_wait,
        }
    }

    #[tokio::test]
    async fn a_decision_given_while_nobody_waits_is_collected_later() {
        let approver = DeferredApproval::new().wait(false);
        assert_eq!(
            approver.request(&request("c1", true)).await,
            ApprovalOutcome::Pending
        );
        assert_eq!(approver.pending().len(), 1);
        approver
            .decide("c1", ApprovalDecision::Approve)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(approver.pending().is_empty());
        assert_eq!(
            approver.request(&request("c1", true)).await,
            ApprovalOutcome::Decided(ApprovalDecision::Approve)
        );
    }

    #[test]
    fn deciding_an_unknown_call_is_an_error() {
        let approver = DeferredApproval::new();
        assert_eq!(
            approver.decide("nope", ApprovalDecision::Approve),
            Err(ApprovalError::UnknownCall("nope".to_owned()))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_timeout_leaves_the_call_pending() {
        let approver = DeferredApproval::new().wait_timeout(Duration::from_secs(5));
        assert_eq!(
            approver.request(&request("c2", true)).await,
            ApprovalOutcome::Pending
        );
        assert_eq!(approver.pending().len(), 1);
    }
}
