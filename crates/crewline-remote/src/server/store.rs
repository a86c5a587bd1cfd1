//! Where tasks, their events and their tool calls live: the [`TaskStore`] trait and the
//! in-memory default, [`MemoryStore`].

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::wire::{CustomTool, TOOL_CALL, TaskEvent, TaskStatus, ToolAnswer, now_ms};

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
}

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
    /// The backend failed (for stores other than the in-memory one).
    #[error("the task store failed: {0}")]
    Backend(String),
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

    /// Finishes the task with `status`; pending tool calls stop waiting. Finishing a finished
    /// task changes nothing.
    async fn finish(&self, id: &str, status: TaskStatus) -> Result<TaskSnapshot, StoreError>;

    /// Adds a `tool_call` event for `tool` with `input`; its answer is then awaited with
    /// [`wait_answer`](Self::wait_answer).
    async fn emit_tool_call(
        &self,
        id: &str,
        tool: &str,
        input: Value,
    ) -> Result<TaskEvent, StoreError>;

    /// The task and its events with a timestamp after `after`; when there are none and the
    /// task runs, waits up to `wait` for one.
    async fn poll(&self, id: &str, after: u64, wait: Duration) -> Result<Polled, StoreError>;

    /// Records the client's answer to the tool call `event`.
    async fn answer(&self, id: &str, event: &str, answer: ToolAnswer) -> Result<(), StoreError>;

    /// Waits for the answer to the tool call `event` (the caller's timeout bounds the wait).
    async fn wait_answer(&self, id: &str, event: &str) -> Result<ToolAnswer, StoreError>;

    /// Stops waiting for the answer to `event` (its caller timed out or was cancelled); a later
    /// answer gets [`StoreError::NotWaiting`]. Synchronous, so it can run in `Drop`.
    fn abandon(&self, id: &str, event: &str);
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

/// Where a tool call is.
#[derive(Debug)]
enum CallState {
    Pending,
    /// Answered; the answer (and the bytes it holds) until its waiter takes it.
    Answered(Option<(ToolAnswer, usize)>),
    Abandoned,
}

struct TaskEntry {
    snapshot: TaskSnapshot,
    created: Instant,
    finished: Option<Instant>,
    /// The events, each with the bytes it holds.
    events: VecDeque<(TaskEvent, usize)>,
    last_timestamp: u64,
    calls: HashMap<String, CallState>,
    /// The bytes this task holds: its request, its events, its answers not yet taken.
    bytes: usize,
    /// Bumped on every change; pollers and waiters watch it.
    changed: watch::Sender<u64>,
}

impl TaskEntry {
    fn touch(&self) {
        self.changed.send_modify(|version| *version += 1);
    }

    fn expired(&self, limits: &StoreLimits, now: Instant) -> bool {
        let age = now.duration_since(self.created);
        match (self.snapshot.status, self.finished) {
            (_, Some(finished)) => now.duration_since(finished) >= limits.linger,
            (TaskStatus::Waiting, None) => age >= limits.waiting_ttl,
            _ => age >= limits.max_age,
        }
    }

    /// Drops the oldest event; a pruned call that still waits keeps its state, the others go
    /// with it. Returns the bytes freed.
    fn drop_event(&mut self, index: usize) -> usize {
        let Some((old, size)) = self.events.remove(index) else {
            return 0;
        };
        if !matches!(self.calls.get(&old.id), Some(CallState::Pending)) {
            self.calls.remove(&old.id);
        }
        self.bytes -= size;
        size
    }
}

/// What one caller holds.
#[derive(Debug, Default, Clone, Copy)]
struct OwnerUse {
    tasks: usize,
    bytes: usize,
}

/// What the store holds, per caller and in all.
#[derive(Default)]
struct Usage {
    owners: HashMap<String, OwnerUse>,
    bytes: usize,
}

impl Usage {
    /// Charges `add` more bytes to `entry` if every budget allows it.
    fn reserve(
        &mut self,
        limits: &StoreLimits,
        entry: &mut TaskEntry,
        add: usize,
    ) -> Result<(), StoreError> {
        if entry.bytes.saturating_add(add) > limits.max_task_bytes {
            return Err(StoreError::TaskBudget(limits.max_task_bytes));
        }
        let owner = self
            .owners
            .get(&entry.snapshot.owner)
            .map_or(0, |used| used.bytes);
        if owner.saturating_add(add) > limits.max_owner_bytes {
            return Err(StoreError::OwnerBudget(limits.max_owner_bytes));
        }
        if self.bytes.saturating_add(add) > limits.max_total_bytes {
            return Err(StoreError::FullBytes(limits.max_total_bytes));
        }
        self.bytes += add;
        self.owners
            .entry(entry.snapshot.owner.clone())
            .or_default()
            .bytes += add;
        entry.bytes += add;
        Ok(())
    }

    /// Gives back `freed` bytes `owner`'s task no longer holds.
    fn release(&mut self, owner: &str, freed: usize) {
        self.bytes -= freed;
        if let Some(used) = self.owners.get_mut(owner) {
            used.bytes -= freed;
        }
    }

    /// Forgets a task that leaves the store.
    fn forget(&mut self, entry: &TaskEntry) {
        self.bytes -= entry.bytes;
        if let Some(used) = self.owners.get_mut(&entry.snapshot.owner) {
            used.bytes -= entry.bytes;
            used.tasks -= 1;
            if used.tasks == 0 {
                self.owners.remove(&entry.snapshot.owner);
            }
        }
    }
}

/// The in-memory [`TaskStore`]: bounded (tasks and bytes per caller and in all, bytes and
/// events per task; see [`StoreLimits`]) and self-cleaning (waiting tasks expire, finished
/// ones linger a while); cheap to clone.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    limits: StoreLimits,
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, TaskEntry>,
    usage: Usage,
}

impl Inner {
    fn remove(&mut self, id: &str) {
        if let Some(entry) = self.tasks.remove(id) {
            self.usage.forget(&entry);
        }
    }

    /// Drops every expired task.
    fn sweep(&mut self, limits: &StoreLimits) {
        let now = Instant::now();
        let expired: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, entry)| entry.expired(limits, now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.remove(&id);
        }
    }

    /// Drops `owner`'s oldest finished task (it only lingers to be read); whether there was
    /// one.
    fn evict_finished(&mut self, owner: &str) -> bool {
        let oldest = self
            .tasks
            .iter()
            .filter(|(_, entry)| entry.snapshot.owner == owner)
            .filter_map(|(id, entry)| entry.finished.map(|at| (at, id)))
            .min()
            .map(|(_, id)| id.clone());
        match oldest {
            Some(id) => {
                self.remove(&id);
                true
            }
            None => false,
        }
    }

    /// Makes room for `owner` after a refusal: expired tasks go, then `owner`'s own finished
    /// ones while the refusal was its own budget's. Whether anything went.
    fn make_room(&mut self, limits: &StoreLimits, owner: &str, refusal: &StoreError) -> bool {
        let before = self.tasks.len();
        self.sweep(limits);
        if matches!(refusal, StoreError::OwnerBudget(_)) {
            self.evict_finished(owner);
        }
        self.tasks.len() < before
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("MemoryStore")
            .field("tasks", &inner.tasks.len())
            .field("bytes", &inner.usage.bytes)
            .field("limits", &self.limits)
            .finish()
    }
}

/// The bytes `value` takes as JSON: what holding it costs, near enough.
fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing into a counter cannot fail, and these values serialise without error.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

impl MemoryStore {
    /// An empty store with default limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store with `limits`.
    pub fn with_limits(limits: StoreLimits) -> Self {
        Self {
            inner: Arc::default(),
            limits,
        }
    }

    /// How many tasks the store holds (expired ones included until the next sweep).
    pub fn len(&self) -> usize {
        self.lock().tasks.len()
    }

    /// Whether the store holds no task.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many bytes the store's tasks hold (as counted against [`StoreLimits`]).
    pub fn bytes(&self) -> usize {
        self.lock().usage.bytes
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every update is one step),
        // so a poisoned lock is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the live task `id`. When `f` is refused for a caller's or the store's byte
    /// budget, expired tasks (and the caller's own finished ones) make room and `f` runs once
    /// more; so what `f` changes before it is refused must be safe to do twice.
    fn with_task<T>(
        &self,
        id: &str,
        mut f: impl FnMut(&mut TaskEntry, &mut Usage) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut inner = self.lock();
        let mut retried = false;
        loop {
            let now = Instant::now();
            let Inner { tasks, usage } = &mut *inner;
            let result = match tasks.get_mut(id) {
                Some(entry) if !entry.expired(&self.limits, now) => f(entry, usage),
                Some(_) => {
                    if let Some(entry) = tasks.remove(id) {
                        usage.forget(&entry);
                    }
                    return Err(StoreError::UnknownTask(id.to_owned()));
                }
                None => return Err(StoreError::UnknownTask(id.to_owned())),
            };
            match result {
                Err(refusal @ (StoreError::OwnerBudget(_) | StoreError::FullBytes(_)))
                    if !retried =>
                {
                    let owner = tasks
                        .get(id)
                        .map(|entry| entry.snapshot.owner.clone())
                        .unwrap_or_default();
                    retried = true;
                    if !inner.make_room(&self.limits, &owner, &refusal) {
                        return Err(refusal);
                    }
                }
                result => return result,
            }
        }
    }

    /// Checks the per-caller and store-wide task counts for a new task of `owner`, making
    /// room (expired tasks, then `owner`'s own finished ones) where that helps.
    fn admit(&self, inner: &mut Inner, owner: &str) -> Result<(), StoreError> {
        let held = |inner: &Inner| inner.usage.owners.get(owner).map_or(0, |used| used.tasks);
        if held(inner) >= self.limits.max_tasks_per_owner {
            inner.sweep(&self.limits);
            while held(inner) >= self.limits.max_tasks_per_owner {
                if !inner.evict_finished(owner) {
                    return Err(StoreError::TooManyTasks(self.limits.max_tasks_per_owner));
                }
            }
        }
        if inner.tasks.len() >= self.limits.max_tasks {
            inner.sweep(&self.limits);
            if inner.tasks.len() >= self.limits.max_tasks {
                return Err(StoreError::Full(self.limits.max_tasks));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl TaskStore for MemoryStore {
    async fn create(
        &self,
        owner: &str,
        task: Option<String>,
        custom_tools: Vec<CustomTool>,
    ) -> Result<TaskSnapshot, StoreError> {
        let snapshot = TaskSnapshot {
            id: format!("task_{}", uuid::Uuid::new_v4().simple()),
            owner: owner.to_owned(),
            status: TaskStatus::Waiting,
            task,
            custom_tools,
        };
        let size = snapshot.id.len()
            + snapshot.owner.len()
            + json_len(&snapshot.task)
            + json_len(&snapshot.custom_tools);
        if size > self.limits.max_task_bytes {
            return Err(StoreError::TaskBudget(self.limits.max_task_bytes));
        }
        let mut inner = self.lock();
        self.admit(&mut inner, owner)?;
        let (changed, _) = watch::channel(0);
        let mut entry = TaskEntry {
            snapshot: snapshot.clone(),
            created: Instant::now(),
            finished: None,
            events: VecDeque::new(),
            last_timestamp: 0,
            calls: HashMap::new(),
            bytes: 0,
            changed,
        };
        if let Err(refusal) = inner.usage.reserve(&self.limits, &mut entry, size) {
            if !inner.make_room(&self.limits, owner, &refusal) {
                return Err(refusal);
            }
            inner.usage.reserve(&self.limits, &mut entry, size)?;
        }
        inner
            .usage
            .owners
            .entry(owner.to_owned())
            .or_default()
            .tasks += 1;
        inner.tasks.insert(snapshot.id.clone(), entry);
        Ok(snapshot)
    }

    async fn get(&self, id: &str) -> Result<TaskSnapshot, StoreError> {
        self.with_task(id, |entry, _| Ok(entry.snapshot.clone()))
    }

    async fn attach(&self, id: &str) -> Result<TaskSnapshot, StoreError> {
        self.with_task(id, |entry, _| match entry.snapshot.status {
            TaskStatus::Waiting => {
                entry.snapshot.status = TaskStatus::Running;
                entry.touch();
                Ok(entry.snapshot.clone())
            }
            TaskStatus::Running => Err(StoreError::AlreadyAttached(id.to_owned())),
            status => Err(StoreError::Finished {
                id: id.to_owned(),
                status,
            }),
        })
    }

    async fn finish(&self, id: &str, status: TaskStatus) -> Result<TaskSnapshot, StoreError> {
        self.with_task(id, |entry, _| {
            if !entry.snapshot.status.is_terminal() {
                entry.snapshot.status = status;
                entry.finished = Some(Instant::now());
                for state in entry.calls.values_mut() {
                    if matches!(state, CallState::Pending) {
                        *state = CallState::Abandoned;
                    }
                }
                entry.touch();
            }
            Ok(entry.snapshot.clone())
        })
    }

    async fn emit_tool_call(
        &self,
        id: &str,
        tool: &str,
        input: Value,
    ) -> Result<TaskEvent, StoreError> {
        let max_events = self.limits.max_events.max(1);
        let limits = self.limits;
        let event = TaskEvent {
            id: format!("evt_{}", uuid::Uuid::new_v4().simple()),
            name: TOOL_CALL.to_owned(),
            payload: json!({"name": tool, "input": input}),
            timestamp: None,
        };
        let size = json_len(&event);
        self.with_task(id, |entry, usage| {
            if entry.snapshot.status.is_terminal() {
                return Err(StoreError::Finished {
                    id: id.to_owned(),
                    status: entry.snapshot.status,
                });
            }
            let owner = entry.snapshot.owner.clone();
            while entry.events.len() >= max_events {
                let freed = entry.drop_event(0);
                usage.release(&owner, freed);
            }
            // Over the task's budget, settled events (the oldest first) make room, as they
            // would for `max_events`; calls still waiting for an answer are never dropped.
            while entry.bytes.saturating_add(size) > limits.max_task_bytes {
                let Some(index) = entry
                    .events
                    .iter()
                    .position(|(e, _)| !matches!(entry.calls.get(&e.id), Some(CallState::Pending)))
                else {
                    break;
                };
                let freed = entry.drop_event(index);
                usage.release(&owner, freed);
            }
            usage.reserve(&limits, entry, size)?;
            // Strictly increasing per task, so `event_t` = the last timestamp seen misses
            // nothing, even for several events in one millisecond.
            let timestamp = now_ms().max(entry.last_timestamp + 1);
            entry.last_timestamp = timestamp;
            let mut event = event.clone();
            event.timestamp = Some(timestamp);
            entry.calls.insert(event.id.clone(), CallState::Pending);
            entry.events.push_back((event.clone(), size));
            entry.touch();
            Ok(event)
        })
    }

    async fn poll(&self, id: &str, after: u64, wait: Duration) -> Result<Polled, StoreError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut changed = self.with_task(id, |entry, _| Ok(entry.changed.subscribe()))?;
        loop {
            changed.borrow_and_update();
            let polled = self.with_task(id, |entry, _| {
                Ok(Polled {
                    task: entry.snapshot.clone(),
                    events: entry
                        .events
                        .iter()
                        .map(|(e, _)| e)
                        .filter(|e| e.timestamp.unwrap_or(0) > after)
                        .cloned()
                        .collect(),
                })
            })?;
            if !polled.events.is_empty() || polled.task.status.is_terminal() {
                return Ok(polled);
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                // The wait is over, or the task is gone (the next look says which).
                Ok(Err(_)) | Err(_) => {
                    return self.with_task(id, |entry, _| {
                        Ok(Polled {
                            task: entry.snapshot.clone(),
                            events: Vec::new(),
                        })
                    });
                }
            }
        }
    }

    async fn answer(&self, id: &str, event: &str, answer: ToolAnswer) -> Result<(), StoreError> {
        let limits = self.limits;
        let size = json_len(&answer);
        let mut answer = Some(answer);
        self.with_task(id, |entry, usage| {
            let Some(state) = entry.calls.get(event) else {
                return Err(if entry.events.iter().any(|(e, _)| e.id == event) {
                    StoreError::NotAToolCall(event.to_owned())
                } else {
                    StoreError::UnknownEvent {
                        task: id.to_owned(),
                        event: event.to_owned(),
                    }
                });
            };
            match state {
                CallState::Pending => {
                    // The answer is held until its waiter takes it: it counts.
                    usage.reserve(&limits, entry, size)?;
                    let taken = answer.take().map(|answer| (answer, size));
                    entry
                        .calls
                        .insert(event.to_owned(), CallState::Answered(taken));
                    entry.touch();
                    Ok(())
                }
                CallState::Answered(_) => Err(StoreError::AlreadyAnswered(event.to_owned())),
                CallState::Abandoned => Err(StoreError::NotWaiting(event.to_owned())),
            }
        })
    }

    async fn wait_answer(&self, id: &str, event: &str) -> Result<ToolAnswer, StoreError> {
        let mut changed = self.with_task(id, |entry, _| Ok(entry.changed.subscribe()))?;
        loop {
            changed.borrow_and_update();
            let answer = self.with_task(id, |entry, usage| {
                let answer = match entry.calls.get_mut(event) {
                    Some(CallState::Pending) => return Ok(None),
                    Some(CallState::Answered(answer)) => answer
                        .take()
                        .ok_or_else(|| StoreError::AlreadyAnswered(event.to_owned()))?,
                    Some(CallState::Abandoned) => {
                        return Err(StoreError::NotWaiting(event.to_owned()));
                    }
                    None => {
                        return Err(StoreError::UnknownEvent {
                            task: id.to_owned(),
                            event: event.to_owned(),
                        });
                    }
                };
                let (answer, size) = answer;
                entry.bytes -= size;
                usage.release(&entry.snapshot.owner, size);
                Ok(Some(answer))
            })?;
            if let Some(answer) = answer {
                return Ok(answer);
            }
            if changed.changed().await.is_err() {
                return Err(StoreError::UnknownTask(id.to_owned()));
            }
        }
    }

    fn abandon(&self, id: &str, event: &str) {
        // The only error is an unknown (or expired) task, which has no call left to abandon.
        let _ = self.with_task(id, |entry, _| {
            if let Some(state) = entry.calls.get_mut(event)
                && matches!(state, CallState::Pending)
            {
                *state = CallState::Abandoned;
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(limits: StoreLimits) -> MemoryStore {
        MemoryStore::with_limits(limits)
    }

    #[tokio::test]
    async fn a_tool_call_is_answered_once() {
        let store = MemoryStore::new();
        let task = store.create("a", None, Vec::new()).await.unwrap();
        store.attach(&task.id).await.unwrap();
        let event = store
            .emit_tool_call(&task.id, "t", json!({"a": 1}))
            .await
            .unwrap();
        store
            .answer(&task.id, &event.id, ToolAnswer::ok(json!("fine")))
            .await
            .unwrap();
        assert_eq!(
            store
                .answer(&task.id, &event.id, ToolAnswer::ok(json!("again")))
                .await,
            Err(StoreError::AlreadyAnswered(event.id.clone()))
        );
        let answer = store.wait_answer(&task.id, &event.id).await.unwrap();
        assert_eq!(answer.output, json!("fine"));
    }

    #[tokio::test]
    async fn abandoned_calls_refuse_late_answers() {
        let store = MemoryStore::new();
        let task = store.create("a", None, Vec::new()).await.unwrap();
        let event = store
            .emit_tool_call(&task.id, "t", json!({}))
            .await
            .unwrap();
        store.abandon(&task.id, &event.id);
        assert_eq!(
            store
                .answer(&task.id, &event.id, ToolAnswer::ok(json!(1)))
                .await,
            Err(StoreError::NotWaiting(event.id.clone()))
        );
    }

    #[tokio::test]
    async fn events_are_pruned_oldest_first_and_timestamps_increase() {
        let store = store(StoreLimits {
            max_events: 3,
            ..StoreLimits::default()
        });
        let task = store.create("a", None, Vec::new()).await.unwrap();
        let mut ids = Vec::new();
        for _ in 0..5 {
            let event = store
                .emit_tool_call(&task.id, "t", json!({}))
                .await
                .unwrap();
            store.abandon(&task.id, &event.id);
            ids.push(event);
        }
        let polled = store.poll(&task.id, 0, Duration::ZERO).await.unwrap();
        let kept: Vec<&str> = polled.events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(kept, [&ids[2].id, &ids[3].id, &ids[4].id]);
        assert!(
            ids.windows(2).all(|w| w[0].timestamp < w[1].timestamp),
            "strictly increasing"
        );
        assert!(matches!(
            store
                .answer(&task.id, &ids[0].id, ToolAnswer::ok(json!(1)))
                .await,
            Err(StoreError::UnknownEvent { .. })
        ));
    }

    #[tokio::test]
    async fn waiting_tasks_expire_and_finished_ones_linger() {
        let store = store(StoreLimits {
            waiting_ttl: Duration::from_millis(50),
            linger: Duration::from_millis(50),
            ..StoreLimits::default()
        });
        let waiting = store.create("a", None, Vec::new()).await.unwrap();
        let finished = store.create("a", None, Vec::new()).await.unwrap();
        store.attach(&finished.id).await.unwrap();
        store.finish(&finished.id, TaskStatus::Done).await.unwrap();
        assert_eq!(
            store.get(&finished.id).await.unwrap().status,
            TaskStatus::Done
        );
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            store.get(&waiting.id).await,
            Err(StoreError::UnknownTask(waiting.id.clone()))
        );
        assert_eq!(
            store.get(&finished.id).await,
            Err(StoreError::UnknownTask(finished.id.clone()))
        );
    }

    #[tokio::test]
    async fn a_full_store_refuses_new_tasks() {
        let store = store(StoreLimits {
            max_tasks: 2,
            ..StoreLimits::default()
        });
        store.create("a", None, Vec::new()).await.unwrap();
        store.create("a", None, Vec::new()).await.unwrap();
        assert_eq!(
            store.create("a", None, Vec::new()).await,
            Err(StoreError::Full(2))
        );
    }

    #[tokio::test]
    async fn a_long_poll_wakes_for_a_new_event() {
        let store = MemoryStore::new();
        let task = store.create("a", None, Vec::new()).await.unwrap();
        store.attach(&task.id).await.unwrap();
        let poller = {
            let store = store.clone();
            let id = task.id.clone();
            tokio::spawn(async move { store.poll(&id, 0, Duration::from_secs(30)).await })
        };
        tokio::task::yield_now().await;
        let event = store
            .emit_tool_call(&task.id, "t", json!({}))
            .await
            .unwrap();
        let polled = poller.await.unwrap().unwrap();
        assert_eq!(polled.events, [event]);
    }

    /// A tool spec whose description is `bytes` long: a task that holds about that much.
    fn tools_of(bytes: usize) -> Vec<CustomTool> {
        vec![CustomTool {
            name: "t".to_owned(),
            description: "x".repeat(bytes),
            inputs: json!({"type": "object"}),
            output: String::new(),
            timeout_ms: None,
        }]
    }

    #[tokio::test]
    async fn one_caller_cannot_take_every_task_slot() {
        let store = store(StoreLimits {
            max_tasks: 10,
            max_tasks_per_owner: 3,
            ..StoreLimits::default()
        });
        for _ in 0..3 {
            store.create("greedy", None, Vec::new()).await.unwrap();
        }
        assert_eq!(
            store.create("greedy", None, Vec::new()).await,
            Err(StoreError::TooManyTasks(3))
        );
        // Another caller is not held back by the first one's tasks.
        store.create("other", None, Vec::new()).await.unwrap();
        assert_eq!(store.len(), 4, "nothing already accepted was dropped");
    }

    #[tokio::test]
    async fn a_callers_finished_tasks_make_room_for_its_new_ones() {
        let store = store(StoreLimits {
            max_tasks_per_owner: 2,
            ..StoreLimits::default()
        });
        let live = store.create("a", None, Vec::new()).await.unwrap();
        let done = store.create("a", None, Vec::new()).await.unwrap();
        store.finish(&done.id, TaskStatus::Cancelled).await.unwrap();
        // Create and cancel in a loop: the caller's own finished tasks go, its live one stays.
        for _ in 0..5 {
            let task = store.create("a", None, Vec::new()).await.unwrap();
            store.finish(&task.id, TaskStatus::Cancelled).await.unwrap();
        }
        assert_eq!(
            store.get(&live.id).await.unwrap().status,
            TaskStatus::Waiting
        );
        assert_eq!(store.len(), 2);
    }

    #[tokio::test]
    async fn a_task_larger_than_its_budget_is_refused() {
        let store = store(StoreLimits {
            max_task_bytes: 4096,
            ..StoreLimits::default()
        });
        assert_eq!(
            store.create("a", None, tools_of(8192)).await,
            Err(StoreError::TaskBudget(4096))
        );
        store.create("a", None, tools_of(1024)).await.unwrap();
    }

    #[tokio::test]
    async fn one_callers_bytes_cannot_fill_the_store() {
        let store = store(StoreLimits {
            max_task_bytes: 64 << 10,
            max_owner_bytes: 100 << 10,
            max_total_bytes: 200 << 10,
            ..StoreLimits::default()
        });
        store
            .create("greedy", None, tools_of(60 << 10))
            .await
            .unwrap();
        assert_eq!(
            store.create("greedy", None, tools_of(60 << 10)).await,
            Err(StoreError::OwnerBudget(100 << 10))
        );
        store.create("b", None, tools_of(60 << 10)).await.unwrap();
        store.create("c", None, tools_of(60 << 10)).await.unwrap();
        // All callers together: the store's own budget.
        assert_eq!(
            store.create("d", None, tools_of(60 << 10)).await,
            Err(StoreError::FullBytes(200 << 10))
        );
        assert!(store.bytes() <= 200 << 10);
    }

    #[tokio::test]
    async fn an_oversized_answer_is_refused_and_the_call_still_waits() {
        let store = store(StoreLimits {
            max_task_bytes: 4096,
            ..StoreLimits::default()
        });
        let task = store.create("a", None, Vec::new()).await.unwrap();
        store.attach(&task.id).await.unwrap();
        let event = store
            .emit_tool_call(&task.id, "t", json!({}))
            .await
            .unwrap();
        assert_eq!(
            store
                .answer(&task.id, &event.id, ToolAnswer::ok(json!("x".repeat(8192))))
                .await,
            Err(StoreError::TaskBudget(4096))
        );
        // Nothing accepted was lost: the call still takes a proper answer.
        store
            .answer(&task.id, &event.id, ToolAnswer::ok(json!("fine")))
            .await
            .unwrap();
        let answer = store.wait_answer(&task.id, &event.id).await.unwrap();
        assert_eq!(answer.output, json!("fine"));
    }

    #[tokio::test]
    async fn large_tool_calls_prune_settled_events_and_never_waiting_ones() {
        let store = store(StoreLimits {
            max_task_bytes: 8192,
            ..StoreLimits::default()
        });
        let task = store.create("a", None, Vec::new()).await.unwrap();
        store.attach(&task.id).await.unwrap();
        let big = json!({"text": "x".repeat(2000)});
        // Settled calls make room for new ones, oldest first, without end.
        for _ in 0..20 {
            let event = store
                .emit_tool_call(&task.id, "t", big.clone())
                .await
                .unwrap();
            store.abandon(&task.id, &event.id);
        }
        assert!(store.bytes() <= 8192);
        // Calls still waiting are kept; once they fill the budget, a new call is refused.
        let mut waiting = Vec::new();
        let refused = loop {
            match store.emit_tool_call(&task.id, "t", big.clone()).await {
                Ok(event) => waiting.push(event.id),
                Err(error) => break error,
            }
            assert!(waiting.len() < 10, "the budget bounds waiting calls");
        };
        assert_eq!(refused, StoreError::TaskBudget(8192));
        assert!(!waiting.is_empty());
        for id in &waiting {
            store
                .answer(&task.id, id, ToolAnswer::ok(json!(1)))
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn expired_tasks_give_their_bytes_back() {
        let store = store(StoreLimits {
            waiting_ttl: Duration::from_millis(30),
            max_owner_bytes: 100 << 10,
            ..StoreLimits::default()
        });
        store.create("a", None, tools_of(60 << 10)).await.unwrap();
        assert!(store.bytes() >= 60 << 10);
        std::thread::sleep(Duration::from_millis(40));
        // The expired task's bytes are the caller's again.
        store.create("a", None, tools_of(60 << 10)).await.unwrap();
        assert_eq!(store.len(), 1);
        assert!(store.bytes() < 100 << 10);
    }
}
