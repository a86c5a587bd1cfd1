//! Run-once claims: where the executor keeps the non-cancellable calls that run and the
//! outcomes a retry may read, in this process ([`MemoryClaims`], the default) or in a store
//! every replica shares (`crewline_redis::RedisClaims`).
//!
//! A call is known by its [`ClaimKey`]: its session (the platform's call, see
//! [`SessionScope::for_call`]), its tool and the hash of its validated arguments, so a retry
//! after a reconnect, on any replica, is the same call. Before a non-cancellable tool starts,
//! the executor claims its key (set-if-absent, with a lease it renews while the tool runs);
//! it writes the outcome before the claim is released (one step: [`ClaimStore::settle`]).
//!
//! What an identical call finds, and what the model then reads:
//!
//! | the claim | the identical call |
//! |---|---|
//! | none | runs (it claims the key first) |
//! | running, its lease renewed | joins it: waits for its outcome, at most the tool's timeout, then `StillRunning` |
//! | its owner stopped renewing (a dead replica) | `OutcomeUnknown`, for the retry window; never run again, unless the tool [dedupes by key](crate::ToolPolicy::dedupes_by_key): then it runs again under the same idempotency key |
//! | finished, nobody received the outcome | reads the outcome as the call's own (it is now received) |
//! | finished and received, a success | does not run: reads "already done" with the outcome, for the retry window; after it, a new identical call runs |
//! | finished and received, a failure | runs: a failed action is a new request |
//!
//! Why a received success is not run again for the window: the executor cannot tell a caller
//! who asks for a second identical transfer from a reconnect that lost the first one's answer,
//! and only the second is common. Money never moves twice; the legitimate second request is
//! not swallowed: the model is told it was already done, and when it can be made again.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::ToolErrorKind;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::{sync::Notify, time::Instant};

use super::{IdempotencyKey, SessionScope, ToolCallError, fingerprint};

/// How long a claim holds without renewal by default: a call whose replica died reads
/// `OutcomeUnknown` within this long. Renewed every third of it while the tool runs.
pub const DEFAULT_CLAIM_LEASE: Duration = Duration::from_secs(10);

/// What makes two calls the same call, as a store keys it: a hex SHA-256 of the session,
/// the tool's name and the arguments' hash (64 characters, whatever their lengths).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimKey(Arc<str>);

impl ClaimKey {
    /// The key of a call of `tool` with the validated `arguments` in the session `scope`.
    pub fn new(scope: &SessionScope, tool: &str, arguments: &Value) -> Self {
        let mut hasher = Sha256::new();
        // Length-prefixed: no two (scope, tool) pairs write the same bytes.
        for part in [scope.as_str(), tool] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        hasher.update(fingerprint::arguments_hash(arguments).as_bytes());
        Self(hex(&hasher.finalize()).into())
    }

    /// The key's text (64 hex digits).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ClaimKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClaimKey").field(&&*self.0).finish()
    }
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    text
}

/// Who holds a claim: minted by each caller that claims, so only the holder renews and
/// settles it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClaimToken(Arc<str>);

impl ClaimToken {
    /// A fresh token (random).
    pub fn fresh() -> Self {
        Self(format!("clm_{}", uuid::Uuid::new_v4().simple()).into())
    }

    /// The token whose text is `token` (for a store that reads it back).
    pub fn from_key(token: &str) -> Self {
        Self(token.into())
    }

    /// The token's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClaimToken").field(&&*self.0).finish()
    }
}

/// The settings of one claim: its lease, and how long what it leaves is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimTerms {
    /// How long the claim holds without renewal.
    pub lease: Duration,
    /// How long an outcome, or an unknown outcome, is kept for a retry.
    pub window: Duration,
}

/// What a caller asks of a store for a key.
#[derive(Debug, Clone)]
pub enum ClaimRequest {
    /// Only reads what holds the key (before an approval: nothing is claimed yet).
    Join,
    /// Claims the key if nothing holds it, or reads what does.
    Claim {
        /// The caller's token, if it wins.
        token: ClaimToken,
        /// The call's idempotency key, if it wins (the first claim mints it).
        idempotency_key: IdempotencyKey,
        /// Whether an unknown outcome may be taken over, under its idempotency key (tools
        /// whose downstream dedupes by it).
        retake_unknown: bool,
    },
}

/// A call's outcome as a store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The tool's result.
    Ok(Value),
    /// The tool's failure.
    Failed(ToolCallError),
    /// The tool succeeded with a result too large to keep (over the executor's, or the
    /// store's, size limit): only its size is kept.
    TooLarge {
        /// The result's size in bytes, as far as it was measured.
        bytes: usize,
    },
}

impl ClaimOutcome {
    /// Whether the tool succeeded (its effect, if any, happened).
    pub fn succeeded(&self) -> bool {
        !matches!(self, Self::Failed(_))
    }

    /// The outcome as JSON text, for a store outside the process.
    pub fn to_json(&self) -> String {
        match self {
            Self::Ok(value) => json!({ "ok": value }),
            Self::Failed(error) => json!({ "error": {
                "kind": error.kind,
                "message": error.message,
                "detail": error.detail.as_deref(),
            }}),
            Self::TooLarge { bytes } => json!({ "too_large": bytes }),
        }
        .to_string()
    }

    /// Reads what [`to_json`](Self::to_json) wrote; `None` for anything else.
    pub fn from_json(text: &str) -> Option<Self> {
        let mut value: Value = serde_json::from_str(text).ok()?;
        let object = value.as_object_mut()?;
        if let Some(ok) = object.remove("ok") {
            return Some(Self::Ok(ok));
        }
        if let Some(bytes) = object.get("too_large") {
            return Some(Self::TooLarge {
                bytes: usize::try_from(bytes.as_u64()?).ok()?,
            });
        }
        let error = object.get("error")?;
        let kind: ToolErrorKind = serde_json::from_value(error.get("kind")?.clone()).ok()?;
        Some(Self::Failed(ToolCallError {
            kind,
            message: error.get("message")?.as_str()?.to_owned(),
            detail: error
                .get("detail")
                .and_then(Value::as_str)
                .map(crewline_core::ErrorDetail::new),
        }))
    }
}

/// What a store found for a key.
#[derive(Debug, Clone)]
pub enum Claim {
    /// Nothing holds the key (a [`ClaimRequest::Join`] only).
    Absent,
    /// The caller holds the claim now: it runs the tool.
    Won {
        /// The caller's token.
        token: ClaimToken,
        /// The call's idempotency key (a retaken claim keeps the first one's).
        idempotency_key: IdempotencyKey,
    },
    /// Another caller runs the call, its lease renewed.
    Running {
        /// The running call's idempotency key.
        idempotency_key: IdempotencyKey,
    },
    /// The call finished and nobody had received its outcome: this caller has it now.
    Outcome {
        /// The outcome.
        outcome: ClaimOutcome,
        /// The call's idempotency key.
        idempotency_key: IdempotencyKey,
    },
    /// The call succeeded and its outcome was received already: it is not run again.
    Done {
        /// The outcome.
        outcome: ClaimOutcome,
        /// The call's idempotency key.
        idempotency_key: IdempotencyKey,
        /// How long ago it finished.
        age: Duration,
    },
    /// The call's owner stopped renewing its claim before any outcome was written: it may
    /// or may not have run.
    Unknown {
        /// The call's idempotency key.
        idempotency_key: IdempotencyKey,
    },
}

/// Why a store could not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// The store could not be reached (or did not answer in time).
    #[error("the claim store ({store}) is unreachable")]
    Unavailable {
        /// The store, as logs name it (a URL without its password).
        store: String,
        /// What the store's client met.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The store answered something this client cannot read.
    #[error("the claim store ({store}) sent a reply it cannot read ({what})")]
    Unreadable {
        /// The store, as logs name it.
        store: String,
        /// What could not be read.
        what: String,
    },
}

/// Where the executor claims non-cancellable calls and keeps their outcomes (see the
/// [module docs](self) for what each state means to a retry).
///
/// Every method is one atomic step for every caller of the store (every replica sharing it).
#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// Claims `key` as `request` says, or reads what holds it; a first read of a finished
    /// call's outcome marks it received. A running claim whose lease lapsed becomes
    /// [`Claim::Unknown`], kept for `terms.window`.
    async fn claim(
        &self,
        key: &ClaimKey,
        request: ClaimRequest,
        terms: ClaimTerms,
    ) -> Result<Claim, ClaimError>;

    /// Waits until the call holding `key` ends or `until` passes, then reads it: `Outcome`
    /// (the outcome, received or not: the waiter joined that very call), `Unknown`,
    /// `Running` (still running at `until`), or `Absent`.
    async fn wait(
        &self,
        key: &ClaimKey,
        until: Instant,
        terms: ClaimTerms,
    ) -> Result<Claim, ClaimError>;

    /// Extends the lease of the claim `key` held with `token`; `false` when it is not held
    /// with it any more (its lease lapsed and someone saw it, or it was retaken).
    async fn renew(
        &self,
        key: &ClaimKey,
        token: &ClaimToken,
        terms: ClaimTerms,
    ) -> Result<bool, ClaimError>;

    /// Writes the outcome of the call `key` held with `token`, releasing the claim in the
    /// same step; kept for `terms.window`. `received` says its caller has it already.
    /// `false` when another caller holds the key now (nothing is written).
    async fn settle(
        &self,
        key: &ClaimKey,
        token: &ClaimToken,
        outcome: &ClaimOutcome,
        received: bool,
        terms: ClaimTerms,
    ) -> Result<bool, ClaimError>;
}

/// The claims of one process, in memory: the default store. Replicas do not share it.
#[derive(Default)]
pub struct MemoryClaims {
    records: Mutex<HashMap<ClaimKey, Record>>,
    /// When expired records are swept next (once a second at most: a sweep reads them all).
    next_purge: Mutex<Option<Instant>>,
}

/// How often expired records are swept from a [`MemoryClaims`].
const PURGE_EVERY: Duration = Duration::from_secs(1);

impl fmt::Debug for MemoryClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryClaims")
            .field("records", &self.lock().len())
            .finish()
    }
}

struct Record {
    state: State,
    idempotency_key: IdempotencyKey,
    /// When the record is forgotten.
    expires: Instant,
    changed: Arc<Notify>,
}

enum State {
    Running {
        token: ClaimToken,
        lease_until: Instant,
    },
    Finished {
        outcome: ClaimOutcome,
        received: bool,
        at: Instant,
    },
    Unknown {
        /// The token of the owner whose lease lapsed: if it was alive after all, its outcome
        /// is still written.
        last_token: ClaimToken,
    },
}

impl Record {
    /// Turns a running claim whose lease lapsed into an unknown outcome.
    fn lapse(&mut self, now: Instant, terms: ClaimTerms) {
        if let State::Running { token, lease_until } = &self.state
            && *lease_until <= now
        {
            tracing::warn!(
                idempotency_key = %self.idempotency_key,
                "a claim's owner stopped renewing it before writing an outcome: the outcome \
                 is unknown"
            );
            self.state = State::Unknown {
                last_token: token.clone(),
            };
            self.expires = now + terms.window;
            self.changed.notify_waiters();
        }
    }

    fn run(&mut self, token: ClaimToken, now: Instant, terms: ClaimTerms) {
        self.state = State::Running {
            token,
            lease_until: now + terms.lease,
        };
        self.expires = now + terms.lease + terms.window;
    }
}

impl MemoryClaims {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets expired records, at most once every [`PURGE_EVERY`] (a record past its
    /// expiry is ignored on read meanwhile).
    fn purge(&self, records: &mut HashMap<ClaimKey, Record>, now: Instant) {
        let mut next = self
            .next_purge
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if next.is_some_and(|at| now < at) {
            return;
        }
        *next = Some(now + PURGE_EVERY);
        records.retain(|_, record| record.expires > now);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ClaimKey, Record>> {
        // Every update is a whole assignment: a poisoned map is consistent.
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The read of a record as a new call's: marks a first read of an outcome received.
fn read(record: &mut Record, now: Instant) -> Claim {
    let idempotency_key = record.idempotency_key.clone();
    match &mut record.state {
        State::Running { .. } => Claim::Running { idempotency_key },
        State::Unknown { .. } => Claim::Unknown { idempotency_key },
        State::Finished {
            outcome,
            received: received @ false,
            ..
        } => {
            *received = true;
            Claim::Outcome {
                outcome: outcome.clone(),
                idempotency_key,
            }
        }
        State::Finished { outcome, at, .. } => Claim::Done {
            outcome: outcome.clone(),
            idempotency_key,
            age: now.saturating_duration_since(*at),
        },
    }
}

#[async_trait]
impl ClaimStore for MemoryClaims {
    async fn claim(
        &self,
        key: &ClaimKey,
        request: ClaimRequest,
        terms: ClaimTerms,
    ) -> Result<Claim, ClaimError> {
        let now = Instant::now();
        let mut records = self.lock();
        self.purge(&mut records, now);
        if records.get(key).is_some_and(|record| record.expires <= now) {
            records.remove(key);
        }
        if let Some(record) = records.get_mut(key) {
            record.lapse(now, terms);
            match (&record.state, request) {
                (
                    State::Unknown { .. },
                    ClaimRequest::Claim {
                        token,
                        retake_unknown: true,
                        ..
                    },
                ) => {
                    record.run(token.clone(), now, terms);
                    return Ok(Claim::Won {
                        token,
                        idempotency_key: record.idempotency_key.clone(),
                    });
                }
                // A received failure: a new identical call is a new request.
                (
                    State::Finished {
                        outcome,
                        received: true,
                        ..
                    },
                    request,
                ) if !outcome.succeeded() => {
                    records.remove(key);
                    return Ok(insert(&mut records, key, request, now, terms));
                }
                _ => return Ok(read(record, now)),
            }
        }
        Ok(insert(&mut records, key, request, now, terms))
    }

    async fn wait(
        &self,
        key: &ClaimKey,
        until: Instant,
        terms: ClaimTerms,
    ) -> Result<Claim, ClaimError> {
        loop {
            let now = Instant::now();
            let changed = {
                let mut records = self.lock();
                let Some(record) = records.get_mut(key).filter(|record| record.expires > now)
                else {
                    return Ok(Claim::Absent);
                };
                record.lapse(now, terms);
                let lease_until = match &mut record.state {
                    State::Running { lease_until, .. } => *lease_until,
                    State::Finished {
                        outcome, received, ..
                    } => {
                        *received = true;
                        return Ok(Claim::Outcome {
                            outcome: outcome.clone(),
                            idempotency_key: record.idempotency_key.clone(),
                        });
                    }
                    State::Unknown { .. } => {
                        return Ok(Claim::Unknown {
                            idempotency_key: record.idempotency_key.clone(),
                        });
                    }
                };
                if now >= until {
                    return Ok(Claim::Running {
                        idempotency_key: record.idempotency_key.clone(),
                    });
                }
                (Arc::clone(&record.changed), lease_until.min(until))
            };
            let (notify, wake_at) = changed;
            let notified = notify.notified();
            tokio::pin!(notified);
            // Registered before the state is read again: a change in between still wakes.
            notified.as_mut().enable();
            if self.changed_since(key) {
                continue;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    async fn renew(
        &self,
        key: &ClaimKey,
        token: &ClaimToken,
        terms: ClaimTerms,
    ) -> Result<bool, ClaimError> {
        let now = Instant::now();
        let mut records = self.lock();
        let Some(record) = records.get_mut(key) else {
            return Ok(false);
        };
        match &record.state {
            State::Running { token: held, .. } if held == token => {
                record.run(token.clone(), now, terms);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn settle(
        &self,
        key: &ClaimKey,
        token: &ClaimToken,
        outcome: &ClaimOutcome,
        received: bool,
        terms: ClaimTerms,
    ) -> Result<bool, ClaimError> {
        let now = Instant::now();
        let mut records = self.lock();
        let Some(record) = records.get_mut(key) else {
            // Forgotten (its lease and window both passed): the outcome is still news.
            return Ok(false);
        };
        let ours = match &record.state {
            State::Running { token: held, .. } => held == token,
            State::Unknown { last_token } => last_token == token,
            State::Finished { .. } => false,
        };
        if ours {
            record.state = State::Finished {
                outcome: outcome.clone(),
                received,
                at: now,
            };
            record.expires = now + terms.window;
            record.changed.notify_waiters();
        }
        Ok(ours)
    }
}

impl MemoryClaims {
    /// Whether `key`'s record is no longer running (checked after registering for wake-ups).
    fn changed_since(&self, key: &ClaimKey) -> bool {
        self.lock()
            .get(key)
            .is_none_or(|record| !matches!(record.state, State::Running { .. }))
    }
}

/// Inserts a running claim for `request` if it claims; `Absent` for a join.
fn insert(
    records: &mut HashMap<ClaimKey, Record>,
    key: &ClaimKey,
    request: ClaimRequest,
    now: Instant,
    terms: ClaimTerms,
) -> Claim {
    let ClaimRequest::Claim {
        token,
        idempotency_key,
        ..
    } = request
    else {
        return Claim::Absent;
    };
    let mut record = Record {
        state: State::Unknown {
            last_token: token.clone(),
        },
        idempotency_key: idempotency_key.clone(),
        expires: now,
        changed: Arc::new(Notify::new()),
    };
    record.run(token.clone(), now, terms);
    records.insert(key.clone(), record);
    Claim::Won {
        token,
        idempotency_key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_back_as_written() {
        for outcome in [
            ClaimOutcome::Ok(json!({"sent": 50})),
            ClaimOutcome::Failed(
                ToolCallError::new(ToolErrorKind::ToolError, "no funds").with_detail("402"),
            ),
            ClaimOutcome::TooLarge { bytes: 2 << 20 },
        ] {
            assert_eq!(ClaimOutcome::from_json(&outcome.to_json()), Some(outcome));
        }
        assert_eq!(ClaimOutcome::from_json("[]"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_owner_alive_after_its_lease_lapsed_still_writes_its_outcome() {
        let store = MemoryClaims::new();
        let terms = ClaimTerms {
            lease: Duration::from_secs(1),
            window: Duration::from_secs(60),
        };
        let key = ClaimKey::new(&SessionScope::for_call("c1"), "transfer", &json!({}));
        let token = ClaimToken::fresh();
        let request = ClaimRequest::Claim {
            token: token.clone(),
            idempotency_key: IdempotencyKey::fresh(),
            retake_unknown: false,
        };
        let won = store.claim(&key, request, terms).await.unwrap();
        assert!(matches!(won, Claim::Won { .. }));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let seen = store.claim(&key, ClaimRequest::Join, terms).await.unwrap();
        assert!(matches!(seen, Claim::Unknown { .. }), "{seen:?}");
        assert!(!store.renew(&key, &token, terms).await.unwrap());

        let outcome = ClaimOutcome::Ok(json!({"sent": 50}));
        assert!(
            store
                .settle(&key, &token, &outcome, false, terms)
                .await
                .unwrap()
        );
        let read = store.claim(&key, ClaimRequest::Join, terms).await.unwrap();
        assert!(
            matches!(
                read,
                Claim::Outcome {
                    outcome: ClaimOutcome::Ok(_),
                    ..
                }
            ),
            "{read:?}"
        );
        let other = ClaimToken::fresh();
        assert!(
            !store
                .settle(&key, &other, &outcome, false, terms)
                .await
                .unwrap()
        );
    }

    #[test]
    fn keys_differ_by_session_tool_and_arguments() {
        let call = SessionScope::for_call("c1");
        let key = ClaimKey::new(&call, "transfer", &json!({"n": 50}));
        assert_eq!(key, ClaimKey::new(&call, "transfer", &json!({"n": 50})));
        assert_eq!(key.as_str().len(), 64);
        assert_ne!(
            key,
            ClaimKey::new(&SessionScope::for_call("c2"), "transfer", &json!({"n": 50}))
        );
        assert_ne!(key, ClaimKey::new(&call, "refund", &json!({"n": 50})));
        assert_ne!(key, ClaimKey::new(&call, "transfer", &json!({"n": 60})));
    }
}
