//! The call stage: runs the tool and says how its call ended.

use crewline_core::ToolErrorKind;

use super::{CancelledBy, Raced, call_tool, human_duration};
use crate::executor::{
    Executor, ToolCallError, limits,
    stage::{Call, Outcome, Stage},
};

/// Runs the tool, under its timeout (or the run's remaining tool time, when less) and the
/// run's and the call's cancellation tokens; a non-cancellable tool runs on its own task.
/// The last stage: nothing comes after it.
#[derive(Default)]
pub(crate) struct Invoke;

impl Stage for Invoke {
    async fn run(&self, executor: &Executor, call: &mut Call<'_>) -> Outcome {
        let timeout = call.policy.timeout.unwrap_or(executor.default_timeout);
        // The run's remaining tool time caps this call too; running out of it is a run limit.
        let (limit, by_budget) = match call.remaining {
            Some(left) if left < timeout => (left, true),
            _ => (timeout, false),
        };
        // A background call runs on as a task of the session that takes its result; it is
        // answered "started" at once (a session without notices runs it like any other).
        if call.policy.background
            && let Some(notices) = call.context.scope.tool_notices()
        {
            let arguments = std::mem::take(&mut call.arguments);
            return Outcome::Ran(
                super::background::start(
                    notices,
                    call.entry,
                    call.call,
                    arguments,
                    timeout,
                    executor.max_result_bytes,
                )
                .await,
            );
        }
        if !call.policy.cancellable {
            return Outcome::Ran(executor.run_detached(call, limit).await);
        }
        let started = tokio::time::Instant::now();
        let arguments = std::mem::take(&mut call.arguments);
        let raced = call_tool(call.entry, call.call, arguments, limit, call.context).await;
        call.context.run.spend(started.elapsed());
        Outcome::Ran(match raced {
            Raced::Done(Ok(value)) => executor.check_result_size(value),
            Raced::Done(Err(error)) => Err(error),
            // The tool said what being cut short means for its call (it may have run).
            Raced::Said(said) => said.and_then(|value| executor.check_result_size(value)),
            Raced::TimedOut if by_budget => Err(limits::exceeded(
                "this turn ran out of time for tools while the tool was running",
            )
            .with_detail(format!("stopped after the run's remaining {limit:?}"))),
            Raced::TimedOut => Err(ToolCallError::new(
                ToolErrorKind::Timeout,
                format!(
                    "the tool did not finish within {}; try again later or without it",
                    human_duration(limit)
                ),
            )),
            Raced::Cancelled(by) => Err(ToolCallError::new(
                ToolErrorKind::Cancelled,
                "the call was cancelled",
            )
            .with_detail(match by {
                CancelledBy::Run => "the run's cancellation token fired",
                CancelledBy::Call => "the call's cancellation token fired",
            })),
        })
    }
}
