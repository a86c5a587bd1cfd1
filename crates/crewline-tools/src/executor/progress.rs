//! What a tool says while it runs, and the outcome of a background call when it lands.
//!
//! A session that wants them ([`SessionScope::with_tool_notices`](super::SessionScope::with_tool_notices))
//! gets a [`ToolNotices`] channel: a tool reports progress through [`Progress::current`] (a
//! tokio task-local the executor sets around the tool's future, like
//! [`IdempotencyKey::current`](super::IdempotencyKey::current)), and a tool whose policy says
//! [`background`](crate::ToolPolicy::background) answers "started" at once while its call runs
//! on as a task of the session, whose result comes back as [`ToolNotice::Landed`]. Without the
//! channel, progress goes nowhere and a background tool runs like any other.
//!
//! Every buffer here is bounded: the queue ([`NOTICE_QUEUE`], progress beyond it is dropped),
//! each update's text ([`MAX_PROGRESS_BYTES`]), the updates of one call
//! ([`MAX_PROGRESS_UPDATES`]), and the background calls running at once
//! ([`DEFAULT_MAX_BACKGROUND`]).
//!
//! A background call runs once per call, also across a crash: a session whose call is kept in
//! a shared store sets a [`BackgroundRecord`], and each background call starts only after the
//! record of its start is written there (record first, then start). A replica killed while
//! the call runs leaves the record behind, and the call's resume answers `outcome_unknown`
//! instead of running it a second time.

use std::{
    collections::HashSet,
    fmt,
    future::Future,
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicU32, Ordering},
    },
};

use async_trait::async_trait;
use crewline_core::ToolResult;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

tokio::task_local! {
    static CURRENT: Slot;
}

/// What the executor sets around a tool's call: what its [`Progress`] is made of, made only
/// when the tool asks for it. Most tools never report progress, and their calls pay one
/// allocation here (the id and name), not the handle's three (issue 36's bench).
struct Slot {
    notices: ToolNotices,
    /// The call's id followed by the tool's name.
    call: String,
    /// Where the id ends in `call`.
    id_len: usize,
    progress: OnceLock<Progress>,
}

impl Slot {
    /// The call's handle, the same for every [`Progress::current`] of the call (they share
    /// its cap on updates).
    fn progress(&self) -> &Progress {
        self.progress.get_or_init(|| {
            Progress(Arc::new(Shared {
                notices: self.notices.clone(),
                call: self.call.clone(),
                id_len: self.id_len,
                sent: AtomicU32::new(0),
            }))
        })
    }
}

/// The most bytes of one progress update that are kept (cut at a character boundary).
pub const MAX_PROGRESS_BYTES: usize = 300;
/// The most progress updates one call may send; later ones are dropped.
pub const MAX_PROGRESS_UPDATES: u32 = 16;
/// How many notices wait for the session at most; progress past it is dropped.
pub const NOTICE_QUEUE: usize = 32;
/// How many background calls one session may start in all (each is remembered, to run once).
pub const MAX_BACKGROUND_CALLS: usize = 64;
/// How many background calls of one session run at once by default.
pub const DEFAULT_MAX_BACKGROUND: usize = 4;

/// Where a session keeps the background calls it started, durably (the call's checkpoint in
/// a store the replicas share), so that a resume of the call after a crash does not start
/// them again.
#[async_trait]
pub trait BackgroundRecord: Send + Sync + 'static {
    /// Writes `started` (every background call the session started, the one about to start
    /// included) where a resume finds it, and returns once it is written; an error leaves the
    /// call unstarted.
    async fn record(
        &self,
        started: Vec<String>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// Something a tool call tells its session while the conversation goes on.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ToolNotice {
    /// A running call's progress.
    Progress {
        /// The call's id.
        tool_call_id: String,
        /// The tool's name.
        name: String,
        /// The words, at most [`MAX_PROGRESS_BYTES`].
        text: String,
        /// Whether it is for the caller's ears (else for the call's log only).
        speak: bool,
    },
    /// A background call finished (or failed, or timed out): its result.
    Landed(ToolResult),
}

/// The session's end of the notices: the sending side shared by its calls, the background
/// calls' limit and their cancellation. Cheap to clone (one reference count: the executor
/// clones it for every tool call); every clone is the same session's.
#[derive(Clone)]
pub struct ToolNotices(Arc<Session>);

/// What every clone of one session's [`ToolNotices`] shares.
struct Session {
    sender: mpsc::Sender<ToolNotice>,
    ended: CancellationToken,
    running: Arc<Semaphore>,
    /// The background calls started in this session (tool and arguments): each runs once.
    started: Arc<Mutex<HashSet<String>>>,
    /// Those an earlier connection of the call started (their outcome is not known here).
    inherited: Arc<HashSet<String>>,
    /// The background calls that landed (this session's, and an earlier connection's).
    landed: Arc<Mutex<HashSet<String>>>,
    /// Where each start is recorded before the call starts; `None`: in this process only.
    record: Option<Arc<dyn BackgroundRecord>>,
}

impl Session {
    /// Another handle on the same session's state (the channel, the token, the sets), for a
    /// builder that changes one field.
    fn copy(&self) -> Self {
        Self {
            sender: self.sender.clone(),
            ended: self.ended.clone(),
            running: Arc::clone(&self.running),
            started: Arc::clone(&self.started),
            inherited: Arc::clone(&self.inherited),
            landed: Arc::clone(&self.landed),
            record: self.record.clone(),
        }
    }
}

impl fmt::Debug for ToolNotices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolNotices")
            .field("ended", &self.0.ended.is_cancelled())
            .field("free_background_slots", &self.0.running.available_permits())
            .field("recorded", &self.0.record.is_some())
            .finish_non_exhaustive()
    }
}

impl ToolNotices {
    /// A channel for one session, running at most `max_background` background calls at once;
    /// the receiver is the session's to read.
    pub fn channel(max_background: usize) -> (Self, mpsc::Receiver<ToolNotice>) {
        let (sender, receiver) = mpsc::channel(NOTICE_QUEUE);
        let notices = Self(Arc::new(Session {
            sender,
            ended: CancellationToken::new(),
            running: Arc::new(Semaphore::new(max_background)),
            started: Arc::default(),
            inherited: Arc::default(),
            landed: Arc::default(),
            record: None,
        }));
        (notices, receiver)
    }

    /// The session ended: its background calls are cancelled (their futures dropped), and
    /// no new one starts.
    pub fn end(&self) {
        self.0.ended.cancel();
    }

    /// Whether the session ended.
    pub fn is_ended(&self) -> bool {
        self.0.ended.is_cancelled()
    }

    /// The same channel, knowing the background calls an earlier connection of the same
    /// call started (as [`started`](Self::started) gave them): they do not run again.
    pub fn with_started(self, started: impl IntoIterator<Item = String>) -> Self {
        let inherited: HashSet<String> = started.into_iter().collect();
        lock(&self.0.started).extend(inherited.iter().cloned());
        let session = &*self.0;
        Self(Arc::new(Session {
            inherited: Arc::new(inherited),
            ..session.copy()
        }))
    }

    /// The same channel, knowing the background calls of an earlier connection of the same
    /// call that landed (as [`landed_calls`](Self::landed_calls) gave them): asked again, the
    /// model reads that they ran, not that their outcome is unknown.
    pub fn with_landed(self, landed: impl IntoIterator<Item = String>) -> Self {
        lock(&self.0.landed).extend(landed);
        self
    }

    /// The same channel, recording each background call's start in `record` before the call
    /// starts.
    pub fn with_record(self, record: Arc<dyn BackgroundRecord>) -> Self {
        Self(Arc::new(Session {
            record: Some(record),
            ..self.0.copy()
        }))
    }

    /// Whether the background call `key` was started by an earlier connection of the call.
    pub(crate) fn is_inherited(&self, key: &str) -> bool {
        self.0.inherited.contains(key)
    }

    /// Whether the background call `key` landed (here or on an earlier connection).
    pub(crate) fn has_landed(&self, key: &str) -> bool {
        lock(&self.0.landed).contains(key)
    }

    /// Marks the background call `key` landed.
    pub(crate) fn mark_landed(&self, key: &str) {
        lock(&self.0.landed).insert(key.to_owned());
    }

    /// The background calls that landed (tool name and a hash of the arguments), for a
    /// checkpoint to carry over a reconnect.
    pub fn landed_calls(&self) -> Vec<String> {
        let mut landed: Vec<String> = lock(&self.0.landed).iter().cloned().collect();
        landed.sort();
        landed
    }

    /// Writes the calls started so far to the session's [`BackgroundRecord`], if it has one.
    pub(crate) async fn record_started(
        &self,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        match &self.0.record {
            Some(record) => record.record(self.started()).await,
            None => Ok(()),
        }
    }

    /// Forgets that `key` started: its start could not be recorded, so it did not start.
    pub(crate) fn forget_start(&self, key: &str) {
        lock(&self.0.started).remove(key);
    }

    /// The background calls this session started (tool name and a hash of the arguments),
    /// for a checkpoint to carry over a reconnect.
    pub fn started(&self) -> Vec<String> {
        let mut started: Vec<String> = lock(&self.0.started).iter().cloned().collect();
        started.sort();
        started
    }

    /// Fires when the session ends.
    pub(crate) fn ended(&self) -> &CancellationToken {
        &self.0.ended
    }

    /// A slot for one more background call, if the session has one free.
    pub(crate) fn background_slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.0.running).try_acquire_owned().ok()
    }

    /// Marks the background call `key` started; `false` if it was already (it runs once),
    /// or if the session holds [`MAX_BACKGROUND_CALLS`] already.
    pub(crate) fn first_start(&self, key: &str) -> Option<bool> {
        let mut started = lock(&self.0.started);
        if started.contains(key) {
            return Some(false);
        }
        if started.len() >= MAX_BACKGROUND_CALLS {
            return None;
        }
        started.insert(key.to_owned());
        Some(true)
    }

    /// Hands a background call's result to the session (waits for room: it is never dropped
    /// while the session lives).
    pub(crate) async fn landed(&self, result: ToolResult) {
        if self
            .0
            .sender
            .send(ToolNotice::Landed(result))
            .await
            .is_err()
        {
            tracing::debug!("a background call landed after its session ended");
        }
    }

    /// Runs `future` (the tool call `tool_call_id` of `name`) with its [`Progress`] set.
    pub(crate) fn scope<F: Future>(
        &self,
        tool_call_id: &str,
        name: &str,
        future: F,
    ) -> impl Future<Output = F::Output> + use<F> {
        let mut call = String::with_capacity(tool_call_id.len() + name.len());
        call.push_str(tool_call_id);
        call.push_str(name);
        let slot = Slot {
            notices: self.clone(),
            call,
            id_len: tool_call_id.len(),
            progress: OnceLock::new(),
        };
        CURRENT.scope(slot, future)
    }
}

/// A set of calls' keys; each update is one insert or remove, so a poisoned set is whole.
fn lock(set: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    set.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the current tool call reports its progress through; see the [module](self).
///
/// # Examples
///
/// ```
/// use crewline_tools::Progress;
///
/// // Inside a tool: `if let Some(progress) = Progress::current() { progress.say("Still looking...") }`.
/// // Outside a tool's call there is none.
/// assert!(Progress::current().is_none());
/// ```
#[derive(Clone)]
pub struct Progress(Arc<Shared>);

/// One call's progress, shared by every handle of it.
struct Shared {
    notices: ToolNotices,
    /// The call's id followed by the tool's name, as in [`Slot`].
    call: String,
    id_len: usize,
    /// Updates sent so far (capped at [`MAX_PROGRESS_UPDATES`]).
    sent: AtomicU32,
}

impl Shared {
    fn tool_call_id(&self) -> &str {
        self.call.get(..self.id_len).unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.call.get(self.id_len..).unwrap_or_default()
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Progress")
            .field("tool_call_id", &self.0.tool_call_id())
            .field("name", &self.0.name())
            .finish_non_exhaustive()
    }
}

impl Progress {
    /// The progress of the call the current tool runs for; `None` outside a tool's call or
    /// in a session that takes no notices.
    pub fn current() -> Option<Self> {
        CURRENT.try_with(|slot| slot.progress().clone()).ok()
    }

    /// Says `text` to the caller (between the agent's sentences, never over the caller);
    /// `false` if it was dropped (a full queue, or past [`MAX_PROGRESS_UPDATES`]).
    pub fn say(&self, text: impl Into<String>) -> bool {
        self.send(text.into(), true)
    }

    /// Adds `text` to the call's log (`agent.log`) without saying it; `false` if dropped.
    pub fn log(&self, text: impl Into<String>) -> bool {
        self.send(text.into(), false)
    }

    fn send(&self, mut text: String, speak: bool) -> bool {
        let shared = &*self.0;
        if shared.sent.fetch_add(1, Ordering::Relaxed) >= MAX_PROGRESS_UPDATES {
            tracing::debug!(
                tool = shared.name(),
                "progress past the per-call cap dropped"
            );
            return false;
        }
        let kept = crewline_core::prefix(&text, MAX_PROGRESS_BYTES).len();
        text.truncate(kept);
        let notice = ToolNotice::Progress {
            tool_call_id: shared.tool_call_id().to_owned(),
            name: shared.name().to_owned(),
            text,
            speak,
        };
        // Progress is advice: a session that has not read the last ones gets no more.
        shared.notices.0.sender.try_send(notice).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn progress_is_bounded_per_update_per_call_and_by_the_queue() {
        let (notices, mut inbox) = ToolNotices::channel(DEFAULT_MAX_BACKGROUND);
        let long = "é".repeat(MAX_PROGRESS_BYTES);
        let said = notices
            .scope("call_1", "search", async {
                let progress = Progress::current().expect("set inside the call");
                let first = progress.say(long.clone());
                let kept = (1..MAX_PROGRESS_UPDATES + 5)
                    .filter(|_| progress.log("more"))
                    .count();
                (first, kept)
            })
            .await;
        assert_eq!(
            said,
            (true, usize::try_from(MAX_PROGRESS_UPDATES - 1).unwrap())
        );
        let Some(ToolNotice::Progress { text, speak, .. }) = inbox.recv().await else {
            panic!("a progress notice first");
        };
        assert!(speak && text.len() <= MAX_PROGRESS_BYTES && !text.is_empty());

        // A session that reads nothing gets at most the queue's worth.
        let mut queued = MAX_PROGRESS_UPDATES as usize - 1;
        for call in 0..4 {
            queued += notices
                .scope(&format!("call_{call}"), "search", async {
                    let progress = Progress::current().expect("set inside the call");
                    (0..MAX_PROGRESS_UPDATES)
                        .filter(|_| progress.log("x"))
                        .count()
                })
                .await;
        }
        assert_eq!(queued, NOTICE_QUEUE);
        assert!(Progress::current().is_none());
    }

    #[tokio::test]
    async fn the_handles_of_one_call_share_its_cap_and_name_it() {
        let (notices, mut inbox) = ToolNotices::channel(DEFAULT_MAX_BACKGROUND);
        let kept = notices
            .scope("call_7", "lookup", async {
                // Made on the first ask; the second ask is the same call's handle.
                let first = Progress::current().expect("set inside the call");
                let second = Progress::current().expect("set inside the call");
                let kept = (0..MAX_PROGRESS_UPDATES)
                    .filter(|_| first.log("first"))
                    .count();
                kept + usize::from(second.log("second"))
            })
            .await;
        assert_eq!(
            kept, MAX_PROGRESS_UPDATES as usize,
            "a second handle does not get a cap of its own"
        );
        let Some(ToolNotice::Progress {
            tool_call_id, name, ..
        }) = inbox.recv().await
        else {
            panic!("a progress notice");
        };
        assert_eq!((tool_call_id.as_str(), name.as_str()), ("call_7", "lookup"));
        // A call that never asks sends nothing, and the next call's handle is its own.
        notices.scope("call_8", "lookup", async {}).await;
        let fresh = notices
            .scope("call_9", "lookup", async {
                Progress::current().is_some_and(|progress| progress.say("again"))
            })
            .await;
        assert!(fresh, "a new call starts with a fresh cap");
    }

    #[test]
    fn a_background_call_starts_once_and_a_resumed_session_knows_it() {
        let (notices, _inbox) = ToolNotices::channel(1);
        assert_eq!(notices.first_start("book:abc"), Some(true));
        assert_eq!(notices.first_start("book:abc"), Some(false));
        let (resumed, _inbox) = ToolNotices::channel(1);
        let resumed = resumed.with_started(notices.started());
        assert_eq!(resumed.first_start("book:abc"), Some(false));
        assert!(resumed.is_inherited("book:abc") && !notices.is_inherited("book:abc"));
        let _slot = resumed.background_slot().expect("one free slot");
        assert!(resumed.background_slot().is_none(), "one at once");
    }
}
