//! The in-flight stage: non-cancellable calls, run once per session. A retry of such a call
//! joins the run that holds its claim ([`claims`](crate::executor::claims)) or reads its
//! outcome (`stage.rs`); the call stage runs one that holds nothing as a task of its own once it
//! won its claim (`claimed.rs`, `detached.rs`), and its caller waits for it here, at most the
//! tool's timeout (then `StillRunning`; the call runs on).
//!
//! Whether an identical call joins, reads an outcome or runs is the claim store's to say
//! (shared between replicas when configured); the table here ([`InFlight`]) only serves the
//! synchronous [`Executor::interrupted`](crate::executor::Executor) with what this process
//! knows: a call of its own still running, or finished with nobody having received its
//! outcome.

mod claimed;
mod detached;
mod stage;

use crewline_core::error_chain;
use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

pub(crate) use self::stage::Join;
use crate::executor::{
    DetachedTasks, ToolCallError, claims::ClaimKey, error::Settled, ledger::record::Recorder,
};
use crewline_core::ToolErrorKind;
use tokio::{sync::watch, time::Instant};

/// One call's entry: its outcome once it is known, and when it was.
struct Slot {
    generation: u64,
    outcome: watch::Receiver<Option<Settled>>,
    finished_at: Option<Instant>,
}

type Slots = Arc<Mutex<HashMap<ClaimKey, Slot>>>;

/// The non-cancellable calls this process runs, and those finished whose outcome its
/// callers did not receive.
pub(crate) struct InFlight {
    slots: Slots,
    window: Duration,
    generations: AtomicU64,
}

/// What this process knows of a call of its own.
pub(crate) enum Local {
    /// Finished: its outcome (now received).
    Finished(Settled),
    Running,
}

/// Waits for the outcome of a call this process started.
pub(crate) struct Waiter {
    key: ClaimKey,
    generation: u64,
    outcome: watch::Receiver<Option<Settled>>,
    slots: Slots,
    /// Whether the caller still waits (the task writes its outcome as received if so).
    waiting: Arc<AtomicBool>,
    /// The ledger hand-over of the caller that started the call.
    handoff: Box<detached::Waiter>,
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
        // The caller records this outcome itself; the task must not.
        self.handoff.received();
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

impl Drop for Waiter {
    fn drop(&mut self) {
        // Received, timed out or dropped: nobody waits any more.
        self.waiting.store(false, Ordering::Release);
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

    /// The call `key` of this process: running, or finished and not yet received (its
    /// outcome is taken).
    pub(crate) fn take(&self, key: &ClaimKey) -> Option<Local> {
        let mut slots = self.lock();
        self.purge(&mut slots);
        let slot = slots.get(key)?;
        if slot.finished_at.is_some() {
            let settled = slot.outcome.borrow().clone();
            slots.remove(key);
            return settled.map(Local::Finished);
        }
        Some(Local::Running)
    }

    /// Whether the call `key` of this process is running, or finished with nobody having
    /// its outcome yet.
    pub(crate) fn contains(&self, key: &ClaimKey) -> bool {
        let mut slots = self.lock();
        self.purge(&mut slots);
        slots.contains_key(key)
    }

    /// Starts the call `call` builds as a task of its own, tracked in `tasks` (nothing but its
    /// end stops it);
    /// the returned waiter waits for it. `call` is given the flag that says whether its
    /// caller still waits.
    ///
    /// `recorder` (when there is a ledger) writes the call's record if its caller stops
    /// waiting before the outcome.
    pub(crate) fn start<F>(
        &self,
        key: ClaimKey,
        tasks: &DetachedTasks,
        call: impl FnOnce(Arc<AtomicBool>) -> F,
        recorder: Option<Recorder>,
    ) -> Waiter
    where
        F: Future<Output = Settled> + Send + 'static,
    {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let (sender, outcome) = watch::channel(None);
        self.lock().insert(
            key.clone(),
            Slot {
                generation,
                outcome: outcome.clone(),
                finished_at: None,
            },
        );
        let waiting = Arc::new(AtomicBool::new(true));
        let call = call(Arc::clone(&waiting));
        let table = Arc::clone(&self.slots);
        let finished_key = key.clone();
        let handoff = detached::spawn(
            tasks,
            Box::pin(async move {
                let settled = call.await;
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
        Waiter {
            key,
            generation,
            outcome,
            slots: Arc::clone(&self.slots),
            waiting,
            handoff: Box::new(handoff),
        }
    }

    /// Drops outcomes kept past the window, and calls whose task is gone.
    fn purge(&self, slots: &mut HashMap<ClaimKey, Slot>) {
        let now = Instant::now();
        slots.retain(|_, slot| match slot.finished_at {
            Some(at) => now.duration_since(at) < self.window,
            None => slot.outcome.has_changed().is_ok(),
        });
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ClaimKey, Slot>> {
        lock(&self.slots)
    }
}

fn lock(slots: &Slots) -> MutexGuard<'_, HashMap<ClaimKey, Slot>> {
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

/// The error for a call whose owner stopped before writing its outcome (a dead replica).
pub(crate) fn outcome_unknown(dedupes_by_key: bool) -> ToolCallError {
    let message = if dedupes_by_key {
        "the outcome of this action is unknown (the server handling it stopped); it is safe to \
         call this tool again with exactly the same arguments: it will not be done twice"
    } else {
        "the outcome of this action is unknown (the server handling it stopped); do not retry \
         it; tell the caller it is being checked"
    };
    ToolCallError::new(ToolErrorKind::OutcomeUnknown, message)
}

/// The error for a non-cancellable call refused because its claim store cannot be reached.
pub(crate) fn unclaimable(error: &crate::executor::claims::ClaimError) -> ToolCallError {
    ToolCallError::new(
        ToolErrorKind::ToolError,
        "this action cannot be started right now (the service that makes sure it runs only \
         once is unreachable); nothing was done; try again in a moment",
    )
    .with_detail(error_chain(error))
}
