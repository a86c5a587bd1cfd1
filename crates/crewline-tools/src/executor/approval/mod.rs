//! The approval stage: human (or programmatic) approval of `confirm` tools.
//!
//! Error kinds: [`ToolErrorKind::ApprovalDenied`] and [`ToolErrorKind::ApprovalPending`].
//! Arguments edited by the approver are validated again by the executor.
//!
//! Every request carries an id the executor mints ([`ApprovalRequest::id`]), never the model's
//! call id: models and servers repeat those (`call_0` in every turn). A decision is bound to
//! the request's session, tool and the hash of its validated arguments, and applies only to a
//! call with all three the same.

mod stage;

pub(crate) use self::stage::Approve;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{ErrorDetail, ToolErrorKind};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;

use tokio::time::Instant;

use super::{SessionScope, ToolCallError};

/// How long a caller waits for a deferred decision by default: a phone caller is waiting.
pub const DEFAULT_APPROVAL_WAIT: Duration = Duration::from_secs(10);

/// How long a parked call, and a decision nobody has collected, are kept by default.
pub const DEFAULT_APPROVAL_TTL: Duration = Duration::from_secs(5 * 60);

/// How many calls may wait for a decision at once by default (more are denied).
pub const DEFAULT_MAX_PARKED: usize = 1024;

/// The default [`DeferredApproval::max_request_bytes`]: 64 KiB. A call that needs a person's
/// approval (a payment, a refund) has arguments of a few hundred bytes; without a bound,
/// `max_parked` calls of any size (the model writes them; a caller can prompt for them) would
/// be held in memory, and copied whole into every [`DeferredApproval::pending`].
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 64 << 10;

/// What the model reads when a call is too large to park (the same words as the Redis
/// approver's).
const TOO_LARGE: &str = "this call's arguments are too large to be held for approval; nothing \
                         was run, call it again with shorter arguments";

/// What the approver decided.
///
/// Serialised as `{"decision": "approve" | "deny" | "approve_with_edits", ...}`, so an approver
/// that keeps decisions outside the process (Redis) stores them as they are.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
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
    /// The request's id, minted by the executor for this request (what
    /// [`DeferredApproval::decide`] takes).
    pub id: String,
    /// The session the call belongs to.
    pub scope: SessionScope,
    /// The model's id for the call: for display only, never a key (models repeat them).
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The validated arguments.
    pub arguments: Value,
    /// The SHA-256 of the canonical JSON of `arguments`: a decision is bound to it.
    pub arguments_hash: String,
    /// Whether the caller can wait for a decision (false: answer at once or say pending).
    pub can_wait: bool,
}

impl ApprovalRequest {
    /// The bytes a parked request holds: its arguments as JSON, and its names and ids.
    fn bytes(&self) -> usize {
        crewline_core::json_len(&self.arguments)
            + self.id.len()
            + self.call_id.len()
            + self.tool.len()
            + self.arguments_hash.len()
    }

    /// What a decision on this request is bound to: session, tool and arguments.
    fn binding(&self) -> Binding {
        Binding {
            scope: self.scope.clone(),
            tool: self.tool.clone(),
            arguments_hash: self.arguments_hash.clone(),
        }
    }
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
    /// No call waits for a decision under this id (never parked, already decided, or
    /// expired).
    #[error("no call `{0}` is waiting for approval")]
    UnknownCall(String),
    /// Where the approver keeps its calls cannot be reached (e.g. Redis is down): nothing was
    /// decided. The cause is a detail naming the store and what it met (the typed error under
    /// it), so that an approval error stays `Clone` and comparable.
    #[error("approvals are unavailable")]
    Unavailable(#[source] ErrorDetail),
}

/// An approver deciding at once through a closure.
///
/// # Examples
///
/// ```
/// # use async_trait::async_trait;
/// # use crewline_tools::{Tool, ToolError, ToolPolicy};
/// # use serde_json::{Value, json};
/// # struct T;
/// # #[async_trait]
/// # impl Tool for T {
/// #     fn name(&self) -> &str { "refund" }
/// #     fn description(&self) -> &str { "A tool." }
/// #     fn parameters(&self) -> Value {
/// #         json!({"type": "object", "properties": {"city": {"type": "string"}}})
/// #     }
/// #     fn policy(&self) -> ToolPolicy { ToolPolicy::new().confirm(true) }
/// #     async fn call(&self, args: Value) -> Result<Value, ToolError> {
/// #         Ok(json!("refunded"))
/// #     }
/// # }
/// use std::sync::Arc;
///
/// use crewline_core::{ToolCall, ToolErrorKind};
/// use crewline_tools::executor::approval::{ApprovalDecision, CallbackApproval};
/// use crewline_tools::{ExecuteOptions, Executor, ToolRegistry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Refunds for Paris bookings only.
/// let approver = CallbackApproval::new(|request| match request.arguments["city"].as_str() {
///     Some("Paris") => ApprovalDecision::Approve,
///     _ => ApprovalDecision::Deny { reason: "Only Paris bookings can be refunded.".into() },
/// });
/// let executor = Executor::builder().approval(Arc::new(approver)).build();
/// let mut tools = ToolRegistry::new().with_executor(executor);
/// tools.register(T)?;
///
/// let calls = [
///     ToolCall::new("call_1", "refund", r#"{"city": "Paris"}"#),
///     ToolCall::new("call_2", "refund", r#"{"city": "Rome"}"#),
/// ];
/// let runs = tools.execute(&calls, ExecuteOptions::new()).await;
/// assert_eq!(runs[0].result.content(), "refunded");
/// assert_eq!(runs[1].result.error_kind(), Some(ToolErrorKind::ApprovalDenied));
/// # Ok(()) }
/// ```
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

/// What a decision applies to: the same session, tool and arguments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Binding {
    scope: SessionScope,
    tool: String,
    arguments_hash: String,
}

/// A parked call: its request, the waiter to wake if the caller is still waiting, and when it
/// is dropped.
struct Parked {
    request: ApprovalRequest,
    waiter: Option<oneshot::Sender<ApprovalDecision>>,
    /// The id of the request whose caller waits (the latest to ask): only it lets go of the
    /// wait when it times out.
    waiter_token: Option<String>,
    expires: Instant,
}

#[derive(Default)]
struct DeferredState {
    /// By request id.
    parked: HashMap<String, Parked>,
    /// Decisions given while no caller was waiting, collected when the same call (same
    /// session, tool and arguments) is made again.
    decided: HashMap<Binding, (ApprovalDecision, Instant)>,
}

impl DeferredState {
    fn purge(&mut self, now: Instant) {
        self.parked.retain(|_, parked| parked.expires > now);
        self.decided.retain(|_, (_, expires)| *expires > now);
    }
}

/// An approver that parks each call until [`decide`](Self::decide) is called from elsewhere
/// (a UI, an operator's API, code reading the caller's answer).
///
/// A caller waits at most [`wait_timeout`](Self::wait_timeout) (default
/// [`DEFAULT_APPROVAL_WAIT`]); with `wait(false)`, or when the wait runs out, the call returns
/// `ApprovalPending` and stays parked. A decision given then is kept and collected when the
/// same call (same session, tool and arguments) is made again, whatever its call id. With a
/// call's scope ([`SessionScope::for_call`]) that is the same platform call after a reconnect
/// (share one approver, cloned, across the server's sessions): it collects a decision given
/// before it, and the newest caller takes over a wait an earlier socket of the call still
/// holds (that one hears `Pending`); a decision never applies to another call, tool or
/// arguments. Parked
/// calls and uncollected decisions expire after [`ttl`](Self::ttl) (default
/// [`DEFAULT_APPROVAL_TTL`]). At most [`max_parked`](Self::max_parked) calls are parked
/// (default [`DEFAULT_MAX_PARKED`]), each of at most
/// [`max_request_bytes`](Self::max_request_bytes) (default [`DEFAULT_MAX_REQUEST_BYTES`]);
/// past either, the call is denied and the model reads why. Cloning shares the parked calls.
///
/// # Examples
///
/// The model asks for a refund; an operator approves it; the model's retry runs it:
///
/// ```
/// # use async_trait::async_trait;
/// # use crewline_tools::{Tool, ToolError, ToolPolicy};
/// # use serde_json::{Value, json};
/// # struct T;
/// # #[async_trait]
/// # impl Tool for T {
/// #     fn name(&self) -> &str { "refund" }
/// #     fn description(&self) -> &str { "A tool." }
/// #     fn parameters(&self) -> Value {
/// #         json!({"type": "object", "properties": {"city": {"type": "string"}}})
/// #     }
/// #     fn policy(&self) -> ToolPolicy { ToolPolicy::new().confirm(true) }
/// #     async fn call(&self, args: Value) -> Result<Value, ToolError> {
/// #         Ok(json!("refunded"))
/// #     }
/// # }
/// use std::sync::Arc;
///
/// use crewline_core::{ToolCall, ToolErrorKind};
/// use crewline_tools::executor::approval::{ApprovalDecision, DeferredApproval};
/// use crewline_tools::{ExecuteOptions, Executor, ToolRegistry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let approvals = DeferredApproval::new().wait(false); // answer the model at once
/// let executor = Executor::builder().approval(Arc::new(approvals.clone())).build();
/// let mut tools = ToolRegistry::new().with_executor(executor);
/// tools.register(T)?;
/// let session = tools.context(); // one caller's session, across turns
/// let call = ToolCall::new("call_1", "refund", r#"{"city": "Paris"}"#);
///
/// let first = tools.execute(&[call.clone()], ExecuteOptions::new().in_run(session.clone())).await;
/// assert_eq!(first[0].result.error_kind(), Some(ToolErrorKind::ApprovalPending));
///
/// // Elsewhere (a UI, an operator's API): the parked request, and its decision.
/// let pending = approvals.pending();
/// assert_eq!(pending[0].tool, "refund");
/// approvals.decide(&pending[0].id, ApprovalDecision::Approve)?;
///
/// let retry = tools.execute(&[call], ExecuteOptions::new().in_run(session)).await;
/// assert_eq!(retry[0].result.content(), "refunded");
/// assert!(approvals.decide(&pending[0].id, ApprovalDecision::Approve).is_err()); // used up
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DeferredApproval {
    state: Arc<Mutex<DeferredState>>,
    wait: bool,
    wait_timeout: Duration,
    ttl: Duration,
    max_parked: usize,
    max_request_bytes: usize,
}

impl Default for DeferredApproval {
    fn default() -> Self {
        Self::new()
    }
}

impl DeferredApproval {
    /// An approver whose callers wait up to [`DEFAULT_APPROVAL_WAIT`] for the decision.
    pub fn new() -> Self {
        Self {
            state: Arc::default(),
            wait: true,
            wait_timeout: DEFAULT_APPROVAL_WAIT,
            ttl: DEFAULT_APPROVAL_TTL,
            max_parked: DEFAULT_MAX_PARKED,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }

    /// Whether callers wait for the decision (`false`: `ApprovalPending` at once).
    pub fn wait(mut self, wait: bool) -> Self {
        self.wait = wait;
        self
    }

    /// How long a caller waits before getting `ApprovalPending`.
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = timeout;
        self
    }

    /// How long a parked call, and a decision not yet collected, are kept.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How many calls may wait for a decision at once; more are denied.
    pub fn max_parked(mut self, max: usize) -> Self {
        self.max_parked = max;
        self
    }

    /// How large a call may be to be parked: its arguments as JSON, with its names and ids
    /// (default [`DEFAULT_MAX_REQUEST_BYTES`]); a larger one is denied, saying why.
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// The calls waiting for a decision (each under its [`id`](ApprovalRequest::id)).
    pub fn pending(&self) -> Vec<ApprovalRequest> {
        let mut state = self.lock();
        state.purge(Instant::now());
        state.parked.values().map(|p| p.request.clone()).collect()
    }

    /// Decides on the parked request `id`: wakes its caller, or keeps the decision for when
    /// the same call (same session, tool and arguments) is made again.
    pub fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<(), ApprovalError> {
        let now = Instant::now();
        let mut state = self.lock();
        state.purge(now);
        let parked = state
            .parked
            .remove(id)
            .ok_or_else(|| ApprovalError::UnknownCall(id.to_owned()))?;
        let undelivered = match parked.waiter {
            Some(waiter) => waiter.send(decision).err(),
            None => Some(decision),
        };
        if let Some(decision) = undelivered {
            // The caller stopped waiting (pending, timed out or dropped): keep it for later.
            state
                .decided
                .insert(parked.request.binding(), (decision, now + self.ttl));
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
        let bytes = request.bytes();
        if bytes > self.max_request_bytes {
            tracing::warn!(
                approval_id = %request.id,
                tool = %crewline_core::excerpt(&request.tool),
                bytes,
                max = self.max_request_bytes,
                "a call too large to park for approval is denied"
            );
            return ApprovalOutcome::Decided(ApprovalDecision::Deny {
                reason: TOO_LARGE.to_owned(),
            });
        }
        let binding = request.binding();
        let waits = self.wait && request.can_wait;
        let (id, receiver) = {
            let now = Instant::now();
            let mut state = self.lock();
            state.purge(now);
            if let Some((decision, _)) = state.decided.remove(&binding) {
                return ApprovalOutcome::Decided(decision);
            }
            // The same call already parked (the model asked again, or the call reconnected
            // and asks from a new socket while the old one still seems to wait): it keeps its
            // id, so the question the caller heard still names it; it is never parked twice,
            // and the newest caller waits on it (the earlier one hears `Pending`).
            let same = state
                .parked
                .iter()
                .find(|(_, p)| p.request.binding() == binding)
                .map(|(id, _)| id.clone());
            let (sender, receiver) = if waits {
                let (sender, receiver) = oneshot::channel();
                (Some(sender), Some(receiver))
            } else {
                (None, None)
            };
            let id = match same {
                Some(id) => {
                    if let Some(parked) = state.parked.get_mut(&id) {
                        parked.waiter = sender;
                        parked.waiter_token = waits.then(|| request.id.clone());
                    }
                    id
                }
                None => {
                    if state.parked.contains_key(&request.id) {
                        // Ids are minted per request; a repeated one (a hand-made request)
                        // never replaces the call parked under it.
                        tracing::warn!(id = %request.id, "an approval id was reused; not parked");
                        return ApprovalOutcome::Pending;
                    }
                    if state.parked.len() >= self.max_parked {
                        tracing::warn!(max = self.max_parked, "too many calls wait for approval");
                        return ApprovalOutcome::Decided(ApprovalDecision::Deny {
                            reason: "too many calls are waiting for approval; try again later"
                                .to_owned(),
                        });
                    }
                    state.parked.insert(
                        request.id.clone(),
                        Parked {
                            request: request.clone(),
                            waiter: sender,
                            waiter_token: waits.then(|| request.id.clone()),
                            expires: now + self.ttl,
                        },
                    );
                    request.id.clone()
                }
            };
            (id, receiver)
        };
        let Some(receiver) = receiver else {
            return ApprovalOutcome::Pending;
        };
        match tokio::time::timeout(self.wait_timeout, receiver).await {
            Ok(Ok(decision)) => ApprovalOutcome::Decided(decision),
            _ => {
                // Timed out, or a later caller of the same call took the wait over: the call
                // stays parked (a decision given now is kept for later, or goes to that
                // caller), unless it was decided in the meantime.
                let mut state = self.lock();
                let mine = state
                    .parked
                    .get(&id)
                    .is_none_or(|parked| parked.waiter_token.as_deref() == Some(&*request.id));
                if !mine {
                    return ApprovalOutcome::Pending;
                }
                if let Some((decision, _)) = state.decided.remove(&binding) {
                    return ApprovalOutcome::Decided(decision);
                }
                if let Some(parked) = state.parked.get_mut(&id) {
                    parked.waiter = None;
                    parked.waiter_token = None;
                }
                ApprovalOutcome::Pending
            }
        }
    }
}

/// The error for a denied call.
pub(crate) fn denied(reason: &str) -> ToolCallError {
    ToolCallError::new(
        ToolErrorKind::ApprovalDenied,
        format!("the call was not approved: {reason}"),
    )
}

/// The error for a call still waiting for approval.
pub(crate) fn pending() -> ToolCallError {
    ToolCallError::new(
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
            id: id.to_owned(),
            scope: SCOPE.with(Clone::clone),
            call_id: "call_0".to_owned(),
            tool: "pay".to_owned(),
            arguments: json!({}),
            arguments_hash: "h".to_owned(),
            can_wait,
        }
    }

    thread_local! {
        static SCOPE: SessionScope = SessionScope::new();
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
    fn decisions_serialise_with_their_kind_and_read_back() {
        let decisions = [
            ApprovalDecision::Approve,
            ApprovalDecision::Deny {
                reason: "too much".to_owned(),
            },
            ApprovalDecision::ApproveWithEdits {
                arguments: json!({"cents": 100}),
            },
        ];
        let json = serde_json::to_value(&decisions).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            json,
            json!([
                {"decision": "approve"},
                {"decision": "deny", "reason": "too much"},
                {"decision": "approve_with_edits", "arguments": {"cents": 100}},
            ])
        );
        let back: Vec<ApprovalDecision> =
            serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, decisions);
    }

    #[test]
    fn deciding_an_unknown_call_is_an_error() {
        let approver = DeferredApproval::new();
        assert_eq!(
            approver.decide("nope", ApprovalDecision::Approve),
            Err(ApprovalError::UnknownCall("nope".to_owned()))
        );
    }

    /// A request of the platform call `call` for `tool` with arguments hashed `hash`.
    fn of_call(id: &str, call: &str, tool: &str, hash: &str) -> ApprovalRequest {
        ApprovalRequest {
            id: id.to_owned(),
            scope: SessionScope::for_call(call),
            call_id: "call_0".to_owned(),
            tool: tool.to_owned(),
            arguments: json!({}),
            arguments_hash: hash.to_owned(),
            can_wait: true,
        }
    }

    #[tokio::test]
    async fn a_reconnect_of_the_same_call_collects_a_decision_made_before_it_and_no_other_does() {
        let approver = DeferredApproval::new().wait(false);
        assert_eq!(
            approver.request(&of_call("a1", "call-1", "pay", "h")).await,
            ApprovalOutcome::Pending
        );
        approver
            .decide("a1", ApprovalDecision::Approve)
            .unwrap_or_else(|e| panic!("{e}"));
        // Another call, another tool, other arguments: none is approved by it.
        for (id, call, tool, hash) in [
            ("b1", "call-2", "pay", "h"),
            ("b2", "call-1", "refund", "h"),
            ("b3", "call-1", "pay", "other"),
        ] {
            assert_eq!(
                approver.request(&of_call(id, call, tool, hash)).await,
                ApprovalOutcome::Pending,
                "{id}"
            );
        }
        // The same call after a reconnect (a new socket, a new executor): its decision.
        assert_eq!(
            approver.request(&of_call("a2", "call-1", "pay", "h")).await,
            ApprovalOutcome::Decided(ApprovalDecision::Approve)
        );
        // Used once.
        assert_eq!(
            approver.request(&of_call("a3", "call-1", "pay", "h")).await,
            ApprovalOutcome::Pending
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconnected_call_takes_over_the_wait_its_old_socket_still_holds() {
        let approver = DeferredApproval::new().wait_timeout(Duration::from_secs(10));
        let old = tokio::spawn({
            let approver = approver.clone();
            async move { approver.request(&of_call("o1", "call-1", "pay", "h")).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let new = tokio::spawn({
            let approver = approver.clone();
            async move { approver.request(&of_call("n1", "call-1", "pay", "h")).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let pending = approver.pending();
        assert_eq!(pending.len(), 1, "one question for one call");
        approver
            .decide(&pending[0].id, ApprovalDecision::Approve)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            new.await.unwrap_or_else(|e| panic!("{e}")),
            ApprovalOutcome::Decided(ApprovalDecision::Approve),
            "the live socket's caller gets the decision"
        );
        assert_eq!(
            old.await.unwrap_or_else(|e| panic!("{e}")),
            ApprovalOutcome::Pending
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
