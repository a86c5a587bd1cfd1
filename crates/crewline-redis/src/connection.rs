//! One connection to Redis that the task store and the approver share: the commands'
//! reconnecting connection, the key prefix, and the wake-up subscription with its local
//! waiters; and the check, at connect, of the Redis settings that can lose crewline's keys
//! (eviction, persistence).

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
        let checks = Checks::from_variables(|name| std::env::var(name).ok());
        check_settings(&mut commands.clone(), &target, checks).await?;
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

/// The variable that turns the settings check off (`0`): for a Redis whose `CONFIG` is renamed
/// on purpose and whose settings are known good.
pub(crate) const CHECK_VARIABLE: &str = "CREWLINE_REDIS_CHECK_CONFIG";
/// The variable that turns the refusal of a Redis without persistence into a warning (`0`).
pub(crate) const REQUIRE_PERSISTENCE_VARIABLE: &str = "CREWLINE_REDIS_REQUIRE_PERSISTENCE";

/// Which of Redis's settings are checked at connect, and how strictly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checks {
    /// Whether to read the settings at all.
    check: bool,
    /// Whether a Redis that keeps nothing on disk refuses the start (else a warning).
    require_persistence: bool,
}

impl Checks {
    /// The checks the variables `variable` looks up say: both on unless set to `0`, `false`
    /// or `no`. Persistence is required by default: a Redis restart that loses the claims and
    /// approvals can run a money-moving tool twice, which a bank would rather learn at start.
    fn from_variables(variable: impl Fn(&str) -> Option<String>) -> Self {
        let on = |name| {
            !matches!(
                variable(name)
                    .map(|value: String| value.trim().to_ascii_lowercase())
                    .as_deref(),
                Some("0" | "false" | "no" | "off")
            )
        };
        Self {
            check: on(CHECK_VARIABLE),
            require_persistence: on(REQUIRE_PERSISTENCE_VARIABLE),
        }
    }
}

/// Redis's settings that decide whether crewline's keys can be lost.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    /// `maxmemory-policy`.
    policy: String,
    /// `appendonly`.
    appendonly: String,
    /// `save` (empty: no snapshots).
    save: String,
}

/// What the settings mean for crewline's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Nothing evicts crewline's keys, and a restart keeps them (up to the AOF's fsync).
    Safe,
    /// Snapshots only: a restart loses the writes since the last one.
    SnapshotsOnly,
    /// Nothing on disk, and persistence is not required: a restart loses every key.
    NothingKept,
}

/// Whether `settings` are acceptable under `checks` (the refusal, else what to warn of).
fn assess(settings: &Settings, checks: Checks, url: &str) -> Result<Verdict, RedisStoreError> {
    // Every crewline key has a TTL, so the volatile-* policies can evict them as surely as
    // the allkeys-* ones: only `noeviction` keeps them (a full Redis then refuses writes,
    // which crewline reports, instead of dropping a claim or an approval without a word).
    if !settings.policy.eq_ignore_ascii_case("noeviction") {
        return Err(RedisStoreError::EvictionPolicy {
            url: url.to_owned(),
            policy: settings.policy.clone(),
        });
    }
    if settings.appendonly.eq_ignore_ascii_case("yes") {
        return Ok(Verdict::Safe);
    }
    if !settings.save.trim().is_empty() {
        return Ok(Verdict::SnapshotsOnly);
    }
    if checks.require_persistence {
        return Err(RedisStoreError::NoPersistence {
            url: url.to_owned(),
        });
    }
    Ok(Verdict::NothingKept)
}

/// One setting's value (`CONFIG GET name`).
async fn setting(
    connection: &mut ConnectionManager,
    name: &str,
) -> redis::RedisResult<Option<String>> {
    // RESP2 answers `[name, value]`; a map reads the same way.
    let reply: std::collections::HashMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(connection)
        .await?;
    Ok(reply.get(name).cloned())
}

/// The settings, or why they could not be read.
async fn settings(connection: &mut ConnectionManager) -> Result<Settings, String> {
    let mut read = async |name: &str| match setting(connection, name).await {
        Ok(Some(value)) => Ok(value),
        Ok(None) => Err(format!("CONFIG GET {name} returned nothing")),
        Err(error) => Err(format!("CONFIG GET {name} failed: {error}")),
    };
    Ok(Settings {
        policy: read("maxmemory-policy").await?,
        appendonly: read("appendonly").await?,
        save: read("save").await?,
    })
}

/// Checks the settings of the Redis behind `connection` as `checks` say: refuses an
/// eviction policy that can drop crewline's keys, and a Redis without persistence when that is
/// required; warns of the rest. A Redis that will not tell (managed services often disable
/// `CONFIG`) is a warning, not a refusal.
async fn check_settings(
    connection: &mut ConnectionManager,
    url: &str,
    checks: Checks,
) -> Result<(), RedisStoreError> {
    if !checks.check {
        tracing::info!(redis = %url, "Redis settings not checked ({CHECK_VARIABLE}=0)");
        return Ok(());
    }
    let settings = match settings(connection).await {
        Ok(settings) => settings,
        Err(reason) => {
            tracing::warn!(
                redis = %url,
                %reason,
                "could not check Redis's eviction and persistence settings: make sure \
                 maxmemory-policy is noeviction and appendonly is yes (docs/deploying.md, Redis)"
            );
            return Ok(());
        }
    };
    match assess(&settings, checks, url)? {
        Verdict::Safe => {}
        Verdict::SnapshotsOnly => tracing::warn!(
            redis = %url,
            save = %settings.save,
            "Redis keeps snapshots only (appendonly no): a restart loses the tasks, claims and \
             approvals written since the last snapshot; set appendonly yes"
        ),
        Verdict::NothingKept => tracing::warn!(
            redis = %url,
            "Redis keeps nothing on disk (appendonly no, save \"\"): a restart loses every \
             task, claim and approval; set appendonly yes"
        ),
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(policy: &str, appendonly: &str, save: &str) -> Settings {
        Settings {
            policy: policy.to_owned(),
            appendonly: appendonly.to_owned(),
            save: save.to_owned(),
        }
    }

    const STRICT: Checks = Checks {
        check: true,
        require_persistence: true,
    };
    const LENIENT: Checks = Checks {
        check: true,
        require_persistence: false,
    };

    #[test]
    fn every_policy_that_can_evict_a_key_with_a_ttl_is_refused() {
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            let refused = assess(&settings(policy, "yes", ""), LENIENT, "redis://r");
            assert!(
                matches!(&refused, Err(RedisStoreError::EvictionPolicy { policy: named, .. }) if named == policy),
                "{policy}: {refused:?}"
            );
        }
        assert_eq!(
            assess(&settings("noeviction", "yes", ""), STRICT, "redis://r").ok(),
            Some(Verdict::Safe)
        );
    }

    #[test]
    fn no_persistence_is_refused_when_required_and_warned_of_otherwise() {
        let nothing = settings("noeviction", "no", "");
        assert!(matches!(
            assess(&nothing, STRICT, "redis://r"),
            Err(RedisStoreError::NoPersistence { .. })
        ));
        assert_eq!(
            assess(&nothing, LENIENT, "redis://r").ok(),
            Some(Verdict::NothingKept)
        );
        assert_eq!(
            assess(&settings("noeviction", "no", "3600 1"), STRICT, "redis://r").ok(),
            Some(Verdict::SnapshotsOnly)
        );
    }

    #[test]
    fn both_checks_are_on_unless_a_variable_turns_them_off() {
        assert_eq!(Checks::from_variables(|_| None), STRICT);
        assert_eq!(
            Checks::from_variables(
                |name| (name == REQUIRE_PERSISTENCE_VARIABLE).then(|| "0".to_owned())
            ),
            LENIENT
        );
        let off = Checks::from_variables(|name| (name == CHECK_VARIABLE).then(|| "no".to_owned()));
        assert!(!off.check && off.require_persistence);
        // Anything but an explicit "off" keeps a check on: a typo does not disable it.
        assert_eq!(Checks::from_variables(|_| Some("yes".to_owned())), STRICT);
    }

    #[test]
    fn the_refusals_name_the_setting_and_the_fix() {
        let eviction = assess(&settings("allkeys-lru", "yes", ""), STRICT, "redis://r")
            .expect_err("refused")
            .to_string();
        assert!(
            eviction.contains("maxmemory-policy allkeys-lru"),
            "{eviction}"
        );
        assert!(
            eviction.contains("maxmemory-policy noeviction"),
            "{eviction}"
        );
        let persistence = assess(&settings("noeviction", "no", ""), STRICT, "redis://r")
            .expect_err("refused")
            .to_string();
        assert!(persistence.contains("appendonly yes"), "{persistence}");
        assert!(
            persistence.contains(REQUIRE_PERSISTENCE_VARIABLE),
            "{persistence}"
        );
    }
}
