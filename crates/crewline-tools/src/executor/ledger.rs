//! Stage 9: one record per call, to a pluggable sink.
//!
//! A sink failure never fails the call: it is logged. [`JsonlLedger`] appends JSON Lines with
//! one write and one flush per record, so a crash mid-write loses at most that record; its
//! reader skips a torn line.

use std::{
    fs::{File, OpenOptions},
    io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
    sync::{Mutex, MutexGuard},
};

use crewline_core::ToolErrorKind;
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
}

/// Why the ledger could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The file could not be opened, written or read.
    #[error("ledger I/O failed on {path}: {source}")]
    Io {
        /// The ledger file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A record could not be encoded.
    #[error("ledger record could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Where records go.
pub trait LedgerSink: Send + Sync {
    /// Stores one record; called once per call, after the result is known.
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError>;
}

/// Records kept in memory (tests, short-lived tools).
#[derive(Debug, Default)]
pub struct MemoryLedger {
    records: Mutex<Vec<LedgerRecord>>,
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

    fn lock(&self) -> MutexGuard<'_, Vec<LedgerRecord>> {
        // Pushing is the only update: a poisoned vector is still whole.
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl LedgerSink for MemoryLedger {
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError> {
        self.lock().push(record.clone());
        Ok(())
    }
}

/// Records appended to a JSON Lines file.
#[derive(Debug)]
pub struct JsonlLedger {
    path: PathBuf,
    file: Mutex<File>,
}

impl JsonlLedger {
    /// Opens (or creates) the file for appending.
    ///
    /// If a crash left a torn last line, a newline is added first so that the next record
    /// starts on a line of its own and the torn one stays skippable.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        let path = path.as_ref().to_path_buf();
        let io_error = |source| LedgerError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)
            .map_err(io_error)?;
        let len = file.metadata().map_err(io_error)?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1)).map_err(io_error)?;
            file.read_exact(&mut last).map_err(io_error)?;
            if last[0] != b'\n' {
                file.write_all(b"\n").map_err(io_error)?;
                file.flush().map_err(io_error)?;
            }
        }
        Ok(Self {
            path,
            file: Mutex::new(file),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the records of a ledger file, skipping torn or unreadable lines (logged).
    pub fn read(path: impl AsRef<Path>) -> Result<Vec<LedgerRecord>, LedgerError> {
        let path = path.as_ref();
        let io_error = |source| LedgerError::Io {
            path: path.to_path_buf(),
            source,
        };
        let reader = BufReader::new(File::open(path).map_err(io_error)?);
        let mut records = Vec::new();
        for (number, line) in reader.split(b'\n').enumerate() {
            let line = line.map_err(io_error)?;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice(&line) {
                Ok(record) => records.push(record),
                Err(error) => tracing::warn!(
                    path = %path.display(),
                    line = number + 1,
                    %error,
                    "skipping a torn ledger line"
                ),
            }
        }
        Ok(records)
    }
}

impl LedgerSink for JsonlLedger {
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError> {
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        // One write of the whole line, so records from concurrent calls never interleave.
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.write_all(&line)
            .and_then(|()| file.flush())
            .map_err(|source| LedgerError::Io {
                path: self.path.clone(),
                source,
            })
    }
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
}
