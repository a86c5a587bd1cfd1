//! Calls' checkpoints and owners in Redis: a call resumes on any replica sharing the Redis
//! and prefix, and a replica that lost a call to a newer connection learns it at once (a
//! notice on the wake-up channel), or at its next write or renewal if the notice was lost.
//!
//! Keys, under the connection's prefix: `call:{id}:checkpoint` (the checkpoint's JSON, living
//! `ttl` after its last write or renewal) and `call:{id}:owner` (the owner's token, living
//! `lease` after its last renewal). Every write is one script that checks the owner first, so
//! a fenced owner never overwrites the newer one's checkpoint.

use std::{fmt, time::Duration};

use async_trait::async_trait;
use crewline::session_store::{
    CallStore, CallStoreError, DEFAULT_CHECKPOINT_TTL, DEFAULT_OWNER_LEASE, Fenced,
    MAX_CHECKPOINT_BYTES,
};
use futures::{StreamExt, stream::BoxStream};
use redis::Script;

use crate::{
    connection::{self, RedisConnection},
    millis,
};

/// The longest call id kept in Redis: a platform's call ids are tens of bytes; a longer one is
/// not checkpointed rather than made into a key of any size.
pub const MAX_CALL_ID_BYTES: usize = 256;

/// Makes a token the call's owner, whatever owned it before (newest wins); when it took the
/// call from another owner, tells every replica on the connection's wake-up channel (ARGV[3],
/// message ARGV[4]), so that owner ends its session now rather than at its next renewal.
const CLAIM: &str = r"
local older = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if older then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
return 1
";

/// Writes the checkpoint if the token still owns the call; renews both keys.
const SAVE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
return 1
";

/// Renews both keys if the token still owns the call.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
";

/// Gives the call up if the token still owns it.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
";

/// Why Redis could not keep a call's checkpoint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointStoreError {
    /// Redis failed or could not be reached.
    #[error("the call store (Redis at {target}) {failure}")]
    Redis {
        /// Where Redis is.
        target: String,
        /// `is unreachable` or `failed`.
        failure: &'static str,
        /// The cause.
        #[source]
        source: redis::RedisError,
    },
    /// A call id over [`MAX_CALL_ID_BYTES`].
    #[error("a call id of {0} bytes is too long to checkpoint")]
    CallIdTooLong(usize),
}

/// The Redis-backed [`CallStore`]: calls' checkpoints and owners shared by every replica on
/// the same Redis and prefix; cheap to clone.
#[derive(Clone)]
pub struct RedisCheckpoints {
    connection: RedisConnection,
    ttl: Duration,
    lease: Duration,
}

impl fmt::Debug for RedisCheckpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCheckpoints")
            .field("redis", &self.connection.target())
            .field("prefix", &self.connection.prefix())
            .field("ttl", &self.ttl)
            .field("lease", &self.lease)
            .finish()
    }
}

impl RedisCheckpoints {
    /// Checkpoints on `connection` (shared with the task store, say), with
    /// [`DEFAULT_CHECKPOINT_TTL`] and [`DEFAULT_OWNER_LEASE`].
    pub fn new(connection: RedisConnection) -> Self {
        Self {
            connection,
            ttl: DEFAULT_CHECKPOINT_TTL,
            lease: DEFAULT_OWNER_LEASE,
        }
    }

    /// A checkpoint lives `ttl` after its call's last write or renewal.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl.max(Duration::from_secs(1));
        self
    }

    /// An owner lives `lease` without renewal; owners renew every third of it, so a replica
    /// that lost its call learns within a third of `lease`.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(300));
        self
    }

    /// The keys of call `call`: its owner, its checkpoint.
    fn keys(&self, call: &str) -> Result<(String, String), CallStoreError> {
        if call.len() > MAX_CALL_ID_BYTES {
            return Err(CallStoreError::Backend(Box::new(
                CheckpointStoreError::CallIdTooLong(call.len()),
            )));
        }
        let prefix = self.connection.prefix();
        Ok((
            format!("{prefix}call:{call}:owner"),
            format!("{prefix}call:{call}:checkpoint"),
        ))
    }

    fn failed(&self, source: redis::RedisError) -> CallStoreError {
        CallStoreError::Backend(Box::new(CheckpointStoreError::Redis {
            target: self.connection.target().to_owned(),
            failure: connection::failure(&source),
            source,
        }))
    }

    /// Runs `script` on the call's keys with `args`; its integer reply.
    async fn run(&self, script: &str, call: &str, args: &[&str]) -> Result<i64, CallStoreError> {
        let (owner, checkpoint) = self.keys(call)?;
        let script = Script::new(script);
        let mut invocation = script.prepare_invoke();
        invocation.key(owner).key(checkpoint);
        for arg in args {
            invocation.arg(*arg);
        }
        self.connection
            .invoke(&invocation)
            .await
            .map_err(|error| self.failed(error))
    }

    fn fenced(reply: i64) -> Fenced {
        if reply == 1 {
            Fenced::Owner
        } else {
            Fenced::Lost
        }
    }
}

/// Loads the checkpoint (a script too: one way to Redis for every command).
const LOAD: &str = r"return redis.call('GET', KEYS[2])";

#[async_trait]
impl CallStore for RedisCheckpoints {
    async fn claim(&self, call: &str) -> Result<String, CallStoreError> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let lease = millis(self.lease).to_string();
        let channel = self.connection.wakeup_channel();
        let takeover = takeover_wakeup(call);
        self.run(CLAIM, call, &[&token, &lease, &channel, &takeover])
            .await?;
        Ok(token)
    }

    async fn load(&self, call: &str) -> Result<Option<String>, CallStoreError> {
        let (owner, checkpoint) = self.keys(call)?;
        let script = Script::new(LOAD);
        let mut invocation = script.prepare_invoke();
        invocation.key(owner).key(checkpoint);
        let json: Option<String> = self
            .connection
            .invoke(&invocation)
            .await
            .map_err(|error| self.failed(error))?;
        Ok(json)
    }

    async fn save(&self, call: &str, token: &str, json: &str) -> Result<Fenced, CallStoreError> {
        if json.len() > MAX_CHECKPOINT_BYTES {
            return Err(CallStoreError::TooLarge {
                bytes: json.len(),
                limit: MAX_CHECKPOINT_BYTES,
            });
        }
        let (lease, ttl) = (millis(self.lease).to_string(), millis(self.ttl).to_string());
        let reply = self.run(SAVE, call, &[token, &lease, &ttl, json]).await?;
        Ok(Self::fenced(reply))
    }

    async fn renew(&self, call: &str, token: &str) -> Result<Fenced, CallStoreError> {
        let (lease, ttl) = (millis(self.lease).to_string(), millis(self.ttl).to_string());
        let reply = self.run(RENEW, call, &[token, &lease, &ttl]).await?;
        Ok(Self::fenced(reply))
    }

    async fn release(&self, call: &str, token: &str) -> Result<(), CallStoreError> {
        self.run(RELEASE, call, &[token]).await.map(|_| ())
    }

    fn renew_every(&self) -> Duration {
        self.lease / 3
    }

    /// This process's one wake-up subscription (shared with tasks, approvals and claims)
    /// carries the call's takeovers; a lost subscription wakes every watcher once it is back,
    /// since a notice may have been missed meanwhile. A watch holds a counter, not a queue.
    fn takeover_hints(&self, call: &str) -> Option<BoxStream<'static, ()>> {
        if call.len() > MAX_CALL_ID_BYTES {
            return None;
        }
        let mut watch = self.connection.watch(&takeover_wakeup(call));
        watch.seen();
        let hints = futures::stream::unfold(watch, |mut watch| async move {
            watch.changed().await;
            Some(((), watch))
        });
        Some(hints.boxed())
    }
}

/// The wake-up message of a takeover of call `call` (apart from tasks' ids, `claim:` and
/// `approval:` ones).
fn takeover_wakeup(call: &str) -> String {
    format!("call:{call}")
}
