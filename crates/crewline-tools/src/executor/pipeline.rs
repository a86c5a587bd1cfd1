//! The pipeline: the order of the stages, written once ([`Stages`]), and the ledger's frame
//! around them ([`Executor::execute`]).

use std::{borrow::Cow, time::Instant};

use crewline_core::{ToolCall, ToolErrorKind, ToolFailure, ToolResult};
use tracing::Instrument;

use super::{
    CallContext, Executor, ToolCallError, ToolRun,
    approval::Approve,
    cache::Cached,
    call::Invoke,
    error::Settled,
    guardrails::Guard,
    hooks::Hooks,
    in_flight::Join,
    ledger::record::{LedgerGuard, record, write_record},
    limits::Admit,
    stage::{Call, Stage, Trace},
    validation::{CallArguments, Validate},
};
use crate::catalog::Catalog;

/// The stages every call goes through, outermost first: each runs around the ones below it.
#[rustfmt::skip]
pub(crate) type Stages =
    // Validation first: every stage after it, a hook or a guardrail included, sees arguments
    // that match the tool's schema, and a malformed call costs nothing more.
    Validate<
    // Before-hooks next, so they may rewrite the arguments (or answer the call) before anything
    // judges them; their after-hooks see the outcome last, after the output guardrails.
    Hooks<
    // Guardrails judge the arguments as the tool would get them, before anything is asked of
    // a person or counted, and the tool's result before the after-hooks and the model see it.
    Guard<
    // A retry of a non-cancellable call already running (or run) in this session reads that
    // run: nothing new runs, so nothing is approved or counted again.
    Join<
    // Approval only for a call that will really run, once the guardrails let it through; an
    // approver's edit is validated again.
    Approve<
    // The run's limits count only calls that run, after a person approved them.
    Admit<
    // The cache serves only calls that passed the limits: a cached answer is still a call.
    Cached<
    // The tool itself, under its timeout (or the run's remaining tool time) and tokens.
    Invoke
    >>>>>>>;

impl Executor {
    /// Runs one call of a tool in `tools` through the stages; never fails: failures are
    /// error results.
    ///
    /// The ledger's frame around them: every call (an unknown tool's, a refused one, one
    /// dropped half-way) is logged and recorded here, once, whatever stage ended it.
    ///
    /// A call with an empty id gets a fresh `call_...` id, which its result carries.
    /// `arguments` are the call's, read once by the caller (its text is not parsed again).
    pub(crate) async fn execute(
        &self,
        tools: &Catalog,
        call: &ToolCall,
        arguments: CallArguments,
        context: &CallContext,
    ) -> ToolRun {
        let call = if call.id.is_empty() {
            Cow::Owned(ToolCall {
                id: fresh_call_id(),
                ..call.clone()
            })
        } else {
            Cow::Borrowed(call)
        };
        let span = tracing::info_span!(
            "tool.call",
            tool = %call.name,
            call_id = %call.id,
            error = tracing::field::Empty
        );
        async {
            let started = Instant::now();
            let mut guard = LedgerGuard {
                ledger: self.ledger.as_ref(),
                call: &call,
                cut: &context.cut,
                started,
                trace: Trace::default(),
                finished: false,
            };
            let outcome = self
                .run_stages(tools, &call, arguments, context, &mut guard.trace, started)
                .await;
            guard.finished = true;
            let trace = std::mem::take(&mut guard.trace);
            drop(guard);
            let latency = started.elapsed();
            match &outcome {
                Ok(_) => tracing::debug!(?latency, outcome = "ok", "tool call finished"),
                Err(error) => {
                    tracing::Span::current().record("error", error.kind.as_str());
                    tracing::warn!(
                        ?latency,
                        kind = %error.kind,
                        // Messages and details may carry a result or the arguments.
                        message = %crewline_core::excerpt(&error.message),
                        detail = error
                            .detail
                            .as_deref()
                            .map(|d| tracing::field::display(crewline_core::excerpt(d))),
                        "tool call failed"
                    );
                }
            }
            if let Some(ledger) = &self.ledger {
                write_record(ledger, record(&call, &outcome, latency, trace)).await;
            }
            // The outcome stays a value: it becomes text once, in the model's message.
            let result = ToolResult::new(&call, outcome.map_err(ToolFailure::from));
            ToolRun { result, latency }
        }
        .instrument(span)
        .await
    }

    /// The call of a tool in `tools`, through [`Stages`].
    async fn run_stages(
        &self,
        tools: &Catalog,
        call: &ToolCall,
        read: CallArguments,
        context: &CallContext,
        trace: &mut Trace,
        started: Instant,
    ) -> Settled {
        let Some(entry) = tools.entry(&call.name) else {
            return Err(ToolCallError::new(
                ToolErrorKind::UnknownTool,
                tools.unknown_tool_message(&call.name),
            ));
        };
        let mut call = Call {
            tools,
            entry,
            call,
            context,
            policy: entry.tool.policy(),
            read,
            arguments: serde_json::Value::Null,
            remaining: None,
            trace,
            started,
        };
        Stages::default().run(self, &mut call).await.settled()
    }
}

/// A fresh call id for callers that gave none.
fn fresh_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests;
