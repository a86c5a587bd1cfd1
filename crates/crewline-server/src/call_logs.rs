//! The WARN lines a caller can cause on every call (a handshake that never comes, bad frames, a
//! flood), written at most once per [`CALL_LOG_INTERVAL`] for all calls together, each with how
//! many calls (or frames) it stands for. One line per call let a token holder write as many
//! lines as it opened calls (the same class as issue 30's refusal flood); every occurrence is
//! still counted in the metrics and logged at `debug`.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

/// The least time between two WARN lines of one kind: 10 s (as crewline-auth's refusal log).
pub(crate) const CALL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// One kind of line: counts occurrences and says when a line is due.
#[derive(Default)]
pub(crate) struct QuietLog {
    /// Milliseconds after the logs' start before which no line is written.
    quiet_until: AtomicU64,
    /// Occurrences not yet reported.
    unreported: AtomicU64,
}

impl QuietLog {
    /// Counts one occurrence at `now` (milliseconds after the logs' start); the count since
    /// the last line when a line is due: the first, and the first after each interval.
    fn due(&self, now: u64) -> Option<u64> {
        self.unreported.fetch_add(1, Ordering::Relaxed);
        let quiet_until = self.quiet_until.load(Ordering::Relaxed);
        if now < quiet_until {
            return None;
        }
        let next = now.saturating_add(millis(CALL_LOG_INTERVAL));
        // One call wins the line; the others' occurrences go into the next one.
        self.quiet_until
            .compare_exchange(quiet_until, next, Ordering::Relaxed, Ordering::Relaxed)
            .ok()?;
        Some(self.unreported.swap(0, Ordering::Relaxed))
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The rate-limited lines of one server's calls.
pub(crate) struct CallLogs {
    start: Instant,
    pub(crate) no_init: QuietLog,
    pub(crate) not_init: QuietLog,
    pub(crate) bad_init: QuietLog,
    pub(crate) too_big: QuietLog,
    pub(crate) bad_frame: QuietLog,
    pub(crate) control_flood: QuietLog,
    pub(crate) message_budget: QuietLog,
    pub(crate) write_timeout: QuietLog,
    pub(crate) idle: QuietLog,
}

impl Default for CallLogs {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            no_init: QuietLog::default(),
            not_init: QuietLog::default(),
            bad_init: QuietLog::default(),
            too_big: QuietLog::default(),
            bad_frame: QuietLog::default(),
            control_flood: QuietLog::default(),
            message_budget: QuietLog::default(),
            write_timeout: QuietLog::default(),
            idle: QuietLog::default(),
        }
    }
}

impl CallLogs {
    /// Counts one occurrence of `log`'s kind; the count to report when a line is due.
    pub(crate) fn due(&self, log: impl FnOnce(&Self) -> &QuietLog) -> Option<u64> {
        log(self).due(millis(self.start.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_since_the_last() {
        let log = QuietLog::default();
        assert_eq!(log.due(0), Some(1));
        for at in 1..100 {
            assert_eq!(log.due(at), None);
        }
        assert_eq!(log.due(millis(CALL_LOG_INTERVAL)), Some(100));
        assert_eq!(log.due(millis(CALL_LOG_INTERVAL) + 1), None);
    }
}
