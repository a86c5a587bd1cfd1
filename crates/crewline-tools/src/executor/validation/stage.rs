//! The validation stage: the model's arguments, read once, checked against the tool's schema.

use crate::executor::{
    Executor,
    stage::{Call, Outcome, Stage},
};

/// Checks the call's arguments against its tool's schema (the executor's
/// [`ValidationConfig`](super::ValidationConfig) says how problems are reported), then hands the
/// call on.
#[derive(Default)]
pub(crate) struct Validate<Next>(pub(crate) Next);

impl<Next: Stage> Stage for Validate<Next> {
    async fn run(&self, executor: &Executor, call: &mut Call<'_>) -> Outcome {
        match executor
            .validation
            .validate_read(call.entry, call.read.take())
        {
            Ok(arguments) => call.arguments = arguments,
            Err(invalid) => return Outcome::Stopped(Err(invalid)),
        }
        self.0.run(executor, call).await
    }
}
