//! The common output agent: a conversation answered by a tool loop.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
};

use async_trait::async_trait;
use crewline_core::{Context, ContextLimits, TokenCounter};

use crate::{
    CallControl, ToolLoop,
    crew::{NodeError, NodeHandle, OutputAgent},
    eval_faults::CallTurns,
    turn::TurnStream,
};

/// An output agent that answers every LLM request with its [`ToolLoop`] on its conversation:
/// what most crews' output node is, without writing the [`OutputAgent`] impl by hand.
///
/// [`Agent`](crate::Agent) builds one per call; build one yourself for a crew of your own.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use crewline::{
///     ToolLoop,
///     agent::LoopAgent,
///     crew::OutputAgent,
///     llm::{Reply, ScriptedLlm},
///     prelude::*,
///     tool::ToolRegistry,
/// };
///
/// let model = Arc::new(ScriptedLlm::new([Reply::text("Hello!")]));
/// let tool_loop = ToolLoop::new(model, Arc::new(ToolRegistry::new()));
/// let mut agent = LoopAgent::new("You are a friendly voice assistant.", tool_loop);
/// assert_eq!(agent.context().messages().len(), 1); // the system prompt
///
/// let mut crew = Crew::new();
/// crew.add_node(OutputNode::new("weather-agent", agent));
/// assert!(crew.validate().is_ok());
/// ```
pub struct LoopAgent {
    context: Context,
    tool_loop: ToolLoop,
    /// The call's controls, known once the node starts: a turn ends without asking the model
    /// again once a tool ended or transferred the call.
    call: Option<CallControl>,
    /// Runs with the final conversation when the agent is dropped (the call has ended).
    on_end: Option<CallEndHook>,
    /// The call's turns, counted for its tool faults (an eval's crew only).
    turns: Option<CallTurns>,
}

/// A hook run once with a call's final conversation; see [`LoopAgent::on_end`].
pub type CallEndHook = Arc<dyn Fn(&Context) + Send + Sync>;

impl LoopAgent {
    /// An agent with `system_prompt` whose answers come from `tool_loop`.
    pub fn new(system_prompt: impl Into<String>, tool_loop: ToolLoop) -> Self {
        Self::with_context(Context::with_system(system_prompt), tool_loop)
    }

    /// How much of the conversation the agent keeps (default [`ContextLimits::default`]):
    /// past it, the oldest turns go first.
    #[must_use]
    pub fn context_limits(mut self, limits: ContextLimits) -> Self {
        self.context.set_limits(limits);
        self
    }

    /// Counts the conversation's tokens by `counter` (the model's tokenizer) instead of the
    /// byte estimate.
    #[must_use]
    pub fn token_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.context.set_token_counter(Some(counter));
        self
    }

    /// An agent that starts from `context`.
    pub fn with_context(context: Context, tool_loop: ToolLoop) -> Self {
        Self {
            context,
            tool_loop,
            call: None,
            on_end: None,
            turns: None,
        }
    }

    /// Counts the call's turns in `turns` (what its tools' faults are timed by).
    pub(crate) fn counting_turns(mut self, turns: CallTurns) -> Self {
        self.turns = Some(turns);
        self
    }

    /// Runs `hook` once with the final conversation when the call ends (when the session
    /// drops the agent): to record what the call concluded. A panic in it is logged, not
    /// propagated; it runs in `Drop`, so it must not block.
    #[must_use]
    pub fn on_end(mut self, hook: CallEndHook) -> Self {
        self.on_end = Some(hook);
        self
    }
}

impl Drop for LoopAgent {
    fn drop(&mut self) {
        if let Some(hook) = self.on_end.take() {
            let context = &self.context;
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| hook(context))) {
                tracing::error!(
                    panic = crewline_core::panic_message(panic.as_ref()),
                    "the call-end hook panicked"
                );
            }
        }
    }
}

#[async_trait]
impl OutputAgent for LoopAgent {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }

    fn generate_response(&mut self) -> TurnStream<'_> {
        if let Some(turns) = &self.turns {
            turns.next();
        }
        match &self.call {
            Some(call) => self
                .tool_loop
                .run_until(&mut self.context, || call.handoff_requested()),
            None => self.tool_loop.run(&mut self.context),
        }
    }

    async fn on_start(&mut self, node: &NodeHandle) -> Result<(), NodeError> {
        // The call's scope: what the executor keeps for this caller stays theirs.
        self.tool_loop = self
            .tool_loop
            .clone()
            .with_scope(node.call().scope().clone());
        self.call = Some(node.call().clone());
        Ok(())
    }
}
