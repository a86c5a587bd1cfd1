//! Breaker state shared by the replicas of a crew: a provider one replica found dead is
//! skipped by the others too, without each paying its own failures to learn it.

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Inner, lock};

/// The error of a shared breaker store (the store's own, boxed).
pub type ShareError = Box<dyn std::error::Error + Send + Sync>;

/// Where replicas tell each other which providers' circuits are open (a Redis store:
/// `crewline_redis::RedisBreakers`).
///
/// Nothing on a turn's path waits for it: an opened circuit is told in a task of its own,
/// and what the others opened is read every [`SHARED_BREAKERS_POLL`]. A store that fails
/// costs only the sharing: each replica's own breakers go on working.
#[async_trait]
pub trait SharedBreakers: Send + Sync + 'static {
    /// Tells the others that `provider`'s circuit opened here for `cool_down`.
    async fn opened(&self, provider: &str, cool_down: Duration) -> Result<(), ShareError>;

    /// For each of `providers`, how much longer its circuit stays open by any replica's word
    /// (`None`: not open).
    async fn open_for(&self, providers: &[String]) -> Result<Vec<Option<Duration>>, ShareError>;
}

/// How often a replica reads the circuits the others opened.
pub const SHARED_BREAKERS_POLL: Duration = Duration::from_secs(1);

/// Tells the store that `provider`'s circuit opened, without waiting.
pub(super) fn publish(store: &Arc<dyn SharedBreakers>, provider: &str, cool_down: Duration) {
    let store = Arc::clone(store);
    let provider = provider.to_owned();
    tokio::spawn(async move {
        if let Err(error) = store.opened(&provider, cool_down).await {
            tracing::warn!(%provider, error = %crewline_core::ErrorChain(&*error), "could not share an opened LLM circuit");
        }
    });
}

/// Reads the others' open circuits every [`SHARED_BREAKERS_POLL`] into `inner`'s breakers,
/// until the client is dropped.
pub(super) async fn follow(inner: Weak<Inner>, store: Arc<dyn SharedBreakers>) {
    let mut tick = tokio::time::interval(SHARED_BREAKERS_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let names: Vec<String> = match inner.upgrade() {
            Some(inner) => inner.providers.iter().map(|p| p.name.to_string()).collect(),
            None => return,
        };
        let open = match store.open_for(&names).await {
            Ok(open) => open,
            Err(error) => {
                tracing::debug!(error = %crewline_core::ErrorChain(&*error), "could not read the shared LLM circuits");
                continue;
            }
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let now = Instant::now();
        for (provider, left) in inner.providers.iter().zip(open) {
            if let Some(left) = left
                && lock(&provider.health).breaker.open_until(now + left)
            {
                // Turns waiting on it here move on too.
                provider.opened.notify_waiters();
            }
        }
    }
}
