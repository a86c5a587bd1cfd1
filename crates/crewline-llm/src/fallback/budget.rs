//! The retry budget: failovers and hedges together are at most a share of the requests, so an
//! outage cannot turn into a retry storm against the providers left.

use std::time::Duration;

use tokio::time::Instant;

/// How many extra requests (failovers and hedges) the client may make.
///
/// Over the last [`window`](Self::window), extra requests may be at most
/// [`min_retries`](Self::min_retries) plus [`ratio`](Self::ratio) times the requests made.
/// A failover the budget refuses ends the turn with the provider's error. A provider whose
/// breaker is open is skipped without spending budget: after the first failures of an outage
/// the next provider is simply first, so a lasting outage costs no budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudget {
    /// Extra requests allowed per request (default 0.2).
    pub ratio: f64,
    /// Extra requests always allowed per window, so a quiet crew can still fail over
    /// (default 10).
    pub min_retries: u32,
    /// How far back requests are counted (default 10 s).
    pub window: Duration,
}

impl RetryBudget {
    /// No limit: every failure may fail over.
    pub fn unlimited() -> Self {
        Self {
            ratio: f64::INFINITY,
            min_retries: u32::MAX,
            ..Self::default()
        }
    }
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self {
            ratio: 0.2,
            min_retries: 10,
            window: Duration::from_secs(10),
        }
    }
}

/// The number of slices the window is counted in: memory is fixed whatever the rate.
const SLICES: usize = 10;

/// Requests and extra requests over a sliding window, counted in [`SLICES`] slices.
#[derive(Debug)]
pub(super) struct Budget {
    config: RetryBudget,
    start: Instant,
    /// (slice number, requests, retries) per slot.
    slots: [(u64, u64, u64); SLICES],
}

impl Budget {
    pub(super) fn new(config: RetryBudget) -> Self {
        Self {
            config,
            start: Instant::now(),
            slots: [(u64::MAX, 0, 0); SLICES],
        }
    }

    fn slice_of(&self, now: Instant) -> u64 {
        let slice = (self.config.window.as_nanos() / SLICES as u128).max(1);
        u64::try_from(now.duration_since(self.start).as_nanos() / slice).unwrap_or(u64::MAX)
    }

    fn slot(&mut self, now: Instant) -> &mut (u64, u64, u64) {
        let slice = self.slice_of(now);
        let slot = &mut self.slots[(slice % SLICES as u64) as usize];
        if slot.0 != slice {
            *slot = (slice, 0, 0);
        }
        slot
    }

    fn totals(&self, now: Instant) -> (u64, u64) {
        let current = self.slice_of(now);
        self.slots
            .iter()
            .filter(|(slice, _, _)| *slice <= current && current - slice < SLICES as u64)
            .fold((0, 0), |(r, x), (_, requests, retries)| {
                (r + requests, x + retries)
            })
    }

    /// Counts one request.
    pub(super) fn request(&mut self, now: Instant) {
        self.slot(now).1 += 1;
    }

    /// Spends one extra request if the budget allows it.
    pub(super) fn try_retry(&mut self, now: Instant) -> bool {
        let (requests, retries) = self.totals(now);
        let allowed = f64::from(self.config.min_retries) + self.config.ratio * requests as f64;
        if (retries as f64) < allowed {
            self.slot(now).2 += 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn retries_are_at_most_the_floor_plus_the_share_of_requests() {
        let mut budget = Budget::new(RetryBudget {
            ratio: 0.2,
            min_retries: 2,
            window: Duration::from_secs(10),
        });
        for _ in 0..100 {
            budget.request(Instant::now());
        }
        let granted = (0..100)
            .filter(|_| budget.try_retry(Instant::now()))
            .count();
        assert_eq!(granted, 22);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_refills_as_the_window_slides() {
        let mut budget = Budget::new(RetryBudget {
            ratio: 0.0,
            min_retries: 3,
            window: Duration::from_secs(10),
        });
        assert_eq!(
            (0..10).filter(|_| budget.try_retry(Instant::now())).count(),
            3
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!budget.try_retry(Instant::now()));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(
            (0..10).filter(|_| budget.try_retry(Instant::now())).count(),
            3
        );
    }
}
