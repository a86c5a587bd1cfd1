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
    #[error(
        "`{url}` is not a Redis URL (redis://, rediss://, redis+unix://, \
         redis+sentinel://host:port[,host:port]/service)"
    )]
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
    /// Redis's `maxmemory-policy` can evict crewline's keys (every one has a TTL, so the
    /// `volatile-*` policies can too): a claim or an approval would vanish without a word.
    #[error(
        "Redis at {url} has maxmemory-policy {policy}, which can evict crewline's tasks, claims \
         and approvals: set `maxmemory-policy noeviction` (docs/deploying.md, Redis)"
    )]
    EvictionPolicy {
        /// The URL, its password hidden.
        url: String,
        /// The policy Redis reported.
        policy: String,
    },
    /// Redis keeps nothing on disk (`appendonly no`, `save ""`) and persistence is required.
    #[error(
        "Redis at {url} keeps nothing on disk (appendonly no, save \"\"): a restart would lose \
         every task, claim and approval; set `appendonly yes` (docs/deploying.md, Redis), or \
         CREWLINE_REDIS_REQUIRE_PERSISTENCE=0 to accept that loss"
    )]
    NoPersistence {
        /// The URL, its password hidden.
        url: String,
    },
}
