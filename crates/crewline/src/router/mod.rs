//! The deterministic router: several sub-agents in one output node, and code-defined,
//! data-dependent transitions between them.
//!
//! Voice teams split a call into steps (intake, verification, resolution), each with its own
//! prompt and tools. A [`DeterministicRouter`] holds one [`SubAgent`] per step. The active
//! sub-agent answers each LLM request with the full streaming tool loop (its own tools on every
//! round, text spoken as it arrives). After a completed turn the router reads its
//! [`RouterState`], which the tools set from real results, and picks the next sub-agent in
//! code: the first conditional transition out of the active sub-agent that holds, in the order
//! they were added, else its default, else it stays. The routing is reproducible and auditable,
//! and each move is logged to the call's timeline as an `agent.log` `agent.transition` event
//! `{from, to, state}`.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use crewline::{prelude::*, router::{when, DeterministicRouter, RouterState, SubAgent}, tool::ToolRegistry};
//! # fn build(llm: Arc<dyn LlmClient>, tools: Arc<ToolRegistry>, state: RouterState)
//! # -> Result<DeterministicRouter, crewline::router::RouterError> {
//! let router = DeterministicRouter::builder("intake", llm)
//!     .tools(tools)
//!     .state(state) // the clone the tools write to
//!     .sub_agent(SubAgent::new("intake", "Greet; find the account.").with_tools(["find_account"]))
//!     .sub_agent(SubAgent::new("verify", "Verify the caller.").with_tools(["verify_identity"]))
//!     .sub_agent(SubAgent::new("resolve", "Agree a payment plan."))
//!     // Skip verification for a caller verified before.
//!     .add_transition("intake", "resolve", when::flag("verified"))
//!     .add_transition("intake", "verify", when::present("account_id"))
//!     .add_transition("verify", "resolve", when::flag("verified"))
//!     .build()?;
//! # Ok(router) }
//! ```
//!
//! Unlike the reference's router, the graph is checked once when it is built, tools may take
//! several rounds in a turn, a hand-off (a tool ended or transferred the call) ends the turn
//! without more speech, and an interrupted or failed turn never moves the router.

mod builder;
mod classify;
mod error;
mod state;

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
};

use async_trait::async_trait;
use crewline_core::{Context, Message, Role};
use crewline_llm::LlmClient;
use futures::StreamExt;
use serde_json::{Map, Value};

pub use builder::{RouterBuilder, SubAgent};
pub use classify::StructuredStep;
pub use error::RouterError;
pub use state::{RouterState, when};

use crate::{
    CallControl, ToolLoop, TurnEvent,
    crew::{NodeError, NodeHandle, OutputAgent},
    session_store::RouterCheckpoint,
    structured::{STRUCTURED_ERROR_LOG, StructuredError},
    turn::TurnStream,
};

/// The name of the `agent.log` entry for each move between sub-agents.
pub const TRANSITION_LOG: &str = "agent.transition";

/// A transition condition over the router's state.
type Predicate = Box<dyn Fn(&Map<String, Value>) -> bool + Send + Sync>;

/// A sub-agent ready to answer: its prompt and its tool loop over its own tools.
struct Stage {
    id: String,
    prompt: String,
    tool_loop: ToolLoop,
    /// The typed question asked at the start of each of its turns, if any.
    classify: Option<Arc<dyn classify::Classify>>,
}

/// The transitions out of one sub-agent, by index.
#[derive(Default)]
struct Routes {
    /// Tried in order; the first whose condition holds is taken.
    conditional: Vec<(usize, Predicate)>,
    /// Taken when no condition holds.
    default: Option<usize>,
}

/// An output agent made of sub-agents with code-defined transitions (see the
/// [module docs](self)); build it with [`DeterministicRouter::builder`].
///
/// Put it in an [`OutputNode`](crate::crew::OutputNode). It needs the node's handle, which it takes
/// in [`OutputAgent::on_start`], to log its transitions; an agent that wraps a router must
/// forward `on_start` to it.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use crewline::{
///     Crew,
///     crew::OutputNode,
///     llm::ScriptedLlm,
///     router::{DeterministicRouter, SubAgent},
/// };
///
/// let router = DeterministicRouter::builder("intake", Arc::new(ScriptedLlm::new([])))
///     .sub_agent(SubAgent::new("intake", "Find the caller's account."))
///     .sub_agent(SubAgent::new("resolve", "Agree a payment plan."))
///     .add_default("intake", "resolve")
///     .build()?;
/// let mut crew = Crew::new();
/// crew.add_node(OutputNode::new("collections", router));
/// assert!(crew.validate().is_ok());
/// # Ok::<(), crewline::router::RouterError>(())
/// ```
pub struct DeterministicRouter {
    context: Context,
    stages: Vec<Stage>,
    routes: Vec<Routes>,
    active: usize,
    state: RouterState,
    node: Option<NodeHandle>,
    /// Whether the start has been logged (on the first turn, as the reference does).
    entered: bool,
    /// The model the classification steps ask.
    llm: Arc<dyn LlmClient>,
}

impl DeterministicRouter {
    /// Declares a router that starts at the sub-agent `start` and runs on `llm`.
    pub fn builder(start: impl Into<String>, llm: std::sync::Arc<dyn LlmClient>) -> RouterBuilder {
        RouterBuilder::new(start.into(), llm)
    }

    /// The id of the sub-agent that answers the next turn.
    pub fn active(&self) -> &str {
        &self.stages[self.active].id
    }

    /// The sub-agents' ids, in the order they were added.
    pub fn sub_agents(&self) -> impl Iterator<Item = &str> {
        self.stages.iter().map(|s| s.id.as_str())
    }

    /// The state the transitions read (shared with the tools that hold a clone).
    pub fn state(&self) -> &RouterState {
        &self.state
    }

    /// The sub-agent to move to from `active` on `state`: the first conditional transition
    /// that holds, else the default, else none (stay).
    fn next_stage(&self, state: &Map<String, Value>) -> Option<usize> {
        let routes = &self.routes[self.active];
        for (to, when) in &routes.conditional {
            // A panicking condition is a bug in the crew's code; it counts as not holding, so
            // one bad condition does not stop the call (the reference does the same).
            match catch_unwind(AssertUnwindSafe(|| when(state))) {
                Ok(true) => return Some(*to),
                Ok(false) => {}
                Err(_) => tracing::error!(
                    from = %self.stages[self.active].id,
                    to = %self.stages[*to].id,
                    "transition condition panicked; treated as false"
                ),
            }
        }
        routes.default
    }

    /// Logs the move `from` -> `to` with the state it was decided on.
    async fn log_transition(&self, from: Option<usize>, to: usize, state: Map<String, Value>) {
        let Some(node) = &self.node else {
            tracing::debug!("router not started in a node; transition not logged");
            return;
        };
        let mut payload = Map::new();
        payload.insert(
            "from".into(),
            from.map_or(Value::Null, |i| Value::from(self.stages[i].id.as_str())),
        );
        payload.insert("to".into(), Value::from(self.stages[to].id.as_str()));
        payload.insert("state".into(), Value::Object(state));
        node.log(TRANSITION_LOG, payload).await;
    }

    /// Makes `to` active: its prompt replaces the previous one; the conversation is kept.
    fn enter(&mut self, to: usize) {
        tracing::info!(
            from = %self.stages[self.active].id,
            to = %self.stages[to].id,
            "router transition"
        );
        self.active = to;
        let conversation: Vec<Message> = self
            .context
            .messages()
            .iter()
            .filter(|m| m.role() != Role::System)
            .cloned()
            .collect();
        self.context = self.fresh_context(to);
        self.context.add_many(conversation);
    }

    /// A context with the prompt of the sub-agent at `index` and the current one's limits and
    /// token counter (a long call's budget holds across transitions).
    fn fresh_context(&self, index: usize) -> Context {
        let mut context = Context::with_system(self.stages[index].prompt.clone())
            .with_limits(self.context.limits());
        context.set_token_counter(self.context.token_counter().cloned());
        context
    }

    /// Puts the router's place into the call's checkpoint (a checkpointed call only: it
    /// costs a copy of the state).
    fn record_place(&self) {
        let Some(node) = &self.node else { return };
        if node.call().is_checkpointed() {
            node.call().record_router(
                node.name(),
                RouterCheckpoint {
                    active: self.stages[self.active].id.clone(),
                    state: self.state.snapshot(),
                },
            );
        }
    }

    /// Continues where a checkpoint left the router: its sub-agent and its state.
    fn resume(&mut self, place: &RouterCheckpoint) {
        let Some(index) = self.stages.iter().position(|s| s.id == place.active) else {
            tracing::warn!(
                sub_agent = %place.active,
                "the checkpoint names a sub-agent this router does not have: starting over"
            );
            return;
        };
        tracing::info!(sub_agent = %place.active, "router resumed");
        self.state.merge(place.state.clone());
        if index != self.active {
            self.active = index;
            self.context = self.fresh_context(index);
        }
        // The start was logged by the call's first connection.
        self.entered = true;
    }

    /// Runs the active sub-agent's classification step, if it has one: the answer goes to
    /// the state and the transitions are tried, so the sub-agent they pick answers this turn.
    /// A failed step moves nothing and is logged.
    async fn classify(&mut self) {
        let Some(step) = self.stages[self.active].classify.clone() else {
            return;
        };
        match step.classify(&*self.llm, self.context.messages()).await {
            Ok(answer) => {
                self.state.merge(answer);
                let state = self.state.snapshot();
                if let Some(next) = self.next_stage(&state)
                    && next != self.active
                {
                    self.log_transition(Some(self.active), next, state).await;
                    self.enter(next);
                }
            }
            Err(error) => self.log_structured_error(step.name(), &error).await,
        }
    }

    /// Logs a failed classification step (`agent.log` [`STRUCTURED_ERROR_LOG`]).
    async fn log_structured_error(&self, schema: &str, error: &StructuredError) {
        let sub_agent = &self.stages[self.active].id;
        tracing::warn!(
            %sub_agent,
            schema,
            error = %error.chain(),
            "classification step failed: the sub-agent answers"
        );
        let Some(node) = &self.node else { return };
        node.log(STRUCTURED_ERROR_LOG, error.to_log(sub_agent))
            .await;
    }

    /// Whether a tool of this turn ended or transferred the call.
    fn handed_off(call: Option<&CallControl>) -> bool {
        call.is_some_and(CallControl::handoff_requested)
    }
}

#[async_trait]
impl OutputAgent for DeterministicRouter {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }

    /// Runs the active sub-agent's tool loop, then moves the router if a transition holds.
    ///
    /// The move happens only when the turn completes: an interrupt drops this stream before
    /// it gets there, and a failed turn returns early. The `agent.transition` log is sent
    /// before the move is made, and nothing that can be interrupted follows it, so the log
    /// and the move happen together or not at all.
    fn generate_response(&mut self) -> TurnStream<'_> {
        Box::pin(async_stream::stream! {
            if !self.entered {
                self.log_transition(None, self.active, self.state.snapshot()).await;
                self.entered = true;
            }
            self.classify().await;
            let call = self.node.as_ref().map(|n| n.call().clone());
            let stage = &self.stages[self.active];
            let mut report = None;
            {
                let done = || Self::handed_off(call.as_ref());
                let mut turn = stage.tool_loop.run_until(&mut self.context, done);
                while let Some(item) = turn.next().await {
                    match item {
                        Ok(TurnEvent::Done(done)) => report = Some(done),
                        Ok(event) => yield Ok(event),
                        Err(error) => {
                            yield Err(error);
                            return;
                        }
                    }
                }
            }
            if let Some(report) = report {
                yield Ok(TurnEvent::Done(report));
            }
            if Self::handed_off(call.as_ref()) {
                // The call is leaving the crew: no sub-agent answers next.
                return;
            }
            let state = self.state.snapshot();
            if let Some(next) = self.next_stage(&state)
                && next != self.active
            {
                self.log_transition(Some(self.active), next, state).await;
                self.enter(next);
            }
            self.record_place();
        })
    }

    async fn on_start(&mut self, node: &NodeHandle) -> Result<(), NodeError> {
        // The call's scope: what the executor keeps for this caller stays theirs.
        for stage in &mut self.stages {
            stage.tool_loop = stage
                .tool_loop
                .clone()
                .with_scope(node.call().scope().clone());
        }
        if let Some(place) = node
            .call()
            .resumed()
            .and_then(|checkpoint| checkpoint.routers.get(node.name()))
        {
            let place = place.clone();
            self.resume(&place);
        }
        self.node = Some(node.clone());
        self.record_place();
        Ok(())
    }
}
