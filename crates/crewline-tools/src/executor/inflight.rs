//! Non-cancellable calls that run on after their caller stopped waiting, so a retry joins them
//! instead of running the tool twice.
//!
//! Error kind: [`ToolErrorKind::StillRunning`]. A call is known by its session, registry, tool
//! and the hash of its validated arguments. While one runs, an identical call joins it (waits
//! for the same outcome); once it has finished, an identical call within the retry window
//! reads its outcome instead of running again, unless some caller already received it (then
//! the model has it, and a new identical call is a new request that runs).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use super::{CallContext, SessionScope, ToolCallError, detached, fingerprint};
use crate::catalog::Catalog;
use crewline_core::{ToolCall, ToolErrorKind};
use serde_json::Value;
use tokio::{sync::watch, time::Instant};

/// A call's outcome as every joiner reads it.
pub(crate) type Settled = Result<Value, ToolCallError>;

/// What makes two calls the same call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    scope: SessionScope,
    registry: u64,
    tool: String,
    arguments_hash: String,
}

impl Key {
    /// The key of `call` with its validated `arguments`, in the session of `context`.
    pub(crate) fn new(
        context: &CallContext,
        tools: &Catalog,
        call: &ToolCall,
        arguments: &Value,
    ) -> Self {
        Self {
            scope: context.scope().clone(),
            registry: tools.id(),
            tool: call.name.clone(),
            arguments_hash: fingerprint::arguments_hash(arguments),
        }
    }
}

/// One call's entry: its outcome once it is known, and when it was.
struct Slot {
    generation: u64,
    outcome: watch::Receiver<Option<Settled>>,
    finished_at: Option<Instant>,
}

type Slots = Arc<Mutex<HashMap<Key, Slot>>>;

/// The non-cancellable calls running, and those finished whose outcome nobody received.
pub(crate) struct InFlight {
    slots: Slots,
    window: Duration,
    generations: AtomicU64,
}

/// A call joined: finished (its outcome, now received), or running.
pub(crate) enum Joined {
    Finished(Settled),
    Running(Waiter),
}

/// Waits for a running call's outcome.
pub(crate) struct Waiter {
    key: Key,
    generation: u64,
    outcome: watch::Receiver<Option<Settled>>,
    slots: Slots,
    /// The ledger hand-over of the caller that started the call (joiners have none).
    handoff: Option<Box<detached::Waiter>>,
}

impl Waiter {
    /// The call's outcome, or `None` if it has not finished within `limit` (it runs on).
    pub(crate) async fn wait(mut self, limit: Duration) -> Option<Settled> {
        let waited = tokio::time::timeout(limit, async {
            // Cloned at once: the borrow must not be held across an await.
            self.outcome
                .wait_for(Option::is_some)
                .await
                .map(|outcome| outcome.clone())
        })
        .await;
        let settled = match waited {
            Err(_elapsed) => return None,
            Ok(Ok(Some(settled))) => settled,
            // The task was dropped before it finished (the runtime is shutting down).
            Ok(_) => Err(ToolCallError::new(
                ToolErrorKind::ToolError,
                "the tool stopped before it reported a result",
            )),
        };
        if let Some(handoff) = self.handoff.as_mut() {
            // The caller records this outcome itself; the task must not.
            handoff.received();
        }
        // This caller has the outcome (and so the model): a later identical call is new.
        let mut slots = lock(&self.slots);
        if slots
            .get(&self.key)
            .is_some_and(|slot| slot.generation == self.generation)
        {
            slots.remove(&self.key);
        }
        Some(settled)
    }
}

impl InFlight {
    /// An empty table keeping unreceived outcomes for `window`.
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            slots: Arc::default(),
            window,
            generations: AtomicU64::new(0),
        }
    }

    /// Joins the call `key` if it is running, or takes its outcome if it finished and nobody
    /// received it yet.
    pub(crate) fn join(&self, key: &Key) -> Option<Joined> {
        let mut slots = self.lock();
        self.purge(&mut slots);
        let slot = slots.get(key)?;
        if slot.finished_at.is_some() {
            let settled = slot.outcome.borrow().clone();
            slots.remove(key);
            return settled.map(Joined::Finished);
        }
        Some(Joined::Running(Waiter {
            key: key.clone(),
            generation: slot.generation,
            outcome: slot.outcome.clone(),
            slots: Arc::clone(&self.slots),
            handoff: None,
        }))
    }

    /// Whether the call `key` is running, or finished with nobody having its outcome yet.
    pub(crate) fn contains(&self, key: &Key) -> bool {
        let mut slots = self.lock();
        self.purge(&mut slots);
        slots.contains_key(key)
    }

    /// Joins the call `key`, or starts `call` as a task of its own (nothing but its end stops
    /// it) and waits for that.
    ///
    /// `recorder` (when there is a ledger) writes the call's record if its caller stops
    /// waiting before the outcome.
    pub(crate) fn start<F>(&self, key: Key, call: F, recorder: Option<detached::Recorder>) -> Joined
    where
        F: Future<Output = Settled> + Send + 'static,
    {
        if let Some(joined) = self.join(&key) {
            return joined;
        }
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let (sender, outcome) = watch::channel(None);
        let mut slots = self.lock();
        if slots.contains_key(&key) {
            // Started by another caller between the two locks: join that one instead.
            drop(slots);
            if let Some(joined) = self.join(&key) {
                return joined;
            }
            slots = self.lock();
        }
        slots.insert(
            key.clone(),
            Slot {
                generation,
                outcome: outcome.clone(),
                finished_at: None,
            },
        );
        drop(slots);
        let table = Arc::clone(&self.slots);
        let finished_key = key.clone();
        let handoff = detached::spawn(
            Box::pin(async move {
                let settled = call.await;
                // Under the lock: a joiner sees either a running call it can wait for, or a
                // finished one with its outcome.
                let mut slots = lock(&table);
                if let Some(slot) = slots.get_mut(&finished_key)
                    && slot.generation == generation
                {
                    slot.finished_at = Some(Instant::now());
                }
                sender.send_replace(Some(settled.clone()));
                settled
            }),
            recorder,
        );
        Joined::Running(Waiter {
            key,
            generation,
            outcome,
            slots: Arc::clone(&self.slots),
            handoff: Some(Box::new(handoff)),
        })
    }

    /// Drops outcomes kept past the window, and calls whose task is gone.
    fn purge(&self, slots: &mut HashMap<Key, Slot>) {
        let now = Instant::now();
        slots.retain(|_, slot| match slot.finished_at {
            Some(at) => now.duration_since(at) < self.window,
            None => slot.outcome.has_changed().is_ok(),
        });
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Slot>> {
        lock(&self.slots)
    }
}

fn lock(slots: &Slots) -> MutexGuard<'_, HashMap<Key, Slot>> {
    // Every update is a single insert, field write or remove: a poisoned map is consistent.
    slots
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The error for a non-cancellable call whose caller stopped waiting while it runs on.
pub(crate) fn still_running() -> ToolCallError {
    ToolCallError::new(
        ToolErrorKind::StillRunning,
        "the action is still in progress and must not be retried or started again; tell the \
         user it is being processed. To learn its outcome, call this tool again with exactly \
         the same arguments: that waits for the running action instead of starting another",
    )
}
