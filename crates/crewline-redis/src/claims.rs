//! Run-once claims shared through Redis: a non-cancellable call claimed on one replica is
//! joined, read, or found dead (`OutcomeUnknown`) from any replica on the same Redis and
//! prefix.

use std::{fmt, time::Duration};

use async_trait::async_trait;
use crewline_tools::{
    DEFAULT_MAX_RESULT_BYTES, IdempotencyKey,
    executor::claims::{
        Claim, ClaimError, ClaimKey, ClaimOutcome, ClaimRequest, ClaimStore, ClaimTerms, ClaimToken,
    },
};
use redis::Script;
use tokio::time::Instant;

use crate::{Reply, connection::RedisConnection, millis, scripts};

/// The longest a kept failure's message may be once its outcome is over the size bound.
const MAX_KEPT_MESSAGE: usize = 1024;

/// The [`ClaimStore`] every replica on one Redis and prefix shares: keys
/// `{prefix}claim:{key}` (one hash per call, 64 hex digits of key), each update one Lua
/// script, every key with a TTL (lease + window while running, the window after).
///
/// What each failure does:
/// - Redis unreachable before the claim is taken: the executor refuses the call and it does
///   NOT run (fail closed: a non-cancellable tool never runs unclaimed); the model reads that
///   nothing was done.
/// - Renewals failing while the tool runs: the tool runs on (it is not cancellable); if the
///   lease lapses meanwhile, a retry elsewhere reads `OutcomeUnknown`.
/// - The outcome's write failing after the tool ran: its caller still gets the outcome it
///   has; a retry elsewhere finds the lease lapsed and reads `OutcomeUnknown`.
/// - An outcome over [`max_outcome_bytes`](Self::max_outcome_bytes) (default the executor's
///   1 MiB result limit) is never stored: a success is kept as its size only (a reader is
///   told it was too large, an identical call that it was already done), a failure as its
///   kind and the first KiB of its message, without its detail.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use crewline_redis::{RedisClaims, RedisConfig};
/// use crewline_tools::Executor;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let connection = RedisConfig::from_env()?.open().await?;
/// let executor = Executor::builder()
///     .claims(Arc::new(RedisClaims::new(connection)))
///     .build();
/// # drop(executor); Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisClaims {
    connection: RedisConnection,
    max_outcome_bytes: usize,
}

impl fmt::Debug for RedisClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClaims")
            .field("redis", &self.connection.target())
            .field("prefix", &self.connection.prefix())
            .field("max_outcome_bytes", &self.max_outcome_bytes)
            .finish()
    }
}

impl RedisClaims {
    /// Claims on `connection`, keeping outcomes of up to the executor's default result limit.
    pub fn new(connection: RedisConnection) -> Self {
        Self {
            connection,
            max_outcome_bytes: DEFAULT_MAX_RESULT_BYTES,
        }
    }

    /// The largest outcome kept, as JSON (default 1 MiB, the executor's result limit); a
    /// larger one is kept as its size (a success) or its shortened message (a failure).
    pub fn max_outcome_bytes(mut self, bytes: usize) -> Self {
        self.max_outcome_bytes = bytes;
        self
    }

    /// Runs `script` for `key` with the prefix and `terms`, then `args`.
    async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        key: &ClaimKey,
        terms: ClaimTerms,
        args: &[&str],
    ) -> Result<T, ClaimError> {
        let mut invocation = script.prepare_invoke();
        invocation
            .arg(self.connection.prefix())
            .arg(key.as_str())
            .arg(millis(terms.lease))
            .arg(millis(terms.window));
        for arg in args {
            invocation.arg(*arg);
        }
        self.connection
            .invoke(&invocation)
            .await
            .map_err(|source| ClaimError::Unavailable {
                store: format!("Redis at {}", self.connection.target()),
                source: Box::new(source),
            })
    }

    fn unreadable(&self, what: impl Into<String>) -> ClaimError {
        ClaimError::Unreadable {
            store: format!("Redis at {}", self.connection.target()),
            what: what.into(),
        }
    }

    /// Reads a claim script's reply.
    fn claim_of(&self, reply: &Reply, token: Option<ClaimToken>) -> Result<Claim, ClaimError> {
        let field = |index: usize| reply.get(index).and_then(|value| value.as_deref());
        let idempotency_key = || {
            field(1)
                .map(IdempotencyKey::from_key)
                .ok_or_else(|| self.unreadable("a claim without its idempotency key"))
        };
        let outcome = || {
            field(2)
                .and_then(ClaimOutcome::from_json)
                .ok_or_else(|| self.unreadable("an outcome"))
        };
        Ok(match field(0).unwrap_or_default() {
            "absent" => Claim::Absent,
            "won" => Claim::Won {
                token: token.ok_or_else(|| self.unreadable("a claim won by a join"))?,
                idempotency_key: idempotency_key()?,
            },
            "running" => Claim::Running {
                idempotency_key: idempotency_key()?,
            },
            "unknown" => Claim::Unknown {
                idempotency_key: idempotency_key()?,
            },
            "outcome" => Claim::Outcome {
                outcome: outcome()?,
                idempotency_key: idempotency_key()?,
            },
            "done" => Claim::Done {
                outcome: outcome()?,
                idempotency_key: idempotency_key()?,
                age: Duration::from_millis(field(3).and_then(|age| age.parse().ok()).unwrap_or(0)),
            },
            other => return Err(self.unreadable(format!("outcome `{other}`"))),
        })
    }

    /// `outcome` as JSON within the size bound.
    fn bounded(&self, outcome: &ClaimOutcome) -> String {
        let json = outcome.to_json();
        if json.len() <= self.max_outcome_bytes {
            return json;
        }
        tracing::warn!(
            bytes = json.len(),
            max = self.max_outcome_bytes,
            "an outcome over the size bound is kept shortened"
        );
        match outcome {
            ClaimOutcome::Failed(error) => {
                let mut error = error.clone();
                let mut end = error.message.len().min(MAX_KEPT_MESSAGE);
                while !error.message.is_char_boundary(end) {
                    end -= 1;
                }
                error.message.truncate(end);
                error.detail = None;
                ClaimOutcome::Failed(error).to_json()
            }
            _ => ClaimOutcome::TooLarge { bytes: json.len() }.to_json(),
        }
    }
}

/// The key a claim's wake-ups go under (the channel is the task store's).
fn wake_key(key: &ClaimKey) -> String {
    format!("claim:{}", key.as_str())
}

#[async_trait]
impl ClaimStore for RedisClaims {
    async fn claim(
        &self,
        key: &ClaimKey,
        request: ClaimRequest,
        terms: ClaimTerms,
    ) -> Result<Claim, ClaimError> {
        let (mode, token, idempotency_key) = match request {
            ClaimRequest::Join => ("join", None, None),
            ClaimRequest::Claim {
                token,
                idempotency_key,
                retake_unknown,
            } => (
                if retake_unknown { "retake" } else { "claim" },
                Some(token),
                Some(idempotency_key),
            ),
        };
        let reply: Reply = self
            .eval(
                &scripts::CLAIM,
                key,
                terms,
                &[
                    mode,
                    token.as_ref().map_or("", ClaimToken::as_str),
                    idempotency_key.as_ref().map_or("", IdempotencyKey::as_str),
                ],
            )
            .await?;
        self.claim_of(&reply, token)
    }

    async fn wait(
        &self,
        key: &ClaimKey,
        until: Instant,
        terms: ClaimTerms,
    ) -> Result<Claim, ClaimError> {
        let mut watch = self.connection.watch(&wake_key(key));
        loop {
            // Watching before reading: an outcome written after the read wakes this wait.
            watch.seen();
            let reply: Reply = self
                .eval(&scripts::CLAIM, key, terms, &["wait", "", ""])
                .await?;
            let claim = self.claim_of(&reply, None)?;
            let Claim::Running { .. } = claim else {
                return Ok(claim);
            };
            let now = Instant::now();
            if now >= until {
                return Ok(claim);
            }
            // Read again when the lease may have lapsed (a dead owner publishes nothing).
            let lease_left = reply
                .get(2)
                .and_then(|left| left.as_deref())
                .and_then(|left| left.parse::<u64>().ok())
                .map_or(terms.lease, Duration::from_millis);
            let wake_at = until.min(now + lease_left + Duration::from_millis(1));
            let _ = tokio::time::timeout_at(wake_at, watch.changed()).await;
        }
    }

    async fn renew(
        &self,
        key: &ClaimKey,
        token: &ClaimToken,
        terms: ClaimTerms,
    ) -> Result<bool, ClaimError> {
        let renewed: i64 = self
            .eval(&scripts::CLAIM_RENEW, key, terms, &[token.as_str()])
            .await?;
        Ok(renewed == 1)
    }

    async fn settle(
        &self,
        key: &ClaimKey,
        token: &ClaimToken,
        outcome: &ClaimOutcome,
        received: bool,
        terms: ClaimTerms,
    ) -> Result<bool, ClaimError> {
        let json = self.bounded(outcome);
        let settled: i64 = self
            .eval(
                &scripts::CLAIM_SETTLE,
                key,
                terms,
                &[
                    token.as_str(),
                    &json,
                    if outcome.succeeded() { "1" } else { "0" },
                    if received { "1" } else { "0" },
                ],
            )
            .await?;
        if settled == 1 {
            // This replica's waiters (others hear the script's PUBLISH).
            self.connection.wake(&wake_key(key));
        }
        Ok(settled == 1)
    }
}
