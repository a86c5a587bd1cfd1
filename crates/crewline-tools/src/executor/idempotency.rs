//! The idempotency key of the call a tool is running for, as the tool reads it.
//!
//! The executor sets it around the tool's future (a tokio task-local), so a tool can hand it
//! to a downstream that dedupes by it (a payment API's `Idempotency-Key`). A non-cancellable
//! call's key is minted once, when the call first claims its run, and kept in the claim: a
//! retry, a reconnect or another replica that joins or retakes the same call reads the same
//! key. A cancellable call gets a fresh key of its own, minted only if the tool asks.

use std::{fmt, future::Future, sync::Arc, sync::OnceLock};

tokio::task_local! {
    static CURRENT: Slot;
}

/// The key the task-local holds: given (non-cancellable calls), or minted on first read.
enum Slot {
    Given(IdempotencyKey),
    Lazy(OnceLock<IdempotencyKey>),
}

/// A call's idempotency key: the same for every retry of one call, across reconnects and
/// replicas; unlike any other call's.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(Arc<str>);

impl IdempotencyKey {
    /// The key of the call the current tool runs for; `None` outside a tool's call.
    ///
    /// # Examples
    ///
    /// ```
    /// use crewline_tools::IdempotencyKey;
    ///
    /// // Outside a tool's call there is none.
    /// assert!(IdempotencyKey::current().is_none());
    /// ```
    pub fn current() -> Option<Self> {
        CURRENT
            .try_with(|slot| match slot {
                Slot::Given(key) => key.clone(),
                Slot::Lazy(cell) => cell.get_or_init(Self::fresh).clone(),
            })
            .ok()
    }

    /// A fresh key, unlike every other (random).
    pub fn fresh() -> Self {
        Self(format!("idk_{}", uuid::Uuid::new_v4().simple()).into())
    }

    /// The key whose text is `key`, as [`as_str`](Self::as_str) gave it (for a claim store
    /// that keeps it outside the process and reads it back).
    pub fn from_key(key: &str) -> Self {
        Self(key.into())
    }

    /// The key's text (`idk_` and 32 hex digits when minted here).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Runs `future` with `self` as its [`current`](Self::current) key (what the executor
    /// does around a tool's call; for tests and hand-written runners).
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        CURRENT.scope(Slot::Given(self), future).await
    }

    /// Runs `future` with a key minted only if it asks for one (cancellable calls).
    pub(crate) async fn lazily<F: Future>(future: F) -> F::Output {
        CURRENT.scope(Slot::Lazy(OnceLock::new()), future).await
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey").field(&&*self.0).finish()
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_scope_gives_its_key_and_a_lazy_scope_one_stable_key() {
        assert!(IdempotencyKey::current().is_none());
        let key = IdempotencyKey::fresh();
        let seen = key.clone().scope(async { IdempotencyKey::current() }).await;
        assert_eq!(seen, Some(key));
        let (a, b) = IdempotencyKey::lazily(async {
            (IdempotencyKey::current(), IdempotencyKey::current())
        })
        .await;
        assert!(a.is_some());
        assert_eq!(a, b, "one call, one key");
        assert_ne!(IdempotencyKey::fresh(), IdempotencyKey::fresh());
    }
}
