//! The ledger, the frame around every stage: one record per call, to a pluggable sink; and,
//! before a tool with effects (a non-cancellable one) starts, the intent to run it.
//!
//! An intent without an outcome is a call an operator must reconcile: the process died (a
//! crash, `kill -9`, a node lost) after the tool may have started and before its outcome was
//! written. [`JsonlLedger::pending`] (and `crewline ledger pending`) lists them. A sink that
//! cannot store an intent refuses the call by default ([`LedgerSink::require_intent`]): a tool
//! that moves money does not run unrecorded. The outcome of a call with effects is stored
//! before its result returns ([`LedgerSink::settle`], at most [`OUTCOME_TIMEOUT`]), so a crash
//! after the result cannot leave that call pending; other outcomes are queued. A failure to
//! write an outcome never fails the call: it is logged. [`JsonlLedger`] appends JSON Lines from
//! a writer thread of its own (the async threads only queue the record), with one write per
//! record, so a crash mid-write loses at most that record; its reader skips a torn line.
//! Rotation is hand-written (a rename chain of a few lines): it must happen between records
//! only, on the writer thread that owns the file, which a few lines do without a dependency.

pub(crate) mod record;

use std::{
    fs::{File, OpenOptions},
    io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
};

use crewline_core::{ErrorDetail, ToolErrorKind};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::approval::ApprovalRecord;

/// How one call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The model got a result.
    Ok,
    /// The model got an error.
    Error,
}

/// One call, as the operator sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerRecord {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments the tool ran with (after hooks and edits), or the model's text if they
    /// never parsed.
    pub arguments: Value,
    /// How the call ended.
    pub outcome: Outcome,
    /// The error's kind, if it failed.
    pub error_kind: Option<ToolErrorKind>,
    /// The message the model read, if it failed.
    pub message: Option<String>,
    /// The operator's detail (never shown to the model).
    pub detail: Option<String>,
    /// Microseconds from start to result.
    pub latency_us: u64,
    /// The approval decision, for `confirm` tools.
    pub approval: Option<ApprovalRecord>,
    /// Whether the result came from the cache.
    pub cache_hit: bool,
    /// When the call finished, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The tool (a non-cancellable one) ended after its caller had stopped waiting (a
    /// timeout, a barge-in, a shutdown): this is its real outcome. If the model was told a
    /// `Timeout` first, an earlier record of the same call says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ran_on: bool,
    /// The [`LedgerIntent::intent_id`] this is the outcome of (tools with effects only; not
    /// on a `StillRunning` or `OutcomeUnknown` record, which leaves the intent pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_id: Option<String>,
}

/// The intent to run a tool with effects, stored before the tool starts.
///
/// An outcome record names it ([`LedgerRecord::intent_id`]); an intent no outcome names is
/// pending: the tool may or may not have run ([`pending`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerIntent {
    /// The intent's id (`int_…`), minted by the executor, unique.
    pub intent_id: String,
    /// The call's idempotency key, the one the tool can hand to a downstream that dedupes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The session (the call's scope, `call:<platform call id>` for a voice call).
    pub scope: String,
    /// The model's id of the tool call.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments the tool runs with (after hooks, approval and edits).
    pub arguments: Value,
    /// When the intent was made, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
}

/// One line of a ledger: an intent, or an outcome record.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerEntry {
    /// A tool with effects is about to start.
    Intent(LedgerIntent),
    /// A call ended.
    Outcome(LedgerRecord),
}

/// How an intent is written: tagged, so that it never reads as an outcome record (whose lines
/// stay as they were, untagged).
#[derive(Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
enum Tagged<T> {
    Intent(T),
}

impl LedgerEntry {
    /// The entry as one line of JSON (no newline).
    pub fn to_json(&self) -> Result<Vec<u8>, LedgerError> {
        Ok(match self {
            Self::Intent(intent) => serde_json::to_vec(&Tagged::Intent(intent))?,
            Self::Outcome(record) => serde_json::to_vec(record)?,
        })
    }

    /// Reads an entry written by [`to_json`](Self::to_json).
    pub fn from_json(line: &[u8]) -> Result<Self, serde_json::Error> {
        match serde_json::from_slice::<Tagged<LedgerIntent>>(line) {
            Ok(Tagged::Intent(intent)) => Ok(Self::Intent(intent)),
            Err(_) => serde_json::from_slice(line).map(Self::Outcome),
        }
    }
}

/// The intents among `entries` that no outcome names, in their order: what an operator
/// reconciles after a crash.
pub fn pending(entries: impl IntoIterator<Item = LedgerEntry>) -> Vec<LedgerIntent> {
    let mut intents = Vec::new();
    let mut settled = std::collections::HashSet::new();
    for entry in entries {
        match entry {
            LedgerEntry::Intent(intent) => intents.push(intent),
            LedgerEntry::Outcome(record) => {
                if let Some(id) = record.intent_id {
                    settled.insert(id);
                }
            }
        }
    }
    intents.retain(|intent| !settled.contains(&intent.intent_id));
    intents
}

/// Why the ledger could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The file could not be opened, written or read.
    #[error("ledger I/O failed on {path}")]
    Io {
        /// The ledger file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A record could not be encoded.
    #[error("ledger record could not be encoded")]
    Encode(#[from] serde_json::Error),
    /// The sink keeps no intents (a [`LedgerSink`] that only implements `record`).
    #[error("this ledger sink does not record intents")]
    IntentsUnsupported,
    /// The sink could not store an intent (its store is down, full or too slow).
    #[error("the ledger could not store the intent")]
    IntentNotStored {
        /// What went wrong: the sink's words, and the error under them when there is one.
        #[source]
        reason: ErrorDetail,
    },
    /// The sink could not store an outcome at once ([`LedgerSink::settle`]).
    #[error("the ledger could not store the outcome")]
    OutcomeNotStored {
        /// What went wrong: the sink's words, and the error under them when there is one.
        #[source]
        reason: ErrorDetail,
    },
}

/// Where records go.
pub trait LedgerSink: Send + Sync {
    /// Stores one record; called once per call, after the result is known.
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError>;

    /// Stores the intent of a call with effects; the tool starts only once this resolves
    /// `Ok`, so it should resolve once the intent is as durable as the sink makes it.
    ///
    /// The default keeps no intents ([`LedgerError::IntentsUnsupported`]): such a sink runs
    /// tools as before, with outcome records only.
    fn intent(&self, intent: &LedgerIntent) -> BoxFuture<'static, Result<(), LedgerError>> {
        let _ = intent;
        Box::pin(std::future::ready(Err(LedgerError::IntentsUnsupported)))
    }

    /// Whether a call with effects is refused when its intent could not be stored (default:
    /// yes; a tool that moves money does not run unrecorded).
    fn require_intent(&self) -> bool {
        true
    }

    /// Stores the outcome record of a call whose intent was stored, resolving once a crash of
    /// this process can no longer lose it. The executor waits for it (at most
    /// [`OUTCOME_TIMEOUT`]) before the call's result returns, so a call whose result was
    /// heard never shows as pending; if it fails, the record goes to
    /// [`record`](Self::record). The default is `record`, whose record a sink may still hold
    /// in a queue.
    fn settle(&self, record: &LedgerRecord) -> BoxFuture<'static, Result<(), LedgerError>> {
        Box::pin(std::future::ready(self.record(record)))
    }
}

/// Records kept in memory (tests, short-lived tools).
#[derive(Debug, Default)]
pub struct MemoryLedger {
    records: Mutex<Vec<LedgerRecord>>,
    intents: Mutex<Vec<LedgerIntent>>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the records so far, in the order they were written.
    pub fn records(&self) -> Vec<LedgerRecord> {
        self.lock().clone()
    }

    /// Removes and returns the records so far (keeps a long-lived ledger bounded).
    pub fn take(&self) -> Vec<LedgerRecord> {
        std::mem::take(&mut *self.lock())
    }

    /// A copy of the intents so far, in the order they were written.
    pub fn intents(&self) -> Vec<LedgerIntent> {
        lock(&self.intents).clone()
    }

    /// The intents no record so far names (see [`pending`]).
    pub fn pending(&self) -> Vec<LedgerIntent> {
        let records = self.records();
        pending(
            self.intents()
                .into_iter()
                .map(LedgerEntry::Intent)
                .chain(records.into_iter().map(LedgerEntry::Outcome)),
        )
    }

    fn lock(&self) -> MutexGuard<'_, Vec<LedgerRecord>> {
        lock(&self.records)
    }
}

/// Locks a vector whose only update is a push: a poisoned one is still whole.
fn lock<T>(vector: &Mutex<Vec<T>>) -> MutexGuard<'_, Vec<T>> {
    vector
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl LedgerSink for MemoryLedger {
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError> {
        self.lock().push(record.clone());
        Ok(())
    }

    fn intent(&self, intent: &LedgerIntent) -> BoxFuture<'static, Result<(), LedgerError>> {
        lock(&self.intents).push(intent.clone());
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The longest a call with effects waits for its intent to be stored before its tool starts
/// (then it is refused, or runs unrecorded: [`LedgerSink::require_intent`]): a caller on the
/// phone waits seconds, and a sink this slow is failing.
pub const INTENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The longest the result of a call with effects waits for its outcome record to be stored
/// ([`LedgerSink::settle`]); then the record is queued instead: a caller's answer is not held
/// up longer for its bookkeeping.
pub const OUTCOME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// The records a [`JsonlLedger`] queues for its writer thread by default.
pub const DEFAULT_QUEUE_CAPACITY: usize = 4096;

/// What [`JsonlLedger::record`] does when its writer thread is that far behind (the disk is
/// stalled or much slower than the calls).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WhenFull {
    /// Drop the record, log an error naming the call, and count it
    /// ([`JsonlLedger::dropped`]): calls never wait on the disk. The default.
    #[default]
    Drop,
    /// Block the calling thread until the writer has room: no record is lost, but a stalled
    /// disk then stalls the calls (and the async worker thread they run on).
    Block,
}

/// Size-based rotation of a [`JsonlLedger`]: when the file would pass `max_bytes`, it becomes
/// `<file>.1` (the older ones shift to `.2`, `.3`...; only `keep` are kept) and a new file
/// starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// The size a file may reach (a record larger than this gets a file of its own).
    pub max_bytes: u64,
    /// How many rotated files are kept besides the current one (0: none).
    pub keep: usize,
}

/// How a [`JsonlLedger`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonlOptions {
    /// Records queued for the writer thread at most (default [`DEFAULT_QUEUE_CAPACITY`]).
    pub capacity: usize,
    /// What a full queue does (default [`WhenFull::Drop`]).
    pub when_full: WhenFull,
    /// `sync_data` after every record: it survives a power cut, at a disk flush per call
    /// (default off: each record still reaches the OS with one write).
    pub sync_data: bool,
    /// Size-based rotation (default off).
    pub rotation: Option<Rotation>,
    /// `sync_data` after every intent, before its tool starts: the intent survives a power
    /// cut or a kernel crash, not only the process's (default on; see [`sync_intents`]).
    ///
    /// [`sync_intents`]: Self::sync_intents
    pub sync_intents: bool,
    /// Refuse a call with effects whose intent could not be written (default on; see
    /// [`LedgerSink::require_intent`]).
    pub require_intent: bool,
}

impl Default for JsonlOptions {
    fn default() -> Self {
        Self {
            capacity: DEFAULT_QUEUE_CAPACITY,
            when_full: WhenFull::Drop,
            sync_data: false,
            rotation: None,
            sync_intents: true,
            require_intent: true,
        }
    }
}

impl JsonlOptions {
    /// Sets the queue's capacity (at least 1).
    pub fn capacity(mut self, records: usize) -> Self {
        self.capacity = records.max(1);
        self
    }

    /// Sets what a full queue does.
    pub fn when_full(mut self, policy: WhenFull) -> Self {
        self.when_full = policy;
        self
    }

    /// Calls `sync_data` after every record.
    pub fn sync_data(mut self, sync: bool) -> Self {
        self.sync_data = sync;
        self
    }

    /// Whether each intent is synced to the disk (`sync_data`) before its tool starts.
    ///
    /// Every intent reaches the OS before its tool starts either way, so it survives the
    /// process's crash; the sync makes it survive the machine's. It costs one disk flush per
    /// call with effects (calls without effects write no intent).
    pub fn sync_intents(mut self, sync: bool) -> Self {
        self.sync_intents = sync;
        self
    }

    /// Whether a call with effects is refused when its intent could not be written.
    pub fn require_intent(mut self, require: bool) -> Self {
        self.require_intent = require;
        self
    }

    /// Rotates the file when it would pass `max_bytes`, keeping `keep` rotated files.
    pub fn rotate(mut self, max_bytes: u64, keep: usize) -> Self {
        self.rotation = Some(Rotation { max_bytes, keep });
        self
    }

    /// Opens the ledger at `path` with these options (see [`JsonlLedger::open`]).
    pub fn open(self, path: impl AsRef<Path>) -> Result<JsonlLedger, LedgerError> {
        JsonlLedger::open_with(path, self)
    }
}

/// What the writer thread is sent.
enum Job {
    /// One encoded record, newline included.
    Line(Vec<u8>),
    /// Answer once everything sent before is written.
    Flush(mpsc::SyncSender<()>),
    /// One encoded intent, newline included: answered once it is written (and synced).
    Intent(
        Vec<u8>,
        tokio::sync::oneshot::Sender<Result<(), LedgerError>>,
    ),
    /// One encoded outcome record that settles an intent: answered once it is written.
    Settle(
        Vec<u8>,
        tokio::sync::oneshot::Sender<Result<(), LedgerError>>,
    ),
}

/// Counters shared with the writer thread.
#[derive(Debug, Default)]
struct Counters {
    dropped: AtomicU64,
    failed: AtomicU64,
}

/// Records appended to a JSON Lines file by a writer thread of its own.
///
/// [`record`](LedgerSink::record) only encodes the record and queues it (bounded, see
/// [`WhenFull`]): the file is written, synced and rotated off the async threads, in the order
/// the records were queued. A write error is logged (and counted, [`write_errors`]), never a
/// panic and never the call's failure. Dropping the ledger writes what is queued and joins the
/// thread; [`flush`](Self::flush) waits for it without dropping. A ledger in a process-wide
/// executor is never dropped: flush it before the process exits.
///
/// [`write_errors`]: Self::write_errors
///
/// # Examples
///
/// ```
/// # use async_trait::async_trait;
/// # use crewline_tools::{Tool, ToolError, ToolPolicy};
/// # use serde_json::{Value, json};
/// # struct T;
/// # #[async_trait]
/// # impl Tool for T {
/// #     fn name(&self) -> &str { "get_weather" }
/// #     fn description(&self) -> &str { "A tool." }
/// #     fn parameters(&self) -> Value {
/// #         json!({"type": "object", "properties": {"city": {"type": "string"}}})
/// #     }
/// #     async fn call(&self, args: Value) -> Result<Value, ToolError> {
/// #         Ok(json!({"city": args["city"], "sky": "sunny"}))
/// #     }
/// # }
/// use std::sync::Arc;
///
/// use crewline_core::ToolCall;
/// use crewline_tools::executor::ledger::{JsonlLedger, Outcome};
/// use crewline_tools::{ExecuteOptions, Executor, ToolRegistry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let path = std::env::temp_dir().join(format!("crewline-ledger-doc-{}.jsonl", std::process::id()));
/// # let _ = std::fs::remove_file(&path);
/// let ledger = Arc::new(JsonlLedger::options().rotate(10 << 20, 3).open(&path)?);
/// let mut tools = ToolRegistry::new().with_executor(Executor::builder().ledger(ledger.clone()).build());
/// tools.register(T)?;
///
/// let call = ToolCall::new("call_1", "get_weather", r#"{"city": "Paris"}"#);
/// tools.execute(&[call], ExecuteOptions::new()).await;
/// ledger.flush(); // records are written by a thread of the ledger's own
///
/// let records = JsonlLedger::read(&path)?;
/// assert_eq!((records[0].tool.as_str(), records[0].outcome), ("get_weather", Outcome::Ok));
/// assert_eq!(records[0].arguments, json!({"city": "Paris"}));
/// # std::fs::remove_file(&path)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct JsonlLedger {
    path: PathBuf,
    queue: Option<mpsc::SyncSender<Job>>,
    writer: Option<std::thread::JoinHandle<()>>,
    when_full: WhenFull,
    require_intent: bool,
    counters: Arc<Counters>,
}

impl JsonlLedger {
    /// Opens (or creates) the file for appending, with the default [`JsonlOptions`].
    ///
    /// If a crash left a torn last line, a newline is added first so that the next record
    /// starts on a line of its own and the torn one stays skippable.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        Self::open_with(path, JsonlOptions::default())
    }

    /// Options to open a ledger with (rotation, `sync_data`, the queue).
    pub fn options() -> JsonlOptions {
        JsonlOptions::default()
    }

    /// Opens (or creates) the file for appending with `options`.
    pub fn open_with(path: impl AsRef<Path>, options: JsonlOptions) -> Result<Self, LedgerError> {
        let path = path.as_ref().to_path_buf();
        let (file, size) = open_for_append(&path)?;
        let (queue, jobs) = mpsc::sync_channel(options.capacity.max(1));
        let counters = Arc::new(Counters::default());
        let mut writer = Writer {
            path: path.clone(),
            file: Some(file),
            size,
            options,
            counters: Arc::clone(&counters),
        };
        // The thread logs to the subscriber of whoever opened the ledger.
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let thread = std::thread::Builder::new()
            .name("crewline-ledger".to_owned())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || writer.run(&jobs));
            })
            .map_err(|source| LedgerError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(Self {
            path,
            queue: Some(queue),
            writer: Some(thread),
            when_full: options.when_full,
            require_intent: options.require_intent,
            counters,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Blocks until every record queued so far is written (and synced, with `sync_data`).
    pub fn flush(&self) {
        let Some(queue) = &self.queue else { return };
        let (done, written) = mpsc::sync_channel(1);
        if queue.send(Job::Flush(done)).is_ok() {
            let _ = written.recv();
        }
    }

    /// Records dropped because the queue was full ([`WhenFull::Drop`]).
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// Records that could not be written (each is logged at `error`).
    pub fn write_errors(&self) -> u64 {
        self.counters.failed.load(Ordering::Relaxed)
    }

    /// Reads the records of a ledger, oldest first: the rotated files (`<file>.N` down to
    /// `<file>.1`) if any, then the file itself, skipping torn or unreadable lines (logged).
    /// Intents are left out ([`read_entries`](Self::read_entries) has them).
    pub fn read(path: impl AsRef<Path>) -> Result<Vec<LedgerRecord>, LedgerError> {
        Ok(Self::read_entries(path)?
            .into_iter()
            .filter_map(|entry| match entry {
                LedgerEntry::Outcome(record) => Some(record),
                LedgerEntry::Intent(_) => None,
            })
            .collect())
    }

    /// Reads the intents and records of a ledger, oldest first, as [`read`](Self::read) does.
    pub fn read_entries(path: impl AsRef<Path>) -> Result<Vec<LedgerEntry>, LedgerError> {
        let path = path.as_ref();
        let mut entries = Vec::new();
        for rotated in rotated_files(path)?.into_iter().rev() {
            read_file(&rotated, &mut entries)?;
        }
        read_file(path, &mut entries)?;
        Ok(entries)
    }

    /// The intents of the ledger at `path` (its rotated files included) that no record names:
    /// calls with effects whose outcome is unknown (the process died while they ran). A torn
    /// last line (a crash mid-write) is skipped.
    pub fn pending(path: impl AsRef<Path>) -> Result<Vec<LedgerIntent>, LedgerError> {
        Ok(pending(Self::read_entries(path)?))
    }

    /// Queues one encoded line; `Ok(false)` when the queue was full and the line dropped.
    fn send(&self, job: Job) -> Result<bool, LedgerError> {
        let stopped = || LedgerError::Io {
            path: self.path.clone(),
            source: io::Error::other("the ledger's writer thread has stopped"),
        };
        let Some(queue) = &self.queue else {
            return Err(stopped());
        };
        match self.when_full {
            WhenFull::Block => queue.send(job).map(|()| true).map_err(|_| stopped()),
            WhenFull::Drop => match queue.try_send(job) {
                Ok(()) => Ok(true),
                Err(mpsc::TrySendError::Full(_)) => {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    Ok(false)
                }
                Err(mpsc::TrySendError::Disconnected(_)) => Err(stopped()),
            },
        }
    }
}

impl LedgerSink for JsonlLedger {
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError> {
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        if !self.send(Job::Line(line))? {
            tracing::error!(
                path = %self.path.display(),
                call_id = %record.call_id.chars().take(64).collect::<String>(),
                tool = %record.tool,
                "the ledger's queue is full (the disk is not keeping up): record dropped"
            );
        }
        Ok(())
    }

    fn intent(&self, intent: &LedgerIntent) -> BoxFuture<'static, Result<(), LedgerError>> {
        let line = LedgerEntry::Intent(intent.clone())
            .to_json()
            .map(|mut line| {
                line.push(b'\n');
                line
            });
        let (done, written) = tokio::sync::oneshot::channel();
        let sent = line.and_then(|line| self.send(Job::Intent(line, done)));
        self.answered(sent, written, |reason| LedgerError::IntentNotStored {
            reason: reason.into(),
        })
    }

    /// Written to the OS before it resolves (synced too with `sync_data`): a killed process
    /// loses nothing the OS has; an intent's fsync is not repeated for its outcome.
    fn settle(&self, record: &LedgerRecord) -> BoxFuture<'static, Result<(), LedgerError>> {
        let line = serde_json::to_vec(record)
            .map(|mut line| {
                line.push(b'\n');
                line
            })
            .map_err(LedgerError::from);
        let (done, written) = tokio::sync::oneshot::channel();
        let sent = line.and_then(|line| self.send(Job::Settle(line, done)));
        self.answered(sent, written, |reason| LedgerError::OutcomeNotStored {
            reason: reason.into(),
        })
    }

    fn require_intent(&self) -> bool {
        self.require_intent
    }
}

impl JsonlLedger {
    /// Waits for the writer's answer to a line `sent` with `written` as its answer; a full
    /// queue is the error `full` makes.
    fn answered(
        &self,
        sent: Result<bool, LedgerError>,
        written: tokio::sync::oneshot::Receiver<Result<(), LedgerError>>,
        full: fn(String) -> LedgerError,
    ) -> BoxFuture<'static, Result<(), LedgerError>> {
        let path = self.path.clone();
        Box::pin(async move {
            if !sent? {
                return Err(full(format!(
                    "the queue of {} is full (the disk is not keeping up)",
                    path.display()
                )));
            }
            // The writer answers once the line is written (and synced); its thread gone
            // without an answer means it was not.
            written.await.unwrap_or_else(|_| {
                Err(LedgerError::Io {
                    path,
                    source: io::Error::other("the ledger's writer thread has stopped"),
                })
            })
        })
    }
}

impl Drop for JsonlLedger {
    fn drop(&mut self) {
        // Closing the queue lets the writer write what is left and stop.
        drop(self.queue.take());
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            tracing::error!(path = %self.path.display(), "the ledger's writer thread panicked");
        }
    }
}

/// The writer thread's state.
struct Writer {
    path: PathBuf,
    /// `None` after a failed rotation left no file open (the next record retries).
    file: Option<File>,
    size: u64,
    options: JsonlOptions,
    counters: Arc<Counters>,
}

impl Writer {
    fn run(&mut self, jobs: &mpsc::Receiver<Job>) {
        for job in jobs {
            match job {
                Job::Line(line) => {
                    if let Err(error) = self.write(&line) {
                        self.counters.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(error = %crewline_core::ErrorChain(&error), "the tool ledger could not be written");
                    }
                }
                Job::Flush(done) => {
                    let _ = done.send(());
                }
                Job::Intent(line, done) => {
                    let written = self.write(&line).and_then(|()| self.sync_intent());
                    if let Err(error) = &written {
                        self.counters.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(error = %crewline_core::ErrorChain(error), "an intent could not be written to the tool ledger");
                    }
                    // The caller may have stopped waiting (its call was dropped).
                    let _ = done.send(written);
                }
                Job::Settle(line, done) => {
                    let written = self.write(&line);
                    if let Err(error) = &written {
                        self.counters.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(error = %crewline_core::ErrorChain(error), "the tool ledger could not be written");
                    }
                    let _ = done.send(written);
                }
            }
        }
    }

    fn write(&mut self, line: &[u8]) -> Result<(), LedgerError> {
        let len = u64::try_from(line.len()).unwrap_or(u64::MAX);
        if let Some(rotation) = self.options.rotation
            && self.size > 0
            && self.size.saturating_add(len) > rotation.max_bytes
        {
            self.rotate(rotation)?;
        }
        let io_error = |source| LedgerError::Io {
            path: self.path.clone(),
            source,
        };
        if self.file.is_none() {
            let (file, size) = open_for_append(&self.path)?;
            self.file = Some(file);
            self.size = size;
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        // One write of the whole line: a crash tears at most this record.
        file.write_all(line).map_err(io_error)?;
        self.size = self.size.saturating_add(len);
        if self.options.sync_data {
            file.sync_data().map_err(io_error)?;
        }
        Ok(())
    }

    /// Syncs the file after an intent, unless every line already is (`sync_data`).
    fn sync_intent(&mut self) -> Result<(), LedgerError> {
        if !self.options.sync_intents || self.options.sync_data {
            return Ok(());
        }
        match self.file.as_mut() {
            Some(file) => file.sync_data().map_err(|source| LedgerError::Io {
                path: self.path.clone(),
                source,
            }),
            None => Ok(()),
        }
    }

    /// `<file>` becomes `<file>.1`, `.1` becomes `.2`..., the oldest past `keep` is removed.
    fn rotate(&mut self, rotation: Rotation) -> Result<(), LedgerError> {
        let io_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| LedgerError::Io { path, source }
        };
        self.file = None;
        if rotation.keep == 0 {
            std::fs::remove_file(&self.path).map_err(io_error(&self.path))?;
        } else {
            let _ = std::fs::remove_file(numbered(&self.path, rotation.keep));
            for n in (1..rotation.keep).rev() {
                let from = numbered(&self.path, n);
                match std::fs::rename(&from, numbered(&self.path, n + 1)) {
                    Err(error) if error.kind() != io::ErrorKind::NotFound => {
                        return Err(io_error(&from)(error));
                    }
                    _ => {}
                }
            }
            std::fs::rename(&self.path, numbered(&self.path, 1)).map_err(io_error(&self.path))?;
        }
        self.size = 0;
        Ok(())
    }
}

/// Opens `path` for appending; returns it and its size. Ends a torn last line first.
fn open_for_append(path: &Path) -> Result<(File, u64), LedgerError> {
    let io_error = |source| LedgerError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(path)
        .map_err(io_error)?;
    let mut len = file.metadata().map_err(io_error)?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1)).map_err(io_error)?;
        file.read_exact(&mut last).map_err(io_error)?;
        if last[0] != b'\n' {
            file.write_all(b"\n").map_err(io_error)?;
            len += 1;
        }
    }
    Ok((file, len))
}

/// `<path>.<n>`.
fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// The rotated files of `path` that exist, `.1` (newest) first.
fn rotated_files(path: &Path) -> Result<Vec<PathBuf>, LedgerError> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(Vec::new());
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Some(name) = name.to_str() else {
        return Ok(Vec::new());
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(source) => {
            return Err(LedgerError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut numbers: Vec<usize> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let file = entry.file_name();
            let rest = file.to_str()?.strip_prefix(name)?.strip_prefix('.')?;
            rest.parse().ok().filter(|n| *n > 0)
        })
        .collect();
    numbers.sort_unstable();
    Ok(numbers.into_iter().map(|n| numbered(path, n)).collect())
}

/// Appends the entries of one file to `records`, skipping torn lines.
fn read_file(path: &Path, records: &mut Vec<LedgerEntry>) -> Result<(), LedgerError> {
    let io_error = |source| LedgerError::Io {
        path: path.to_path_buf(),
        source,
    };
    let reader = BufReader::new(File::open(path).map_err(io_error)?);
    for (number, line) in reader.split(b'\n').enumerate() {
        let line = line.map_err(io_error)?;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match LedgerEntry::from_json(&line) {
            Ok(entry) => records.push(entry),
            Err(error) => tracing::warn!(
                path = %path.display(),
                line = number + 1,
                error = %crewline_core::ErrorChain(&error),
                "skipping a torn ledger line"
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn record(id: &str) -> LedgerRecord {
        LedgerRecord {
            call_id: id.to_owned(),
            tool: "t".to_owned(),
            arguments: serde_json::json!({"a": 1}),
            outcome: Outcome::Error,
            error_kind: Some(ToolErrorKind::Timeout),
            message: Some("slow".to_owned()),
            detail: None,
            latency_us: 7,
            approval: Some(ApprovalRecord::Approved),
            cache_hit: false,
            timestamp_ms: 1,
            ran_on: false,
            intent_id: None,
        }
    }

    #[test]
    fn records_round_trip_through_json() {
        let text = serde_json::to_string(&record("c")).unwrap_or_default();
        let back: LedgerRecord = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, record("c"));
        assert!(text.contains(r#""error_kind":"Timeout""#), "{text}");
    }

    #[test]
    fn memory_ledger_keeps_order() {
        let ledger = MemoryLedger::new();
        for id in ["1", "2"] {
            ledger.record(&record(id)).unwrap_or_else(|e| panic!("{e}"));
        }
        let ids: Vec<_> = ledger.records().into_iter().map(|r| r.call_id).collect();
        assert_eq!(ids, ["1", "2"]);
        assert_eq!(ledger.take().len(), 2);
        assert!(ledger.records().is_empty());
    }

    #[tokio::test]
    async fn a_jsonl_outcome_is_in_the_file_once_settle_resolves() {
        let path = std::env::temp_dir().join(format!(
            "crewline-ledger-settle-{}.jsonl",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let ledger = JsonlLedger::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let mut settled = record("c1");
        settled.intent_id = Some("int_1".to_owned());
        ledger
            .settle(&settled)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // Not flushed: the writer answered once the line was with the OS.
        let read = JsonlLedger::read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read, [settled]);
        drop(ledger);
        let _ = std::fs::remove_file(&path);
    }
}
