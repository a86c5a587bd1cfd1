//! The call's controls: speech out of turn, hanging up, transferring.
//!
//! Every node and tool of a call acts on it through its [`CallControl`] (cheap to clone). Tools
//! that hang up or transfer are made per call, from the controls in the call's
//! [`SessionSetup`](crate::SessionSetup); a hand-off asked for during an answer is sent once the answer has ended.
//!
//! ```
//! use crewline::prelude::*;
//! use crewline::{
//!     CallControl, Session,
//!     llm::{Reply, ScriptedLlm},
//!     protocol::{ConversationType, Event, EventBody, LlmRequest, SessionContext, SystemInit},
//! };
//! use tokio::sync::mpsc;
//!
//! /// The tools of one call: they act on it through its controls.
//! struct CallTools {
//!     call: CallControl,
//! }
//!
//! #[tools]
//! impl CallTools {
//!     /// End the call when the caller says goodbye.
//!     #[function_tool]
//!     async fn end_call(&self) -> Result<&'static str, ToolError> {
//!         self.call.end_call().await.map_err(ToolError::from)?;
//!         Ok("The call ends after your goodbye.")
//!     }
//! }
//!
//! /// The crew of one call: the agent, with tools bound to this call.
//! fn crew(setup: &SessionSetup) -> Result<Crew, crewline::agent::AgentError> {
//!     // The goodbye and the tool call in one answer: once a tool ended the call, the turn
//!     // ends without asking the model again.
//!     let model = ScriptedLlm::new([
//!         Reply::tool_call("end_call", serde_json::json!({})).with_text("Goodbye!"),
//!     ]);
//!     let call = setup.call().clone();
//!     let agent = Agent::builder(model).tools(CallTools { call }).build()?;
//!     Ok(agent.crew_for(setup))
//! }
//!
//! # fn handshake() -> SystemInit {
//! #     SystemInit {
//! #         version: "1.0".into(),
//! #         session_context: SessionContext {
//! #             initial_variables: Default::default(),
//! #             conversation_type: ConversationType::Webcall,
//! #             caller: None,
//! #         },
//! #         output_agent_settings: None,
//! #     }
//! # }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (to_platform, mut from_crew) = mpsc::channel(64);
//! let setup = SessionSetup::new(handshake(), to_platform);
//! let session = Session::start(crew(&setup)?, setup).await?;
//! session.dispatch(Event::now(EventBody::LlmRequest(LlmRequest::default())))?;
//!
//! // The goodbye is said, then the call ends.
//! let mut said = String::new();
//! while let Some(event) = from_crew.recv().await {
//!     match event.body {
//!         EventBody::ResponseChunk { text } => said.push_str(&text),
//!         EventBody::EndCall => break,
//!         _ => {}
//!     }
//! }
//! assert_eq!(said, "Goodbye!");
//! session.shutdown().await;
//! # Ok(()) }
//! ```

use std::{
    sync::{Arc, Mutex, PoisonError, Weak},
    time::Duration,
};

use crewline_protocol::{
    Event, EventBody, HoldMusic, SessionContext, SystemInit, TransferCall, TransferOptions,
};
use crewline_tools::{
    BackgroundRecord, DetachedTasks, SessionScope, ToolNotice, ToolNotices,
    executor::progress::DEFAULT_MAX_BACKGROUND,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};
use tokio::sync::{Notify, mpsc};

use crate::session_store::{
    CallStore, CallStoreError, Checkpoint, Fenced, MAX_CHECKPOINT_BYTES, MAX_OUTCOME_BYTES,
    MAX_UNTOLD_OUTCOMES, RouterCheckpoint,
};

/// A hand-off that ends the crew's part in the call.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Handoff {
    /// `agent.end_call`.
    EndCall,
    /// `agent.transfer_call`.
    Transfer(TransferCall),
}

impl Handoff {
    pub(crate) fn into_body(self) -> EventBody {
        match self {
            Self::EndCall => EventBody::EndCall,
            Self::Transfer(transfer) => EventBody::TransferCall(transfer),
        }
    }
}

/// Why a call control could not act.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallControlError {
    /// The call already ended or was transferred.
    #[error("the call was already handed off (ended or transferred)")]
    HandedOff,
    /// The session is over (the platform hung up).
    #[error("the session has ended")]
    SessionEnded,
}

/// Why a value could not be put into, or read from, the call's checkpoint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The value could not be turned into JSON, or the JSON into the type asked for.
    #[error("the checkpoint value `{key}` could not be converted")]
    Convert {
        /// The key.
        key: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The crew's values would pass their share of [`MAX_CHECKPOINT_BYTES`].
    #[error(
        "the checkpoint value `{key}` of {bytes} bytes would take the crew's values past \
         {limit} bytes; it was not kept"
    )]
    TooLarge {
        /// The key.
        key: String,
        /// The value's size.
        bytes: usize,
        /// The most bytes the crew's values may take.
        limit: usize,
    },
    /// The call already holds [`MAX_UNTOLD_OUTCOMES`] untold outcomes, or this one is over
    /// [`MAX_OUTCOME_BYTES`].
    #[error("the outcome was not kept: the call holds {held} untold outcomes (limit {limit})")]
    TooManyOutcomes {
        /// Outcomes held.
        held: usize,
        /// The limit.
        limit: usize,
    },
    /// The checkpoint could not be written to the call's store.
    #[error("the call's checkpoint could not be written to its store")]
    Store(#[source] CallStoreError),
    /// The store did not answer in time; the write may or may not have been taken.
    #[error("the call's store did not answer within {0:?}")]
    StoreTimeout(Duration),
    /// A newer connection owns the call: nothing was written.
    #[error("a newer connection owns the call; its checkpoint was not written")]
    Superseded,
}

/// The most bytes the crew's own checkpoint values take: half the checkpoint, leaving the
/// rest to the router, the outcomes and the hand-off.
pub const MAX_CREW_CHECKPOINT_BYTES: usize = MAX_CHECKPOINT_BYTES / 2;

/// The controls of one call, shared by its nodes and tools (cheap to clone).
///
/// Hand-offs requested while an output node is generating (typically from a tool) are held
/// until the generation completes: an interrupted generation's hand-off is never sent.
#[derive(Clone)]
pub struct CallControl {
    inner: Arc<Inner>,
}

struct Inner {
    init: SystemInit,
    /// The key naming the call across sockets and replicas: the platform's call id, else the
    /// crew's key; `None` for a call named by neither (it shares nothing).
    key: Option<Arc<str>>,
    /// Names this call in the executor: its cached results, approvals and running
    /// non-cancellable tools are its own.
    scope: SessionScope,
    outbound: mpsc::Sender<Box<Event>>,
    state: Mutex<State>,
    /// The shared store the call checkpoints to, with its owner token.
    store: Option<Attached>,
    /// The checkpoint this call resumed from.
    resumed: Option<Checkpoint>,
    /// Where the call's tools report progress and background results (on its scope).
    notices: ToolNotices,
    /// The receiving end, taken by the call's output node.
    notice_inbox: Mutex<Option<mpsc::Receiver<ToolNotice>>>,
    /// Held by each checkpoint write, its snapshot taken under it: a write that started
    /// earlier never lands after a later one with an older snapshot.
    writes: tokio::sync::Mutex<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // No background call outlives its call.
        self.notices.end();
    }
}

/// The checkpoint key under which a call keeps the background calls it started, so that a
/// resumed call does not start them again.
const BACKGROUND_CALLS_KEY: &str = "crewline.background_calls";

/// The checkpoint key under which a call keeps the background calls that landed, so that a
/// resumed call asked for one again says it ran (not that its outcome is unknown).
const BACKGROUND_LANDED_KEY: &str = "crewline.background_landed";

/// The longest a background call's start waits for its record in the store: the turn waits
/// with it, and a store that slow is failing (the call is then not started).
const RECORD_TIMEOUT: Duration = Duration::from_secs(5);

/// Records a call's background starts in its checkpoint, written to its store before each
/// call starts (held weakly: the call's notices belong to the call).
struct StartsInCheckpoint(Weak<Inner>);

#[async_trait::async_trait]
impl BackgroundRecord for StartsInCheckpoint {
    async fn record(
        &self,
        started: Vec<String>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let Some(inner) = self.0.upgrade() else {
            return Err(Box::new(CallControlError::SessionEnded));
        };
        let call = CallControl { inner };
        call.save_background_calls(&started).await?;
        Ok(())
    }
}

/// A call's place in a [`CallStore`].
pub(crate) struct Attached {
    pub(crate) store: Arc<dyn CallStore>,
    pub(crate) token: String,
    /// Wakes the call's checkpointer: there is something new to write.
    pub(crate) dirty: Notify,
    /// Fired once a newer connection owns the call.
    pub(crate) lost: signal::Lost,
}

/// A one-shot signal: a flag and a notify.
pub(crate) mod signal {
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio::sync::Notify;

    /// Set once; waiters wake then, and later waiters return at once.
    #[derive(Default)]
    pub(crate) struct Lost {
        set: AtomicBool,
        notify: Notify,
    }

    impl Lost {
        pub(crate) fn set(&self) {
            self.set.store(true, Ordering::Release);
            self.notify.notify_waiters();
        }

        pub(crate) fn is_set(&self) -> bool {
            self.set.load(Ordering::Acquire)
        }

        pub(crate) async fn wait(&self) {
            loop {
                let notified = self.notify.notified();
                if self.is_set() {
                    return;
                }
                notified.await;
            }
        }
    }
}

#[derive(Default)]
struct State {
    /// Generations in progress (by turn id) that hold hand-offs back.
    generating: Option<String>,
    /// A hand-off requested during the current generation.
    pending: Option<Handoff>,
    /// A hand-off was sent: the crew stops answering.
    handed_off: bool,
    /// What the checkpoint keeps beyond the hand-off.
    kept: Kept,
    /// What the call's answered turns cost so far (this connection's: not checkpointed).
    usage: crate::usage::CallUsage,
}

/// The parts of the checkpoint the call holds between turns.
#[derive(Default)]
struct Kept {
    turns: u64,
    routers: std::collections::BTreeMap<String, RouterCheckpoint>,
    handoff: Option<Handoff>,
    untold: Vec<String>,
    nodes: Map<String, Value>,
    /// The bytes of `nodes` as JSON, kept so each put checks the bound without re-encoding.
    node_bytes: usize,
    /// A router moved since the last turn ended (the checkpoint must be written).
    changed: bool,
}

impl CallControl {
    /// Controls for a call that sends its events to `outbound` (the platform), named by the
    /// platform's call id, else by `crew_key`, else by nothing (a fresh scope).
    ///
    /// The tools its calls leave running are tracked in `detached` (its server's), if given.
    pub(crate) fn new(
        init: SystemInit,
        outbound: mpsc::Sender<Box<Event>>,
        crew_key: Option<String>,
        store: Option<Attached>,
        resumed: Option<Checkpoint>,
        detached: Option<DetachedTasks>,
    ) -> Self {
        let key: Option<Arc<str>> = call_key(&init)
            .map(Into::into)
            .or_else(|| crew_key.filter(|key| !key.is_empty()).map(Into::into));
        // The platform names calls (it holds the crew's token): a reconnect with the same call
        // id is the same call, on this replica or another, and finds its running tools and
        // their outcomes. A call with no name shares nothing.
        let scope = key
            .as_deref()
            .map_or_else(SessionScope::new, SessionScope::for_call);
        let scope = match detached {
            Some(tasks) => scope.with_detached_tasks(tasks),
            None => scope,
        };
        let (notices, notice_inbox) = ToolNotices::channel(DEFAULT_MAX_BACKGROUND);
        // Background calls an earlier connection of this call started do not run again.
        let kept = |name: &str| {
            resumed
                .as_ref()
                .and_then(|checkpoint| checkpoint.nodes.get(name))
                .and_then(|keys| serde_json::from_value::<Vec<String>>(keys.clone()).ok())
        };
        let notices = match kept(BACKGROUND_CALLS_KEY) {
            Some(started) => notices.with_started(started),
            None => notices,
        };
        let notices = match kept(BACKGROUND_LANDED_KEY) {
            Some(landed) => notices.with_landed(landed),
            None => notices,
        };
        let mut state = State::default();
        if let Some(checkpoint) = &resumed {
            state.usage =
                crate::usage::CallUsage::from_kept(checkpoint.nodes.get(crate::usage::USAGE_KEY));
            state.handed_off = checkpoint.handoff.is_some();
            state.kept = Kept {
                turns: checkpoint.turns,
                routers: checkpoint.routers.clone(),
                handoff: checkpoint.handoff.clone(),
                untold: checkpoint.untold.clone(),
                node_bytes: Value::Object(checkpoint.nodes.clone()).to_string().len(),
                nodes: checkpoint.nodes.clone(),
                changed: false,
            };
        }
        // A call kept in a store records each background call's start there before the
        // call starts: a crash after the start finds the record.
        let recorded = store.is_some() && key.is_some();
        let inner = Arc::new_cyclic(|this: &Weak<Inner>| {
            let notices = if recorded {
                notices.with_record(Arc::new(StartsInCheckpoint(this.clone())))
            } else {
                notices
            };
            Inner {
                init,
                key,
                scope: scope.with_tool_notices(notices.clone()),
                outbound,
                state: Mutex::new(state),
                store,
                resumed,
                notices,
                notice_inbox: Mutex::new(Some(notice_inbox)),
                writes: tokio::sync::Mutex::new(()),
            }
        });
        Self { inner }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The call's context from the handshake.
    pub fn session_context(&self) -> &SessionContext {
        &self.inner.init.session_context
    }

    /// The handshake itself.
    pub fn init(&self) -> &SystemInit {
        &self.inner.init
    }

    /// The call's session scope, minted once per call: pass it on every tool call's context
    /// (`CallContext::with_scope`, [`ToolLoop::with_scope`](crate::ToolLoop::with_scope)) so
    /// nothing the executor keeps for this caller reaches another.
    pub fn scope(&self) -> &SessionScope {
        &self.inner.scope
    }

    /// The key naming this call across reconnects and replicas: the platform's call id
    /// (`session_context.caller.call_id`), else the key the crew's server gave, else `None`.
    pub fn call_key(&self) -> Option<&str> {
        self.inner.key.as_deref()
    }

    /// The checkpoint this call resumed from: `Some` when an earlier connection of the same
    /// call (on any replica sharing the store) left one.
    pub fn resumed(&self) -> Option<&Checkpoint> {
        self.inner.resumed.as_ref()
    }

    /// Whether this call checkpoints to a shared store.
    pub fn is_checkpointed(&self) -> bool {
        self.inner.store.is_some()
    }

    /// Records an outcome the caller has not heard yet (a transfer that completed, say): kept
    /// in the checkpoint at once, told to the model before each turn until a turn completes,
    /// and so heard after a reconnect even if the socket dropped before it was spoken.
    pub fn push_outcome(&self, outcome: impl Into<String>) -> Result<(), CheckpointError> {
        let mut outcome = outcome.into();
        if outcome.len() > MAX_OUTCOME_BYTES {
            let mut end = MAX_OUTCOME_BYTES;
            while !outcome.is_char_boundary(end) {
                end -= 1;
            }
            outcome.truncate(end);
        }
        {
            let mut state = self.state();
            let held = state.kept.untold.len();
            if held >= MAX_UNTOLD_OUTCOMES {
                return Err(CheckpointError::TooManyOutcomes {
                    held,
                    limit: MAX_UNTOLD_OUTCOMES,
                });
            }
            state.kept.untold.push(outcome);
        }
        self.mark_dirty();
        Ok(())
    }

    /// The outcomes the caller has not heard yet, oldest first.
    pub fn untold_outcomes(&self) -> Vec<String> {
        self.state().kept.untold.clone()
    }

    /// Puts `value` into the call's checkpoint under `key`: written at the next turn
    /// boundary (when it differs from what was there), and read back by
    /// [`checkpoint_get`](Self::checkpoint_get) after a resume. The crew's values together
    /// stay under [`MAX_CREW_CHECKPOINT_BYTES`].
    pub fn checkpoint_put(
        &self,
        key: impl Into<String>,
        value: &impl Serialize,
    ) -> Result<(), CheckpointError> {
        let key = key.into();
        let value = serde_json::to_value(value).map_err(|source| CheckpointError::Convert {
            key: key.clone(),
            source,
        })?;
        // The key, the value, the quotes, colon and comma around them.
        let bytes = key.len() + value.to_string().len() + 4;
        let mut state = self.state();
        let kept = &mut state.kept;
        let old = kept
            .nodes
            .get(&key)
            .map_or(0, |old| key.len() + old.to_string().len() + 4);
        let total = kept.node_bytes.saturating_sub(old).saturating_add(bytes);
        if total > MAX_CREW_CHECKPOINT_BYTES {
            return Err(CheckpointError::TooLarge {
                key,
                bytes,
                limit: MAX_CREW_CHECKPOINT_BYTES,
            });
        }
        kept.node_bytes = total;
        // A turn that changed nothing is not written (`turn_finished`): a changed value is a
        // change, or a crew's value would reach the store only with some other move.
        if kept.nodes.get(&key) != Some(&value) {
            kept.changed = true;
        }
        kept.nodes.insert(key, value);
        Ok(())
    }

    /// The value under `key` in the call's checkpoint (put on this connection or before a
    /// resume), as `T`.
    pub fn checkpoint_get<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, CheckpointError> {
        let value = self.state().kept.nodes.get(key).cloned();
        value
            .map(|value| {
                serde_json::from_value(value).map_err(|source| CheckpointError::Convert {
                    key: key.to_owned(),
                    source,
                })
            })
            .transpose()
    }

    /// Records a router's place (only for a checkpointed call: it costs a copy of the state).
    pub(crate) fn record_router(&self, node: &str, checkpoint: RouterCheckpoint) {
        let mut state = self.state();
        if state.kept.routers.get(node) != Some(&checkpoint) {
            state.kept.routers.insert(node.to_owned(), checkpoint);
            state.kept.changed = true;
        }
    }

    /// A turn ended: a completed one told the caller every outcome held; the checkpoint is
    /// written (off this task) when the call has a store.
    pub(crate) fn turn_finished(&self, completed: bool) {
        let changed = {
            let mut state = self.state();
            let mut changed = std::mem::take(&mut state.kept.changed);
            if completed && !state.kept.untold.is_empty() {
                state.kept.untold.clear();
                changed = true;
            }
            state.kept.turns += 1;
            changed
        };
        // A turn that changed nothing a resume needs (no router moved, no outcome told) is not
        // written: a store round trip per turn costs more than the turn's own work (+9 % of a
        // text turn's instructions, BENCHMARKS.md). Its count goes out with the next write.
        if changed {
            self.mark_dirty();
        }
    }

    /// What the call's answered turns cost so far: tokens, and money when the agent has
    /// prices (see [`crate::usage`]). Kept in the call's checkpoint: a call resumed on another
    /// connection or replica goes on from the total of its last finished turn.
    pub fn usage(&self) -> crate::usage::CallUsage {
        self.state().usage
    }

    /// Puts the tally into the checkpoint, for a call with a store (only a resume reads it;
    /// without a store the serialising was 30 k instructions of a 395 k text turn).
    fn keep_usage(&self, usage: crate::usage::CallUsage) {
        if self.attached().is_none() {
            return;
        }
        if let Err(error) = self.checkpoint_put(crate::usage::USAGE_KEY, &usage.kept()) {
            tracing::warn!(%error, "the call's usage could not be kept in the checkpoint");
        }
    }

    /// Adds a summary request's tokens and money to the call's tally (and the checkpoint);
    /// returns the new total.
    pub(crate) fn add_summary_usage(
        &self,
        spent: crate::summary::Spent,
    ) -> crate::usage::CallUsage {
        self.tally(|usage| usage.add_summary(spent))
    }

    /// Adds an answered turn's usage to the call's tally, and the tally to the checkpoint
    /// (written with the turn); returns the new total.
    pub(crate) fn add_usage(&self, report: &crate::turn::TurnReport) -> crate::usage::CallUsage {
        self.tally(|usage| usage.add(report))
    }

    /// Changes the call's tally by `add` and keeps it; returns the new total.
    fn tally(&self, add: impl FnOnce(&mut crate::usage::CallUsage)) -> crate::usage::CallUsage {
        let usage = {
            let mut state = self.state();
            add(&mut state.usage);
            state.usage
        };
        self.keep_usage(usage);
        usage
    }

    /// The receiving end of the call's tool notices (progress, background results), for the
    /// output node that speaks them: the first to ask gets it.
    pub(crate) fn take_tool_notices(&self) -> Option<mpsc::Receiver<ToolNotice>> {
        self.inner
            .notice_inbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The call's tool notices: [`ToolNotices::end`] cancels its background calls.
    pub(crate) fn tool_notices(&self) -> &ToolNotices {
        &self.inner.notices
    }

    /// Keeps the background calls started and landed so far in the checkpoint (a resume
    /// must not start them again); nothing for a call that started none.
    pub(crate) fn record_background_calls(&self) {
        let started = self.inner.notices.started();
        if started.is_empty() {
            return;
        }
        if let Err(error) = self.checkpoint_put(BACKGROUND_CALLS_KEY, &started) {
            tracing::warn!(%error, "the background calls could not be kept in the checkpoint");
        }
        let landed = self.inner.notices.landed_calls();
        if landed.is_empty() {
            return;
        }
        if let Err(error) = self.checkpoint_put(BACKGROUND_LANDED_KEY, &landed) {
            tracing::warn!(%error, "the landed background calls could not be kept in the checkpoint");
        }
    }

    /// Puts `started` into the checkpoint and writes it to the call's store now, returning
    /// once the store took it: a background call starts only after this (record first, then
    /// start), so a replica killed while the call runs leaves the record for the resume.
    async fn save_background_calls(&self, started: &[String]) -> Result<(), CheckpointError> {
        self.checkpoint_put(BACKGROUND_CALLS_KEY, &started)?;
        let (Some(attached), Some(key)) = (self.attached(), self.call_key()) else {
            return Ok(());
        };
        // The wait for a write under way (the checkpointer's) counts in the bound too.
        let save = async {
            let _writes = self.lock_writes().await;
            let json = self.checkpoint().to_json()?;
            attached.store.save(key, &attached.token, &json).await
        };
        match tokio::time::timeout(RECORD_TIMEOUT, save).await {
            Ok(Ok(Fenced::Owner)) => Ok(()),
            Ok(Ok(Fenced::Lost)) => {
                attached.lost.set();
                Err(CheckpointError::Superseded)
            }
            Ok(Err(error)) => Err(CheckpointError::Store(error)),
            Err(_) => Err(CheckpointError::StoreTimeout(RECORD_TIMEOUT)),
        }
    }

    /// Waits for the call's checkpoint writes to be this caller's alone; take the snapshot
    /// to write under it.
    pub(crate) async fn lock_writes(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.writes.lock().await
    }

    /// Every outcome held has been told to the caller (outside a turn).
    pub(crate) fn outcomes_told(&self) {
        let told = {
            let mut state = self.state();
            let held = !state.kept.untold.is_empty();
            state.kept.untold.clear();
            state.kept.changed |= held;
            held
        };
        if told {
            self.mark_dirty();
        }
    }

    /// The note telling the model the outcomes the caller has not heard, if any.
    pub(crate) fn untold_note(&self) -> Option<String> {
        let state = self.state();
        if state.kept.untold.is_empty() {
            return None;
        }
        let mut note = String::from(
            "[Not yet told to the caller: the connection dropped before these were said. Tell \
             the caller now; do not redo them.]",
        );
        for outcome in &state.kept.untold {
            note.push_str("\n- ");
            note.push_str(outcome);
        }
        Some(note)
    }

    /// The call's checkpoint as it stands.
    pub fn checkpoint(&self) -> Checkpoint {
        let state = self.state();
        let kept = &state.kept;
        Checkpoint {
            turns: kept.turns,
            routers: kept.routers.clone(),
            handoff: kept.handoff.clone(),
            untold: kept.untold.clone(),
            nodes: kept.nodes.clone(),
        }
    }

    /// Wakes the checkpointer, if any (nothing else when the call has no store).
    fn mark_dirty(&self) {
        if let Some(attached) = &self.inner.store {
            attached.dirty.notify_one();
        }
    }

    pub(crate) fn attached(&self) -> Option<&Attached> {
        self.inner.store.as_ref()
    }

    /// Waits until a newer connection owns this call (forever for a call without a store).
    pub async fn superseded(&self) {
        match &self.inner.store {
            Some(attached) => attached.lost.wait().await,
            None => std::future::pending().await,
        }
    }

    /// Whether the call was ended or transferred.
    pub fn is_handed_off(&self) -> bool {
        self.state().handed_off
    }

    /// Whether a hand-off was asked for: already sent, or held until the current generation
    /// completes. An agent stops speaking once this is true.
    pub fn handoff_requested(&self) -> bool {
        let state = self.state();
        state.handed_off || state.pending.is_some()
    }

    /// Says `text` to the caller now, outside a turn (`agent.speak`).
    pub async fn speak(&self, text: impl Into<String>) -> Result<(), CallControlError> {
        self.send(EventBody::Speak { text: text.into() }).await
    }

    /// Hangs up after the current turn (`agent.end_call`).
    pub async fn end_call(&self) -> Result<(), CallControlError> {
        self.hand_off(Handoff::EndCall).await
    }

    /// Transfers the call after the current turn (`agent.transfer_call`).
    pub async fn transfer_call(
        &self,
        number: impl Into<String>,
        options: TransferOptions,
        on_hold_music: Option<HoldMusic>,
    ) -> Result<(), CallControlError> {
        self.hand_off(Handoff::Transfer(TransferCall {
            transfer_call_number: number.into(),
            transfer_options: options,
            on_hold_music,
        }))
        .await
    }

    /// Mutes the caller's microphone on the platform.
    pub async fn mute_user(&self) -> Result<(), CallControlError> {
        self.send(EventBody::MuteUser).await
    }

    /// Unmutes the caller's microphone on the platform.
    pub async fn unmute_user(&self) -> Result<(), CallControlError> {
        self.send(EventBody::UnmuteUser).await
    }

    async fn hand_off(&self, handoff: Handoff) -> Result<(), CallControlError> {
        {
            let mut state = self.state();
            if state.handed_off {
                return Err(CallControlError::HandedOff);
            }
            if state.generating.is_some() {
                // Held until the generation completes; the last request wins.
                state.pending = Some(handoff);
                return Ok(());
            }
            state.handed_off = true;
            state.kept.handoff = Some(handoff.clone());
        }
        self.mark_dirty();
        self.send_raw(handoff.into_body()).await
    }

    async fn send(&self, body: EventBody) -> Result<(), CallControlError> {
        if self.is_handed_off() {
            return Err(CallControlError::HandedOff);
        }
        self.send_raw(body).await
    }

    async fn send_raw(&self, body: EventBody) -> Result<(), CallControlError> {
        self.inner
            .outbound
            .send(Box::new(Event::now(body)))
            .await
            .map_err(|_| CallControlError::SessionEnded)
    }

    /// Marks the start of a generation: hand-offs are held from now on.
    pub(crate) fn begin_generation(&self, turn_id: &str) {
        let mut state = self.state();
        state.generating = Some(turn_id.to_owned());
        state.pending = None;
    }

    /// Ends a generation; returns the held hand-off to send if it completed, dropping it if
    /// it was interrupted.
    pub(crate) fn finish_generation(&self, completed: bool) -> Option<Handoff> {
        let mut state = self.state();
        state.generating = None;
        let pending = state.pending.take();
        match pending {
            Some(handoff) if completed && !state.handed_off => {
                state.handed_off = true;
                state.kept.handoff = Some(handoff.clone());
                Some(handoff)
            }
            _ => None,
        }
    }
}

/// The platform's call id, if it gave a non-empty one.
fn call_key(init: &SystemInit) -> Option<String> {
    init.session_context
        .caller
        .as_ref()
        .and_then(|caller| caller.call_id.as_deref())
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

impl std::fmt::Debug for CallControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallControl")
            .field(
                "conversation_type",
                &self.inner.init.session_context.conversation_type,
            )
            .field("handed_off", &self.is_handed_off())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SessionSetup;

    fn call() -> CallControl {
        SessionSetup::dry_run().with_call_key("k").call().clone()
    }

    #[test]
    fn crew_values_round_trip_and_stay_bounded() {
        let call = call();
        assert_eq!(call.call_key(), Some("k"));
        call.checkpoint_put("plan", &vec![50, 50, 50])
            .expect("fits");
        assert_eq!(
            call.checkpoint_get::<Vec<u32>>("plan").expect("readable"),
            Some(vec![50, 50, 50])
        );
        let big = "x".repeat(MAX_CREW_CHECKPOINT_BYTES);
        assert!(matches!(
            call.checkpoint_put("big", &big),
            Err(CheckpointError::TooLarge { .. })
        ));
        // Refused without losing what was there; replacing a value frees its old size.
        assert!(
            call.checkpoint_get::<Vec<u32>>("plan")
                .expect("readable")
                .is_some()
        );
        for _ in 0..1_000 {
            call.checkpoint_put("plan", &"y".repeat(1_000))
                .expect("a replacement fits");
        }
        for n in 0..MAX_UNTOLD_OUTCOMES {
            call.push_outcome(format!("outcome {n}")).expect("fits");
        }
        assert!(matches!(
            call.push_outcome("one more"),
            Err(CheckpointError::TooManyOutcomes { .. })
        ));
        call.turn_finished(true);
        assert!(
            call.untold_outcomes().is_empty(),
            "a completed turn told them"
        );
    }
}
