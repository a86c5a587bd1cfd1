//! The in-memory [`TaskStore`]: tasks, their events and tool calls in one process, bounded by
//! [`StoreLimits`].

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::{Polled, StoreError, StoreLimits, TaskSnapshot, TaskStore, Withdrawn, json_len};
use crate::wire::{CustomTool, TOOL_CALL, TaskEvent, TaskStatus, ToolAnswer, now_ms};

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
    /// The tool calls a poll has returned: their client may have run them.
    handed_out: HashSet<String>,
    /// The call holding the task under a lease, if it was attached with one.
    attachment: Option<Attachment>,
    /// The bytes this task holds: its request, its events, its answers not yet taken.
    bytes: usize,
    /// Bumped on every change; pollers and waiters watch it.
    changed: watch::Sender<u64>,
}

/// Who holds a running task, and until when.
struct Attachment {
    call: String,
    token: String,
    /// Tokio's clock, so that tests can pause it.
    until: tokio::time::Instant,
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
            // A task whose holder's lease lapsed waits for a call again, as a new one does.
            _ => {
                age >= limits.max_age
                    || self.attachment.as_ref().is_some_and(|attachment| {
                        tokio::time::Instant::now() >= attachment.until + limits.waiting_ttl
                    })
            }
        }
    }

    /// Settles the calls a previous attachment left waiting: one no poll handed out is
    /// removed (no client will run it), one handed out is abandoned (it may have run).
    /// Returns the bytes freed.
    fn settle_pending(&mut self) -> usize {
        let pending: Vec<String> = self
            .calls
            .iter()
            .filter(|(_, state)| matches!(state, CallState::Pending))
            .map(|(id, _)| id.clone())
            .collect();
        let mut freed = 0;
        for id in pending {
            if self.handed_out.contains(&id) {
                self.calls.insert(id, CallState::Abandoned);
            } else {
                freed += self.remove_call(&id);
            }
        }
        freed
    }

    /// Drops the event at `index`; a pruned call that still waits keeps its state, the others
    /// go with it (an answer not yet taken too). Returns the bytes freed.
    fn drop_event(&mut self, index: usize) -> usize {
        let Some((old, mut size)) = self.events.remove(index) else {
            return 0;
        };
        if !matches!(self.calls.get(&old.id), Some(CallState::Pending)) {
            self.handed_out.remove(&old.id);
            if let Some(CallState::Answered(Some((_, held)))) = self.calls.remove(&old.id) {
                size += held;
            }
        }
        self.bytes -= size;
        size
    }

    /// Removes the tool call `event` altogether (its event, its state, its answer): what a
    /// withdrawn call that no poll returned leaves. Returns the bytes freed.
    fn remove_call(&mut self, event: &str) -> usize {
        let mut freed = 0;
        if let Some(index) = self.events.iter().position(|(e, _)| e.id == event)
            && let Some((_, size)) = self.events.remove(index)
        {
            freed += size;
        }
        if let Some(CallState::Answered(Some((_, held)))) = self.calls.remove(event) {
            freed += held;
        }
        self.handed_out.remove(event);
        self.bytes -= freed;
        freed
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

    /// Finishes task `id` (only while it is the attachment `token`'s, if given, in the same
    /// step); `None` when another attachment holds it.
    fn finish_as(
        &self,
        id: &str,
        token: Option<&str>,
        status: TaskStatus,
        output: Option<Value>,
    ) -> Result<Option<TaskSnapshot>, StoreError> {
        let limits = self.limits;
        let size = output.as_ref().map_or(0, json_len);
        self.with_task(id, |entry, usage| {
            if let Some(token) = token
                && entry
                    .attachment
                    .as_ref()
                    .is_some_and(|held| held.token != token)
            {
                return Ok(None);
            }
            if !entry.snapshot.status.is_terminal() {
                // A task always finishes: an output over a budget is left out, with a warning.
                if let Some(output) = &output {
                    match usage.reserve(&limits, entry, size) {
                        Ok(()) => entry.snapshot.output = Some(output.clone()),
                        Err(error) => {
                            tracing::warn!(task_id = id, error = %crewline_core::ErrorChain(&error), "task finished without its output");
                        }
                    }
                }
                entry.snapshot.status = status;
                entry.finished = Some(Instant::now());
                for state in entry.calls.values_mut() {
                    if matches!(state, CallState::Pending) {
                        *state = CallState::Abandoned;
                    }
                }
                entry.touch();
            }
            Ok(Some(entry.snapshot.clone()))
        })
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

    /// [`TaskStore::withdraw`], at once (nothing here waits).
    fn withdraw_in_memory(&self, id: &str, event: &str) -> Result<Withdrawn, StoreError> {
        self.with_task(id, |entry, usage| {
            let handed_out = entry.handed_out.contains(event);
            let withdrawn = match entry.calls.get_mut(event) {
                None => {
                    return Err(if entry.events.iter().any(|(e, _)| e.id == event) {
                        StoreError::NotAToolCall(event.to_owned())
                    } else {
                        StoreError::UnknownEvent {
                            task: id.to_owned(),
                            event: event.to_owned(),
                        }
                    });
                }
                Some(CallState::Answered(answer)) => match answer.take() {
                    Some((answer, size)) => {
                        entry.bytes -= size;
                        usage.release(&entry.snapshot.owner, size);
                        return Ok(Withdrawn::Answered(answer));
                    }
                    None => return Err(StoreError::AlreadyAnswered(event.to_owned())),
                },
                Some(state) if handed_out => {
                    *state = CallState::Abandoned;
                    Withdrawn::HandedOut
                }
                Some(_) => {
                    let freed = entry.remove_call(event);
                    usage.release(&entry.snapshot.owner, freed);
                    Withdrawn::NeverHandedOut
                }
            };
            entry.touch();
            Ok(withdrawn)
        })
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
        let snapshot = TaskSnapshot::waiting(owner, task, custom_tools);
        let size = snapshot.request_bytes();
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
            handed_out: HashSet::new(),
            attachment: None,
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

    async fn attach_leased(
        &self,
        id: &str,
        call: &str,
        token: &str,
        lease: Duration,
    ) -> Result<TaskSnapshot, StoreError> {
        let now = tokio::time::Instant::now();
        self.with_task(id, |entry, usage| {
            match entry.snapshot.status {
                TaskStatus::Waiting => {}
                TaskStatus::Running => {
                    let reattach = entry.attachment.as_ref().is_some_and(|held| {
                        (!call.is_empty() && held.call == call) || held.until <= now
                    });
                    if !reattach {
                        return Err(StoreError::AlreadyAttached(id.to_owned()));
                    }
                    let freed = entry.settle_pending();
                    usage.release(&entry.snapshot.owner, freed);
                }
                status => {
                    return Err(StoreError::Finished {
                        id: id.to_owned(),
                        status,
                    });
                }
            }
            entry.snapshot.status = TaskStatus::Running;
            entry.attachment = Some(Attachment {
                call: call.to_owned(),
                token: token.to_owned(),
                until: now + lease,
            });
            entry.touch();
            Ok(entry.snapshot.clone())
        })
    }

    async fn renew(&self, id: &str, token: &str, lease: Duration) -> Result<(), StoreError> {
        let now = tokio::time::Instant::now();
        self.with_task(id, |entry, _| {
            if entry.snapshot.status.is_terminal() {
                return Err(StoreError::Finished {
                    id: id.to_owned(),
                    status: entry.snapshot.status,
                });
            }
            match &mut entry.attachment {
                Some(held) if held.token == token => {
                    held.until = now + lease;
                    Ok(())
                }
                _ => Err(StoreError::AlreadyAttached(id.to_owned())),
            }
        })
    }

    async fn release(
        &self,
        id: &str,
        token: &str,
        status: TaskStatus,
        output: Option<Value>,
    ) -> Result<bool, StoreError> {
        self.finish_as(id, Some(token), status, output)
            .map(|finished| finished.is_some())
    }

    async fn finish(
        &self,
        id: &str,
        status: TaskStatus,
        output: Option<Value>,
    ) -> Result<TaskSnapshot, StoreError> {
        // Without a token, a live task always finishes: `None` cannot come back.
        self.finish_as(id, None, status, output)?
            .ok_or_else(|| StoreError::UnknownTask(id.to_owned()))
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
            if !entry.snapshot.custom_tools.iter().any(|t| t.name == tool) {
                return Err(StoreError::UnknownTool {
                    task: id.to_owned(),
                    tool: tool.to_owned(),
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
                let events: Vec<TaskEvent> = entry
                    .events
                    .iter()
                    .map(|(e, _)| e)
                    .filter(|e| e.timestamp.unwrap_or(0) > after)
                    .cloned()
                    .collect();
                // Returned to a client, which may run them: from now on, withdrawing one of
                // these calls cannot say it was not run.
                for event in &events {
                    if entry.calls.contains_key(&event.id) {
                        entry.handed_out.insert(event.id.clone());
                    }
                }
                Ok(Polled {
                    task: entry.snapshot.clone(),
                    events,
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

    async fn withdraw(&self, id: &str, event: &str) -> Result<Withdrawn, StoreError> {
        self.withdraw_in_memory(id, event)
    }

    fn withdraw_now(&self, id: &str, event: &str) -> Option<Withdrawn> {
        self.withdraw_in_memory(id, event).ok()
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
mod tests;
