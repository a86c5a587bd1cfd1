//! The limits stage: the call takes its slot in the run's limits, or is refused.

use crate::executor::{
    Executor,
    stage::{Call, Outcome, Stage},
};

/// Admits the call into its run (calls per run, per tool, tool time left), then hands it on
/// with the tool time the run has left; the call stage spends that time.
#[derive(Default)]
pub(crate) struct Admit<Next>(pub(crate) Next);

impl<Next: Stage> Stage for Admit<Next> {
    async fn run(&self, executor: &Executor, call: &mut Call<'_>) -> Outcome {
        match call.context.run.admit(&call.call.name) {
            Ok(remaining) => call.remaining = remaining,
            Err(exceeded) => return Outcome::Stopped(Err(exceeded)),
        }
        self.0.run(executor, call).await
    }
}
