//! Latency histograms and counters shared by every session of a load run.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{route::Route, script::Transfer, turn_log::TurnOutcome};

/// The largest latency a histogram keeps exactly (longer ones are clamped to it): 1 hour.
const MAX_MICROS: u64 = 3_600_000_000;

/// A latency histogram in microseconds (3 significant digits).
#[derive(Debug, Clone)]
pub(crate) struct Latencies(Histogram<u64>);

impl Latencies {
    pub(crate) fn new() -> Self {
        // Constant, valid bounds: 1 µs .. 1 h at 3 significant digits.
        Self(Histogram::new_with_bounds(1, MAX_MICROS, 3).expect("valid histogram bounds"))
    }

    pub(crate) fn record(&mut self, value: Duration) {
        let micros = u64::try_from(value.as_micros())
            .unwrap_or(MAX_MICROS)
            .clamp(1, MAX_MICROS);
        // In range by the clamp above, so saturating recording never drops a value.
        self.0.saturating_record(micros);
    }

    pub(crate) fn summary(&self) -> Percentiles {
        let ms = |micros: u64| micros as f64 / 1000.0;
        if self.0.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: self.0.len(),
            p50_ms: ms(self.0.value_at_quantile(0.50)),
            p90_ms: ms(self.0.value_at_quantile(0.90)),
            p99_ms: ms(self.0.value_at_quantile(0.99)),
            max_ms: ms(self.0.max()),
            mean_ms: self.0.mean() / 1000.0,
        }
    }
}

/// Percentiles of one latency, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// How many samples.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// The largest sample.
    pub max_ms: f64,
    /// The mean.
    pub mean_ms: f64,
}

/// What one finished turn contributes to the totals.
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnSample {
    pub(crate) first_chunk: Option<Duration>,
    pub(crate) end: Duration,
    pub(crate) chunks: u64,
    pub(crate) tool_ends: u64,
    pub(crate) tool_errors: u64,
    pub(crate) agent_errors: u64,
    pub(crate) stray_chunks: u64,
    /// Set when the client interrupted this turn.
    pub(crate) interrupt: Option<InterruptSample>,
}

impl TurnSample {
    /// How the completed turn went: an `agent.error` spoils it, and a turn needs a chunk unless
    /// the client interrupted it.
    pub(crate) fn outcome(&self) -> TurnOutcome {
        if self.agent_errors > 0 {
            TurnOutcome::AgentError
        } else if self.chunks == 0 && self.interrupt.is_none() {
            TurnOutcome::NoChunks
        } else {
            TurnOutcome::Ok
        }
    }
}

/// An interrupted turn, measured from the moment `system.control.interrupt` was sent.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct InterruptSample {
    /// Until the last chunk received (zero when none came after the interrupt).
    pub(crate) to_last_chunk: Duration,
    /// Until `end`.
    pub(crate) to_end: Duration,
    /// Chunks that arrived after the interrupt was sent.
    pub(crate) chunks_after: u64,
}

/// The totals of a run, filled by every session under one lock (once per turn).
#[derive(Debug, Clone)]
pub(crate) struct Totals {
    pub(crate) connect: Latencies,
    pub(crate) first_chunk: Latencies,
    pub(crate) end: Latencies,
    pub(crate) interrupt_to_last_chunk: Latencies,
    pub(crate) interrupt_to_end: Latencies,
    pub(crate) connected: u64,
    pub(crate) connect_errors: u64,
    pub(crate) turns_completed: u64,
    pub(crate) turns_ok: u64,
    pub(crate) turns_with_agent_error: u64,
    pub(crate) turns_without_chunks: u64,
    pub(crate) turns_timed_out: u64,
    pub(crate) turns_lost: u64,
    pub(crate) turns_not_run: u64,
    pub(crate) chunks: u64,
    pub(crate) stray_chunks: u64,
    pub(crate) tool_calls_ended: u64,
    pub(crate) tool_calls_failed: u64,
    pub(crate) agent_errors: u64,
    pub(crate) turns_interrupted: u64,
    pub(crate) chunks_after_interrupt: u64,
    pub(crate) drops: u64,
    pub(crate) reconnects: u64,
    pub(crate) reconnect_failures: u64,
    pub(crate) turns_in_flight_at_drop: u64,
    pub(crate) transfers_requested: u64,
    pub(crate) transfers_confirmed: u64,
    pub(crate) transfers_asked_again: u64,
    pub(crate) resumed_calls: u64,
    pub(crate) resumed_turns: u64,
    pub(crate) resumed_in_wrong_sub_agent: u64,
    /// The first few calls resumed in the wrong sub-agent, for the report.
    pub(crate) wrong_sub_agent_samples: Vec<String>,
    /// The first few error messages, for the report.
    pub(crate) error_samples: Vec<String>,
}

/// How many distinct error messages the report keeps.
const ERROR_SAMPLES: usize = 8;

/// How many calls resumed in the wrong sub-agent the report names.
const WRONG_SUB_AGENT_SAMPLES: usize = 20;

impl Totals {
    pub(crate) fn new() -> Self {
        Self {
            connect: Latencies::new(),
            first_chunk: Latencies::new(),
            end: Latencies::new(),
            interrupt_to_last_chunk: Latencies::new(),
            interrupt_to_end: Latencies::new(),
            connected: 0,
            connect_errors: 0,
            turns_completed: 0,
            turns_ok: 0,
            turns_with_agent_error: 0,
            turns_without_chunks: 0,
            turns_timed_out: 0,
            turns_lost: 0,
            turns_not_run: 0,
            chunks: 0,
            stray_chunks: 0,
            tool_calls_ended: 0,
            tool_calls_failed: 0,
            agent_errors: 0,
            turns_interrupted: 0,
            chunks_after_interrupt: 0,
            drops: 0,
            reconnects: 0,
            reconnect_failures: 0,
            turns_in_flight_at_drop: 0,
            transfers_requested: 0,
            transfers_confirmed: 0,
            transfers_asked_again: 0,
            resumed_calls: 0,
            resumed_turns: 0,
            resumed_in_wrong_sub_agent: 0,
            wrong_sub_agent_samples: Vec::new(),
            error_samples: Vec::new(),
        }
    }

    pub(crate) fn note_error(&mut self, message: String) {
        if self.error_samples.len() < ERROR_SAMPLES && !self.error_samples.contains(&message) {
            self.error_samples.push(message);
        }
    }

    /// Counts a call's transfers once, when the call ends.
    pub(crate) fn add_transfers(&mut self, transfers: &[Transfer]) {
        for transfer in transfers {
            self.transfers_requested += 1;
            self.transfers_confirmed += u64::from(transfer.confirmed);
            self.transfers_asked_again += u64::from(transfer.asked_again);
        }
    }

    /// Counts a router call's resumed turns once, when the call ends.
    pub(crate) fn add_route(&mut self, call_id: &str, route: &Route) {
        if route.resumed_turns == 0 {
            return;
        }
        self.resumed_calls += 1;
        self.resumed_turns += route.resumed_turns;
        if let Some(wrong) = &route.wrong {
            self.resumed_in_wrong_sub_agent += 1;
            if self.wrong_sub_agent_samples.len() < WRONG_SUB_AGENT_SAMPLES {
                self.wrong_sub_agent_samples.push(format!(
                    "call {call_id} turn {}: was in {}, answered by {}",
                    wrong.turn,
                    wrong.expected.join(" or "),
                    wrong.answered.as_deref().unwrap_or("an unknown sub-agent")
                ));
            }
        }
    }

    pub(crate) fn add_turn(&mut self, turn: &TurnSample) {
        self.turns_completed += 1;
        if let Some(first) = turn.first_chunk {
            self.first_chunk.record(first);
        }
        self.end.record(turn.end);
        self.chunks += turn.chunks;
        self.stray_chunks += turn.stray_chunks;
        self.tool_calls_ended += turn.tool_ends;
        self.tool_calls_failed += turn.tool_errors;
        self.agent_errors += turn.agent_errors;
        match turn.outcome() {
            TurnOutcome::AgentError => self.turns_with_agent_error += 1,
            TurnOutcome::NoChunks => self.turns_without_chunks += 1,
            _ => self.turns_ok += 1,
        }
        if let Some(interrupt) = turn.interrupt {
            self.turns_interrupted += 1;
            self.chunks_after_interrupt += interrupt.chunks_after;
            self.interrupt_to_last_chunk.record(interrupt.to_last_chunk);
            self.interrupt_to_end.record(interrupt.to_end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_reported_in_milliseconds() {
        let mut latencies = Latencies::new();
        for ms in 1..=100 {
            latencies.record(Duration::from_millis(ms));
        }
        let summary = latencies.summary();
        assert_eq!(summary.count, 100);
        assert!((summary.p50_ms - 50.0).abs() < 0.1, "{summary:?}");
        assert!((summary.p99_ms - 99.0).abs() < 0.1, "{summary:?}");
        assert!((summary.max_ms - 100.0).abs() < 0.1, "{summary:?}");
        assert_eq!(Latencies::new().summary(), Percentiles::default());
    }

    #[test]
    fn a_turn_with_an_agent_error_is_not_ok() {
        let mut totals = Totals::new();
        totals.add_turn(&TurnSample {
            chunks: 3,
            first_chunk: Some(Duration::from_millis(2)),
            ..TurnSample::default()
        });
        totals.add_turn(&TurnSample {
            agent_errors: 1,
            ..TurnSample::default()
        });
        totals.add_turn(&TurnSample::default());
        assert_eq!(totals.turns_completed, 3);
        assert_eq!(totals.turns_ok, 1);
        assert_eq!(totals.turns_with_agent_error, 1);
        assert_eq!(totals.turns_without_chunks, 1);
        assert_eq!(totals.first_chunk.summary().count, 1);
    }
}
