//! The hooks stage: before-hooks on the validated arguments, after-hooks on the outcome.

use super::HookAction;
use crate::executor::{
    Executor,
    stage::{Call, Outcome, Stage},
};

/// Runs the executor's before-hooks (one may answer the call itself), the stages after it,
/// then its after-hooks on what the tool (or the cache) gave.
#[derive(Default)]
pub(crate) struct Hooks<Next>(pub(crate) Next);

impl<Next: Stage> Stage for Hooks<Next> {
    async fn run(&self, executor: &Executor, call: &mut Call<'_>) -> Outcome {
        for hook in &executor.before_hooks {
            if let HookAction::Respond(value) = hook.before(call.call, &mut call.arguments).await {
                executor.keep_arguments(call.trace, &call.arguments);
                return Outcome::Stopped(Ok(value));
            }
        }
        executor.keep_arguments(call.trace, &call.arguments);
        let mut settled = match self.0.run(executor, call).await {
            Outcome::Ran(settled) => settled,
            stopped @ Outcome::Stopped(_) => return stopped,
        };
        for hook in &executor.after_hooks {
            hook.after(call.call, &mut settled).await;
        }
        Outcome::Ran(settled)
    }
}
