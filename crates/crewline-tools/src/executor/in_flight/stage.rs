//! The in-flight stage: a retry of a non-cancellable call that runs, or ran, in this session
//! reads that run instead of starting another.

use crate::executor::{
    Executor,
    claims::ClaimKey,
    stage::{Call, Outcome, Stage},
};

/// For a non-cancellable tool: joins the identical call of the session that holds its claim
/// (running, finished, or lost with its replica) and reads what the claim says; any other call
/// goes on to the stages after it.
#[derive(Default)]
pub(crate) struct Join<Next>(pub(crate) Next);

impl<Next: Stage> Stage for Join<Next> {
    async fn run(&self, executor: &Executor, call: &mut Call<'_>) -> Outcome {
        if call.policy.cancellable {
            return self.0.run(executor, call).await;
        }
        let key = ClaimKey::new(call.context.scope(), &call.call.name, &call.arguments);
        match executor.join_claim(&key, call.policy).await {
            Err(refused) => Outcome::Stopped(Err(refused)),
            Ok(None) => self.0.run(executor, call).await,
            Ok(Some(joined)) => {
                let limit = call.policy.timeout.unwrap_or(executor.default_timeout);
                Outcome::Ran(executor.read_claim(joined, &key, call.policy, limit).await)
            }
        }
    }
}
