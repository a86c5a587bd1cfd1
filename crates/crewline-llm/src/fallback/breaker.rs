//! The circuit breaker of one provider: a dead provider is skipped, so it costs the turns after
//! it no latency, and probed now and then so it is used again once it recovers.

use std::{collections::VecDeque, time::Duration};

use tokio::time::Instant;

/// When a provider's breaker opens, and for how long.
///
/// The breaker opens after [`consecutive_failures`](Self::consecutive_failures) failures in a
/// row, or when at least [`min_requests`](Self::min_requests) requests ended within
/// [`window`](Self::window) and more than [`error_rate`](Self::error_rate) of them failed.
/// While open the provider gets no request; after [`cool_down`](Self::cool_down) one probe
/// request is let through (half-open): its success closes the breaker, its failure opens it
/// for another cool-down.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Failures in a row that open the breaker (default 5).
    pub consecutive_failures: u32,
    /// The share of failed requests in the window that opens the breaker (default 0.5).
    pub error_rate: f64,
    /// Fewest requests in the window before the error rate counts (default 20).
    pub min_requests: u32,
    /// How far back the error rate looks (default 10 s).
    pub window: Duration,
    /// How long an open breaker refuses requests before a probe (default 5 s).
    pub cool_down: Duration,
}

impl BreakerConfig {
    /// A breaker that never opens: every provider is always tried.
    pub fn disabled() -> Self {
        Self {
            consecutive_failures: u32::MAX,
            error_rate: f64::INFINITY,
            min_requests: u32::MAX,
            ..Self::default()
        }
    }
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
            error_rate: 0.5,
            min_requests: 20,
            window: Duration::from_secs(10),
            cool_down: Duration::from_secs(5),
        }
    }
}

/// A breaker's state, as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests go through.
    Closed,
    /// Requests are refused until the cool-down ends.
    Open,
    /// One probe request is out; the others are refused until it ends.
    HalfOpen,
}

impl BreakerState {
    /// The state as a number for a gauge: 0 closed, 1 open, 2 half-open.
    pub fn as_gauge(self) -> u64 {
        match self {
            Self::Closed => 0,
            Self::Open => 1,
            Self::HalfOpen => 2,
        }
    }

    /// The state's name: `closed`, `open` or `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }
}

/// The most outcomes kept for the error rate: the window is bounded in memory whatever the
/// request rate (at more than this many requests per window, the rate is over the latest).
const MAX_OUTCOMES: usize = 1_024;

/// What the breaker lets a request do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    /// Go ahead.
    Yes,
    /// Go ahead as the one probe of a half-open breaker.
    Probe,
    /// Skip this provider.
    No,
}

#[derive(Debug)]
enum State {
    Closed,
    Open {
        until: Instant,
    },
    /// A probe is out since `since`; a probe that never reports (its turn was dropped on
    /// barge-in) lets another probe go after one more cool-down, so the breaker cannot stick.
    HalfOpen {
        since: Instant,
    },
}

/// One provider's breaker.
#[derive(Debug)]
pub(super) struct Breaker {
    config: BreakerConfig,
    state: State,
    consecutive: u32,
    /// (when, failed) of the latest outcomes, oldest first.
    outcomes: VecDeque<(Instant, bool)>,
}

impl Breaker {
    pub(super) fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            state: State::Closed,
            consecutive: 0,
            outcomes: VecDeque::new(),
        }
    }

    /// The state at `now` (an open breaker whose cool-down ended shows as half-open).
    pub(super) fn state(&self, now: Instant) -> BreakerState {
        match self.state {
            State::Closed => BreakerState::Closed,
            State::Open { until } if now >= until => BreakerState::HalfOpen,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Whether a request may go to this provider at `now`, and marks a probe as out.
    pub(super) fn admit(&mut self, now: Instant) -> Admit {
        match self.state {
            State::Closed => Admit::Yes,
            State::Open { until } if now >= until => {
                self.state = State::HalfOpen { since: now };
                Admit::Probe
            }
            State::HalfOpen { since } if now >= since + self.config.cool_down => {
                self.state = State::HalfOpen { since: now };
                Admit::Probe
            }
            State::Open { .. } | State::HalfOpen { .. } => Admit::No,
        }
    }

    /// Opens the breaker until `until` (another replica found the provider failing), unless
    /// it is open longer already or a probe is out; whether it was closed before.
    pub(super) fn open_until(&mut self, until: Instant) -> bool {
        match self.state {
            State::Closed => {
                self.state = State::Open { until };
                true
            }
            State::Open { until: now_until } if now_until < until => {
                self.state = State::Open { until };
                false
            }
            State::Open { .. } | State::HalfOpen { .. } => false,
        }
    }

    /// Records a request that got an answer.
    pub(super) fn success(&mut self, now: Instant) {
        self.consecutive = 0;
        self.push(now, false);
        if !matches!(self.state, State::Closed) {
            tracing::info!("LLM provider answered again: circuit closed");
        }
        self.state = State::Closed;
    }

    /// Records a failed request; returns whether this opened the breaker.
    pub(super) fn failure(&mut self, now: Instant) -> bool {
        self.consecutive = self.consecutive.saturating_add(1);
        self.push(now, true);
        let open_now = match self.state {
            // A failed probe (or a late failure while half-open) opens it again.
            State::HalfOpen { .. } => true,
            State::Open { .. } => false,
            State::Closed => {
                self.consecutive >= self.config.consecutive_failures || self.rate_over()
            }
        };
        if open_now {
            self.state = State::Open {
                until: now + self.config.cool_down,
            };
        }
        open_now
    }

    fn push(&mut self, now: Instant, failed: bool) {
        if self.outcomes.len() >= MAX_OUTCOMES {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back((now, failed));
        while let Some(&(at, _)) = self.outcomes.front() {
            if now.duration_since(at) > self.config.window {
                self.outcomes.pop_front();
            } else {
                break;
            }
        }
    }

    fn rate_over(&self) -> bool {
        let total = self.outcomes.len();
        if total == 0 || (total as u64) < u64::from(self.config.min_requests) {
            return false;
        }
        let failed = self.outcomes.iter().filter(|(_, failed)| *failed).count();
        failed as f64 / total as f64 > self.config.error_rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BreakerConfig {
        BreakerConfig {
            consecutive_failures: 3,
            error_rate: 0.5,
            min_requests: 10,
            window: Duration::from_secs(10),
            cool_down: Duration::from_secs(5),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn consecutive_failures_open_it_and_a_probe_after_the_cool_down_closes_it() {
        let mut breaker = Breaker::new(config());
        let now = Instant::now();
        assert!(!breaker.failure(now));
        assert!(!breaker.failure(now));
        assert!(breaker.failure(now));
        assert_eq!(breaker.admit(now), Admit::No);
        assert_eq!(breaker.state(now), BreakerState::Open);

        tokio::time::advance(Duration::from_secs(5)).await;
        let later = Instant::now();
        assert_eq!(breaker.admit(later), Admit::Probe);
        // Only one probe at a time.
        assert_eq!(breaker.admit(later), Admit::No);
        breaker.success(later);
        assert_eq!(breaker.state(later), BreakerState::Closed);
        assert_eq!(breaker.admit(later), Admit::Yes);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_opens_it_for_another_cool_down() {
        let mut breaker = Breaker::new(config());
        let now = Instant::now();
        for _ in 0..3 {
            breaker.failure(now);
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(breaker.admit(Instant::now()), Admit::Probe);
        assert!(breaker.failure(Instant::now()));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(breaker.admit(Instant::now()), Admit::No);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(breaker.admit(Instant::now()), Admit::Probe);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_never_reports_lets_another_probe_go_later() {
        let mut breaker = Breaker::new(config());
        for _ in 0..3 {
            breaker.failure(Instant::now());
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(breaker.admit(Instant::now()), Admit::Probe);
        // The probe's turn was dropped: no outcome.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(breaker.admit(Instant::now()), Admit::Probe);
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_rate_over_the_window_opens_it_without_failures_in_a_row() {
        let mut breaker = Breaker::new(config());
        let mut opened = false;
        // Fail, fail, succeed: never 3 in a row, but 2/3 of requests fail.
        for i in 0..12 {
            let now = Instant::now();
            if i % 3 == 2 {
                breaker.success(now);
            } else {
                opened |= breaker.failure(now);
            }
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        assert!(opened);
    }

    #[tokio::test(start_paused = true)]
    async fn old_failures_leave_the_window() {
        let mut breaker = Breaker::new(config());
        for i in 0..30 {
            let now = Instant::now();
            // 6 failures early, then only successes, spread over 30 s.
            if i < 6 && i % 2 == 0 {
                breaker.failure(now);
            } else {
                breaker.success(now);
            }
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        assert_eq!(breaker.state(Instant::now()), BreakerState::Closed);
        assert!(breaker.outcomes.len() <= 11);
    }
}
