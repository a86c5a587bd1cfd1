//! What a call keeps across a crash: its [`Checkpoint`], written at each turn boundary to a
//! [`CallStore`] shared by the replicas, and the ownership that keeps one live session per call.
//!
//! The conversation itself is not in the checkpoint: the platform resends it with every
//! `system.llm.request`. The checkpoint holds what the platform does not resend: the router's
//! active sub-agent and its state, a hand-off already sent, outcomes the caller has not heard,
//! and what a crew puts there
//! ([`CallControl::checkpoint_put`](crate::CallControl::checkpoint_put)).
//!
//! A remote-tool task is not in it: the task store itself records which call holds a task
//! (under a lease), and a reconnect re-attaches it by its call id, with the task id the
//! platform resends in the call's variables (`crewline_remote::TaskApi::attach_call_for`).

use crewline_core::error_chain;
use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use futures::{StreamExt, stream::BoxStream};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::call::Handoff;

/// The most bytes of one call's checkpoint (as JSON): far above what a router's state, a few
/// outcomes and a crew's own keys take, small enough that a store of many calls stays bounded.
pub const MAX_CHECKPOINT_BYTES: usize = 64 * 1024;
/// The most outcomes a call holds untold ([`CallControl::push_outcome`](crate::CallControl::push_outcome)).
pub const MAX_UNTOLD_OUTCOMES: usize = 16;
/// The most bytes of one untold outcome.
pub const MAX_OUTCOME_BYTES: usize = 2 * 1024;
/// How long a checkpoint outlives its call's last turn: a reconnect comes within seconds, and
/// a phone call that was silent for half an hour is over.
pub const DEFAULT_CHECKPOINT_TTL: Duration = Duration::from_secs(30 * 60);
/// How long a call's owner key lives without renewal; renewed every third of it.
pub const DEFAULT_OWNER_LEASE: Duration = Duration::from_secs(15);

/// The router's place in a call: its active sub-agent and the state its transitions read.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RouterCheckpoint {
    /// The id of the sub-agent that answers the next turn.
    pub active: String,
    /// The router's state ([`RouterState`](crate::router::RouterState)).
    pub state: Map<String, Value>,
}

/// What a call keeps across a reconnect to any replica (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Checkpoint {
    /// Completed turns so far (each turn boundary counts one).
    #[serde(default)]
    pub turns: u64,
    /// The routers' places, by the name of their output node.
    #[serde(default)]
    pub routers: BTreeMap<String, RouterCheckpoint>,
    /// The hand-off already sent (the call was ended or transferred).
    #[serde(default)]
    pub handoff: Option<Handoff>,
    /// Outcomes the caller has not heard yet, oldest first.
    #[serde(default)]
    pub untold: Vec<String>,
    /// What the crew put there ([`CallControl::checkpoint_put`](crate::CallControl::checkpoint_put)).
    #[serde(default)]
    pub nodes: Map<String, Value>,
}

impl Checkpoint {
    /// The checkpoint as the JSON a store keeps.
    pub fn to_json(&self) -> Result<String, CallStoreError> {
        let json = serde_json::to_string(self).map_err(CallStoreError::Encode)?;
        if json.len() > MAX_CHECKPOINT_BYTES {
            return Err(CallStoreError::TooLarge {
                bytes: json.len(),
                limit: MAX_CHECKPOINT_BYTES,
            });
        }
        Ok(json)
    }

    /// The checkpoint a store's JSON holds.
    pub fn from_json(json: &str) -> Result<Self, CallStoreError> {
        if json.len() > MAX_CHECKPOINT_BYTES {
            return Err(CallStoreError::TooLarge {
                bytes: json.len(),
                limit: MAX_CHECKPOINT_BYTES,
            });
        }
        serde_json::from_str(json).map_err(CallStoreError::Decode)
    }
}

/// Why a call store could not act.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallStoreError {
    /// The store's backend failed (Redis unreachable, say).
    #[error("the call store failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A checkpoint could not be encoded.
    #[error("a checkpoint could not be encoded")]
    Encode(#[source] serde_json::Error),
    /// A stored checkpoint could not be read.
    #[error("a stored checkpoint could not be read")]
    Decode(#[source] serde_json::Error),
    /// A checkpoint over [`MAX_CHECKPOINT_BYTES`].
    #[error("a checkpoint of {bytes} bytes is over the limit of {limit}")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

/// Whether a write under an owner token was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The token still owns the call: done.
    Owner,
    /// A newer connection owns the call: nothing was written.
    Lost,
}

/// The port of the store that keeps calls' checkpoints and owners, shared by every replica
/// that may serve a call (in memory: [`MemoryCallStore`]; Redis: `crewline_redis::RedisCheckpoints`).
///
/// Ownership is "newest wins": [`claim`](Self::claim) always succeeds and fences every older
/// token, whose writes are refused from then on and whose [`renew`](Self::renew) reports
/// [`Fenced::Lost`].
#[async_trait]
pub trait CallStore: Send + Sync + 'static {
    /// Makes a new token the call's owner and returns it.
    async fn claim(&self, call: &str) -> Result<String, CallStoreError>;
    /// The call's checkpoint as JSON, if one is kept.
    async fn load(&self, call: &str) -> Result<Option<String>, CallStoreError>;
    /// Stores the call's checkpoint if `token` still owns it (and renews both lifetimes).
    async fn save(&self, call: &str, token: &str, json: &str) -> Result<Fenced, CallStoreError>;
    /// Renews `token`'s ownership (and the checkpoint's lifetime) if it still owns the call.
    async fn renew(&self, call: &str, token: &str) -> Result<Fenced, CallStoreError>;
    /// Gives ownership up if `token` still holds it; the checkpoint stays for its lifetime.
    async fn release(&self, call: &str, token: &str) -> Result<(), CallStoreError>;
    /// How often an owner renews (a third of its lease): the longest an owner that lost its
    /// call to another replica goes on before it learns.
    fn renew_every(&self) -> Duration {
        DEFAULT_OWNER_LEASE / 3
    }
    /// Hints that another connection may have taken `call` over: each item asks its owner to
    /// renew now (which tells it whether it lost the call) instead of at its next renewal.
    /// `None` (the default): renewals alone tell. A hint is not proof: a store may send one
    /// when it may have missed a takeover (a lost subscription, say), and the owner renews to
    /// know.
    fn takeover_hints(&self, call: &str) -> Option<BoxStream<'static, ()>> {
        let _ = call;
        None
    }
}

/// A [`CallStore`] in this process's memory: calls resume after a reconnect to the same
/// replica, not after a crash. Bounded: expired calls are swept, and past `max_calls` the one
/// closest to expiry is dropped.
#[derive(Clone)]
pub struct MemoryCallStore {
    inner: Arc<Mutex<MemoryInner>>,
    ttl: Duration,
    lease: Duration,
    max_calls: usize,
}

#[derive(Default)]
struct MemoryInner {
    calls: HashMap<String, MemoryCall>,
    next_token: u64,
}

struct MemoryCall {
    checkpoint: Option<String>,
    checkpoint_expires: Instant,
    owner: Option<(String, Instant)>,
}

/// The default most calls a [`MemoryCallStore`] keeps.
pub const DEFAULT_MEMORY_CALLS: usize = 100_000;

impl Default for MemoryCallStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryCallStore {
    /// A store with [`DEFAULT_CHECKPOINT_TTL`], [`DEFAULT_OWNER_LEASE`], [`DEFAULT_MEMORY_CALLS`].
    pub fn new() -> Self {
        Self {
            inner: Arc::default(),
            ttl: DEFAULT_CHECKPOINT_TTL,
            lease: DEFAULT_OWNER_LEASE,
            max_calls: DEFAULT_MEMORY_CALLS,
        }
    }

    /// Checkpoints live `ttl` after their last write.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Keeps at most `max_calls` calls.
    pub fn max_calls(mut self, max_calls: usize) -> Self {
        self.max_calls = max_calls.max(1);
        self
    }

    /// How many calls the store holds (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.lock().calls.len()
    }

    /// Whether the store holds no call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The call's entry, made room for if new.
    fn entry<'a>(
        &self,
        inner: &'a mut MemoryInner,
        call: &str,
        now: Instant,
    ) -> &'a mut MemoryCall {
        if !inner.calls.contains_key(call) && inner.calls.len() >= self.max_calls {
            inner.calls.retain(|_, entry| entry.alive(now));
            if inner.calls.len() >= self.max_calls
                && let Some(oldest) = inner
                    .calls
                    .iter()
                    .min_by_key(|(_, entry)| entry.checkpoint_expires)
                    .map(|(key, _)| key.clone())
            {
                inner.calls.remove(&oldest);
            }
        }
        inner
            .calls
            .entry(call.to_owned())
            .or_insert_with(|| MemoryCall {
                checkpoint: None,
                checkpoint_expires: now,
                owner: None,
            })
    }
}

impl MemoryCall {
    fn alive(&self, now: Instant) -> bool {
        self.checkpoint_expires > now || self.owner.as_ref().is_some_and(|(_, until)| *until > now)
    }

    fn owned_by(&self, token: &str, now: Instant) -> bool {
        self.owner
            .as_ref()
            .is_some_and(|(owner, until)| owner == token && *until > now)
    }
}

#[async_trait]
impl CallStore for MemoryCallStore {
    async fn claim(&self, call: &str) -> Result<String, CallStoreError> {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.next_token += 1;
        let token = format!("{}-{}", inner.next_token, uuid::Uuid::new_v4().simple());
        let lease = self.lease;
        self.entry(&mut inner, call, now).owner = Some((token.clone(), now + lease));
        Ok(token)
    }

    async fn load(&self, call: &str) -> Result<Option<String>, CallStoreError> {
        let now = Instant::now();
        let inner = self.lock();
        Ok(inner
            .calls
            .get(call)
            .filter(|entry| entry.checkpoint_expires > now)
            .and_then(|entry| entry.checkpoint.clone()))
    }

    async fn save(&self, call: &str, token: &str, json: &str) -> Result<Fenced, CallStoreError> {
        if json.len() > MAX_CHECKPOINT_BYTES {
            return Err(CallStoreError::TooLarge {
                bytes: json.len(),
                limit: MAX_CHECKPOINT_BYTES,
            });
        }
        let now = Instant::now();
        let mut inner = self.lock();
        let Some(entry) = inner.calls.get_mut(call).filter(|e| e.owned_by(token, now)) else {
            return Ok(Fenced::Lost);
        };
        entry.checkpoint = Some(json.to_owned());
        entry.checkpoint_expires = now + self.ttl;
        entry.owner = Some((token.to_owned(), now + self.lease));
        Ok(Fenced::Owner)
    }

    async fn renew(&self, call: &str, token: &str) -> Result<Fenced, CallStoreError> {
        let now = Instant::now();
        let mut inner = self.lock();
        let Some(entry) = inner.calls.get_mut(call).filter(|e| e.owned_by(token, now)) else {
            return Ok(Fenced::Lost);
        };
        entry.owner = Some((token.to_owned(), now + self.lease));
        if entry.checkpoint.is_some() {
            entry.checkpoint_expires = now + self.ttl;
        }
        Ok(Fenced::Owner)
    }

    async fn release(&self, call: &str, token: &str) -> Result<(), CallStoreError> {
        let now = Instant::now();
        let mut inner = self.lock();
        if let Some(entry) = inner.calls.get_mut(call)
            && entry.owned_by(token, now)
        {
            entry.owner = None;
        }
        Ok(())
    }

    fn renew_every(&self) -> Duration {
        self.lease / 3
    }
}

impl std::fmt::Debug for MemoryCallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryCallStore")
            .field("calls", &self.len())
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// Writes a call's checkpoint whenever it changes and renews its ownership between writes,
/// until the call is superseded (then it says so and stops) or its session ends.
///
/// A write is one store round trip, on this task: never on the path of a turn's chunks. A
/// write that fails stays pending and is tried again after [`RETRY_FIRST`], doubling up to
/// [`RETRY_MAX`], until one succeeds: a Redis failover takes seconds, and a replica killed just
/// after it must not take the call's last move with it.
pub(crate) async fn run_checkpointer(call: crate::CallControl) {
    let Some(attached) = call.attached() else {
        return;
    };
    let Some(key) = call.call_key().map(str::to_owned) else {
        return;
    };
    let every = attached.store.renew_every().max(Duration::from_millis(10));
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // While a write failed: when to try it again, and the wait after that.
    let mut retry: Option<(tokio::time::Instant, Duration)> = None;
    let mut hints = attached.store.takeover_hints(&key);
    // The call was claimed before these hints were listened to: a takeover in between sent
    // its hint to no one, so the first round checks ownership at once.
    let mut check_now = hints.is_some();
    loop {
        let write = if std::mem::take(&mut check_now) {
            false
        } else {
            tokio::select! {
                () = attached.dirty.notified() => true,
                () = sleep_until(retry.map(|(at, _)| at)) => true,
                // A renewal while a write is pending is that write (it renews too).
                _ = renew.tick() => retry.is_some(),
                hint = next_hint(&mut hints) => {
                    if hint.is_none() {
                        hints = None;
                    }
                    retry.is_some()
                }
            }
        };
        let result = if write {
            // The snapshot is taken under the write lock: a background call's start recorded
            // meanwhile is in it or in a write that lands after it.
            let _writes = call.lock_writes().await;
            match call.checkpoint().to_json() {
                Ok(json) => attached.store.save(&key, &attached.token, &json).await,
                Err(error) => {
                    tracing::warn!(error = %error_chain(&error), "call checkpoint not written");
                    continue;
                }
            }
        } else {
            attached.store.renew(&key, &attached.token).await
        };
        match result {
            Ok(Fenced::Owner) => {
                if write {
                    retry = None;
                }
            }
            Ok(Fenced::Lost) => {
                tracing::info!("a newer connection owns this call: this session ends");
                attached.lost.set();
                return;
            }
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "call store write failed");
                if write {
                    let wait = retry.map_or(RETRY_FIRST, |(_, wait)| (wait * 2).min(RETRY_MAX));
                    retry = Some((tokio::time::Instant::now() + wait, wait));
                }
            }
        }
    }
}

/// The next takeover hint (`None`: the hints ended); never without hints.
async fn next_hint(hints: &mut Option<BoxStream<'static, ()>>) -> Option<()> {
    match hints {
        Some(hints) => hints.next().await,
        None => std::future::pending().await,
    }
}

/// The first wait before a failed checkpoint write is tried again.
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two tries of a failed checkpoint write.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Completes at `at`; never without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The most a session's last checkpoint write may hold up its shutdown.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Writes the call's checkpoint once more (a session ending on a dropped socket), unless
/// the call was superseded; bounded by [`FLUSH_TIMEOUT`].
pub(crate) async fn flush(call: &crate::CallControl) {
    let (Some(attached), Some(key)) = (call.attached(), call.call_key()) else {
        return;
    };
    if attached.lost.is_set() {
        return;
    }
    // The wait for another write (a background call's record) counts in the bound too.
    let write = async {
        let _writes = call.lock_writes().await;
        match call.checkpoint().to_json() {
            Ok(json) => Some(attached.store.save(key, &attached.token, &json).await),
            Err(_) => None,
        }
    };
    match tokio::time::timeout(FLUSH_TIMEOUT, write).await {
        Ok(None | Some(Ok(_))) => {}
        Ok(Some(Err(error))) => {
            tracing::warn!(error = %error_chain(&error), "last call checkpoint not written")
        }
        Err(_) => {
            tracing::warn!(timeout = ?FLUSH_TIMEOUT, "last call checkpoint not written in time")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_written_with_a_remote_task_field_still_reads() {
        // Written by a replica of before the field went (a rolling upgrade): it is ignored.
        let json = r#"{"turns":3,"untold":["sent $50"],"remote_task":"task_1","nodes":{}}"#;
        let checkpoint = Checkpoint::from_json(json).expect("reads");
        assert_eq!(checkpoint.turns, 3);
        assert_eq!(checkpoint.untold, vec!["sent $50".to_owned()]);
        assert!(
            !checkpoint
                .to_json()
                .expect("writes")
                .contains("remote_task")
        );
    }

    /// A memory store whose first `failures` saves fail, as during a Redis failover.
    struct Flaky {
        inner: MemoryCallStore,
        failures: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl CallStore for Flaky {
        async fn claim(&self, call: &str) -> Result<String, CallStoreError> {
            self.inner.claim(call).await
        }
        async fn load(&self, call: &str) -> Result<Option<String>, CallStoreError> {
            self.inner.load(call).await
        }
        async fn save(
            &self,
            call: &str,
            token: &str,
            json: &str,
        ) -> Result<Fenced, CallStoreError> {
            let failing = self
                .failures
                .fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |left| left.checked_sub(1),
                )
                .is_ok();
            if failing {
                return Err(CallStoreError::Backend(
                    "the primary is failing over".into(),
                ));
            }
            self.inner.save(call, token, json).await
        }
        async fn renew(&self, call: &str, token: &str) -> Result<Fenced, CallStoreError> {
            self.inner.renew(call, token).await
        }
        async fn release(&self, call: &str, token: &str) -> Result<(), CallStoreError> {
            self.inner.release(call, token).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_checkpoint_write_that_failed_is_tried_again_without_a_new_turn() {
        let store = Arc::new(Flaky {
            inner: MemoryCallStore::new(),
            failures: std::sync::atomic::AtomicUsize::new(3),
        });
        let token = store.claim("k").await.expect("claim");
        let attached = crate::call::Attached {
            store: store.clone(),
            token,
            dirty: tokio::sync::Notify::new(),
            lost: crate::call::signal::Lost::default(),
        };
        let init = crate::SessionSetup::dry_run().call().init().clone();
        let (outbound, _inbound) = tokio::sync::mpsc::channel(1);
        let call = crate::CallControl::new(
            init,
            outbound,
            Some("k".to_owned()),
            Some(attached),
            None,
            None,
        );
        let checkpointer = tokio::spawn(run_checkpointer(call.clone()));
        // The call's last move before its replica dies: nothing else happens on the call.
        call.push_outcome("The $50 transfer to Alice completed.")
            .expect("fits");
        // Less than one renewal period (5 s): the retries alone must write it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let saved = store.inner.load("k").await.expect("load");
        assert!(
            saved.is_some_and(|json| json.contains("transfer to Alice completed")),
            "the write that failed was not tried again"
        );
        checkpointer.abort();
    }

    /// A memory store that sends takeover hints when the test says.
    struct Hinted {
        inner: MemoryCallStore,
        hints: Mutex<Option<tokio::sync::mpsc::Receiver<()>>>,
    }

    #[async_trait]
    impl CallStore for Hinted {
        async fn claim(&self, call: &str) -> Result<String, CallStoreError> {
            self.inner.claim(call).await
        }
        async fn load(&self, call: &str) -> Result<Option<String>, CallStoreError> {
            self.inner.load(call).await
        }
        async fn save(
            &self,
            call: &str,
            token: &str,
            json: &str,
        ) -> Result<Fenced, CallStoreError> {
            self.inner.save(call, token, json).await
        }
        async fn renew(&self, call: &str, token: &str) -> Result<Fenced, CallStoreError> {
            self.inner.renew(call, token).await
        }
        async fn release(&self, call: &str, token: &str) -> Result<(), CallStoreError> {
            self.inner.release(call, token).await
        }
        fn takeover_hints(&self, _call: &str) -> Option<BoxStream<'static, ()>> {
            let receiver = self.hints.lock().ok()?.take()?;
            let hints = futures::stream::unfold(receiver, |mut receiver| async move {
                receiver.recv().await.map(|()| ((), receiver))
            });
            Some(hints.boxed())
        }
    }

    /// A call `k` owned on `store`, its checkpointer running.
    async fn owned_call(store: Arc<dyn CallStore>) -> crate::CallControl {
        let token = store.claim("k").await.expect("claim");
        let attached = crate::call::Attached {
            store,
            token,
            dirty: tokio::sync::Notify::new(),
            lost: crate::call::signal::Lost::default(),
        };
        let init = crate::SessionSetup::dry_run().call().init().clone();
        let (outbound, _inbound) = tokio::sync::mpsc::channel(1);
        crate::CallControl::new(
            init,
            outbound,
            Some("k".to_owned()),
            Some(attached),
            None,
            None,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_takeover_hint_ends_the_older_session_before_its_next_renewal() {
        let (hint, hints) = tokio::sync::mpsc::channel(1);
        let store = Arc::new(Hinted {
            inner: MemoryCallStore::new(),
            hints: Mutex::new(Some(hints)),
        });
        let call = owned_call(store.clone()).await;
        let checkpointer = tokio::spawn(run_checkpointer(call.clone()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Another replica takes the call over and its store says so.
        store.claim("k").await.expect("claim");
        hint.send(()).await.expect("the checkpointer listens");
        // Well within the 5 s renewal period: only the hint can have told it.
        tokio::time::timeout(Duration::from_secs(1), call.superseded())
            .await
            .expect("superseded on the hint");
        checkpointer.await.expect("the checkpointer stops");
    }

    #[tokio::test(start_paused = true)]
    async fn a_takeover_before_the_hints_were_listened_to_is_seen_at_once() {
        let (_hint, hints) = tokio::sync::mpsc::channel(1);
        let store = Arc::new(Hinted {
            inner: MemoryCallStore::new(),
            hints: Mutex::new(Some(hints)),
        });
        let call = owned_call(store.clone()).await;
        // Taken over between the claim and the checkpointer's start: no hint will come.
        store.claim("k").await.expect("claim");
        let checkpointer = tokio::spawn(run_checkpointer(call.clone()));
        tokio::time::timeout(Duration::from_secs(1), call.superseded())
            .await
            .expect("superseded at once");
        checkpointer.await.expect("the checkpointer stops");
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_whose_only_change_is_a_crew_value_is_written() {
        let store = Arc::new(MemoryCallStore::new());
        let call = owned_call(store.clone()).await;
        let checkpointer = tokio::spawn(run_checkpointer(call.clone()));
        // The crew's question to the caller, the only thing this turn changed.
        call.checkpoint_put("asked", &"Shall I transfer $50.00 to Alice?")
            .expect("fits");
        call.turn_finished(true);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let saved = store.load("k").await.expect("load");
        assert!(
            saved.is_some_and(|json| json.contains("Shall I transfer")),
            "the crew's value was not written at the turn's end"
        );
        checkpointer.abort();
    }

    #[tokio::test]
    async fn the_newest_claim_fences_the_older_owner() {
        let store = MemoryCallStore::new();
        let first = store.claim("c1").await.expect("claim");
        assert_eq!(
            store.save("c1", &first, "{}").await.ok(),
            Some(Fenced::Owner)
        );
        let second = store.claim("c1").await.expect("claim");
        assert_eq!(
            store.save("c1", &first, r#"{"turns":9}"#).await.ok(),
            Some(Fenced::Lost)
        );
        assert_eq!(store.renew("c1", &first).await.ok(), Some(Fenced::Lost));
        assert_eq!(store.load("c1").await.ok().flatten().as_deref(), Some("{}"));
        assert_eq!(store.renew("c1", &second).await.ok(), Some(Fenced::Owner));
        // Another call shares nothing.
        assert_eq!(store.load("c2").await.ok().flatten(), None);
        assert_eq!(
            store.save("c2", &second, "{}").await.ok(),
            Some(Fenced::Lost)
        );
    }

    #[tokio::test]
    async fn the_store_stays_bounded() {
        let store = MemoryCallStore::new().max_calls(3);
        for call in 0..10 {
            let call = call.to_string();
            let token = store.claim(&call).await.expect("claim");
            store.save(&call, &token, "{}").await.expect("save");
        }
        assert!(store.len() <= 3, "{}", store.len());
    }

    #[test]
    fn a_checkpoint_over_the_limit_is_refused() {
        let mut checkpoint = Checkpoint::default();
        checkpoint.nodes.insert(
            "big".into(),
            Value::String("x".repeat(MAX_CHECKPOINT_BYTES)),
        );
        assert!(matches!(
            checkpoint.to_json(),
            Err(CallStoreError::TooLarge { .. })
        ));
    }
}
