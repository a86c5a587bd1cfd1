//! Redis-backed state for crewline replicas behind a load balancer: a [`TaskStore`] for the
//! task API (several crew servers serve one set of tasks); [`RedisApproval`], deferred
//! approvals an operator decides on any replica; [`RedisClaims`], run-once claims of
//! non-cancellable tool calls (a retry on any replica joins the running call or reads its
//! outcome); and [`RedisLedger`], the tool ledger as one stream (`<prefix>ledger`, trimmed to
//! [`DEFAULT_LEDGER_MAX_LEN`] entries) whose intents with no outcome are the calls a crashed
//! replica left for an operator to reconcile; and [`RedisCheckpoints`], each call's checkpoint
//! and owner, so a call resumes on any replica and never has two live sessions. All can share
//! one [`RedisConnection`] ([`RedisConfig::open`]).
//!
//! A task created through one replica can be attached to a call on another; its tool calls are
//! polled, and answered, through any replica; the answer reaches the replica whose call waits
//! for it. Every update is one Lua script (atomic across replicas), every task key expires with
//! the task ([`StoreLimits`]: `waiting_ttl`, `max_age`, `linger`) so nothing outlives it even if
//! every replica dies, and each change is published on one channel: a replica's long polls and
//! waiting calls wake on it and read the task again. Works with Redis 7 and Valkey (a single
//! primary; not Redis Cluster).
//!
//! When Redis is unreachable, every operation fails naming Redis and the cause:
//! [`StoreError::Unreachable`] when the command was certainly never sent,
//! [`StoreError::Backend`] when it may have run (a reply lost to the 5 s timeout), which a
//! remote tool tells its model as an unknown outcome, never as "not called". It works again
//! once Redis is back (commands and the wake-up subscription
//! reconnect by themselves); calls that do not use remote tools go on meanwhile.
//!
//! ```no_run
//! use crewline_redis::RedisStore;
//! use crewline_remote::{StoreLimits, TaskApi};
//!
//! # async fn run() -> Result<(), crewline_redis::RedisStoreError> {
//! // Or `RedisStore::from_env()`, which reads CREWLINE_REDIS_URL and CREWLINE_REDIS_PREFIX.
//! let store = RedisStore::connect("redis://127.0.0.1:6379", StoreLimits::default()).await?;
//! let api = TaskApi::with_store(store);
//! # drop(api); Ok(()) }
//! ```

mod approval;
mod breakers;
mod checkpoint;
mod claims;
mod connection;
mod error;
mod ledger;
mod primary;
mod scripts;
mod wakeups;

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use crewline::types::ErrorDetail;
use crewline_remote::{
    Polled, StoreError, StoreLimits, TaskSnapshot, TaskStore, Withdrawn, json_len,
    wire::{CustomTool, TOOL_CALL, TaskEvent, TaskStatus, ToolAnswer},
};
use redis::Script;
use serde_json::{Value, json};

pub use self::{
    approval::{DEFAULT_MAX_REQUEST_BYTES, RedisApproval},
    breakers::RedisBreakers,
    checkpoint::{CheckpointStoreError, MAX_CALL_ID_BYTES, RedisCheckpoints},
    claims::RedisClaims,
    connection::RedisConnection,
    error::RedisStoreError,
    ledger::{
        DEFAULT_LEDGER_MAX_ARGUMENT_BYTES, DEFAULT_LEDGER_MAX_LEN, RedisLedger, RedisLedgerError,
        RedisLedgerOptions, read_ledger,
    },
};

/// The environment variable with the Redis URL ([`RedisConfig::from_env`]).
pub const URL_VARIABLE: &str = "CREWLINE_REDIS_URL";
/// The environment variable with the key prefix ([`RedisConfig::from_env`]).
pub const PREFIX_VARIABLE: &str = "CREWLINE_REDIS_PREFIX";
/// The key prefix when none is set.
pub const DEFAULT_PREFIX: &str = "crewline:";

/// Where a [`RedisStore`] keeps its tasks: the URL, the key prefix, the limits.
#[derive(Clone)]
pub struct RedisConfig {
    url: String,
    prefix: String,
    limits: StoreLimits,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("limits", &self.limits)
            .finish()
    }
}

impl RedisConfig {
    /// Redis at `url` (`redis://[user:password@]host:port[/db]`, `rediss://`, `redis+unix://`),
    /// keys under [`DEFAULT_PREFIX`], default limits.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            limits: StoreLimits::default(),
        }
    }

    /// The URL from `CREWLINE_REDIS_URL` and the prefix from `CREWLINE_REDIS_PREFIX` (if set).
    pub fn from_env() -> Result<Self, RedisStoreError> {
        Self::from_variables(|name| std::env::var(name).ok())
    }

    /// The config the variables `variable` looks up say.
    fn from_variables(variable: impl Fn(&str) -> Option<String>) -> Result<Self, RedisStoreError> {
        let url = variable(URL_VARIABLE).unwrap_or_default();
        if url.trim().is_empty() {
            return Err(RedisStoreError::NoUrl);
        }
        let config = Self::new(url.trim());
        Ok(match variable(PREFIX_VARIABLE) {
            Some(prefix) if !prefix.is_empty() => config.prefix(prefix),
            _ => config,
        })
    }

    /// Keys under `prefix` (default `crewline:`): servers that share tasks share a prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The limits (every replica of one prefix should have the same).
    pub fn limits(mut self, limits: StoreLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Connects: commands through a reconnecting connection, wake-ups through a subscription
    /// of their own.
    pub async fn connect(self) -> Result<RedisStore, RedisStoreError> {
        let limits = self.limits;
        Ok(RedisStore::with_connection(self.open().await?, limits))
    }

    /// Connects, for a task store and an approver to share ([`RedisStore::with_connection`],
    /// [`RedisApproval::new`]); the limits are the task store's.
    pub async fn open(self) -> Result<RedisConnection, RedisStoreError> {
        RedisConnection::open(&self.url, self.prefix).await
    }
}

/// The Redis-backed [`TaskStore`]: the same contract as the in-memory store (bounds, expiry,
/// errors), shared by every store on the same Redis and prefix; cheap to clone.
#[derive(Clone)]
pub struct RedisStore {
    shared: Arc<Shared>,
}

struct Shared {
    connection: RedisConnection,
    limits: StoreLimits,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("redis", &self.shared.connection.target())
            .field("prefix", &self.shared.connection.prefix())
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

/// What a store's tasks hold, as counted against its [`StoreLimits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Tasks held, all callers together.
    pub tasks: usize,
    /// Bytes held, all callers together.
    pub bytes: usize,
}

/// `url` with its password (if any) replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

/// A script's reply: its outcome (`ok` or a refusal's name), then its values.
type Reply = Vec<Option<String>>;

/// What a refusal names, beyond the task.
#[derive(Default)]
struct Subject<'a> {
    event: &'a str,
    tool: &'a str,
}

impl RedisStore {
    /// Connects to Redis at `url` with `limits` and the default prefix (see [`RedisConfig`]).
    pub async fn connect(
        url: impl Into<String>,
        limits: StoreLimits,
    ) -> Result<Self, RedisStoreError> {
        RedisConfig::new(url).limits(limits).connect().await
    }

    /// Connects as `CREWLINE_REDIS_URL` and `CREWLINE_REDIS_PREFIX` say, with default limits.
    pub async fn from_env() -> Result<Self, RedisStoreError> {
        RedisConfig::from_env()?.connect().await
    }

    /// A store on `connection` (shared, e.g. with a [`RedisApproval`]) with `limits`.
    pub fn with_connection(connection: RedisConnection, limits: StoreLimits) -> Self {
        Self {
            shared: Arc::new(Shared { connection, limits }),
        }
    }

    /// The connection (to share with a [`RedisApproval`]).
    pub fn connection(&self) -> &RedisConnection {
        &self.shared.connection
    }

    /// The limits.
    pub fn limits(&self) -> StoreLimits {
        self.shared.limits
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        self.shared.connection.prefix()
    }

    /// What the store's tasks hold (expired ones are swept first).
    pub async fn usage(&self) -> Result<Usage, StoreError> {
        let reply = self.eval(&scripts::USAGE, "", &[]).await?;
        let number = |index: usize| {
            reply
                .get(index)
                .and_then(|value| value.as_deref())
                .and_then(|text| text.parse().ok())
                .unwrap_or(0)
        };
        Ok(Usage {
            tasks: number(1),
            bytes: number(2),
        })
    }

    /// Runs `script` for task `id` with the store's prefix and limits, then `args`.
    async fn eval(&self, script: &Script, id: &str, args: &[&str]) -> Result<Reply, StoreError> {
        let limits = &self.shared.limits;
        let mut invocation = script.prepare_invoke();
        invocation
            .arg(self.shared.connection.prefix())
            .arg(limits.max_tasks)
            .arg(limits.max_tasks_per_owner)
            .arg(limits.max_task_bytes)
            .arg(limits.max_owner_bytes)
            .arg(limits.max_total_bytes)
            .arg(limits.max_events)
            .arg(millis(limits.waiting_ttl))
            .arg(millis(limits.max_age))
            .arg(millis(limits.linger))
            .arg(id);
        for arg in args {
            invocation.arg(*arg);
        }
        self.shared
            .connection
            .invoke(&invocation)
            .await
            .map_err(|error| self.backend(error))
    }

    /// The error for a Redis failure, naming Redis and the cause: [`StoreError::Unreachable`]
    /// when the command was certainly never sent (the connection was refused), else
    /// [`StoreError::Backend`] (it may have run, its reply lost).
    fn backend(&self, error: redis::RedisError) -> StoreError {
        let message = format!(
            "the task store (Redis at {}) {}: {error}",
            self.shared.connection.target(),
            connection::failure(&error)
        );
        if error.is_connection_refusal() {
            StoreError::Unreachable(ErrorDetail::caused_by(message, error))
        } else {
            StoreError::Backend(ErrorDetail::caused_by(message, error))
        }
    }

    /// The error for a reply this store cannot read.
    fn unreadable(&self, what: &str) -> StoreError {
        StoreError::Backend(ErrorDetail::new(format!(
            "the task store (Redis at {}) sent a reply it cannot read: {what}",
            self.shared.connection.target()
        )))
    }

    /// The error for a stored value (`what`) that is not the JSON this store wrote.
    fn unreadable_json(&self, what: &str, error: serde_json::Error) -> StoreError {
        StoreError::Backend(ErrorDetail::caused_by(
            format!(
                "the task store (Redis at {}) sent a reply it cannot read: {what}: {error}",
                self.shared.connection.target()
            ),
            error,
        ))
    }

    /// `reply`'s values if it is `ok`, else the refusal it names.
    fn outcome<'r>(
        &self,
        reply: &'r Reply,
        id: &str,
        subject: &Subject<'_>,
    ) -> Result<&'r [Option<String>], StoreError> {
        let limits = &self.shared.limits;
        let code = reply.first().and_then(|code| code.as_deref()).unwrap_or("");
        let text = |index: usize| reply.get(index).and_then(|value| value.as_deref());
        Err(match code {
            "ok" => return Ok(&reply[1..]),
            "unknown_task" => StoreError::UnknownTask(id.to_owned()),
            "already_attached" => StoreError::AlreadyAttached(id.to_owned()),
            "finished" => StoreError::Finished {
                id: id.to_owned(),
                status: self.status(text(1))?,
            },
            "unknown_tool" => StoreError::UnknownTool {
                task: id.to_owned(),
                tool: subject.tool.to_owned(),
            },
            "unknown_event" => StoreError::UnknownEvent {
                task: id.to_owned(),
                event: subject.event.to_owned(),
            },
            "not_a_tool_call" => StoreError::NotAToolCall(subject.event.to_owned()),
            "already_answered" => StoreError::AlreadyAnswered(subject.event.to_owned()),
            "not_waiting" => StoreError::NotWaiting(subject.event.to_owned()),
            "full" => StoreError::Full(limits.max_tasks),
            "full_bytes" => StoreError::FullBytes(limits.max_total_bytes),
            "too_many_tasks" => StoreError::TooManyTasks(limits.max_tasks_per_owner),
            "owner_budget" => StoreError::OwnerBudget(limits.max_owner_bytes),
            "task_budget" => StoreError::TaskBudget(limits.max_task_bytes),
            other => return Err(self.unreadable(&format!("outcome `{other}`"))),
        })
    }

    /// The refusal a script's `refusal` names (emit's and finish's budgets), as an error.
    fn refusal(&self, refusal: &str, id: &str) -> StoreError {
        let reply = vec![Some(refusal.to_owned())];
        match self.outcome(&reply, id, &Subject::default()) {
            Err(error) => error,
            Ok(_) => self.unreadable("a refusal named `ok`"),
        }
    }

    fn status(&self, text: Option<&str>) -> Result<TaskStatus, StoreError> {
        let text = text.unwrap_or_default();
        serde_json::from_value(Value::String(text.to_owned()))
            .map_err(|_| self.unreadable(&format!("status `{text}`")))
    }

    /// A snapshot from the values `owner, status, task, tools, output`.
    fn snapshot(&self, id: &str, values: &[Option<String>]) -> Result<TaskSnapshot, StoreError> {
        let text = |index: usize| values.get(index).and_then(|value| value.as_deref());
        let json = |index: usize, what: &str| -> Result<Option<Value>, StoreError> {
            text(index)
                .map(|text| {
                    serde_json::from_str(text)
                        .map_err(|error| self.unreadable_json(&format!("the task's {what}"), error))
                })
                .transpose()
        };
        let task = match json(2, "text")? {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text),
            Some(other) => return Err(self.unreadable(&format!("the task's text {other}"))),
        };
        let custom_tools: Vec<CustomTool> = match json(3, "tools")? {
            Some(tools) => serde_json::from_value(tools)
                .map_err(|error| self.unreadable_json("the task's tools", error))?,
            None => Vec::new(),
        };
        Ok(TaskSnapshot {
            id: id.to_owned(),
            owner: text(0).unwrap_or_default().to_owned(),
            status: self.status(text(1))?,
            task,
            custom_tools,
            output: json(4, "output")?,
        })
    }

    /// The task and its events after `after`, as one script read them.
    async fn read(&self, id: &str, after: u64) -> Result<Polled, StoreError> {
        let after = after.to_string();
        let reply = self.eval(&scripts::POLL, id, &[&after]).await?;
        let values = self.outcome(&reply, id, &Subject::default())?;
        let task = self.snapshot(id, values.get(..5).unwrap_or_default())?;
        let events = values
            .get(5..)
            .unwrap_or_default()
            .chunks(2)
            .map(|pair| self.event(pair))
            .collect::<Result<_, _>>()?;
        Ok(Polled { task, events })
    }

    /// An event from its JSON and its timestamp.
    fn event(&self, pair: &[Option<String>]) -> Result<TaskEvent, StoreError> {
        let (Some(Some(json)), Some(Some(timestamp))) = (pair.first(), pair.get(1)) else {
            return Err(self.unreadable("an event without its JSON or its timestamp"));
        };
        let mut event: TaskEvent =
            serde_json::from_str(json).map_err(|error| self.unreadable_json("an event", error))?;
        event.timestamp = Some(
            parse_timestamp(timestamp)
                .ok_or_else(|| self.unreadable(&format!("the timestamp `{timestamp}`")))?,
        );
        Ok(event)
    }

    /// Finishes task `id` (only while it is the attachment `token`'s, if given); `None` when
    /// another attachment holds it.
    async fn finish_as(
        &self,
        id: &str,
        token: Option<&str>,
        status: TaskStatus,
        output: Option<Value>,
    ) -> Result<Option<TaskSnapshot>, StoreError> {
        let (output, size) = match &output {
            Some(output) => (output.to_string(), json_len(output).to_string()),
            None => (String::new(), "0".to_owned()),
        };
        let reply = self
            .eval(
                &scripts::FINISH,
                id,
                &[status.as_str(), &output, &size, token.unwrap_or_default()],
            )
            .await?;
        if reply.first().and_then(|code| code.as_deref()) == Some("released") {
            return Ok(None);
        }
        let values = self.outcome(&reply, id, &Subject::default())?;
        self.shared.connection.wake(id);
        if let Some(Some(refusal)) = values.get(5) {
            // A task always finishes: an output over a budget is left out, with a warning.
            let error = self.refusal(refusal, id);
            tracing::warn!(task_id = id, error = %crewline::types::ErrorChain(&error), "task finished without its output");
        }
        self.snapshot(id, values.get(..5).unwrap_or_default())
            .map(Some)
    }

    /// Marks the call `event` abandoned (what [`TaskStore::abandon`] runs in the background).
    async fn abandon_now(&self, id: &str, event: &str) -> Result<(), StoreError> {
        let reply = self.eval(&scripts::ABANDON, id, &[event]).await?;
        self.outcome(&reply, id, &Subject::default())?;
        self.shared.connection.wake(id);
        Ok(())
    }
}

/// A timestamp as Redis wrote a sorted set's score: an integer, or a float holding one.
fn parse_timestamp(text: &str) -> Option<u64> {
    text.parse().ok().or_else(|| {
        let float: f64 = text.parse().ok()?;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        (float.is_finite() && float >= 0.0).then_some(float as u64)
    })
}

/// `duration` in whole milliseconds.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl TaskStore for RedisStore {
    async fn create(
        &self,
        owner: &str,
        task: Option<String>,
        custom_tools: Vec<CustomTool>,
    ) -> Result<TaskSnapshot, StoreError> {
        let snapshot = TaskSnapshot::waiting(owner, task, custom_tools);
        let size = snapshot.request_bytes();
        if size > self.shared.limits.max_task_bytes {
            return Err(StoreError::TaskBudget(self.shared.limits.max_task_bytes));
        }
        let (text, tools) = (
            json!(snapshot.task).to_string(),
            json!(snapshot.custom_tools).to_string(),
        );
        let size = size.to_string();
        let mut args = vec![owner, text.as_str(), tools.as_str(), size.as_str()];
        args.extend(snapshot.custom_tools.iter().map(|tool| tool.name.as_str()));
        let reply = self.eval(&scripts::CREATE, &snapshot.id, &args).await?;
        self.outcome(&reply, &snapshot.id, &Subject::default())?;
        Ok(snapshot)
    }

    async fn get(&self, id: &str) -> Result<TaskSnapshot, StoreError> {
        let reply = self.eval(&scripts::GET, id, &[]).await?;
        let values = self.outcome(&reply, id, &Subject::default())?;
        self.snapshot(id, values)
    }

    async fn attach(&self, id: &str) -> Result<TaskSnapshot, StoreError> {
        let reply = self.eval(&scripts::ATTACH, id, &[]).await?;
        let values = self.outcome(&reply, id, &Subject::default())?;
        self.shared.connection.wake(id);
        self.snapshot(id, values)
    }

    async fn attach_leased(
        &self,
        id: &str,
        call: &str,
        token: &str,
        lease: Duration,
    ) -> Result<TaskSnapshot, StoreError> {
        let lease = millis(lease).max(1).to_string();
        let reply = self
            .eval(&scripts::ATTACH, id, &[call, token, &lease])
            .await?;
        let values = self.outcome(&reply, id, &Subject::default())?;
        self.shared.connection.wake(id);
        self.snapshot(id, values)
    }

    async fn renew(&self, id: &str, token: &str, lease: Duration) -> Result<(), StoreError> {
        let lease = millis(lease).max(1).to_string();
        let reply = self.eval(&scripts::RENEW, id, &[token, &lease]).await?;
        self.outcome(&reply, id, &Subject::default())?;
        Ok(())
    }

    async fn release(
        &self,
        id: &str,
        token: &str,
        status: TaskStatus,
        output: Option<Value>,
    ) -> Result<bool, StoreError> {
        match self.finish_as(id, Some(token), status, output).await? {
            Some(_) => Ok(true),
            None => Ok(false),
        }
    }

    async fn finish(
        &self,
        id: &str,
        status: TaskStatus,
        output: Option<Value>,
    ) -> Result<TaskSnapshot, StoreError> {
        self.finish_as(id, None, status, output)
            .await?
            .ok_or_else(|| self.unreadable("a finish refused for an attachment it did not name"))
    }

    async fn emit_tool_call(
        &self,
        id: &str,
        tool: &str,
        input: Value,
    ) -> Result<TaskEvent, StoreError> {
        let mut event = TaskEvent {
            id: format!("evt_{}", uuid::Uuid::new_v4().simple()),
            name: TOOL_CALL.to_owned(),
            payload: json!({"name": tool, "input": input}),
            timestamp: None,
        };
        let size = json_len(&event).to_string();
        let json = serde_json::to_string(&event).map_err(|error| {
            StoreError::Backend(ErrorDetail::caused_by(
                format!("a tool call's input: {error}"),
                error,
            ))
        })?;
        let reply = match self
            .eval(&scripts::EMIT, id, &[tool, &event.id, &json, &size])
            .await
        {
            Ok(reply) => reply,
            Err(error @ StoreError::Backend(_)) => {
                // The call may exist, its reply lost: withdrawn once Redis answers, so that a
                // call its caller no longer waits for reaches no client after all.
                let (store, id, event) = (self.clone(), id.to_owned(), event.id.clone());
                tokio::spawn(async move {
                    if let Err(error) = store.withdraw(&id, &event).await {
                        tracing::debug!(task_id = %id, event_id = %event, error = %crewline::types::ErrorChain(&error), "could not withdraw a call whose emit failed");
                    }
                });
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        let subject = Subject { tool, event: "" };
        let values = self.outcome(&reply, id, &subject)?;
        self.shared.connection.wake(id);
        let timestamp = values
            .first()
            .and_then(|value| value.as_deref())
            .and_then(parse_timestamp)
            .ok_or_else(|| self.unreadable("a tool call without its timestamp"))?;
        event.timestamp = Some(timestamp);
        Ok(event)
    }

    async fn poll(&self, id: &str, after: u64, wait: Duration) -> Result<Polled, StoreError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut watch = self.shared.connection.watch(id);
        loop {
            // Watching before reading: a change after the read wakes this poll.
            watch.seen();
            let polled = self.read(id, after).await?;
            if !polled.events.is_empty()
                || polled.task.status.is_terminal()
                || tokio::time::Instant::now() >= deadline
            {
                return Ok(polled);
            }
            if tokio::time::timeout_at(deadline, watch.changed())
                .await
                .is_err()
            {
                return self.read(id, after).await;
            }
        }
    }

    async fn answer(&self, id: &str, event: &str, answer: ToolAnswer) -> Result<(), StoreError> {
        let size = json_len(&answer).to_string();
        let json = serde_json::to_string(&answer).map_err(|error| {
            StoreError::Backend(ErrorDetail::caused_by(
                format!("a tool answer: {error}"),
                error,
            ))
        })?;
        let reply = self
            .eval(&scripts::ANSWER, id, &[event, &json, &size])
            .await?;
        self.outcome(&reply, id, &Subject { event, tool: "" })?;
        self.shared.connection.wake(id);
        Ok(())
    }

    async fn wait_answer(&self, id: &str, event: &str) -> Result<ToolAnswer, StoreError> {
        let mut watch = self.shared.connection.watch(id);
        loop {
            watch.seen();
            let reply = self.eval(&scripts::TAKE, id, &[event]).await?;
            if reply.first().and_then(|code| code.as_deref()) == Some("pending") {
                watch.changed().await;
                continue;
            }
            let values = self.outcome(&reply, id, &Subject { event, tool: "" })?;
            let Some(Some(json)) = values.first() else {
                return Err(self.unreadable("an answer without its JSON"));
            };
            return serde_json::from_str(json)
                .map_err(|error| self.unreadable_json("an answer", error));
        }
    }

    async fn withdraw(&self, id: &str, event: &str) -> Result<Withdrawn, StoreError> {
        let reply = self.eval(&scripts::WITHDRAW, id, &[event]).await?;
        let values = self.outcome(&reply, id, &Subject { event, tool: "" })?;
        self.shared.connection.wake(id);
        match values.first().and_then(|value| value.as_deref()) {
            Some("never") => Ok(Withdrawn::NeverHandedOut),
            Some("handed_out") => Ok(Withdrawn::HandedOut),
            Some("answered") => {
                let Some(Some(json)) = values.get(1) else {
                    return Err(self.unreadable("an answer without its JSON"));
                };
                serde_json::from_str(json)
                    .map(Withdrawn::Answered)
                    .map_err(|error| self.unreadable_json("an answer", error))
            }
            other => Err(self.unreadable(&format!("a withdrawal `{other:?}`"))),
        }
    }

    fn abandon(&self, id: &str, event: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                task_id = id,
                event_id = event,
                "a tool call was abandoned outside a runtime; a late answer will still be taken"
            );
            return;
        };
        let (store, id, event) = (self.clone(), id.to_owned(), event.to_owned());
        runtime.spawn(async move {
            if let Err(error) = store.abandon_now(&id, &event).await {
                tracing::warn!(task_id = %id, event_id = %event, error = %crewline::types::ErrorChain(&error), "could not abandon a tool call");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_and_the_rest_is_kept() {
        assert_eq!(
            redact("redis://:s3cret@10.0.0.5:6379/2"),
            "redis://:***@10.0.0.5:6379/2"
        );
        assert_eq!(
            redact("rediss://crew:s3cret@cache.internal:6380"),
            "rediss://crew:***@cache.internal:6380"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("not a url"), "not a url");
        let config = RedisConfig::new("redis://crew:s3cret@cache:6379");
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[test]
    fn scores_parse_as_integers_or_floats() {
        assert_eq!(parse_timestamp("1764686400123"), Some(1_764_686_400_123));
        assert_eq!(
            parse_timestamp("1.764686400123e+12"),
            Some(1_764_686_400_123)
        );
        assert_eq!(parse_timestamp("-1"), None);
        assert_eq!(parse_timestamp("x"), None);
    }

    #[test]
    fn the_environment_gives_the_url_and_the_prefix() {
        let variables = |url: &'static str, prefix: Option<&'static str>| {
            move |name: &str| match name {
                URL_VARIABLE => Some(url.to_owned()),
                PREFIX_VARIABLE => prefix.map(str::to_owned),
                _ => None,
            }
        };
        let config = RedisConfig::from_variables(variables(" redis://cache:6379 ", Some("a:")))
            .expect("a config");
        assert_eq!(
            (config.url.as_str(), config.prefix.as_str()),
            ("redis://cache:6379", "a:")
        );
        let config =
            RedisConfig::from_variables(variables("redis://cache", None)).expect("a config");
        assert_eq!(config.prefix, DEFAULT_PREFIX);
        let missing = RedisConfig::from_variables(variables("", None)).expect_err("no URL");
        assert!(matches!(missing, RedisStoreError::NoUrl));
        assert!(missing.to_string().contains(URL_VARIABLE), "{missing}");
    }

    #[tokio::test]
    async fn a_bad_url_is_refused_without_showing_its_password() {
        let error = RedisConfig::new("redis://:s3cret@cache:port/0")
            .connect()
            .await
            .expect_err("not a URL");
        assert!(
            matches!(error, RedisStoreError::InvalidUrl { .. }),
            "{error:?}"
        );
        let mut chain = format!("{error} {error:?}");
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            chain.push_str(&cause.to_string());
            source = cause.source();
        }
        assert!(!chain.contains("s3cret"), "{chain}");
    }
}
