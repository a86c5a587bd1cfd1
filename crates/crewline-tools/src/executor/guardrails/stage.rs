//! The guardrails stage: the call's arguments checked before it runs, its result after.

use super::{Side, check};
use crate::executor::{
    Executor,
    stage::{Call, Outcome, Stage},
};

/// Runs the executor's guardrails on the arguments, the stages after it, then the guardrails
/// on a successful result.
#[derive(Default)]
pub(crate) struct Guard<Next>(pub(crate) Next);

impl<Next: Stage> Stage for Guard<Next> {
    async fn run(&self, executor: &Executor, call: &mut Call<'_>) -> Outcome {
        let rails = &executor.guardrails;
        if let Err(blocked) = check(rails, Side::Input, call.call, &call.arguments).await {
            return Outcome::Stopped(Err(blocked));
        }
        match self.0.run(executor, call).await {
            Outcome::Ran(Ok(value)) => match check(rails, Side::Output, call.call, &value).await {
                Ok(()) => Outcome::Ran(Ok(value)),
                Err(blocked) => Outcome::Ran(Err(blocked)),
            },
            other => other,
        }
    }
}
