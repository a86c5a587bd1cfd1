//! A timed sequence of server-wide faults, for load runs through an outage:
//! `down for 20s, stall:3000 for 20s` is down for 20 s, then 3 s to the first byte for 20 s,
//! then healthy.
//!
//! The text is a comma-separated list of phases, each `FAULT for DURATION` ([`Fault`]'s names,
//! or `ok` for no fault; durations in `ms`, `s` or `m`, e.g. `500ms`, `20s`, `2m`). The last
//! phase may have no `for`: it then lasts for ever. After the last timed phase there is no fault.

use std::time::Duration;

use super::Fault;

/// Why a fault schedule could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fault schedule: {0}")]
pub struct ScheduleError(String);

/// One phase of a [`FaultSchedule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase {
    /// The fault of every request in the phase (`None`: healthy).
    pub fault: Option<Fault>,
    /// How long it lasts (`None`: for ever; only the last phase).
    pub lasts: Option<Duration>,
}

/// Server-wide faults in timed phases, counted from the schedule's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSchedule {
    phases: Vec<Phase>,
}

impl FaultSchedule {
    /// Reads a schedule such as `down for 20s, stall:3000 for 20s` (see the module's doc).
    pub fn parse(text: &str) -> Result<Self, ScheduleError> {
        let entries: Vec<&str> = text.split(',').map(str::trim).collect();
        let last = entries.len() - 1;
        let mut phases = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let (fault, lasts) = match entry.split_once(" for ") {
                Some((fault, lasts)) => (fault.trim(), Some(duration(lasts.trim())?)),
                None if i == last => (entry, None),
                None => {
                    return Err(ScheduleError(format!(
                        "`{entry}`: every phase but the last needs `for DURATION`"
                    )));
                }
            };
            let fault = match fault {
                "ok" | "none" => None,
                name => Some(Fault::parse(name).ok_or_else(|| {
                    ScheduleError(format!("`{name}` is not a fault (see `Fault::parse`)"))
                })?),
            };
            phases.push(Phase { fault, lasts });
        }
        Ok(Self { phases })
    }

    /// The phases, in order.
    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// The phase in force `elapsed` after the start (`None` after the last timed one).
    pub fn phase_at(&self, elapsed: Duration) -> Option<usize> {
        let mut start = Duration::ZERO;
        for (i, phase) in self.phases.iter().enumerate() {
            match phase.lasts {
                None => return Some(i),
                Some(lasts) => {
                    start = start.saturating_add(lasts);
                    if elapsed < start {
                        return Some(i);
                    }
                }
            }
        }
        None
    }

    /// The fault in force `elapsed` after the start.
    pub fn fault_at(&self, elapsed: Duration) -> Option<Fault> {
        self.phase_at(elapsed)
            .and_then(|i| self.phases.get(i))
            .and_then(|phase| phase.fault)
    }

    /// Each phase's start and end (`None`: never ends), from the schedule's start.
    pub fn bounds(&self) -> Vec<(Duration, Option<Duration>)> {
        let mut start = Duration::ZERO;
        self.phases
            .iter()
            .map(|phase| {
                let end = phase.lasts.map(|lasts| start.saturating_add(lasts));
                let bounds = (start, end);
                start = end.unwrap_or(start);
                bounds
            })
            .collect()
    }
}

impl std::fmt::Display for FaultSchedule {
    /// The schedule as [`FaultSchedule::parse`] reads it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, phase) in self.phases.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match phase.fault {
                Some(fault) => write!(f, "{fault}")?,
                None => f.write_str("ok")?,
            }
            if let Some(lasts) = phase.lasts {
                write!(f, " for {}ms", lasts.as_millis())?;
            }
        }
        Ok(())
    }
}

/// A duration such as `500ms`, `20s` or `2m`.
fn duration(text: &str) -> Result<Duration, ScheduleError> {
    let bad = || ScheduleError(format!("`{text}` is not a duration (e.g. 500ms, 20s, 2m)"));
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    match unit.trim() {
        "ms" => Ok(Duration::from_millis(number)),
        "s" => Ok(Duration::from_secs(number)),
        "m" | "min" => Ok(Duration::from_secs(number.saturating_mul(60))),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn phases_follow_each_other_then_the_server_recovers() {
        let schedule = FaultSchedule::parse("down for 20s, stall:3000 for 20s").unwrap();
        assert_eq!(schedule.fault_at(Duration::ZERO), Some(Fault::Down));
        assert_eq!(schedule.fault_at(19 * SECOND), Some(Fault::Down));
        assert_eq!(
            schedule.fault_at(20 * SECOND),
            Some(Fault::Stall(Duration::from_secs(3)))
        );
        assert_eq!(schedule.phase_at(39 * SECOND), Some(1));
        assert_eq!(schedule.fault_at(40 * SECOND), None);
        assert_eq!(schedule.phase_at(40 * SECOND), None);
        assert_eq!(
            schedule.bounds(),
            [
                (Duration::ZERO, Some(20 * SECOND)),
                (20 * SECOND, Some(40 * SECOND))
            ]
        );
    }

    #[test]
    fn an_open_last_phase_lasts_for_ever() {
        let schedule = FaultSchedule::parse("ok for 500ms,slow:200 for 1m, 503:2").unwrap();
        assert_eq!(schedule.fault_at(Duration::from_millis(499)), None);
        assert_eq!(
            schedule.fault_at(SECOND),
            Some(Fault::Slow(Duration::from_millis(200)))
        );
        let forever = Some(Fault::StatusRetryAfter {
            status: 503,
            secs: 2,
        });
        assert_eq!(schedule.fault_at(61 * SECOND), forever);
        assert_eq!(schedule.fault_at(100_000 * SECOND), forever);
        assert_eq!(
            schedule.to_string(),
            "ok for 500ms, slow:200 for 60000ms, 503:2"
        );
        assert_eq!(FaultSchedule::parse(&schedule.to_string()), Ok(schedule));
    }

    #[test]
    fn mistakes_are_named() {
        for (text, says) in [
            ("down, ok for 1s", "needs `for DURATION`"),
            ("boom for 1s", "`boom` is not a fault"),
            ("down for 20", "`20` is not a duration"),
            ("down for 2h", "`2h` is not a duration"),
            ("down for s", "`s` is not a duration"),
            ("", "`` is not a fault"),
        ] {
            let error = FaultSchedule::parse(text).unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
