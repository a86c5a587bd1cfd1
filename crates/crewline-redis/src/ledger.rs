//! The tool ledger in a Redis stream: intents and outcomes of every replica in one place, for
//! an operator to reconcile the calls a crashed replica left with no outcome.

use std::{
    fmt,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crewline::types::ErrorDetail;
use crewline_tools::executor::ledger::{
    LedgerEntry, LedgerError, LedgerIntent, LedgerRecord, LedgerSink, pending,
};
use futures::future::BoxFuture;
use redis::Script;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::connection::{self, RedisConnection};

/// The entries the stream keeps by default (older ones are trimmed, `MAXLEN ~`): about a day
/// of a busy fleet's calls with effects and their outcomes, a few tens of MB.
pub const DEFAULT_LEDGER_MAX_LEN: usize = 100_000;

/// The largest arguments an entry keeps whole by default (as JSON): 16 KiB. A payment's
/// arguments are a few hundred bytes; larger ones are kept as an excerpt, so the stream's size
/// stays bounded by `max_len` entries of about this size.
pub const DEFAULT_LEDGER_MAX_ARGUMENT_BYTES: usize = 16 << 10;

/// How often a failing Redis is logged (each failure is counted): once per interval, not once
/// per call.
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What an argument excerpt keeps of arguments over the limit.
const EXCERPT_BYTES: usize = 1024;

/// Appends one entry and trims the stream (approximately) to `ARGV[1]` entries.
const XADD: &str = "return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', \
                    'kind', ARGV[2], 'entry', ARGV[3])";

/// The newest `ARGV[2]` entries up to id `ARGV[1]` (`+`: the newest), newest first.
const XREVRANGE: &str = "return redis.call('XREVRANGE', KEYS[1], ARGV[1], '-', 'COUNT', ARGV[2])";

/// Why the Redis ledger could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisLedgerError {
    /// Redis did not answer, or refused the command.
    #[error("the ledger (Redis at {target}) {failure}")]
    Redis {
        /// The URL, its password hidden.
        target: String,
        /// Unreachable, or failed.
        failure: &'static str,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// A reply was not a stream's entries.
    #[error("the ledger (Redis at {target}) sent a reply it cannot read: {what}")]
    Unreadable {
        /// The URL, its password hidden.
        target: String,
        /// What was wrong.
        what: String,
    },
}

/// How a [`RedisLedger`] writes and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisLedgerOptions {
    /// Entries the stream keeps (default [`DEFAULT_LEDGER_MAX_LEN`]), trimmed approximately.
    pub max_len: usize,
    /// Arguments kept whole up to this size (default [`DEFAULT_LEDGER_MAX_ARGUMENT_BYTES`]).
    pub max_argument_bytes: usize,
    /// Outcome records queued for the writer task at most (default 4,096); more are dropped
    /// and counted. Queued: the outcomes of calls without effects, which never wait on Redis,
    /// and those of calls with effects whose awaited write failed or timed out.
    pub capacity: usize,
    /// How long one write may take (default 1 s, under the executor's 2 s intent limit).
    pub write_timeout: Duration,
    /// Refuse a call with effects whose intent could not be written (default on).
    pub require_intent: bool,
}

impl Default for RedisLedgerOptions {
    fn default() -> Self {
        Self {
            max_len: DEFAULT_LEDGER_MAX_LEN,
            max_argument_bytes: DEFAULT_LEDGER_MAX_ARGUMENT_BYTES,
            capacity: crewline_tools::executor::ledger::DEFAULT_QUEUE_CAPACITY,
            write_timeout: Duration::from_secs(1),
            require_intent: true,
        }
    }
}

impl RedisLedgerOptions {
    /// Sets the entries the stream keeps (at least 1).
    pub fn max_len(mut self, entries: usize) -> Self {
        self.max_len = entries.max(1);
        self
    }

    /// Sets the size up to which arguments are kept whole.
    pub fn max_argument_bytes(mut self, bytes: usize) -> Self {
        self.max_argument_bytes = bytes;
        self
    }

    /// Sets the outcome queue's capacity (at least 1).
    pub fn capacity(mut self, records: usize) -> Self {
        self.capacity = records.max(1);
        self
    }

    /// Sets how long one write may take.
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Whether a call with effects is refused when its intent could not be written.
    pub fn require_intent(mut self, require: bool) -> Self {
        self.require_intent = require;
        self
    }
}

/// The tool ledger as a Redis stream (`<prefix>ledger`), shared by every replica on the same
/// Redis and prefix: intents are written before a tool with effects starts, and its outcome
/// before its result returns (the call waits for Redis's answer, at most `write_timeout`);
/// the other outcomes (calls without effects) by a task of the ledger's own, which no call
/// waits for. [`pending`](Self::pending) lists the intents no outcome names.
///
/// The stream is trimmed to about `max_len` entries on every write (`XADD MAXLEN ~`), so it
/// never grows past that even if nobody reads it. A Redis error never fails a call by itself:
/// it is counted ([`write_errors`](Self::write_errors)) and logged once per 10 s; an intent
/// that could not be written refuses its call when `require_intent` is on (the default).
///
/// An intent is as durable as Redis makes it: with AOF `appendfsync everysec` (see
/// docs/deploying.md) a Redis crash can lose the last second.
#[derive(Clone)]
pub struct RedisLedger {
    shared: Arc<Shared>,
}

struct Shared {
    connection: RedisConnection,
    key: String,
    options: RedisLedgerOptions,
    script: Script,
    queue: mpsc::Sender<(&'static str, String)>,
    errors: AtomicU64,
    dropped: AtomicU64,
    logged: Mutex<Option<Instant>>,
}

impl fmt::Debug for RedisLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLedger")
            .field("redis", &self.shared.connection.target())
            .field("key", &self.shared.key)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl RedisLedger {
    /// A ledger in the stream `<prefix>ledger` of `connection`, with default options.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (its writer is a task).
    pub fn new(connection: RedisConnection) -> Self {
        Self::with_options(connection, RedisLedgerOptions::default())
    }

    /// A ledger in the stream `<prefix>ledger` of `connection`, with `options`.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (its writer is a task).
    pub fn with_options(connection: RedisConnection, options: RedisLedgerOptions) -> Self {
        let (queue, records) = mpsc::channel(options.capacity.max(1));
        let shared = Arc::new(Shared {
            key: format!("{}ledger", connection.prefix()),
            connection,
            options,
            script: Script::new(XADD),
            queue,
            errors: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            logged: Mutex::new(None),
        });
        // The task holds the ledger weakly: it ends once every handle is dropped.
        tokio::spawn(write_outcomes(Arc::downgrade(&shared), records));
        Self { shared }
    }

    /// The stream's key.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// Entries that could not be written (Redis down, slow or refusing).
    pub fn write_errors(&self) -> u64 {
        self.shared.errors.load(Ordering::Relaxed)
    }

    /// Outcome records dropped because the queue was full (Redis is not keeping up).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// The newest `limit` entries at most, oldest first (read newest first, in pages).
    pub async fn entries(&self, limit: usize) -> Result<Vec<LedgerEntry>, RedisLedgerError> {
        read_entries(&self.shared.connection, &self.shared.key, limit).await
    }

    /// The intents among the stream's entries (all it keeps) that no outcome names: calls
    /// with effects whose outcome is unknown (a replica died while they ran).
    pub async fn pending(&self) -> Result<Vec<LedgerIntent>, RedisLedgerError> {
        // `MAXLEN ~` keeps up to a node (100 entries by default) more than `max_len`.
        let all = self.shared.options.max_len.saturating_add(PAGE);
        Ok(pending(self.entries(all).await?))
    }
}

/// The newest `limit` entries at most of the ledger stream under `connection`'s prefix,
/// oldest first: for a reader that writes nothing (`crewline ledger pending`).
pub async fn read_ledger(
    connection: &RedisConnection,
    limit: usize,
) -> Result<Vec<LedgerEntry>, RedisLedgerError> {
    read_entries(connection, &format!("{}ledger", connection.prefix()), limit).await
}

/// The entries read per command.
const PAGE: usize = 1000;

async fn read_entries(
    connection: &RedisConnection,
    key: &str,
    limit: usize,
) -> Result<Vec<LedgerEntry>, RedisLedgerError> {
    let script = Script::new(XREVRANGE);
    let mut entries = Vec::new();
    let mut from = "+".to_owned();
    while entries.len() < limit {
        let count = PAGE.min(limit - entries.len());
        let mut invocation = script.prepare_invoke();
        invocation.key(key).arg(&from).arg(count);
        let page: Vec<(String, Vec<String>)> =
            connection
                .invoke(&invocation)
                .await
                .map_err(|source| RedisLedgerError::Redis {
                    target: connection.target().to_owned(),
                    failure: connection::failure(&source),
                    source,
                })?;
        let Some((last, _)) = page.last() else { break };
        from = format!("({last}");
        let full = page.len() == count;
        for (id, fields) in page {
            let entry = fields
                .chunks(2)
                .find(|pair| pair.first().map(String::as_str) == Some("entry"))
                .and_then(|pair| pair.get(1));
            let Some(entry) = entry else {
                return Err(RedisLedgerError::Unreadable {
                    target: connection.target().to_owned(),
                    what: format!("entry {id} has no `entry` field"),
                });
            };
            match LedgerEntry::from_json(entry.as_bytes()) {
                Ok(entry) => entries.push(entry),
                Err(error) => {
                    tracing::warn!(stream = key, id, error = %crewline::types::ErrorChain(&error), "skipping an unreadable ledger entry");
                }
            }
        }
        if !full {
            break;
        }
    }
    entries.reverse();
    Ok(entries)
}

impl Shared {
    /// Appends one entry, within the write timeout.
    async fn append(&self, kind: &str, json: &str) -> Result<(), ErrorDetail> {
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(&self.key)
            .arg(self.options.max_len)
            .arg(kind)
            .arg(json);
        let written = tokio::time::timeout(
            self.options.write_timeout,
            self.connection.invoke::<String>(&invocation),
        )
        .await;
        let failed = match written {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(error)) => ErrorDetail::caused_by(
                format!(
                    "Redis at {} {}: {error}",
                    self.connection.target(),
                    connection::failure(&error)
                ),
                error,
            ),
            Err(_) => ErrorDetail::new(format!(
                "Redis at {} did not answer within {:?}",
                self.connection.target(),
                self.options.write_timeout
            )),
        };
        self.failed(failed.message());
        Err(failed)
    }

    /// Counts a failure; logs it unless one was logged within the interval.
    fn failed(&self, why: &str) {
        let errors = self.errors.fetch_add(1, Ordering::Relaxed) + 1;
        let mut logged = self
            .logged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if logged.is_none_or(|at| at.elapsed() >= LOG_INTERVAL) {
            *logged = Some(Instant::now());
            tracing::error!(
                stream = %self.key,
                errors,
                dropped = self.dropped.load(Ordering::Relaxed),
                "the tool ledger could not be written to Redis (logged once per {LOG_INTERVAL:?}): {why}"
            );
        }
    }

    /// `arguments`, or an excerpt of them when their JSON is over the limit.
    fn bounded(&self, arguments: &Value) -> Option<Value> {
        let max = self.options.max_argument_bytes;
        let text = arguments.to_string();
        if text.len() <= max {
            return None;
        }
        let mut cut = EXCERPT_BYTES.min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        Some(Value::String(format!(
            "{}… ({} bytes, over the ledger's {max})",
            &text[..cut],
            text.len()
        )))
    }
}

/// Writes the queued outcome records until the ledger is dropped.
async fn write_outcomes(
    shared: std::sync::Weak<Shared>,
    mut records: mpsc::Receiver<(&'static str, String)>,
) {
    while let Some((kind, json)) = records.recv().await {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        // One more try after a short pause: a failover or a reconnect takes a moment.
        if shared.append(kind, &json).await.is_err() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = shared.append(kind, &json).await;
        }
    }
}

impl Shared {
    /// `record` as the stream's entry, its arguments bounded.
    fn outcome_entry(&self, record: &LedgerRecord) -> Result<String, LedgerError> {
        let json = match self.bounded(&record.arguments) {
            Some(excerpt) => {
                let mut record = record.clone();
                record.arguments = excerpt;
                LedgerEntry::Outcome(record).to_json()?
            }
            None => LedgerEntry::Outcome(record.clone()).to_json()?,
        };
        Ok(text(json))
    }
}

impl LedgerSink for RedisLedger {
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError> {
        let shared = &self.shared;
        let entry = shared.outcome_entry(record)?;
        if shared.queue.try_send(("outcome", entry)).is_err() {
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            shared.failed("the outcome queue is full (Redis is not keeping up): record dropped");
        }
        Ok(())
    }

    fn intent(&self, intent: &LedgerIntent) -> BoxFuture<'static, Result<(), LedgerError>> {
        let shared = Arc::clone(&self.shared);
        let mut intent = intent.clone();
        if let Some(excerpt) = shared.bounded(&intent.arguments) {
            intent.arguments = excerpt;
        }
        Box::pin(async move {
            let json = LedgerEntry::Intent(intent).to_json()?;
            shared
                .append("intent", &text(json))
                .await
                .map_err(|reason| LedgerError::IntentNotStored { reason })
        })
    }

    fn require_intent(&self) -> bool {
        self.shared.options.require_intent
    }

    /// One `XADD` awaited (at most `write_timeout`), as an intent is: once it resolves, the
    /// outcome is in Redis whatever happens to this process.
    fn settle(&self, record: &LedgerRecord) -> BoxFuture<'static, Result<(), LedgerError>> {
        let shared = Arc::clone(&self.shared);
        let entry = shared.outcome_entry(record);
        Box::pin(async move {
            shared
                .append("outcome", &entry?)
                .await
                .map_err(|reason| LedgerError::OutcomeNotStored { reason })
        })
    }
}

/// serde_json's output as text (it is always UTF-8).
fn text(json: Vec<u8>) -> String {
    String::from_utf8(json)
        .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned())
}
