//! What each provider of a [`FallbackLlm`](super::FallbackLlm) did, counted for `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::BreakerState;

/// Counters of one provider, updated as requests go.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) requests: AtomicU64,
    pub(super) answered: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) failovers: AtomicU64,
    pub(super) hedges_won: AtomicU64,
    pub(super) hedges_lost: AtomicU64,
    pub(super) cancelled: AtomicU64,
    pub(super) skipped: AtomicU64,
}

impl Counters {
    pub(super) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}

/// One provider's counts since the client was built, from [`FallbackLlm::stats`](super::FallbackLlm::stats).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProviderStats {
    /// The provider's name, as given to the builder.
    pub name: String,
    /// Requests sent to it (first tries, failovers and hedges).
    pub requests: u64,
    /// Requests it answered that were heard (its stream won).
    pub answered: u64,
    /// Requests that failed (connect, status, first-byte timeout, broken stream).
    pub failures: u64,
    /// Failures after which the turn went on to another provider.
    pub failovers: u64,
    /// Hedged requests sent to it that won the race.
    pub hedges_won: u64,
    /// Hedged requests sent to it that lost the race and were dropped.
    pub hedges_lost: u64,
    /// Requests to it dropped because another provider answered first (hedge losers, either
    /// side).
    pub cancelled: u64,
    /// Turns that skipped it (breaker open or `Retry-After` not yet over).
    pub skipped: u64,
    /// Its circuit breaker's state now.
    pub breaker: BreakerState,
}

impl ProviderStats {
    /// Adds the counts of a provider of the same name (another client's); the breaker shows
    /// the less healthy state.
    pub fn add(&mut self, other: &Self) {
        self.requests += other.requests;
        self.answered += other.answered;
        self.failures += other.failures;
        self.failovers += other.failovers;
        self.hedges_won += other.hedges_won;
        self.hedges_lost += other.hedges_lost;
        self.cancelled += other.cancelled;
        self.skipped += other.skipped;
        self.breaker = match (self.breaker, other.breaker) {
            (BreakerState::Open, _) | (_, BreakerState::Open) => BreakerState::Open,
            (BreakerState::HalfOpen, _) | (_, BreakerState::HalfOpen) => BreakerState::HalfOpen,
            _ => BreakerState::Closed,
        };
    }

    pub(super) fn read(name: &str, counters: &Counters, breaker: BreakerState) -> Self {
        Self {
            name: name.to_owned(),
            requests: counters.requests.load(Relaxed),
            answered: counters.answered.load(Relaxed),
            failures: counters.failures.load(Relaxed),
            failovers: counters.failovers.load(Relaxed),
            hedges_won: counters.hedges_won.load(Relaxed),
            hedges_lost: counters.hedges_lost.load(Relaxed),
            cancelled: counters.cancelled.load(Relaxed),
            skipped: counters.skipped.load(Relaxed),
            breaker,
        }
    }
}
