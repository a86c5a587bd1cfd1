//! The one shape every stage of the pipeline has: a [`Stage`] that takes the [`Call`] and
//! hands it on to the stage after it, and the [`Outcome`] it hands back.
//!
//! Each stage is a folder of the executor (`validation/`, `hooks/`, `guardrails/`,
//! `in_flight/`, `approval/`, `limits/`, `cache/`, `call/`) with the same files: `mod.rs`, the
//! stage's vocabulary (its trait or settings, its errors, its tests), and `stage.rs`, the stage
//! itself (one type, one [`Stage::run`]). Their order is written once, in
//! [`pipeline`](super::pipeline).

use std::time::{Duration, Instant};

use crewline_core::ToolCall;
use serde_json::Value;

use super::{
    CallContext, Executor, approval::ApprovalRecord, error::Settled, validation::CallArguments,
};
use crate::{
    ToolPolicy,
    catalog::{Catalog, Entry},
};

/// One stage: its part of a call, before and after the stages it wraps.
///
/// A stage is a type holding the stage after it (`Validate<Hooks<...>>`), so the whole order
/// is one type dispatched statically: nothing is boxed or allocated per stage per call. Its
/// settings are the [`Executor`]'s, handed to every stage.
pub(crate) trait Stage {
    /// Runs `call` through this stage and, unless this stage answers it, the ones after it.
    async fn run(&self, executor: &Executor, call: &mut Call<'_>) -> Outcome;
}

/// One call on its way through the stages: what was called, and what the stages before made
/// of it.
pub(crate) struct Call<'a> {
    /// The registry's tools (the cache keys results by registry).
    pub(crate) tools: &'a Catalog,
    /// The tool called.
    pub(crate) entry: &'a Entry,
    /// The call as the model made it (its id is set).
    pub(crate) call: &'a ToolCall,
    /// The run and the session the call belongs to.
    pub(crate) context: &'a CallContext,
    /// The tool's policy.
    pub(crate) policy: ToolPolicy,
    /// The arguments as read from the model's text, until validation takes them.
    pub(crate) read: CallArguments,
    /// The arguments the tool runs with: validated, then maybe rewritten by a before-hook or
    /// an approver.
    pub(crate) arguments: Value,
    /// The tool time the run has left, once the limits admitted the call (`None`: unlimited).
    pub(crate) remaining: Option<Duration>,
    /// What the ledger records of the call.
    pub(crate) trace: &'a mut Trace,
    /// When the call started.
    pub(crate) started: Instant,
}

/// How a call came back out of the stages.
pub(crate) enum Outcome {
    /// A stage answered before the tool was reached (a refusal, or a before-hook's answer):
    /// the stages that look at results (output guardrails, after-hooks) leave it as it is.
    Stopped(Settled),
    /// The tool answered, or the cache, or an identical call of the session it joined.
    Ran(Settled),
}

impl Outcome {
    /// The call's outcome, however it ended.
    pub(crate) fn settled(self) -> Settled {
        match self {
            Self::Stopped(settled) | Self::Ran(settled) => settled,
        }
    }
}

/// What the stages learnt about one call, for the ledger.
#[derive(Default)]
pub(crate) struct Trace {
    pub(crate) arguments: Option<Value>,
    pub(crate) approval: Option<ApprovalRecord>,
    pub(crate) cache_hit: bool,
    /// While a detached (non-cancellable) tool runs: its task or waiter writes the record if
    /// the call's future is dropped.
    pub(crate) detached: bool,
    /// The intent written before the tool started (tools with effects, with a ledger).
    pub(crate) intent_id: Option<String>,
}
