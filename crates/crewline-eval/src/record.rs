//! What one call of a scenario brought, turn by turn: the records the checks, the judge and
//! the reports read.

use std::time::Duration;

use crewline_testkit::platform::{CrewFrame, ToolOutcome, TurnSummary};
use serde::Serialize;
use serde_json::Value;

use crate::timeline::TimelineEvent;

/// The most `agent.log` events kept of one turn (a crew may log without end).
pub(crate) const MAX_LOGS_PER_TURN: usize = 256;

/// An `agent.log` event as a record the tool matchers read.
pub(crate) fn log_record(name: String, fields: serde_json::Map<String, Value>) -> ToolCallRecord {
    ToolCallRecord {
        name,
        arguments: Value::Object(fields),
        outcome: Some(Ok(())),
    }
}

/// What one call brought.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallRecord {
    /// The turns that ran to their end, in order (`turns[i]` is the scenario's turn `i`).
    pub(crate) turns: Vec<TurnRecord>,
    /// Why the call stopped before its last turn: the turn (0-based; `None`: the handshake)
    /// and what went wrong.
    pub(crate) stopped: Option<(Option<usize>, String)>,
    /// What a simulated caller said, turn by turn (empty with scripted `turns`).
    pub(crate) said: Vec<String>,
    /// The judges' verdicts on this run, by judge check (its `id`), once asked.
    pub(crate) verdicts: std::collections::BTreeMap<usize, Result<Verdict, String>>,
}

/// What one turn brought.
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnRecord {
    /// The reply: the chunks' text, joined.
    pub(crate) text: String,
    /// From the request to the first chunk.
    pub(crate) first_chunk: Option<Duration>,
    /// From the request to `end`.
    pub(crate) turn_time: Option<Duration>,
    /// The tool calls, in the order they were logged.
    pub(crate) tools: Vec<ToolCallRecord>,
    /// The crew's other `agent.log` events (name and fields, as a call's name and
    /// arguments; at most [`MAX_LOGS_PER_TURN`]).
    pub(crate) logs: Vec<ToolCallRecord>,
    /// How many `agent.end_call` came.
    pub(crate) end_calls: usize,
    /// The numbers of the `agent.transfer_call`s that came.
    pub(crate) transfers: Vec<String>,
    /// Set when the turn has a barge-in.
    pub(crate) barge_in: Option<BargeInRecord>,
    /// The messages of the `agent.error`s the crew sent in the turn.
    pub(crate) errors: Vec<String>,
    /// The turn was the caller's silence: the text is what the crew said meanwhile.
    pub(crate) silence: bool,
    /// What the caller said (empty for a silence).
    pub(crate) said: String,
    /// What happened when, for the HTML report (at most [`crate::report::MAX_TIMELINE_EVENTS`]).
    pub(crate) timeline: Vec<TimelineEvent>,
}

/// One tool call, as the crew logged it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolCallRecord {
    /// The tool's name.
    pub(crate) name: String,
    /// Its arguments.
    pub(crate) arguments: Value,
    /// `Some(true)`: `tool_call_end`; `Some(false)`: `tool_call_error`, with its message;
    /// `None`: still running when the turn ended.
    pub(crate) outcome: Option<Result<(), String>>,
}

/// What a barge-in met.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BargeInRecord {
    /// The interrupt was sent before the reply ended.
    pub(crate) reached: bool,
    /// Chunks received before the interrupt was sent.
    pub(crate) chunks_before: usize,
    /// Chunks received after it: in flight, and after the turn's `end`.
    pub(crate) chunks_after: usize,
}

impl CallRecord {
    /// Why a turn (`None`: the whole call) was not reached, if it was not.
    pub(crate) fn not_reached(&self, turn: Option<usize>) -> Option<String> {
        let (at, why) = self.stopped.as_ref()?;
        let reached = match turn {
            Some(turn) => turn < self.turns.len(),
            None => false,
        };
        (!reached).then(|| match at {
            Some(at) => format!("not reached: the call stopped at turn {}: {why}", at + 1),
            None => format!("not reached: the call did not start: {why}"),
        })
    }
}

impl TurnRecord {
    pub(crate) fn from_summary(summary: TurnSummary, barge_in: Option<BargeInRecord>) -> Self {
        let mut end_calls = 0;
        let mut transfers = Vec::new();
        for frame in &summary.frames {
            match &frame.frame {
                CrewFrame::EndCall => end_calls += 1,
                CrewFrame::Transfer(transfer) => {
                    transfers.push(transfer.transfer_call_number.clone());
                }
                _ => {}
            }
        }
        let timeline = TimelineEvent::of_turn(&summary);
        let barge_in = barge_in.map(|mut record| {
            if let Some(report) = &summary.interrupt {
                record.chunks_after = report.chunks_after_interrupt + report.leaked_chunks.len();
            }
            record
        });
        Self {
            first_chunk: summary.time_to_first_chunk,
            turn_time: summary.time_to_end,
            tools: summary
                .tools
                .into_iter()
                .map(|tool| ToolCallRecord {
                    outcome: match tool.outcome {
                        ToolOutcome::Ok(_) => Some(Ok(())),
                        ToolOutcome::Failed(error) => Some(Err(error)),
                        ToolOutcome::Running => None,
                    },
                    name: tool.name,
                    arguments: tool.arguments,
                })
                .collect(),
            logs: summary
                .logs
                .into_iter()
                .take(MAX_LOGS_PER_TURN)
                .map(|(name, fields)| log_record(name, fields))
                .collect(),
            end_calls,
            transfers,
            barge_in,
            errors: summary.errors.into_iter().map(|e| e.message).collect(),
            said: summary.user_text,
            text: summary.text,
            silence: false,
            timeline,
        }
    }
}

/// One judge's verdict on one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The score, 0 to 1.
    pub score: f64,
    /// Why, in the judge's words (cut to [`MAX_REASON_CHARS`](crate::judge::MAX_REASON_CHARS)).
    pub reason: String,
}
