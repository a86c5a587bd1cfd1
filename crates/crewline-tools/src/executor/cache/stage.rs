//! The cache stage: a tool with a `cache_ttl` answers from the cache while its result lives.

use crate::executor::{
    Executor,
    stage::{Call, Outcome, Stage},
};

/// Serves the call from the executor's [`ResultCache`](super::ResultCache) when it holds its
/// result; otherwise hands it on and keeps a successful result for the tool's `cache_ttl`.
#[derive(Default)]
pub(crate) struct Cached<Next>(pub(crate) Next);

impl<Next: Stage> Stage for Cached<Next> {
    async fn run(&self, executor: &Executor, call: &mut Call<'_>) -> Outcome {
        let (Some(cache), Some(ttl)) = (&executor.cache, call.policy.cache_ttl) else {
            return self.0.run(executor, call).await;
        };
        let key = cache.key_for(
            &call.context.scope,
            call.tools.id(),
            &call.call.name,
            &call.arguments,
        );
        if let Some(value) = cache.get(&key) {
            call.trace.cache_hit = true;
            return Outcome::Ran(Ok(value));
        }
        let outcome = self.0.run(executor, call).await;
        if let Outcome::Ran(Ok(value)) = &outcome {
            cache.insert(key, value.clone(), ttl);
        }
        outcome
    }
}
