//! The model providers' circuit breakers shared by every replica on one Redis and prefix: a
//! provider one replica found dead is skipped by the others within a second.

use std::{fmt, sync::LazyLock, time::Duration};

use async_trait::async_trait;
use crewline::llm::fallback::{ShareError, SharedBreakers};
use redis::Script;

use crate::{connection::RedisConnection, millis};

/// The longest provider name kept in a key (longer names are cut at a character boundary).
const MAX_NAME_BYTES: usize = 128;

/// Opens `KEYS[1]` for `ARGV[1]` ms, unless it is open longer already.
static OPEN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local left = redis.call('PTTL', KEYS[1])
         if left < tonumber(ARGV[1]) then
           redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
         end
         return 1",
    )
});

/// Each key's time left in ms (negative: not open).
static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local left = {}
         for i, key in ipairs(KEYS) do left[i] = redis.call('PTTL', key) end
         return left",
    )
});

/// The [`SharedBreakers`] of every replica on one Redis and prefix: keys
/// `{prefix}breaker:{provider}`, each set for the cool-down of the circuit that opened (so
/// every key expires on its own).
///
/// ```no_run
/// use std::sync::Arc;
///
/// use crewline::llm::FallbackLlm;
/// use crewline_redis::{RedisBreakers, RedisConfig};
///
/// # async fn run(primary: Arc<dyn crewline::llm::LlmClient>, backup: Arc<dyn crewline::llm::LlmClient>) -> Result<(), Box<dyn std::error::Error>> {
/// let connection = RedisConfig::from_env()?.open().await?;
/// let llm = FallbackLlm::builder()
///     .provider("primary", primary)
///     .provider("backup", backup)
///     .shared_breakers(Arc::new(RedisBreakers::new(connection)))
///     .build()?;
/// # drop(llm); Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBreakers {
    connection: RedisConnection,
}

impl fmt::Debug for RedisBreakers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBreakers")
            .field("connection", &self.connection)
            .finish()
    }
}

impl RedisBreakers {
    /// The breakers shared through `connection` (its prefix).
    pub fn new(connection: RedisConnection) -> Self {
        Self { connection }
    }

    fn key(&self, provider: &str) -> String {
        let mut end = provider.len().min(MAX_NAME_BYTES);
        while !provider.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}breaker:{}", self.connection.prefix(), &provider[..end])
    }
}

#[async_trait]
impl SharedBreakers for RedisBreakers {
    async fn opened(&self, provider: &str, cool_down: Duration) -> Result<(), ShareError> {
        let mut invocation = OPEN.prepare_invoke();
        invocation
            .key(self.key(provider))
            .arg(millis(cool_down).max(1));
        self.connection.invoke::<i64>(&invocation).await?;
        Ok(())
    }

    async fn open_for(&self, providers: &[String]) -> Result<Vec<Option<Duration>>, ShareError> {
        let mut invocation = READ.prepare_invoke();
        for provider in providers {
            invocation.key(self.key(provider));
        }
        let left: Vec<i64> = self.connection.invoke(&invocation).await?;
        Ok(left
            .into_iter()
            .map(|ms| {
                u64::try_from(ms)
                    .ok()
                    .filter(|ms| *ms > 0)
                    .map(Duration::from_millis)
            })
            .collect())
    }
}
