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
    /// Creates a task in [`TaskStatus::Waiting`].
    async fn create(
        &self,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Most tasks kept at once (default 10 000).
    pub max_tasks: usize,
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
    /// Answered; the answer until its waiter takes it.
    Answered(Option<ToolAnswer>),
    Abandoned,
}

struct TaskEntry {
    snapshot: TaskSnapshot,
    created: Instant,
    finished: Option<Instant>,
    events: VecDeque<TaskEvent>,
    last_timestamp: u64,
    calls: HashMap<String, CallState>,
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
}

/// The in-memory [`TaskStore`]: bounded (tasks, events per task) and self-cleaning (waiting
/// tasks expire, finished ones linger a while); cheap to clone.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    limits: StoreLimits,
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, TaskEntry>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("tasks", &self.lock().tasks.len())
            .field("limits", &self.limits)
            .finish()
    }
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

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every update is one step),
        // so a poisoned lock is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the live task `id`.
    fn with_task<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut TaskEntry) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut inner = self.lock();
        let now = Instant::now();
        match inner.tasks.get_mut(id) {
            Some(entry) if !entry.expired(&self.limits, now) => f(entry),
            Some(_) => {
                inner.tasks.remove(id);
                Err(StoreError::UnknownTask(id.to_owned()))
            }
            None => Err(StoreError::UnknownTask(id.to_owned())),
        }
    }

    fn sweep(&self, inner: &mut Inner) {
        let now = Instant::now();
        inner
            .tasks
            .retain(|_, entry| !entry.expired(&self.limits, now));
    }
}

#[async_trait]
impl TaskStore for MemoryStore {
    async fn create(
        &self,
        task: Option<String>,
        custom_tools: Vec<CustomTool>,
    ) -> Result<TaskSnapshot, StoreError> {
        let mut inner = self.lock();
        if inner.tasks.len() >= self.limits.max_tasks {
            self.sweep(&mut inner);
            if inner.tasks.len() >= self.limits.max_tasks {
                return Err(StoreError::Full(self.limits.max_tasks));
            }
        }
        let snapshot = TaskSnapshot {
            id: format!("task_{}", uuid::Uuid::new_v4().simple()),
            status: TaskStatus::Waiting,
            task,
            custom_tools,
        };
        let (changed, _) = watch::channel(0);
        inner.tasks.insert(
            snapshot.id.clone(),
            TaskEntry {
                snapshot: snapshot.clone(),
                created: Instant::now(),
                finished: None,
                events: VecDeque::new(),
                last_timestamp: 0,
                calls: HashMap::new(),
                changed,
            },
        );
        Ok(snapshot)
    }

    async fn get(&self, id: &str) -> Result<TaskSnapshot, StoreError> {
        self.with_task(id, |entry| Ok(entry.snapshot.clone()))
    }

    async fn attach(&self, id: &str) -> Result<TaskSnapshot, StoreError> {
        self.with_task(id, |entry| match entry.snapshot.status {
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
        self.with_task(id, |entry| {
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
        self.with_task(id, |entry| {
            if entry.snapshot.status.is_terminal() {
                return Err(StoreError::Finished {
                    id: id.to_owned(),
                    status: entry.snapshot.status,
                });
            }
            // Strictly increasing per task, so `event_t` = the last timestamp seen misses
            // nothing, even for several events in one millisecond.
            let timestamp = now_ms().max(entry.last_timestamp + 1);
            entry.last_timestamp = timestamp;
            let event = TaskEvent {
                id: format!("evt_{}", uuid::Uuid::new_v4().simple()),
                name: TOOL_CALL.to_owned(),
                payload: json!({"name": tool, "input": input}),
                timestamp: Some(timestamp),
            };
            while entry.events.len() >= max_events {
                if let Some(old) = entry.events.pop_front() {
                    // A pruned call that still waits keeps its state; the others go with it.
                    if !matches!(entry.calls.get(&old.id), Some(CallState::Pending)) {
                        entry.calls.remove(&old.id);
                    }
                }
            }
            entry.calls.insert(event.id.clone(), CallState::Pending);
            entry.events.push_back(event.clone());
            entry.touch();
            Ok(event)
        })
    }

    async fn poll(&self, id: &str, after: u64, wait: Duration) -> Result<Polled, StoreError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut changed = self.with_task(id, |entry| Ok(entry.changed.subscribe()))?;
        loop {
            changed.borrow_and_update();
            let polled = self.with_task(id, |entry| {
                Ok(Polled {
                    task: entry.snapshot.clone(),
                    events: entry
                        .events
                        .iter()
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
                    return self.with_task(id, |entry| {
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
        self.with_task(id, |entry| {
            let Some(state) = entry.calls.get_mut(event) else {
                return Err(if entry.events.iter().any(|e| e.id == event) {
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
                    *state = CallState::Answered(Some(answer));
                    entry.touch();
                    Ok(())
                }
                CallState::Answered(_) => Err(StoreError::AlreadyAnswered(event.to_owned())),
                CallState::Abandoned => Err(StoreError::NotWaiting(event.to_owned())),
            }
        })
    }

    async fn wait_answer(&self, id: &str, event: &str) -> Result<ToolAnswer, StoreError> {
        let mut changed = self.with_task(id, |entry| Ok(entry.changed.subscribe()))?;
        loop {
            changed.borrow_and_update();
            let answer = self.with_task(id, |entry| match entry.calls.get_mut(event) {
                Some(CallState::Pending) => Ok(None),
                Some(CallState::Answered(answer)) => answer
                    .take()
                    .map(Some)
                    .ok_or_else(|| StoreError::AlreadyAnswered(event.to_owned())),
                Some(CallState::Abandoned) => Err(StoreError::NotWaiting(event.to_owned())),
                None => Err(StoreError::UnknownEvent {
                    task: id.to_owned(),
                    event: event.to_owned(),
                }),
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
        let _ = self.with_task(id, |entry| {
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
        let task = store.create(None, Vec::new()).await.unwrap();
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
        let task = store.create(None, Vec::new()).await.unwrap();
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
        let task = store.create(None, Vec::new()).await.unwrap();
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
        let waiting = store.create(None, Vec::new()).await.unwrap();
        let finished = store.create(None, Vec::new()).await.unwrap();
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
        store.create(None, Vec::new()).await.unwrap();
        store.create(None, Vec::new()).await.unwrap();
        assert_eq!(
            store.create(None, Vec::new()).await,
            Err(StoreError::Full(2))
        );
    }

    #[tokio::test]
    async fn a_long_poll_wakes_for_a_new_event() {
        let store = MemoryStore::new();
        let task = store.create(None, Vec::new()).await.unwrap();
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
}
