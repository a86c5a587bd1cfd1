//! The `generate_response` tool loop.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crewline_core::{Context, Message, ToolCall, ToolDefinition, ToolErrorKind, ToolResult};
use crewline_llm::{
    AnswerLimits, ChatRequest, LlmClient, LlmError, RequestOptions, StreamItem, ToolChoice, Usage,
};
use crewline_tools::{
    CallArguments, CallContext, ExecuteOptions, SessionScope, Target, ToolRegistry, ToolRun,
};
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

/// What one turn cost.
#[derive(Debug, Clone, Default)]
pub struct TurnReport {
    /// One entry per LLM request.
    pub rounds: Vec<RoundReport>,
    /// Tokens over all requests.
    pub usage: Usage,
    /// The model the requests asked for, when known (to count tokens by model).
    pub model: Option<Arc<str>>,
    /// Time from the turn's start to its first text.
    pub time_to_first_token: Option<Duration>,
    /// Time from the turn's start to its end.
    pub total: Duration,
    /// Whether the round cap was reached and a tool-less answer forced.
    pub hit_round_cap: bool,
}

/// What one LLM request of a turn cost.
#[derive(Debug, Clone, Default)]
pub struct RoundReport {
    /// Time from the request to its first text or tool call.
    pub time_to_first_token: Option<Duration>,
    /// Time from the request to the end of its tools.
    pub duration: Duration,
    /// Tokens, when the server reported them.
    pub usage: Option<Usage>,
    /// Each tool call of the round: name and latency.
    pub tools: Vec<(String, Duration)>,
    /// The provider that answered, when the model client said (a
    /// [`FallbackLlm`](crewline_llm::FallbackLlm) does).
    pub provider: Option<Arc<str>>,
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
        }
    }

    /// The same loop for the session `scope` (a call's [`CallControl::scope`]): every turn's
    /// tool calls carry it. A new loop has a fresh scope of its own; clones share it, so build
    /// one loop per call (crew factories run per call) or set the call's scope here.
    /// [`LoopAgent`](crate::LoopAgent) sets it from the call when its node starts.
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
            let turn_started = Instant::now();
            let span = tracing::debug_span!("tool_loop", max_rounds = self.config.max_tool_rounds);
            // One executor run per turn: run limits (calls, tool time) count over all rounds;
            // the session's scope is the same in every turn.
            let run = self.call_context();
            let mut state = TurnState::new(context, &self.tools, run.clone());
            let mut report = TurnReport {
                model: self.model.clone(),
                ..TurnReport::default()
            };
            let mut tool_rounds = 0;
            // Calls of this turn handed to the executor (for the turn's cap).
            let mut turn_calls = 0;
            // Whether the caller has heard anything of this turn (for the filler).
            let mut spoken = false;
            loop {
                let forced_final = tool_rounds >= self.config.max_tool_rounds;
                let mut request = ChatRequest::new(state.context.shared_messages())
                    .with_options(self.config.options.clone());
                if !self.definitions.is_empty() {
                    request.tools = self.definitions.clone();
                    if forced_final {
                        request.tool_choice = Some(ToolChoice::None);
                    }
                }
                let round_started = Instant::now();
                let mut round = RoundReport::default();
                let mut llm_stream = match self.llm.stream_chat(request).await {
                    Ok(stream) => stream,
                    Err(error) => {
                        span.in_scope(|| tracing::warn!(error = %ErrorExcerpt(&error), "LLM request failed"));
                        yield Err(TurnError::Llm(error));
                        return;
                    }
                };
                let mut calls = Vec::new();
                let mut answer = AnswerMeter::new(self.config.answer_limits, state.context.limits());
                while let Some(item) = llm_stream.next().await {
                    let checked = match item {
                        Ok(StreamItem::Text(text)) => {
                            if text.is_empty() {
                                continue;
                            }
                            if let Err(error) = answer.text(&text) {
                                Err(error)
                            } else {
                                round.time_to_first_token.get_or_insert_with(|| round_started.elapsed());
                                report.time_to_first_token.get_or_insert_with(|| turn_started.elapsed());
                                state.text.push_str(&text);
                                spoken = true;
                                yield Ok(TurnEvent::Text(text));
                                Ok(())
                            }
                        }
                        Ok(StreamItem::ToolCalls(new_calls)) => {
                            round.time_to_first_token.get_or_insert_with(|| round_started.elapsed());
                            answer.calls(&new_calls).map(|()| calls.extend(new_calls))
                        }
                        Ok(StreamItem::Usage(usage)) => {
                            report.usage += usage;
                            round.usage = Some(usage);
                            Ok(())
                        }
                        Ok(StreamItem::Finish(_)) => Ok(()),
                        Ok(StreamItem::Provider(name)) => {
                            // A fallback provider's tokens are counted under its own model,
                            // unless the requests name one themselves.
                            if self.config.options.model.is_none()
                                && let Some(model) = self.llm.provider_model_id(&name)
                                && report.model.as_deref() != Some(model)
                            {
                                report.model = Some(Arc::from(model));
                            }
                            round.provider = Some(name);
                            Ok(())
                        }
                        // A reasoning model's thinking is never spoken nor kept, but it is
                        // part of the answer's size.
                        Ok(StreamItem::Reasoning(text)) => answer.text(&text),
                        Err(error) => Err(error),
                    };
                    if let Err(error) = checked {
                        if is_answer_limit(&error) {
                            // Nothing of a refused answer enters the conversation: the model
                            // would read back the runaway answer on every later turn.
                            state.text.clear();
                        }
                        span.in_scope(|| tracing::warn!(error = %ErrorExcerpt(&error), "LLM stream failed mid-way"));
                        drop(llm_stream);
                        yield Err(TurnError::Llm(error));
                        return;
                    }
                }
                drop(llm_stream);

                if forced_final && !calls.is_empty() {
                    // Some servers ignore `tool_choice: "none"`. Calls we will not run must not
                    // enter the context, or the next request would be invalid.
                    span.in_scope(|| tracing::warn!(calls = calls.len(), "model called tools after the round cap; ignoring them"));
                    calls.clear();
                }
                if calls.is_empty() {
                    state.commit_text();
                    round.duration = round_started.elapsed();
                    report.rounds.push(round);
                    report.hit_round_cap = forced_final && tool_rounds > 0;
                    report.total = turn_started.elapsed();
                    span.in_scope(|| report.trace());
                    yield Ok(TurnEvent::Done(report));
                    return;
                }

                if !spoken
                    && let Some(words) = self.filler.as_ref().and_then(|filler| filler(&calls))
                    && !words.is_empty()
                {
                    // Silence while tools run sounds like a dropped line: say the filler now,
                    // before the tools start, as part of this round's message.
                    spoken = true;
                    state.text.push_str(&words);
                    yield Ok(TurnEvent::Text(words));
                }

                // Calls past the answer's or the turn's cap never reach the executor (no
                // approval prompt, no hook, no run): the model reads why instead.
                let allowed = self.calls_allowed(&run, turn_calls, calls.len());
                turn_calls += allowed;
                // A refused call's arguments are not kept nor logged: they never ran, and the
                // model's words of them would cost the conversation and the wire for nothing.
                for call in calls.iter_mut().skip(allowed) {
                    call.arguments = String::from("{}");
                }
                // The state keeps the calls for the drop guard; the executor reads this copy
                // while the state records results.
                state.begin_tools(calls.clone());
                // Each call's text is parsed here, once: the start log prints this value and the
                // executor validates it.
                let mut read: Vec<CallArguments> =
                    calls.iter().map(|call| CallArguments::parse(&call.arguments)).collect();
                for (call, arguments) in calls.iter().zip(&read) {
                    yield Ok(TurnEvent::ToolStarted { call: call.clone(), arguments: arguments.logged() });
                }
                read.truncate(allowed);
                for (index, call) in calls.iter().enumerate().skip(allowed) {
                    let refused = ToolRun {
                        result: self.refuse(call, allowed),
                        latency: Duration::ZERO,
                    };
                    if let Some(slot) = state.results.get_mut(index) {
                        *slot = Some(refused.result.clone());
                    }
                    yield Ok(TurnEvent::ToolFinished(refused));
                }
                if allowed < calls.len() {
                    span.in_scope(|| tracing::warn!(
                        calls = calls.len(),
                        allowed,
                        "the model asked for more tool calls than the caps allow; refusing the rest"
                    ));
                }
                let mut runs = self.tools.execute_each(
                    calls.get(..allowed).unwrap_or_default(),
                    ExecuteOptions::new()
                        .parallel(self.config.parallel_tools)
                        .read_arguments(read)
                        .in_run(run.clone()),
                );
                while let Some((index, run)) = runs.next().await {
                    round.tools.push((run.result.name.clone(), run.latency));
                    if let Some(slot) = state.results.get_mut(index) {
                        *slot = Some(run.result.clone());
                    }
                    yield Ok(TurnEvent::ToolFinished(run));
                }
                drop(runs);
                state.commit_tools();
                round.duration = round_started.elapsed();
                span.in_scope(|| tracing::debug!(
                    round = report.rounds.len(),
                    ttft_ms = round.time_to_first_token.map(|d| d.as_secs_f64() * 1e3),
                    duration_ms = round.duration.as_secs_f64() * 1e3,
                    tools = round.tools.len(),
                    "tool round finished"
                ));
                report.rounds.push(round);
                tool_rounds += 1;
                if done() {
                    report.total = turn_started.elapsed();
                    span.in_scope(|| tracing::debug!("turn ended after its tools by the caller's condition"));
                    span.in_scope(|| report.trace());
                    yield Ok(TurnEvent::Done(report));
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

/// The most bytes of a model error's text a log line carries: the server writes it.
const MAX_LOGGED_ERROR_BYTES: usize = 2_048;

/// A model error as a log line shows it: its text up to [`MAX_LOGGED_ERROR_BYTES`].
struct ErrorExcerpt<'a>(&'a LlmError);

impl std::fmt::Display for ErrorExcerpt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = crewline_core::error_chain(self.0);
        if text.len() <= MAX_LOGGED_ERROR_BYTES {
            return f.write_str(&text);
        }
        let head = crewline_core::prefix(&text, MAX_LOGGED_ERROR_BYTES);
        write!(f, "{head}… ({} bytes in all)", text.len())
    }
}

/// Whether `error` refused an answer past its limits (see [`ToolLoopConfig::answer_limits`]).
fn is_answer_limit(error: &LlmError) -> bool {
    matches!(
        error,
        LlmError::TooLarge { .. } | LlmError::TooManyToolCalls { .. }
    )
}

/// Counts one answer against the loop's [`AnswerLimits`], bounded by what the conversation
/// keeps: an answer the context could not hold as its newest turn would make every later
/// request larger than [`ContextLimits`](crewline_core::ContextLimits) allow.
struct AnswerMeter {
    max_bytes: usize,
    max_calls: usize,
    max_call_bytes: usize,
    bytes: usize,
    calls: usize,
}

impl AnswerMeter {
    fn new(limits: AnswerLimits, context: crewline_core::ContextLimits) -> Self {
        Self {
            max_bytes: limits.max_answer_bytes.min(context.max_bytes),
            // The answer's message and one result per call, beside at least the prompt.
            max_calls: limits
                .max_tool_calls
                .min(context.max_messages.saturating_sub(2)),
            max_call_bytes: limits.max_call_bytes,
            bytes: 0,
            calls: 0,
        }
    }

    fn add(&mut self, bytes: usize) -> Result<(), LlmError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > self.max_bytes {
            return Err(LlmError::TooLarge {
                what: "the answer",
                limit: self.max_bytes,
            });
        }
        Ok(())
    }

    /// A piece of text or reasoning.
    fn text(&mut self, text: &str) -> Result<(), LlmError> {
        self.add(text.len())
    }

    /// Assembled calls, as the context counts their bytes.
    fn calls(&mut self, calls: &[ToolCall]) -> Result<(), LlmError> {
        self.calls = self.calls.saturating_add(calls.len());
        if self.calls > self.max_calls {
            return Err(LlmError::TooManyToolCalls {
                limit: self.max_calls,
            });
        }
        for call in calls {
            let bytes = call.id.len() + call.name.len() + call.arguments.len();
            if bytes > self.max_call_bytes {
                return Err(LlmError::TooLarge {
                    what: "a tool call",
                    limit: self.max_call_bytes,
                });
            }
            self.add(bytes)?;
        }
        Ok(())
    }
}

impl TurnReport {
    /// The provider that answered the turn's last request that named one.
    pub fn provider(&self) -> Option<&str> {
        self.rounds
            .iter()
            .rev()
            .find_map(|round| round.provider.as_deref())
    }

    fn trace(&self) {
        tracing::info!(
            rounds = self.rounds.len(),
            provider = self.provider(),
            ttft_ms = self.time_to_first_token.map(|d| d.as_secs_f64() * 1e3),
            total_ms = self.total.as_secs_f64() * 1e3,
            prompt_tokens = self.usage.prompt_tokens,
            completion_tokens = self.usage.completion_tokens,
            hit_round_cap = self.hit_round_cap,
            "turn finished"
        );
    }
}

/// What a turn has said and asked for but not yet written into the context.
///
/// Everything reaches the context through here, and `Drop` writes whatever is pending, so a
/// turn dropped at any await point (barge-in) still leaves a valid conversation.
struct TurnState<'a> {
    context: &'a mut Context,
    /// What a call cut short is answered with (see [`ToolRegistry::interrupted`]).
    tools: &'a ToolRegistry,
    run: CallContext,
    /// Text of the current round not yet in the context.
    text: String,
    /// Tool calls of the current round, while they run.
    calls: Vec<ToolCall>,
    /// Their results, by call position, as they finish.
    results: Vec<Option<ToolResult>>,
}

impl<'a> TurnState<'a> {
    fn new(context: &'a mut Context, tools: &'a ToolRegistry, run: CallContext) -> Self {
        Self {
            context,
            tools,
            run,
            text: String::new(),
            calls: Vec::new(),
            results: Vec::new(),
        }
    }

    fn commit_text(&mut self) {
        if !self.text.is_empty() {
            self.context
                .add(Message::assistant(std::mem::take(&mut self.text)));
        }
    }

    fn begin_tools(&mut self, calls: Vec<ToolCall>) {
        self.results = vec![None; calls.len()];
        self.calls = calls;
    }

    /// Writes the round's assistant message and one result per call, in call order; calls
    /// without a result (the turn was dropped) are answered by the executor: `Cancelled`,
    /// or for a non-cancellable tool that runs on, its real outcome or `StillRunning` (the
    /// model must not start it again).
    fn commit_tools(&mut self) {
        let calls = std::mem::take(&mut self.calls);
        let results = std::mem::take(&mut self.results);
        let text = std::mem::take(&mut self.text);
        let mut answers: Vec<Message> = calls
            .iter()
            .zip(results)
            .map(|(call, result)| {
                result
                    .unwrap_or_else(|| self.tools.interrupted(call, &self.run))
                    .into_message()
            })
            .collect();
        let asked = Message::assistant_with_tools(text, calls);
        // The context keeps its newest turn whole, whatever its size: the round must fit its
        // bound by itself, or every later request would be past it.
        let asked_bytes = asked.text().map_or(0, str::len)
            + asked
                .tool_calls()
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                .sum::<usize>();
        let ids: usize = answers.iter().map(|m| tool_call_id(m).len()).sum();
        let budget = self
            .context
            .limits()
            .max_bytes
            .saturating_sub(asked_bytes)
            .saturating_sub(ids);
        fit_results(&mut answers, budget);
        self.context.add(asked);
        self.context.add_many(answers);
    }
}

/// The id a tool message answers (empty for other messages).
fn tool_call_id(message: &Message) -> &str {
    match message {
        Message::Tool { tool_call_id, .. } => tool_call_id,
        _ => "",
    }
}

/// What a result cut by [`fit_results`] ends with.
const CUT_NOTE: &str = "… [result cut: too large for the conversation]";

/// Cuts the largest tool results until their contents together fit `budget` bytes: each is
/// kept whole up to an equal share of it, larger ones are cut on a character boundary and
/// say so, so the model knows it read part of a result.
fn fit_results(answers: &mut [Message], budget: usize) {
    let total: usize = answers.iter().map(|m| m.text().map_or(0, str::len)).sum();
    if total <= budget || answers.is_empty() {
        return;
    }
    let share = budget / answers.len();
    let keep = share.saturating_sub(CUT_NOTE.len());
    for answer in answers.iter_mut() {
        if let Message::Tool { content, .. } = answer
            && content.len() > share
        {
            let end = crewline_core::prefix(content, keep).len();
            content.truncate(end);
            if share >= CUT_NOTE.len() {
                content.push_str(CUT_NOTE);
            }
        }
    }
}

impl Drop for TurnState<'_> {
    fn drop(&mut self) {
        if self.calls.is_empty() {
            self.commit_text();
        } else {
            self.commit_tools();
        }
    }
}
