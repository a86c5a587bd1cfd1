//! The approval stage: a `confirm` tool runs only once its approver said yes.

use crewline_core::ToolErrorKind;
use serde_json::Value;

use super::{ApprovalDecision, ApprovalOutcome, ApprovalRecord, ApprovalRequest, denied, pending};
use crate::executor::{
    Executor, ToolCallError, fingerprint,
    stage::{Call, Outcome, Stage},
};

/// For a tool whose policy asks for confirmation: asks the executor's
/// [`ApprovalPort`](super::ApprovalPort), and hands the call on with the arguments it approved
/// (an edit is validated again); any other call goes on as it is.
#[derive(Default)]
pub(crate) struct Approve<Next>(pub(crate) Next);

impl<Next: Stage> Stage for Approve<Next> {
    async fn run(&self, executor: &Executor, call: &mut Call<'_>) -> Outcome {
        if call.policy.confirm {
            match approve(executor, call).await {
                Ok(arguments) => {
                    call.arguments = arguments;
                    executor.keep_arguments(call.trace, &call.arguments);
                }
                Err(refused) => return Outcome::Stopped(Err(refused)),
            }
        }
        self.0.run(executor, call).await
    }
}

/// Asks the approver; returns the arguments to run with.
async fn approve(executor: &Executor, call: &mut Call<'_>) -> Result<Value, ToolCallError> {
    let Some(approver) = &executor.approval else {
        // Fail closed: a tool that asks for confirmation never runs unconfirmed.
        call.trace.approval = Some(ApprovalRecord::Denied);
        return Err(denied("no one is available to approve it")
            .with_detail("the tool needs confirmation but the executor has no approver"));
    };
    let arguments = std::mem::take(&mut call.arguments);
    // The request's id is minted here, never taken from the model (which repeats ids); a
    // decision is bound to the session, the tool and the arguments' hash.
    let request = ApprovalRequest {
        id: fresh_approval_id(),
        scope: call.context.scope.clone(),
        call_id: call.call.id.clone(),
        tool: call.call.name.clone(),
        arguments_hash: fingerprint::arguments_hash(&arguments),
        arguments,
        can_wait: call.context.can_wait,
    };
    let trace = &mut *call.trace;
    match approver.request(&request).await {
        ApprovalOutcome::Decided(ApprovalDecision::Approve) => {
            trace.approval = Some(ApprovalRecord::Approved);
            Ok(request.arguments)
        }
        ApprovalOutcome::Decided(ApprovalDecision::ApproveWithEdits { arguments }) => {
            trace.approval = Some(ApprovalRecord::ApprovedWithEdits);
            executor
                .validation
                .validate_value(call.entry, arguments)
                .map_err(|error| {
                    let detail = format!("the approver's edited arguments: {}", error.message);
                    ToolCallError::new(
                        ToolErrorKind::ToolArgsInvalid,
                        "the arguments the approver edited are not valid for this tool",
                    )
                    .with_detail(detail)
                })
        }
        ApprovalOutcome::Decided(ApprovalDecision::Deny { reason }) => {
            trace.approval = Some(ApprovalRecord::Denied);
            Err(denied(&reason))
        }
        ApprovalOutcome::Pending => {
            trace.approval = Some(ApprovalRecord::Pending);
            Err(pending())
        }
    }
}

/// A fresh id for an approval request (never the model's call id, which models repeat).
fn fresh_approval_id() -> String {
    format!("apr_{}", uuid::Uuid::new_v4().simple())
}
