//! What a crew binary takes from its environment beyond its flags: Redis at
//! `CREWLINE_REDIS_URL` for the calls' checkpoints ([`call_store_from_env`]) and for the model
//! providers' circuit breakers ([`shared_breakers_from_env`]), so that replicas behind a load
//! balancer share them. Redis needs the `redis` feature.

use std::sync::Arc;

use crewline::llm::fallback::SharedBreakers;

use crate::{BoxError, CrewServer};

/// The variable naming the Redis the replicas share.
pub const REDIS_URL_VARIABLE: &str = "CREWLINE_REDIS_URL";

/// Whether `CREWLINE_REDIS_URL` is set (and not empty).
fn redis_configured() -> bool {
    std::env::var_os(REDIS_URL_VARIABLE).is_some_and(|url| !url.is_empty())
}

/// The error for `CREWLINE_REDIS_URL` in a build without Redis: a silent fall back to memory
/// would leave replicas that do not share their calls (or breakers) while believing they do.
#[cfg(not(feature = "redis"))]
fn no_redis() -> BoxError {
    format!("{REDIS_URL_VARIABLE} is set, but this build has no Redis (crewline-server's `redis` feature)")
        .into()
}

/// `server` with its calls' checkpoints and owners in Redis when `CREWLINE_REDIS_URL` is set
/// (and `CREWLINE_REDIS_PREFIX`), so a call whose replica died resumes on another (same call
/// id) and never has two live sessions; unchanged otherwise.
///
/// The variable set in a build without the `redis` feature is an error.
pub async fn call_store_from_env(server: CrewServer) -> Result<CrewServer, BoxError> {
    if !redis_configured() {
        return Ok(server);
    }
    #[cfg(feature = "redis")]
    {
        let connection = crewline_redis::RedisConfig::from_env()?.open().await?;
        tracing::info!(
            prefix = connection.prefix(),
            "calls checkpointed in Redis: a call resumes on any replica"
        );
        Ok(server.call_store(crewline_redis::RedisCheckpoints::new(connection)))
    }
    #[cfg(not(feature = "redis"))]
    {
        drop(server);
        Err(no_redis())
    }
}

/// The model providers' circuit breakers shared by every replica through the Redis at
/// `CREWLINE_REDIS_URL` (and `CREWLINE_REDIS_PREFIX`), so a provider one replica found dead
/// is skipped by all within a second; `None` when the variable is unset.
///
/// The variable set in a build without the `redis` feature is an error.
pub async fn shared_breakers_from_env() -> Result<Option<Arc<dyn SharedBreakers>>, BoxError> {
    if !redis_configured() {
        return Ok(None);
    }
    #[cfg(feature = "redis")]
    {
        let connection = crewline_redis::RedisConfig::from_env()?.open().await?;
        tracing::info!(
            prefix = connection.prefix(),
            "model providers' circuit breakers shared in Redis: a provider one replica found \
             dead is skipped by all"
        );
        Ok(Some(Arc::new(crewline_redis::RedisBreakers::new(
            connection,
        ))))
    }
    #[cfg(not(feature = "redis"))]
    {
        Err(no_redis())
    }
}
