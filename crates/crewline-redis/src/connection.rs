//! One connection to Redis that the task store and the approver share: the commands'
//! reconnecting connection, the key prefix, and the wake-up subscription with its local
//! waiters; and the check of the Redis settings that can lose crewline's keys (eviction,
//! persistence): at connect, where a refusal stops the start, and on every primary a Sentinel
//! failover reaches, where a refusal stops every command to it (fail closed, as if Redis were
//! unreachable) until a re-check, once a second, finds its settings fixed.

use std::{
    fmt,
    sync::{
        Arc, Mutex, PoisonError, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use redis::{
    ScriptInvocation,
    aio::{ConnectionManager, ConnectionManagerConfig},
};

use crate::{
    RedisStoreError,
    primary::{CONNECT_TIMEOUT, Primary},
    redact,
    wakeups::{self, Waiters, Watch},
};

/// How long one command may wait for Redis's reply.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a primary whose settings were refused is checked again: an operator's
/// `CONFIG SET` (or another failover) lets commands through within this.
const RECHECK_EVERY: Duration = Duration::from_secs(1);
/// How soon a primary whose settings could not be read (it was unreachable) is asked again.
const RECHECK_UNCHECKED: Duration = Duration::from_millis(100);
/// How often a primary still refused is logged again at ERROR.
const REMIND_EVERY: Duration = Duration::from_secs(60);

/// A connection to Redis under one key prefix, shared by a [`RedisStore`](crate::RedisStore)
/// and a [`RedisApproval`](crate::RedisApproval) (one command connection and one wake-up
/// subscription for both); cheap to clone.
#[derive(Clone)]
pub struct RedisConnection {
    inner: Arc<Inner>,
}

struct Inner {
    /// The command connection to the current primary (replaced after a Sentinel failover).
    commands: RwLock<ConnectionManager>,
    /// Where the primary is.
    primary: Primary,
    /// Held while the primary is looked up again, so one failover makes one new connection.
    following: tokio::sync::Mutex<()>,
    /// The address of the primary `commands` is connected to.
    primary_addr: RwLock<String>,
    prefix: String,
    /// The URL, its password hidden: what messages and logs name.
    target: String,
    /// The settings checks, run at connect and on every new primary.
    checks: Checks,
    /// Whether `refused` holds a refusal (read on every command, without the lock).
    refusing: AtomicBool,
    /// The primary whose settings can lose crewline's keys: no command goes to it.
    refused: Mutex<Option<Refused>>,
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
    /// wake-ups through a subscription of their own. A `redis+sentinel://` URL finds the
    /// primary through Sentinel, and again after a failover.
    pub(crate) async fn open(url: &str, prefix: String) -> Result<Self, RedisStoreError> {
        let target = redact(url);
        let invalid = |source| RedisStoreError::InvalidUrl {
            url: target.clone(),
            source,
        };
        let primary = Primary::from_url(url).map_err(invalid)?;
        let unreachable = |source| RedisStoreError::Unreachable {
            url: target.clone(),
            source,
        };
        let client = primary.client().await.map_err(unreachable)?;
        let primary_addr = client.get_connection_info().addr().to_string();
        let commands = ConnectionManager::new_with_config(client, manager_config())
            .await
            .map_err(unreachable)?;
        let checks = Checks::from_variables(|name| std::env::var(name).ok());
        let checked = check_settings(&mut commands.clone(), &target, checks).await;
        if let Checked::Refused { error, .. } = checked {
            return Err(error);
        }
        let channel = format!("{prefix}changed");
        let pubsub = wakeups::subscribe(&primary, &channel, CONNECT_TIMEOUT)
            .await
            .map_err(unreachable)?;
        let waiters = Arc::new(Waiters::default());
        let router = tokio::spawn(wakeups::route(
            primary.clone(),
            channel,
            target.clone(),
            CONNECT_TIMEOUT,
            pubsub,
            Arc::downgrade(&waiters),
        ));
        tracing::info!(redis = %target, prefix = %prefix, "connected to Redis");
        let connection = Self {
            inner: Arc::new(Inner {
                commands: RwLock::new(commands),
                primary,
                following: tokio::sync::Mutex::new(()),
                primary_addr: RwLock::new(primary_addr),
                prefix,
                target,
                checks,
                refusing: AtomicBool::new(false),
                refused: Mutex::new(None),
                waiters,
                router: router.abort_handle(),
            }),
        };
        // Lost right after connecting: no command goes out before its settings are read.
        if let Checked::Unchecked { .. } = checked {
            connection.judge(&connection.primary_addr(), checked);
        }
        Ok(connection)
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The URL, its password hidden.
    pub(crate) fn target(&self) -> &str {
        &self.inner.target
    }

    /// The channel every replica on this prefix listens to for wake-ups.
    pub(crate) fn wakeup_channel(&self) -> String {
        format!("{}changed", self.inner.prefix)
    }

    /// Starts watching `key`'s wake-ups (a task id, or an approval's wake-up key).
    pub(crate) fn watch(&self, key: &str) -> Watch {
        self.inner.waiters.watch(key)
    }

    /// Wakes this replica's waiters of `key` (other replicas hear the script's `PUBLISH`).
    pub(crate) fn wake(&self, key: &str) {
        self.inner.waiters.wake(key);
    }

    /// The address of the primary the commands go to.
    fn primary_addr(&self) -> String {
        self.inner
            .primary_addr
            .read()
            .map(|addr| addr.clone())
            .unwrap_or_default()
    }

    /// The command connection to the current primary.
    fn commands(&self) -> ConnectionManager {
        // A poisoned lock still holds a usable connection: the writer only swaps it.
        match self.inner.commands.read() {
            Ok(commands) => commands.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Runs `invocation`, sending it once more if it surely did not run: the connection had
    /// failed before it was sent (Redis was down), or it reached a replica (`READONLY`: the
    /// primary failed over), in which case the primary is looked up again first.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> redis::RedisResult<T> {
        let mut connection = match self.inner.primary.named() {
            // Sentinel named another primary since (the wake-up subscription asked after it
            // lost the old one): connect to it before sending.
            Some(named) if named != self.primary_addr() => self
                .follow_primary()
                .await
                .unwrap_or_else(|| self.commands()),
            _ => self.commands(),
        };
        self.admit().await?;
        match invocation.invoke_async(&mut connection).await {
            // The connection had failed before this command was sent (Redis was down): the
            // manager is reconnecting now, and sending once more is safe.
            Err(error) if error.is_connection_refusal() => {
                let mut connection = self.follow_primary().await.unwrap_or(connection);
                self.admit().await?;
                invocation.invoke_async(&mut connection).await
            }
            // A replica refused it: it did not run. Send it to the new primary.
            Err(error) if error.code() == Some("READONLY") && self.inner.primary.is_sentinel() => {
                match self.follow_primary().await {
                    Some(mut primary) => {
                        self.admit().await?;
                        invocation.invoke_async(&mut primary).await
                    }
                    None => Err(error),
                }
            }
            // Sent, then the connection failed: it may have run, so it is not sent again; the
            // next command goes to the primary Sentinel names now.
            Err(error) if failure(&error) == "is unreachable" => {
                self.follow_primary().await;
                Err(error)
            }
            reply => reply,
        }
    }

    /// With Sentinel: looks the primary up again and, when it moved, connects to the new one
    /// (the connection to use, or `None` if Sentinel did not answer). Without: nothing.
    async fn follow_primary(&self) -> Option<ConnectionManager> {
        let Primary::Sentinel(_) = &self.inner.primary else {
            return None;
        };
        let _following = self.inner.following.lock().await;
        let client = match self.inner.primary.client().await {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(redis = %self.inner.target, error = %crewline::types::ErrorChain(&error), "Sentinel named no primary yet");
                return None;
            }
        };
        let current = self.commands();
        if self.primary_addr() == client.get_connection_info().addr().to_string() {
            return Some(current);
        }
        let addr = client.get_connection_info().addr().to_string();
        match ConnectionManager::new_with_config(client, manager_config()).await {
            Ok(commands) => {
                tracing::warn!(redis = %self.inner.target, primary = %addr, "Redis failed over: commands go to the new primary");
                // A promoted replica has settings of its own: checked as at start, before any
                // command can reach it.
                let checked =
                    check_settings(&mut commands.clone(), &self.inner.target, self.inner.checks)
                        .await;
                self.judge(&addr, checked);
                if let Ok(mut slot) = self.inner.commands.write() {
                    *slot = commands.clone();
                }
                if let Ok(mut known) = self.inner.primary_addr.write() {
                    *known = addr;
                }
                Some(commands)
            }
            Err(error) => {
                tracing::warn!(redis = %self.inner.target, primary = %addr, error = %crewline::types::ErrorChain(&error), "the new primary did not answer");
                None
            }
        }
    }
}

impl RedisConnection {
    fn refused(&self) -> std::sync::MutexGuard<'_, Option<Refused>> {
        // Every update replaces the whole value: a poisoned lock still holds a consistent one.
        self.inner
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records what checking the primary at `addr` found: a refusal (logged at ERROR) stops
    /// every command until a re-check passes; an acceptance lifts an earlier refusal.
    fn judge(&self, addr: &str, checked: Checked) {
        let now = tokio::time::Instant::now();
        let mut refused = self.refused();
        match checked {
            Checked::Unchecked { reason } => {
                tracing::warn!(
                    redis = %self.inner.target,
                    primary = %addr,
                    %reason,
                    "could not read the Redis primary's settings: nothing is written to it until \
                     they are"
                );
                let reminded = refused.as_ref().map_or(now, |old| old.reminded);
                *refused = Some(Refused {
                    primary: addr.to_owned(),
                    why: Why::Unchecked(reason),
                    recheck_at: now + RECHECK_UNCHECKED,
                    reminded,
                });
                self.inner.refusing.store(true, Ordering::Release);
            }
            Checked::Refused { settings, error } => {
                let remind = refused.as_ref().is_none_or(|old| {
                    old.primary != addr
                        || matches!(old.why, Why::Unchecked(_))
                        || now >= old.reminded + REMIND_EVERY
                });
                if remind {
                    tracing::error!(
                        redis = %self.inner.target,
                        primary = %addr,
                        error = %error,
                        recheck = ?RECHECK_EVERY,
                        "the Redis primary's settings can lose crewline's keys: nothing is \
                         written to it (claims, approvals, tasks, checkpoints, ledger), so tools \
                         with effects are refused before they run, until its settings are fixed"
                    );
                }
                let reminded = match refused.as_ref() {
                    Some(old) if !remind => old.reminded,
                    _ => now,
                };
                *refused = Some(Refused {
                    primary: addr.to_owned(),
                    why: Why::Settings(settings),
                    recheck_at: now + RECHECK_EVERY,
                    reminded,
                });
                self.inner.refusing.store(true, Ordering::Release);
            }
            Checked::Accepted => {
                if let Some(old) = refused.take() {
                    tracing::warn!(
                        redis = %self.inner.target,
                        primary = %addr,
                        refused = %old.primary,
                        "the Redis primary's settings keep crewline's keys: commands go to it again"
                    );
                }
                self.inner.refusing.store(false, Ordering::Release);
            }
        }
    }

    /// Lets a command through unless the primary's settings are refused; then it fails as
    /// if Redis refused the connection (it was never sent). Checks them again when due.
    async fn admit(&self) -> redis::RedisResult<()> {
        if !self.inner.refusing.load(Ordering::Acquire) {
            return Ok(());
        }
        if !self.recheck_due() {
            return Err(self.refusal());
        }
        // Another failover may have come meanwhile (nothing went out to learn of it).
        self.follow_primary().await;
        let _checking = self.inner.following.lock().await;
        if !self.recheck_due() {
            return if self.inner.refusing.load(Ordering::Acquire) {
                Err(self.refusal())
            } else {
                Ok(())
            };
        }
        let checked =
            check_settings(&mut self.commands(), &self.inner.target, self.inner.checks).await;
        self.judge(&self.primary_addr(), checked);
        if self.inner.refusing.load(Ordering::Acquire) {
            Err(self.refusal())
        } else {
            Ok(())
        }
    }

    /// Whether a refused primary is due to be checked again.
    fn recheck_due(&self) -> bool {
        self.refused()
            .as_ref()
            .is_some_and(|refused| tokio::time::Instant::now() >= refused.recheck_at)
    }

    /// The error of a command refused for the primary's settings: a connection refusal (it
    /// was certainly not sent) whose cause names the setting and the fix.
    fn refusal(&self) -> redis::RedisError {
        let cause: Box<dyn std::error::Error + Send + Sync> = match self.refused().as_ref() {
            Some(Refused {
                primary,
                why: Why::Settings(settings),
                ..
            }) => match assess(settings, self.inner.checks, &self.inner.target) {
                Err(source) => Box::new(RefusedPrimary::Settings {
                    primary: primary.clone(),
                    source,
                }),
                Ok(_) => "the Redis primary's settings were refused".into(),
            },
            Some(Refused {
                primary,
                why: Why::Unchecked(reason),
                ..
            }) => Box::new(RefusedPrimary::Unchecked {
                primary: primary.clone(),
                reason: reason.clone(),
            }),
            None => "the Redis primary's settings were refused".into(),
        };
        redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            cause,
        ))
    }
}

/// A primary no command goes to, and when to look again.
struct Refused {
    /// Its address.
    primary: String,
    /// Why.
    why: Why,
    /// When a command may check it again.
    recheck_at: tokio::time::Instant,
    /// When it was last logged at ERROR.
    reminded: tokio::time::Instant,
}

/// Why a primary gets no command.
enum Why {
    /// Its settings (as it reported them) can lose crewline's keys.
    Settings(Settings),
    /// Its settings could not be read yet (it was unreachable).
    Unchecked(String),
}

/// Why a command was not sent to the primary.
#[derive(Debug, thiserror::Error)]
enum RefusedPrimary {
    /// Its settings can lose crewline's keys.
    #[error("the Redis primary at {primary} is not written to")]
    Settings {
        /// Its address.
        primary: String,
        /// What is wrong with its settings.
        #[source]
        source: RedisStoreError,
    },
    /// Its settings could not be read yet.
    #[error(
        "the Redis primary at {primary} is not written to until its settings are read ({reason})"
    )]
    Unchecked {
        /// Its address.
        primary: String,
        /// Why they could not be read.
        reason: String,
    },
}

/// The command connection's settings: few, short retries, so an operation while Redis is
/// down fails within a few seconds with a clear error instead of hanging; the next one
/// reconnects.
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500))
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
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

/// Why the settings could not be read.
enum Unread {
    /// Redis would not tell (`CONFIG` disabled, say).
    Untold(String),
    /// Redis could not be reached to ask.
    Unreachable(String),
}

/// The settings, or why they could not be read.
async fn settings(connection: &mut ConnectionManager) -> Result<Settings, Unread> {
    let mut read = async |name: &str| match setting(connection, name).await {
        Ok(Some(value)) => Ok(value),
        Ok(None) => Err(Unread::Untold(format!(
            "CONFIG GET {name} returned nothing"
        ))),
        Err(error) if failure(&error) == "is unreachable" => Err(Unread::Unreachable(format!(
            "CONFIG GET {name} failed: {error}"
        ))),
        Err(error) => Err(Unread::Untold(format!("CONFIG GET {name} failed: {error}"))),
    };
    Ok(Settings {
        policy: read("maxmemory-policy").await?,
        appendonly: read("appendonly").await?,
        save: read("save").await?,
    })
}

/// What checking a Redis's settings found.
enum Checked {
    /// Nothing that can lose crewline's keys (or a Redis that will not tell: warned of).
    Accepted,
    /// Settings that can lose crewline's keys.
    Refused {
        /// What Redis reported.
        settings: Settings,
        /// Which setting, and the fix.
        error: RedisStoreError,
    },
    /// Redis could not be reached to ask.
    Unchecked {
        /// What the attempt met.
        reason: String,
    },
}

/// Checks the settings of the Redis behind `connection` as `checks` say: refuses an
/// eviction policy that can drop crewline's keys, and a Redis without persistence when that is
/// required; warns of the rest. A Redis that will not tell (managed services often disable
/// `CONFIG`) is a warning, not a refusal; one that cannot be reached to ask is refused, as
/// a command would be.
async fn check_settings(connection: &mut ConnectionManager, url: &str, checks: Checks) -> Checked {
    if !checks.check {
        tracing::info!(redis = %url, "Redis settings not checked ({CHECK_VARIABLE}=0)");
        return Checked::Accepted;
    }
    let settings = match settings(connection).await {
        Ok(settings) => settings,
        Err(Unread::Untold(reason)) => {
            tracing::warn!(
                redis = %url,
                %reason,
                "could not check Redis's eviction and persistence settings: make sure \
                 maxmemory-policy is noeviction and appendonly is yes (docs/deploying.md, Redis)"
            );
            return Checked::Accepted;
        }
        Err(Unread::Unreachable(reason)) => return Checked::Unchecked { reason },
    };
    let verdict = match assess(&settings, checks, url) {
        Ok(verdict) => verdict,
        Err(error) => return Checked::Refused { settings, error },
    };
    match verdict {
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
    Checked::Accepted
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
