//! The turn log (`LoadConfig::turn_log`): one JSON line per turn and per failed connection,
//! with its time since the run began, so that a script can compute figures per time window
//! (before, during and after a server restart, say).

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::LoadError;

/// How a turn (or a connection attempt) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnOutcome {
    /// `end` came, after chunks (or an interrupt) and without `agent.error`.
    Ok,
    /// `end` came, but the turn carried an `agent.error`.
    AgentError,
    /// `end` came without a single chunk (and no interrupt).
    NoChunks,
    /// The connection closed or failed before `end`.
    Lost,
    /// No `end` within the turn timeout.
    TimedOut,
    /// The session could not connect or was refused (the record has no turn).
    ConnectFailed,
}

/// One line of the turn log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// When the turn began (its transcript was sent) or the connection attempt began, in ms
    /// since the run began.
    pub at_ms: f64,
    /// The session (call), counted from 0.
    pub session: usize,
    /// The turn within its session, counted from 0; none for a failed connection.
    pub turn: Option<usize>,
    /// How it ended.
    pub outcome: TurnOutcome,
    /// From `system.llm.request` sent to the first chunk, when one came.
    pub first_chunk_ms: Option<f64>,
    /// From `system.llm.request` sent to `end`, when it came.
    pub end_ms: Option<f64>,
    /// What went wrong, for a lost or timed-out turn or a failed connection.
    pub error: Option<String>,
}

/// The open turn-log file.
pub(crate) struct Writer {
    path: PathBuf,
    file: File,
}

impl Writer {
    pub(crate) fn create(path: &Path) -> Result<Self, LoadError> {
        let file = File::create(path).map_err(|source| LoadError::TurnLog {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            path: path.to_owned(),
            file,
        })
    }

    /// Writes `records`, one JSON object a line.
    pub(crate) fn write(self, records: &[TurnRecord]) -> Result<(), LoadError> {
        let failed = |source| LoadError::TurnLog {
            path: self.path.clone(),
            source,
        };
        let mut out = BufWriter::new(&self.file);
        for record in records {
            serde_json::to_writer(&mut out, record).map_err(|e| failed(e.into()))?;
            out.write_all(b"\n").map_err(failed)?;
        }
        out.flush().map_err(failed)
    }
}
