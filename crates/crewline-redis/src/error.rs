//! Why a [`RedisStore`](crate::RedisStore) could not be set up.

/// Why a [`RedisStore`](crate::RedisStore) could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// No URL was given: `CREWLINE_REDIS_URL` is not set (or empty).
    #[error(
        "no Redis URL: set CREWLINE_REDIS_URL (e.g. redis://127.0.0.1:6379) to share tasks \
         between replicas"
    )]
    NoUrl,
    /// The URL is not one the Redis client understands.
    #[error("`{url}` is not a Redis URL (redis://, rediss://, redis+unix://)")]
    InvalidUrl {
        /// The URL, its password hidden.
        url: String,
        /// Why the client refused it.
        #[source]
        source: redis::RedisError,
    },
    /// Redis did not answer (it is down, or the address is wrong).
    #[error("the task store (Redis at {url}) is unreachable")]
    Unreachable {
        /// The URL, its password hidden.
        url: String,
        /// What the connection attempt met.
        #[source]
        source: redis::RedisError,
    },
}
