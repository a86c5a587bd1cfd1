//! One connection to Redis that the task store and the approver share: the commands'
//! reconnecting connection, the key prefix, and the wake-up subscription with its local
//! waiters.

use std::{fmt, sync::Arc, time::Duration};

use redis::{ScriptInvocation, aio::ConnectionManager};

use crate::{
    RedisStoreError, redact,
    wakeups::{self, Waiters, Watch},
};

/// How long connecting to Redis may take before the attempt fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one command may wait for Redis's reply.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to Redis under one key prefix, shared by a [`RedisStore`](crate::RedisStore)
/// and a [`RedisApproval`](crate::RedisApproval) (one command connection and one wake-up
/// subscription for both); cheap to clone.
#[derive(Clone)]
pub struct RedisConnection {
    inner: Arc<Inner>,
}

struct Inner {
    commands: ConnectionManager,
    prefix: String,
    /// The URL, its password hidden: what messages and logs name.
    target: String,
    waiters: Arc<Waiters>,
    router: tokio::task::AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.router.abort();
    }
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConnection")
            .field("redis", &self.inner.target)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisConnection {
    /// Connects to `url` for keys under `prefix`: commands through a reconnecting connection,
    /// wake-ups through a subscription of their own.
    pub(crate) async fn open(url: &str, prefix: String) -> Result<Self, RedisStoreError> {
        let target = redact(url);
        let client = redis::Client::open(url).map_err(|source| RedisStoreError::InvalidUrl {
            url: target.clone(),
            source,
        })?;
        let unreachable = |source| RedisStoreError::Unreachable {
            url: target.clone(),
            source,
        };
        // Few, short retries: an operation while Redis is down fails within a few seconds
        // with a clear error instead of hanging; the next one reconnects.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500))
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let commands = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(unreachable)?;
        let channel = format!("{prefix}changed");
        let pubsub = wakeups::subscribe(&client, &channel, CONNECT_TIMEOUT)
            .await
            .map_err(unreachable)?;
        let waiters = Arc::new(Waiters::default());
        let router = tokio::spawn(wakeups::route(
            client,
            channel,
            target.clone(),
            CONNECT_TIMEOUT,
            pubsub,
            Arc::downgrade(&waiters),
        ));
        tracing::info!(redis = %target, prefix = %prefix, "connected to Redis");
        Ok(Self {
            inner: Arc::new(Inner {
                commands,
                prefix,
                target,
                waiters,
                router: router.abort_handle(),
            }),
        })
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The URL, its password hidden.
    pub(crate) fn target(&self) -> &str {
        &self.inner.target
    }

    /// Starts watching `key`'s wake-ups (a task id, or an approval's wake-up key).
    pub(crate) fn watch(&self, key: &str) -> Watch {
        self.inner.waiters.watch(key)
    }

    /// Wakes this replica's waiters of `key` (other replicas hear the script's `PUBLISH`).
    pub(crate) fn wake(&self, key: &str) {
        self.inner.waiters.wake(key);
    }

    /// Runs `invocation`, sending it once more if the connection had failed before it was
    /// sent.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> redis::RedisResult<T> {
        let mut connection = self.inner.commands.clone();
        match invocation.invoke_async(&mut connection).await {
            // The connection had failed before this command was sent (Redis was down): the
            // manager is reconnecting now, and sending once more is safe.
            Err(error) if error.is_connection_refusal() => {
                invocation.invoke_async(&mut connection).await
            }
            reply => reply,
        }
    }
}

/// What a failed command says of Redis: unreachable (down, or the network), or failed.
pub(crate) fn failure(error: &redis::RedisError) -> &'static str {
    if error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_timeout()
    {
        "is unreachable"
    } else {
        "failed"
    }
}
