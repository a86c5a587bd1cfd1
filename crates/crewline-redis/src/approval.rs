//! Deferred approvals shared through Redis: a `confirm` call parked on one replica is listed
//! and decided from any, and the decision reaches the replica that holds the call.

use std::{fmt, time::Duration};

use async_trait::async_trait;
use crewline::types::ErrorDetail;
use crewline_tools::{
    SessionScope,
    executor::approval::{
        ApprovalDecision, ApprovalError, ApprovalOutcome, ApprovalPort, ApprovalRequest,
        DEFAULT_APPROVAL_TTL, DEFAULT_APPROVAL_WAIT, DEFAULT_MAX_PARKED,
    },
};
use redis::Script;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    Reply,
    connection::{self, RedisConnection},
    millis, scripts,
};

/// What the model reads when Redis cannot be reached: the call was not run, and no one
/// refused it.
const UNAVAILABLE: &str = "approvals are unavailable right now (the approval store cannot be \
                           reached); nothing was run, try again later";

/// What the model reads when too many calls wait for a decision (as the memory approver says).
const FULL: &str = "too many calls are waiting for approval; try again later";

/// What the model reads when a call is too large to park.
const TOO_LARGE: &str = "this call's arguments are too large to be held for approval; nothing \
                         was run, call it again with shorter arguments";

/// The default [`RedisApproval::max_request_bytes`]: 64 KiB. A call that needs a person's
/// approval (a payment, a refund) has arguments of a few hundred bytes; without a bound,
/// `max_parked` calls of any size would sit in Redis and come back whole in every
/// [`RedisApproval::pending`].
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 64 << 10;

/// An approver that parks each `confirm` call in Redis until [`decide`](Self::decide) is called
/// on any replica on the same Redis and prefix: the same behaviour as
/// [`DeferredApproval`](crewline_tools::executor::approval::DeferredApproval), shared.
///
/// A caller on the replica that holds the call waits at most
/// [`wait_timeout`](Self::wait_timeout) and is woken through the store's wake-up subscription
/// when the decision is given (no replica polls another); with `wait(false)`, or when the wait
/// runs out, it gets `ApprovalPending` and the call stays parked. A decision given then is
/// kept in Redis and collected when the same call (same session, tool and arguments) is made
/// again. With a call's scope ([`SessionScope::for_call`]), that is the same platform call
/// after a reconnect, on any replica: it collects a decision given before the reconnect, and
/// the newest caller takes over a parked call an earlier socket (or a dead replica) still
/// seemed to wait on. A decision never applies to another call, tool or arguments. Parked calls and uncollected decisions expire after [`ttl`](Self::ttl), in Redis
/// itself; at most [`max_parked`](Self::max_parked) calls wait at once (more are denied), each
/// of at most [`max_request_bytes`](Self::max_request_bytes) (larger ones are denied without
/// reaching Redis).
/// Every replica of one prefix should use the same settings.
///
/// While Redis cannot be reached, `request` denies the call (it is never run without a
/// decision) and logs why; `pending` and `decide` fail with [`ApprovalError::Unavailable`].
///
/// ```no_run
/// use std::sync::Arc;
///
/// use crewline_redis::{RedisApproval, RedisConfig, RedisStore};
/// use crewline_remote::StoreLimits;
/// use crewline_tools::Executor;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let connection = RedisConfig::from_env()?.open().await?;
/// let store = RedisStore::with_connection(connection.clone(), StoreLimits::default());
/// let approvals = RedisApproval::new(connection);
/// let executor = Executor::builder().approval(Arc::new(approvals.clone())).build();
/// // An operator's route, on whichever replica it lands:
/// for request in approvals.pending().await? {
///     println!("{} wants {} with {}", request.scope, request.tool, request.arguments);
/// }
/// # drop((store, executor)); Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisApproval {
    connection: RedisConnection,
    wait: bool,
    wait_timeout: Duration,
    ttl: Duration,
    max_parked: usize,
    max_request_bytes: usize,
}

impl fmt::Debug for RedisApproval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisApproval")
            .field("redis", &self.connection.target())
            .field("prefix", &self.connection.prefix())
            .field("wait", &self.wait)
            .field("wait_timeout", &self.wait_timeout)
            .field("ttl", &self.ttl)
            .field("max_parked", &self.max_parked)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish()
    }
}

/// A parked request as Redis keeps it.
#[derive(Serialize, Deserialize)]
struct Stored {
    id: String,
    scope: String,
    call_id: String,
    tool: String,
    arguments: Value,
    arguments_hash: String,
    can_wait: bool,
}

impl Stored {
    fn of(request: &ApprovalRequest) -> Self {
        Self {
            id: request.id.clone(),
            scope: request.scope.as_str().to_owned(),
            call_id: request.call_id.clone(),
            tool: request.tool.clone(),
            arguments: request.arguments.clone(),
            arguments_hash: request.arguments_hash.clone(),
            can_wait: request.can_wait,
        }
    }

    fn into_request(self) -> ApprovalRequest {
        ApprovalRequest {
            id: self.id,
            scope: SessionScope::from_key(&self.scope),
            call_id: self.call_id,
            tool: self.tool,
            arguments: self.arguments,
            arguments_hash: self.arguments_hash,
            can_wait: self.can_wait,
        }
    }
}

/// Why a step of `request` failed: Redis, or a reply this approver cannot read.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("Redis {what}", what = connection::failure(.0))]
    Redis(#[from] redis::RedisError),
    /// A value that is not the JSON the approver wrote (or one it could not write).
    #[error("Redis sent a reply the approver cannot read ({what})")]
    Unreadable {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A reply the scripts never send: an unknown outcome, a missing value.
    #[error("Redis sent a reply the approver cannot read ({0})")]
    Unexpected(String),
}

/// What a caller does with its parked call ([`RedisApproval::take`]).
#[derive(Clone, Copy)]
enum Step {
    /// Takes the decision if there is one; waits on.
    Wait,
    /// The wait ran out: takes the decision if there is one, else stops waiting.
    Stop,
    /// The caller is gone: stops waiting, and leaves any decision for the retry.
    Leave,
}

/// What taking a call's decision found.
enum Taken {
    Decided(ApprovalDecision),
    Pending,
    /// The call expired (or another replica's caller took its decision).
    Gone,
}

impl RedisApproval {
    /// An approver on `connection` whose callers wait up to [`DEFAULT_APPROVAL_WAIT`], with
    /// the memory approver's default ttl and bound.
    pub fn new(connection: RedisConnection) -> Self {
        Self {
            connection,
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

    /// How many calls may wait for a decision at once, all replicas together; more are denied.
    pub fn max_parked(mut self, max: usize) -> Self {
        self.max_parked = max;
        self
    }

    /// The largest call (its request as JSON: tool, arguments, ids) that may be parked
    /// (default 64 KiB, [`DEFAULT_MAX_REQUEST_BYTES`]); a larger one is denied, saying why.
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// The calls waiting for a decision on every replica, in the order they were parked (each
    /// under its [`id`](ApprovalRequest::id)).
    pub async fn pending(&self) -> Result<Vec<ApprovalRequest>, ApprovalError> {
        let reply = self
            .eval(&scripts::APPROVAL_PENDING, "", &[])
            .await
            .map_err(|failure| self.unavailable(failure))?;
        reply
            .iter()
            .skip(1)
            .flatten()
            .map(|json| {
                serde_json::from_str::<Stored>(json)
                    .map(Stored::into_request)
                    .map_err(|error| {
                        self.unavailable(Failure::Unreadable {
                            what: "a parked call",
                            source: error,
                        })
                    })
            })
            .collect()
    }

    /// Decides on the parked request `id`: wakes its caller (on whichever replica it waits),
    /// or keeps the decision for when the same call is made again.
    pub async fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<(), ApprovalError> {
        let json = serde_json::to_string(&decision).map_err(|error| {
            self.unavailable(Failure::Unreadable {
                what: "a decision",
                source: error,
            })
        })?;
        let reply = self
            .eval(&scripts::APPROVAL_DECIDE, id, &[&json])
            .await
            .map_err(|failure| self.unavailable(failure))?;
        match code(&reply) {
            "ok" => {
                self.connection.wake(&wake_key(id));
                Ok(())
            }
            "unknown_call" => Err(ApprovalError::UnknownCall(id.to_owned())),
            other => Err(self.unavailable(Failure::Unexpected(format!("outcome `{other}`")))),
        }
    }

    /// Runs `script` for request `id` with the prefix and settings, then `args`.
    async fn eval(&self, script: &Script, id: &str, args: &[&str]) -> Result<Reply, Failure> {
        let mut invocation = script.prepare_invoke();
        invocation
            .arg(self.connection.prefix())
            .arg(millis(self.ttl))
            .arg(self.max_parked)
            .arg(millis(self.wait_timeout))
            .arg(id);
        for arg in args {
            invocation.arg(*arg);
        }
        Ok(self.connection.invoke(&invocation).await?)
    }

    /// The error for a failure, naming Redis and the cause.
    fn unavailable(&self, failure: Failure) -> ApprovalError {
        let words = format!(
            "the approval store (Redis at {}) {}",
            self.connection.target(),
            match &failure {
                Failure::Redis(error) => format!("{}: {error}", connection::failure(error)),
                Failure::Unreadable { what, source } => {
                    format!("sent a reply it cannot read: {what}: {source}")
                }
                Failure::Unexpected(what) => format!("sent a reply it cannot read: {what}"),
            }
        );
        ApprovalError::Unavailable(ErrorDetail::caused_by(words, failure))
    }

    /// Parks `request` (or collects its decision), and waits for the decision if the caller
    /// can.
    async fn try_request(&self, request: &ApprovalRequest) -> Result<ApprovalOutcome, Failure> {
        let waits = self.wait && request.can_wait;
        let binding =
            serde_json::json!([request.scope.as_str(), request.tool, request.arguments_hash])
                .to_string();
        let json =
            serde_json::to_string(&Stored::of(request)).map_err(|source| Failure::Unreadable {
                what: "a request",
                source,
            })?;
        if json.len() > self.max_request_bytes {
            tracing::warn!(
                approval_id = %request.id,
                tool = %request.tool,
                bytes = json.len(),
                max = self.max_request_bytes,
                "a call too large to park for approval is denied"
            );
            return Ok(ApprovalOutcome::Decided(ApprovalDecision::Deny {
                reason: TOO_LARGE.to_owned(),
            }));
        }
        // Armed before the request goes out: a caller dropped while Redis parks its call (a
        // barge-in at that instant) still lets go of it, so the decision stays collectable by
        // the retry instead of waiting out the wait timeout.
        let mut release = Release {
            approval: waits.then(|| self.clone()),
            id: request.id.clone(),
            token: request.id.clone(),
        };
        let reply = self
            .eval(
                &scripts::APPROVAL_REQUEST,
                &request.id,
                &[&binding, &json, if waits { "1" } else { "0" }, &request.id],
            )
            .await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(failure) => {
                release.approval = None;
                return Err(failure);
            }
        };
        if code(&reply) != "parked" {
            release.approval = None;
        }
        let id = match code(&reply) {
            "decided" => return Ok(ApprovalOutcome::Decided(decision(&reply)?)),
            "parked" => value(&reply)?.to_owned(),
            "reused" => {
                tracing::warn!(id = %request.id, "an approval id was reused; not parked");
                return Ok(ApprovalOutcome::Pending);
            }
            "full" => {
                tracing::warn!(max = self.max_parked, "too many calls wait for approval");
                return Ok(ApprovalOutcome::Decided(ApprovalDecision::Deny {
                    reason: FULL.to_owned(),
                }));
            }
            other => return Err(Failure::Unexpected(format!("outcome `{other}`"))),
        };
        if !waits {
            return Ok(ApprovalOutcome::Pending);
        }
        release.id = id;
        self.wait_for(release).await
    }

    /// Waits for the decision on the parked call `release.id`, woken by its `decide` on any
    /// replica; if this caller goes away (a barge-in drops the call), `release` lets go of the
    /// call, so a decision given later is kept for the retry.
    async fn wait_for(&self, mut release: Release) -> Result<ApprovalOutcome, Failure> {
        let deadline = tokio::time::Instant::now() + self.wait_timeout;
        let mut watch = self.connection.watch(&wake_key(&release.id));
        loop {
            // Watching before reading: a decision after the read wakes this wait.
            watch.seen();
            match self.take(&release.id, &release.token, Step::Wait).await? {
                Taken::Decided(decision) => {
                    release.approval = None;
                    return Ok(ApprovalOutcome::Decided(decision));
                }
                Taken::Gone => {
                    release.approval = None;
                    return Ok(ApprovalOutcome::Pending);
                }
                Taken::Pending => {}
            }
            if tokio::time::timeout_at(deadline, watch.changed())
                .await
                .is_err()
            {
                break;
            }
        }
        release.approval = None;
        // Timed out: the call stays parked without a waiter, unless it was decided meanwhile.
        Ok(
            match self.take(&release.id, &release.token, Step::Stop).await? {
                Taken::Decided(decision) => ApprovalOutcome::Decided(decision),
                Taken::Pending | Taken::Gone => ApprovalOutcome::Pending,
            },
        )
    }

    /// Takes call `id`'s decision, or stops waiting on it, as `step` says, for the caller
    /// `token` (nothing, if a later caller of the same call took the call over).
    async fn take(&self, id: &str, token: &str, step: Step) -> Result<Taken, Failure> {
        let step = match step {
            Step::Wait => "wait",
            Step::Stop => "stop",
            Step::Leave => "leave",
        };
        let reply = self
            .eval(&scripts::APPROVAL_TAKE, id, &[step, token])
            .await?;
        match code(&reply) {
            "decided" => Ok(Taken::Decided(decision(&reply)?)),
            "pending" => Ok(Taken::Pending),
            "gone" => Ok(Taken::Gone),
            other => Err(Failure::Unexpected(format!("outcome `{other}`"))),
        }
    }
}

#[async_trait]
impl ApprovalPort for RedisApproval {
    async fn request(&self, request: &ApprovalRequest) -> ApprovalOutcome {
        match self.try_request(request).await {
            Ok(outcome) => outcome,
            Err(failure) => {
                // Never approve without a decision: the call is denied, saying why.
                tracing::warn!(
                    redis = %self.connection.target(),
                    approval_id = %request.id,
                    tool = %request.tool,
                    error = %crewline::types::ErrorChain(&failure),
                    "approvals are unavailable; the call is not run"
                );
                ApprovalOutcome::Decided(ApprovalDecision::Deny {
                    reason: UNAVAILABLE.to_owned(),
                })
            }
        }
    }
}

/// Marks a parked call no longer waited on when its waiting caller is dropped mid-wait.
struct Release {
    /// `None` once the wait ended by itself.
    approval: Option<RedisApproval>,
    id: String,
    /// The caller's token: its own request's id.
    token: String,
}

impl Drop for Release {
    fn drop(&mut self) {
        let Some(approval) = self.approval.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (id, token) = (
            std::mem::take(&mut self.id),
            std::mem::take(&mut self.token),
        );
        runtime.spawn(async move {
            if let Err(error) = approval.take(&id, &token, Step::Leave).await {
                tracing::debug!(approval_id = %id, error = %crewline::types::ErrorChain(&error), "could not release a parked call");
            }
        });
    }
}

/// The key a call's wake-ups go under (the channel is the task store's).
fn wake_key(id: &str) -> String {
    format!("approval:{id}")
}

/// A reply's outcome.
fn code(reply: &Reply) -> &str {
    reply
        .first()
        .and_then(|code| code.as_deref())
        .unwrap_or_default()
}

/// A reply's value after its outcome.
fn value(reply: &Reply) -> Result<&str, Failure> {
    reply
        .get(1)
        .and_then(|value| value.as_deref())
        .ok_or_else(|| Failure::Unexpected("a reply without its value".to_owned()))
}

/// The decision a `decided` reply holds.
fn decision(reply: &Reply) -> Result<ApprovalDecision, Failure> {
    serde_json::from_str(value(reply)?).map_err(|source| Failure::Unreadable {
        what: "a decision",
        source,
    })
}
