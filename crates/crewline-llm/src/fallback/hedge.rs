//! Hedged first tokens: when a provider is slow to start, the next one is asked too, and the
//! first to answer is heard.

use std::{collections::VecDeque, time::Duration};

/// When to start the next provider while the first has produced nothing yet.
///
/// The first provider to produce a delta (text, reasoning, tool calls or its end) wins; the
/// other request is dropped, which closes its connection. Each hedge is an extra request: it
/// spends the [`RetryBudget`](super::RetryBudget) and is counted in the provider's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hedge {
    /// Never hedge (the default): one request at a time.
    #[default]
    Off,
    /// Hedge after this long without a delta.
    Fixed(Duration),
    /// Hedge after the provider's measured 95th percentile time to its first delta, never
    /// sooner than `floor`. Until 20 of its answers were measured the provider is not
    /// hedged (the first-byte timeout still holds), so the measure is not skewed by hedges.
    P95 {
        /// The shortest wait before hedging.
        floor: Duration,
    },
}

/// How many recent first-delta times are kept per provider.
const SAMPLES: usize = 128;

/// Fewest samples before the p95 is trusted.
const MIN_SAMPLES: usize = 20;

/// A provider's recent times to first delta, in a fixed ring.
///
/// A request dropped because another answered first counts with the time it had waited: a
/// lower bound of its own, without which only the answers faster than the hedge would be
/// kept and the p95 would sink with every hedge.
#[derive(Debug, Default)]
pub(super) struct FirstDeltaTimes {
    samples: VecDeque<Duration>,
}

impl FirstDeltaTimes {
    pub(super) fn record(&mut self, took: Duration) {
        if self.samples.len() >= SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(took);
    }

    /// The 95th percentile, once [`MIN_SAMPLES`] were measured.
    pub(super) fn p95(&self) -> Option<Duration> {
        if self.samples.len() < MIN_SAMPLES {
            return None;
        }
        let mut sorted: Vec<Duration> = self.samples.iter().copied().collect();
        sorted.sort_unstable();
        let rank = (sorted.len() * 95).div_ceil(100).saturating_sub(1);
        sorted.get(rank).copied()
    }
}

impl Hedge {
    /// How long to wait for a provider with these `times` before hedging; `None`: never.
    pub(super) fn delay(self, times: &FirstDeltaTimes) -> Option<Duration> {
        match self {
            Self::Off => None,
            Self::Fixed(after) => Some(after),
            Self::P95 { floor } => times.p95().map(|p95| p95.max(floor)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p95_waits_for_enough_samples_then_follows_them_never_under_the_floor() {
        let floor = Duration::from_millis(300);
        let mut times = FirstDeltaTimes::default();
        for _ in 0..10 {
            times.record(Duration::from_secs(2));
        }
        assert_eq!(Hedge::P95 { floor }.delay(&times), None);
        for ms in 1..=100 {
            times.record(Duration::from_millis(ms * 10));
        }
        // The ring keeps the latest 128: 28 of 2 s and 10 ms..1000 ms.
        assert_eq!(
            Hedge::P95 { floor }.delay(&times),
            Some(Duration::from_secs(2))
        );
        assert_eq!(Hedge::Off.delay(&times), None);
        let mut quick = FirstDeltaTimes::default();
        for _ in 0..20 {
            quick.record(Duration::from_millis(10));
        }
        assert_eq!(Hedge::P95 { floor }.delay(&quick), Some(floor));
    }
}
