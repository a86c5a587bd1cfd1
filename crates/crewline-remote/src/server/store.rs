//! Where tasks, their events and their tool calls live: the [`TaskStore`] trait and the
//! in-memory default, [`MemoryStore`].

use std::time::Duration;

use async_trait::async_trait;
use crewline_core::ErrorDetail;
use serde_json::Value;

use crate::wire::{CustomTool, TaskEvent, TaskStatus, ToolAnswer};

mod memory;

pub use memory::MemoryStore;

/// A task as the store keeps it (without its events).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSnapshot {
    /// The task's id.
    pub id: String,
    /// Who created it (the credential's name, or `anonymous`): the per-caller limits count
    /// its tasks and bytes against this owner.
    pub owner: String,
    /// Its status.
    pub status: TaskStatus,
    /// What the client asked for, if anything.
    pub task: Option<String>,
    /// The client's tools.
    pub custom_tools: Vec<CustomTool>,
    /// What the call concluded, once the task has finished (set by the crew; see
    /// [`TaskOutput`](crate::TaskOutput)).
    pub output: Option<Value>,
}

impl TaskSnapshot {
    /// A new task of `owner`, waiting for a call, under a fresh random id.
    pub fn waiting(owner: &str, task: Option<String>, custom_tools: Vec<CustomTool>) -> Self {
        Self {
            id: format!("task_{}", uuid::Uuid::new_v4().simple()),
            owner: owner.to_owned(),
            status: TaskStatus::Waiting,
            task,
            custom_tools,
            output: None,
        }
    }

    /// The bytes the task's request holds (id, owner, text, tool specs): what every store
    /// charges a new task against its budgets, so that the stores agree.
    pub fn request_bytes(&self) -> usize {
        self.id.len() + self.owner.len() + json_len(&self.task) + json_len(&self.custom_tools)
    }
}

/// The length of a value as JSON, without building the text: what stores count against
/// their byte budgets.
pub use crewline_core::json_len;

/// What a poll found: the task and its events after the cursor.
#[derive(Debug, Clone, PartialEq)]
pub struct Polled {
    /// The task.
    pub task: TaskSnapshot,
    /// Its events after the cursor, oldest first.
    pub events: Vec<TaskEvent>,
}

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No task has this id (never created, or expired).
    #[error("no task `{0}` (it was never created, or it expired)")]
    UnknownTask(String),
    /// The task has no event with this id (never emitted, or pruned).
    #[error("task `{task}` has no event `{event}` (unknown, or too old and pruned)")]
    UnknownEvent {
        /// The task.
        task: String,
        /// The event.
        event: String,
    },
    /// The task never registered a tool by this name, so no client would answer a call of it.
    #[error("task `{task}` registered no tool named `{tool}`")]
    UnknownTool {
        /// The task.
        task: String,
        /// The tool asked for.
        tool: String,
    },
    /// The event is not a tool call, so it takes no answer.
    #[error("event `{0}` is not a tool call; only tool calls take answers")]
    NotAToolCall(String),
    /// The tool call already has an answer.
    #[error("tool call `{0}` was already answered")]
    AlreadyAnswered(String),
    /// Nothing waits for the answer any more: the call timed out or was cancelled.
    #[error("tool call `{0}` is no longer waiting for an answer (it timed out or was cancelled)")]
    NotWaiting(String),
    /// A call already runs this task.
    #[error("task `{0}` is already attached to a call")]
    AlreadyAttached(String),
    /// The task has finished.
    #[error("task `{id}` has finished ({status})")]
    Finished {
        /// The task.
        id: String,
        /// How it finished.
        status: TaskStatus,
    },
    /// The store holds as many tasks as it may.
    #[error("the task store is full ({0} tasks); try again later")]
    Full(usize),
    /// The store's tasks hold as many bytes as they may, all callers together.
    #[error("the task store is full ({0} bytes held); try again later")]
    FullBytes(usize),
    /// The caller already holds as many tasks as one caller may.
    #[error(
        "this caller already holds {0} tasks, the most one caller may; finish or cancel one \
         (DELETE /task/{{id}}) before creating another"
    )]
    TooManyTasks(usize),
    /// The caller's tasks already hold as many bytes as one caller's may.
    #[error(
        "this caller's tasks would hold more than {0} bytes, the most one caller's may; finish \
         or cancel a task, or send less"
    )]
    OwnerBudget(usize),
    /// The task would hold more bytes (its tools, events and pending answers) than a task may.
    #[error(
        "a task may hold at most {0} bytes (its tools, tool calls and pending answers); this \
         would exceed it"
    )]
    TaskBudget(usize),
    /// The backend failed (for stores other than the in-memory one): the operation may or
    /// may not have taken effect (a reply lost to a timeout after the request went out).
    /// The cause is a detail (its words name the store and what it met, the typed error
    /// under it when there is one) so that a store error stays `Clone` and comparable.
    #[error("the task store failed")]
    Backend(#[source] ErrorDetail),
    /// The backend could not be reached and the operation certainly changed nothing (it was
    /// never sent).
    #[error("the task store is unreachable")]
    Unreachable(#[source] ErrorDetail),
}

/// What withdrawing a tool call found ([`TaskStore::withdraw`]): whether its client can have
/// run it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Withdrawn {
    /// No poll ever returned the call: no client saw it, and none ever will (it is removed).
    NeverHandedOut,
    /// A poll returned the call: its client may have run it. It no longer waits; a late
    /// answer is refused.
    HandedOut,
    /// Its answer had arrived: here it is, taken.
    Answered(ToolAnswer),
}

/// Keeps tasks, their events and the answers to their tool calls.
///
/// The in-memory [`MemoryStore`] is the default; a shared store (Redis, a database) lets
/// several crew servers behind a load balancer serve one task API.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Creates a task in [`TaskStatus::Waiting`] for `owner` (the credential that asked; the
    /// per-caller limits count against it).
    async fn create(
        &self,
        owner: &str,
        task: Option<String>,
        custom_tools: Vec<CustomTool>,
    ) -> Result<TaskSnapshot, StoreError>;

    /// The task `id`.
    async fn get(&self, id: &str) -> Result<TaskSnapshot, StoreError>;

    /// Marks a waiting task as run by a call ([`TaskStatus::Running`]).
    async fn attach(&self, id: &str) -> Result<TaskSnapshot, StoreError>;

    /// Attaches task `id` to the platform call `call` (its call id; `""` for none) as the
    /// attachment `token`, leased for `lease` (renewed with [`renew`](Self::renew) while the
    /// call lives): a waiting task; a running one attached by the same `call` (a reconnect,
    /// on any replica); or a running one whose lease lapsed (its replica died). Another call
    /// gets [`StoreError::AlreadyAttached`] while the lease lives. Taking a running task over
    /// settles the calls its previous attachment left waiting: one no poll handed out is
    /// removed, one handed out is abandoned (it may have run).
    ///
    /// The default attaches without a lease ([`attach`](Self::attach)): no re-attach.
    async fn attach_leased(
        &self,
        id: &str,
        call: &str,
        token: &str,
        lease: Duration,
    ) -> Result<TaskSnapshot, StoreError> {
        let _ = (call, token, lease);
        self.attach(id).await
    }

    /// Extends the lease of the attachment `token` on task `id` to `lease` from now;
    /// [`StoreError::AlreadyAttached`] when another attachment holds the task now.
    async fn renew(&self, id: &str, token: &str, lease: Duration) -> Result<(), StoreError> {
        let _ = (id, token, lease);
        Ok(())
    }

    /// Finishes the task as [`finish`](Self::finish) does, but only while it is still the
    /// attachment `token`'s (a call that re-attached it since keeps it running); whether it
    /// finished it.
    async fn release(
        &self,
        id: &str,
        token: &str,
        status: TaskStatus,
        output: Option<Value>,
    ) -> Result<bool, StoreError> {
        let _ = token;
        self.finish(id, status, output).await.map(|_| true)
    }

    /// Finishes the task with `status` and what it concluded (`output`, counted against the
    /// task's bytes: when it does not fit, the task finishes without it); pending tool calls
    /// stop waiting. Finishing a finished task changes nothing.
    async fn finish(
        &self,
        id: &str,
        status: TaskStatus,
        output: Option<Value>,
    ) -> Result<TaskSnapshot, StoreError>;

    /// Adds a `tool_call` event for `tool` with `input`; its answer is then awaited with
    /// [`wait_answer`](Self::wait_answer). A `tool` the task did not register is
    /// [`StoreError::UnknownTool`]: no client would ever answer it.
    async fn emit_tool_call(
        &self,
        id: &str,
        tool: &str,
        input: Value,
    ) -> Result<TaskEvent, StoreError>;

    /// The task and its events with a timestamp after `after`; when there are none and the
    /// task runs, waits up to `wait` for one. Every tool call returned is marked handed out
    /// (see [`withdraw`](Self::withdraw)).
    async fn poll(&self, id: &str, after: u64, wait: Duration) -> Result<Polled, StoreError>;

    /// Records the client's answer to the tool call `event`.
    async fn answer(&self, id: &str, event: &str, answer: ToolAnswer) -> Result<(), StoreError>;

    /// Waits for the answer to the tool call `event` (the caller's timeout bounds the wait).
    async fn wait_answer(&self, id: &str, event: &str) -> Result<ToolAnswer, StoreError>;

    /// Stops waiting for the answer to `event` (its caller timed out or was cancelled); a later
    /// answer gets [`StoreError::NotWaiting`]. Synchronous, so it can run in `Drop`.
    fn abandon(&self, id: &str, event: &str);

    /// Ends the tool call `event` for a caller that stops waiting, saying whether its client
    /// can have run it: a call no poll ever returned is removed (so none ever will) and is
    /// [`Withdrawn::NeverHandedOut`]; one a poll returned is abandoned and
    /// [`Withdrawn::HandedOut`]; one answered gives its answer. The answer is what tells a
    /// model "not called" apart from "outcome unknown", so it must be atomic with `poll`'s
    /// hand-out.
    ///
    /// The default abandons the call and says it was handed out: a store that does not track
    /// hand-outs never claims a call was not run.
    async fn withdraw(&self, id: &str, event: &str) -> Result<Withdrawn, StoreError> {
        self.abandon(id, event);
        Ok(Withdrawn::HandedOut)
    }

    /// [`withdraw`](Self::withdraw) at once, for a caller cut short (a barge-in dropped its
    /// future, so it cannot wait): what it found, or `None` when the store cannot tell
    /// without a round trip (or failed). Synchronous, so it can run in `Drop`.
    ///
    /// The default cannot tell: the caller then reads an unknown outcome and withdraws the
    /// call in the background (so no client takes it later).
    fn withdraw_now(&self, id: &str, event: &str) -> Option<Withdrawn> {
        let _ = (id, event);
        None
    }
}

/// The limits of a [`MemoryStore`].
///
/// Every limit bounds memory a caller can make the server hold: tasks per caller and in all,
/// and the bytes they hold (the task's text and tool specs, its tool-call events, answers not
/// yet taken) per task, per caller and in all. A request over a limit is refused with the
/// reason; nothing already accepted is dropped for it, except the oldest events of a task
/// (settled tool calls, as [`max_events`](Self::max_events) already does) and a caller's own
/// finished tasks (which only linger to be read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Most tasks kept at once, all callers together (default 10 000).
    pub max_tasks: usize,
    /// Most tasks one caller (one credential) may hold at once, finished ones lingering
    /// included (default 1 000, a tenth of `max_tasks`, so one caller cannot fill the store).
    pub max_tasks_per_owner: usize,
    /// Most bytes one task may hold (default 1 MiB).
    pub max_task_bytes: usize,
    /// Most bytes one caller's tasks may hold together (default 64 MiB, a quarter of
    /// `max_total_bytes`).
    pub max_owner_bytes: usize,
    /// Most bytes all tasks may hold together (default 256 MiB).
    pub max_total_bytes: usize,
    /// Most events kept per task; the oldest go first (default 256).
    pub max_events: usize,
    /// How long a task may wait for a call to attach it (default 10 min).
    pub waiting_ttl: Duration,
    /// How long a task may live at all (default 4 h).
    pub max_age: Duration,
    /// How long a finished task stays readable (default 5 min).
    pub linger: Duration,
}

impl Default for StoreLimits {
    fn default() -> Self {
        Self {
            max_tasks: 10_000,
            max_tasks_per_owner: 1_000,
            // A voice agent's tools are a few specs of a few KiB, its calls and answers are
            // what a model reads aloud: 1 MiB is far above a real task and far below harm.
            max_task_bytes: 1 << 20,
            max_owner_bytes: 64 << 20,
            max_total_bytes: 256 << 20,
            max_events: 256,
            waiting_ttl: Duration::from_secs(600),
            max_age: Duration::from_secs(4 * 3600),
            linger: Duration::from_secs(300),
        }
    }
}
