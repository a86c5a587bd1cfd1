//! The `generate_response` tool loop.

mod answer;
mod report;
mod state;
mod turn;

pub use report::{RoundReport, TurnReport};

use turn::Turn;

use std::sync::Arc;

use crewline_core::{Context, ToolCall, ToolDefinition, ToolErrorKind, ToolResult};
use crewline_llm::{AnswerLimits, LlmClient, LlmError, PriceTable, RequestOptions};
use crewline_tools::{CallArguments, CallContext, SessionScope, Target, ToolRegistry, ToolRun};
use futures::{StreamExt, stream::BoxStream};
use serde_json::Value;

/// How many tool rounds a turn may take by default.
pub const MAX_TOOL_ROUNDS: usize = 4;

/// How many tool calls of one model answer run by default; the rest are answered
/// `RunLimitExceeded` without running. Real models ask for a few parallel calls at a time.
pub const MAX_CALLS_PER_ANSWER: usize = 16;

/// How many tool calls of one turn (all its answers) run by default; the rest are answered
/// `RunLimitExceeded` without running. The executor's run limits
/// ([`RunLimits`](crewline_tools::executor::limits::RunLimits)) hold as well.
pub const MAX_CALLS_PER_TURN: usize = 32;

/// Settings of a [`ToolLoop`].
#[derive(Debug, Clone)]
pub struct ToolLoopConfig {
    /// The most rounds with tool calls before a last, tool-less answer is forced.
    pub max_tool_rounds: usize,
    /// Whether one round's tool calls run concurrently (`true`) or one after the other.
    pub parallel_tools: bool,
    /// The most tool calls of one model answer that run (default [`MAX_CALLS_PER_ANSWER`]);
    /// the later ones are answered `RunLimitExceeded` without running.
    pub max_calls_per_answer: usize,
    /// The most tool calls of one turn that run (default [`MAX_CALLS_PER_TURN`]); the later
    /// ones are answered `RunLimitExceeded` without running.
    pub max_calls_per_turn: usize,
    /// The bounds of one model answer, held whatever the client (default
    /// [`AnswerLimits::default`]: 1 MiB, 128 calls, 256 KiB a call), and never above the
    /// conversation's [`ContextLimits`](crewline_core::ContextLimits): an answer past one
    /// ends the turn with [`LlmError::TooLarge`] or [`LlmError::TooManyToolCalls`], none of
    /// its calls run, and nothing of it enters the conversation. The client's own limits
    /// ([`OpenAiClientBuilder::answer_limits`](crewline_llm::OpenAiClientBuilder::answer_limits))
    /// bound its memory while it reads; these bound what a turn keeps.
    pub answer_limits: AnswerLimits,
    /// Overrides for every request of the loop.
    pub options: RequestOptions,
}

impl Default for ToolLoopConfig {
    fn default() -> Self {
        Self {
            max_tool_rounds: MAX_TOOL_ROUNDS,
            parallel_tools: true,
            max_calls_per_answer: MAX_CALLS_PER_ANSWER,
            max_calls_per_turn: MAX_CALLS_PER_TURN,
            answer_limits: AnswerLimits::default(),
            options: RequestOptions::default(),
        }
    }
}

/// What a [`ToolLoop`] says while tools run before the turn said anything (see
/// [`ToolLoop::with_filler`]).
type Filler = Arc<dyn Fn(&[ToolCall]) -> Option<String> + Send + Sync>;

/// Runs an agent's LLM turns with tools.
///
/// [`Agent`](crate::Agent) builds one; build one yourself to run turns outside a crew.
///
/// # Examples
///
/// A filler covers a slow tool: the caller hears it before the tool runs.
///
/// ```
/// use std::sync::Arc;
/// use crewline::{ToolLoop, TurnEvent, llm::{Reply, ScriptedLlm}, prelude::*};
/// use crewline::{tool::ToolRegistry, types::{Context, Message}};
/// use futures::StreamExt;
///
/// struct Orders;
///
/// #[tools]
/// impl Orders {
///     /// Look an order up.
///     #[function_tool]
///     async fn find_order(&self, id: u32) -> Result<String, ToolError> {
///         Ok(format!("order {id} ships tomorrow"))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = Arc::new(ScriptedLlm::new([
///     Reply::tool_call("find_order", serde_json::json!({"id": 7})),
///     Reply::text(" It ships tomorrow."),
/// ]));
/// let mut tools = ToolRegistry::new();
/// tools.discover(&Arc::new(Orders))?;
/// let tool_loop = ToolLoop::new(model, Arc::new(tools))
///     .with_parallel_tools(false)
///     .with_max_tool_rounds(2)
///     .with_filler(|_calls| Some("One moment.".to_owned()));
///
/// let mut context = Context::with_system("You answer order questions.");
/// context.add(Message::user("Where is order 7?"));
/// let mut heard = String::new();
/// let mut turn = tool_loop.run(&mut context);
/// while let Some(event) = turn.next().await {
///     match event? {
///         TurnEvent::Text(text) => heard.push_str(&text), // streamed in pieces
///         TurnEvent::ToolStarted { call, .. } => heard.push_str(&format!("[{}]", call.name)),
///         TurnEvent::ToolFinished(_) | TurnEvent::Done(_) => {}
///     }
/// }
/// assert_eq!(heard, "One moment.[find_order] It ships tomorrow.");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ToolLoop {
    llm: Arc<dyn LlmClient>,
    tools: Arc<ToolRegistry>,
    /// The registry's definitions, computed once: every request of every turn sends them.
    definitions: Arc<[ToolDefinition]>,
    config: ToolLoopConfig,
    filler: Option<Filler>,
    /// Whose calls these are: the executor keeps cached results, approvals and running
    /// non-cancellable calls per scope.
    scope: SessionScope,
    /// The model the loop's requests ask for (the options' override, else the client's), to
    /// label each turn's usage; computed once, shared by every turn.
    model: Option<Arc<str>>,
    /// What tokens cost per model, to price each turn (none: usage without money).
    prices: Option<Arc<PriceTable>>,
}

/// The model requests ask for: `options.model`, else the client's own.
fn model_label(llm: &dyn LlmClient, config: &ToolLoopConfig) -> Option<Arc<str>> {
    config
        .options
        .model
        .as_deref()
        .or_else(|| llm.model_id())
        .map(Arc::from)
}

/// Something that happened during a turn.
#[derive(Debug, Clone)]
pub enum TurnEvent {
    /// A piece of the answer, to speak at once.
    Text(String),
    /// A tool call is about to run.
    ToolStarted {
        /// The model's call.
        call: ToolCall,
        /// Its arguments as the tool logs print them (the model's object, `{}` when it sent
        /// anything else), read once: the executor validates the same parse.
        arguments: Value,
    },
    /// A tool call finished (successfully or not).
    ToolFinished(ToolRun),
    /// The turn is over.
    Done(TurnReport),
}

impl TurnEvent {
    /// The start of `call`, its arguments read from the call's text: for agents that run
    /// tools themselves (the tool loop reads them once and hands the executor the same parse).
    pub fn tool_started(call: ToolCall) -> Self {
        let arguments = CallArguments::parse(&call.arguments).logged();
        Self::ToolStarted { call, arguments }
    }
}

/// Why a turn failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// The model's request failed.
    #[error(transparent)]
    Llm(#[from] LlmError),
}

/// The events of one turn.
pub type TurnStream<'a> = BoxStream<'a, Result<TurnEvent, TurnError>>;

impl ToolLoop {
    /// A loop over `llm` with `tools`, with default settings.
    pub fn new(llm: Arc<dyn LlmClient>, tools: Arc<ToolRegistry>) -> Self {
        let config = ToolLoopConfig::default();
        Self {
            // Only the tools exported to the crew loop are offered to its model.
            definitions: tools.definitions_for(Target::Crew).into(),
            model: model_label(llm.as_ref(), &config),
            llm,
            tools,
            config,
            filler: None,
            scope: SessionScope::new(),
            prices: None,
        }
    }

    /// The same loop pricing each turn's usage with `prices` ([`TurnReport::cost`]); a model
    /// the table does not name is reported without money (warned once).
    pub fn with_prices(mut self, prices: Arc<PriceTable>) -> Self {
        self.prices = Some(prices);
        self
    }

    /// What tokens cost per model, if the loop prices its turns.
    pub fn prices(&self) -> Option<&Arc<PriceTable>> {
        self.prices.as_ref()
    }

    /// The same loop for the session `scope` (a call's [`CallControl::scope`]): every turn's
    /// tool calls carry it. A new loop has a fresh scope of its own; clones share it, so build
    /// one loop per call (crew factories run per call) or set the call's scope here.
    /// [`LoopAgent`](crate::agent::LoopAgent) sets it from the call when its node starts.
    ///
    /// [`CallControl::scope`]: crate::CallControl::scope
    pub fn with_scope(mut self, scope: SessionScope) -> Self {
        self.scope = scope;
        self
    }

    /// The same loop calling `tools` instead (its definitions are offered from now on).
    pub fn with_tools(mut self, tools: Arc<ToolRegistry>) -> Self {
        self.definitions = tools.definitions_for(Target::Crew).into();
        self.tools = tools;
        self
    }

    /// The session the loop's tool calls belong to.
    pub fn scope(&self) -> &SessionScope {
        &self.scope
    }

    /// A context for tool calls of this loop's session outside its turns (a call the agent
    /// runs itself, such as an approved call run again).
    pub fn call_context(&self) -> CallContext {
        self.tools.context().with_scope(self.scope.clone())
    }

    /// Speaks a filler ("Let me check that for you.") while a round's tools run, when the
    /// turn has not said anything yet: `filler` gets the round's calls and returns the words,
    /// or `None` to stay silent (fast tools need no filler).
    ///
    /// The filler is yielded as [`TurnEvent::Text`] right before the tools start, so the
    /// caller hears it while they run, and it is recorded in the round's assistant message,
    /// so the model knows it was said. It is part of the turn's stream: a barge-in that drops
    /// the turn stops it like any other text. A model that speaks before its tool calls
    /// (or an earlier round that did) gets no filler on top.
    pub fn with_filler<F>(mut self, filler: F) -> Self
    where
        F: Fn(&[ToolCall]) -> Option<String> + Send + Sync + 'static,
    {
        self.filler = Some(Arc::new(filler));
        self
    }

    /// Replaces the settings.
    pub fn with_config(mut self, config: ToolLoopConfig) -> Self {
        self.model = model_label(self.llm.as_ref(), &config);
        self.config = config;
        self
    }

    /// Sets the most tool rounds per turn.
    pub fn with_max_tool_rounds(mut self, rounds: usize) -> Self {
        self.config.max_tool_rounds = rounds;
        self
    }

    /// Runs each round's tool calls concurrently (`true`, the default) or in call order.
    pub fn with_parallel_tools(mut self, parallel: bool) -> Self {
        self.config.parallel_tools = parallel;
        self
    }

    /// Sets the most tool calls of one model answer that run.
    pub fn with_max_calls_per_answer(mut self, calls: usize) -> Self {
        self.config.max_calls_per_answer = calls;
        self
    }

    /// Sets the most tool calls of one turn that run.
    pub fn with_max_calls_per_turn(mut self, calls: usize) -> Self {
        self.config.max_calls_per_turn = calls;
        self
    }

    /// Sets the bounds of one model answer (see [`ToolLoopConfig::answer_limits`]).
    pub fn with_answer_limits(mut self, limits: AnswerLimits) -> Self {
        self.config.answer_limits = limits;
        self
    }

    /// The loop's settings.
    pub fn config(&self) -> &ToolLoopConfig {
        &self.config
    }

    /// The model every turn asks.
    pub(crate) fn llm(&self) -> &Arc<dyn LlmClient> {
        &self.llm
    }

    /// The loop's tools.
    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.tools
    }

    /// Runs one turn on `context`: the documented `generate_response` loop.
    ///
    /// 1. Streams a chat request with the registry's tools; each text piece is yielded as
    ///    [`TurnEvent::Text`] as soon as it arrives.
    /// 2. Appends one assistant message with the round's text and tool calls.
    /// 3. Without tool calls the turn is over ([`TurnEvent::Done`]). Otherwise the tools run
    ///    (parallel or sequential) and one `tool` message per call is appended.
    /// 4. Repeats, at most `max_tool_rounds` times; then one last request with
    ///    `tool_choice: "none"` makes sure the caller gets an answer instead of silence.
    ///
    /// Dropping the stream (barge-in) cancels the LLM request and any running tools at once.
    /// The context is then left consistent: the text streamed so far is kept as the assistant's
    /// message, and every tool call in it has a result (`Cancelled` for those that had not
    /// finished), so the next request is valid.
    ///
    /// An LLM failure ends the stream with a [`TurnError`] after the text that did arrive.
    pub fn run<'a>(&'a self, context: &'a mut Context) -> TurnStream<'a> {
        self.run_until(context, || false)
    }

    /// Runs one turn like [`run`](Self::run), but ends it after a tool round when `done()`
    /// holds, without asking the model again: after a tool ended or transferred the call
    /// (see [`CallControl::handoff_requested`](crate::CallControl::handoff_requested)) the
    /// agent must not speak.
    pub fn run_until<'a>(
        &'a self,
        context: &'a mut Context,
        done: impl Fn() -> bool + Send + 'a,
    ) -> TurnStream<'a> {
        Box::pin(async_stream::stream! {
            let mut turn = Turn::start(self, context);
            loop {
                // 1. Ask the model, with the conversation so far.
                let mut answer = match self.llm.stream_chat(turn.request()).await {
                    Ok(stream) => stream,
                    Err(error) => {
                        yield Err(turn.request_failed(error));
                        return;
                    }
                };
                // 2. Speak its text as it comes; gather its tool calls.
                let mut read = turn.answer();
                while let Some(item) = answer.next().await {
                    match turn.read(&mut read, item) {
                        Ok(Some(text)) => yield Ok(TurnEvent::Text(text)),
                        Ok(None) => {}
                        Err(error) => {
                            drop(answer);
                            yield Err(turn.answer_failed(error));
                            return;
                        }
                    }
                }
                drop(answer);
                // 3. An answer without tool calls ends the turn.
                let calls = turn.calls_to_run(read);
                if calls.is_empty() {
                    yield Ok(TurnEvent::Done(turn.answered()));
                    return;
                }
                // 4. Say a filler before the tools start, if the turn said nothing yet.
                if let Some(words) = turn.filler(&calls) {
                    yield Ok(TurnEvent::Text(words));
                }
                // 5. Announce every call; answer those past the caps without running them.
                let mut round = turn.begin_tools(calls);
                for event in round.started() {
                    yield Ok(event);
                }
                for index in round.refused() {
                    if let Some(refused) = turn.refuse(&round, index) {
                        yield Ok(TurnEvent::ToolFinished(refused));
                    }
                }
                // 6. Run the rest, keeping each result as it lands.
                let options = turn.execute_options(round.take_read());
                let mut runs = self.tools.execute_each(round.to_run(), options);
                while let Some((index, run)) = runs.next().await {
                    yield Ok(TurnEvent::ToolFinished(turn.finished(index, run)));
                }
                drop(runs);
                // 7. Write the round into the conversation; a tool that ended the call ends
                //    the turn.
                turn.end_tool_round();
                if done() {
                    yield Ok(TurnEvent::Done(turn.ended_by_tools()));
                    return;
                }
            }
        })
    }
}

impl ToolLoop {
    /// How many of an answer's `calls` may run: the answer's cap, what is left of the turn's
    /// (`turn_calls` ran already), and what is left of the run's `max_calls` (the earlier
    /// rounds' calls have all finished).
    fn calls_allowed(&self, run: &CallContext, turn_calls: usize, calls: usize) -> usize {
        let run = run.run();
        let run_left = run
            .limits()
            .calls_left(run.calls())
            .map_or(usize::MAX, |left| {
                usize::try_from(left).unwrap_or(usize::MAX)
            });
        let turn_left = self.config.max_calls_per_turn.saturating_sub(turn_calls);
        calls
            .min(self.config.max_calls_per_answer)
            .min(turn_left)
            .min(run_left)
    }

    /// The result of a call past a cap; `allowed` of its answer ran.
    fn refuse(&self, call: &ToolCall, allowed: usize) -> ToolResult {
        let message = if allowed < self.config.max_calls_per_answer {
            // Fewer than the answer's cap ran: the turn's (or the run's) cap stopped the rest.
            "this turn already made all the tool calls it may; answer with what you have".to_owned()
        } else {
            format!(
                "only {} tool calls of one answer run and this one came later, so it did not run; \
                 call fewer tools at once",
                self.config.max_calls_per_answer
            )
        };
        ToolResult::error(call, ToolErrorKind::RunLimitExceeded, message)
    }
}
