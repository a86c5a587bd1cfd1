//! One turn of the tool loop as named steps; [`ToolLoop::run_until`] calls them in order.

use std::time::{Duration, Instant};

use crewline_core::{Context, ToolCall};
use crewline_llm::{ChatRequest, LlmError, StreamItem, ToolChoice};
use crewline_tools::{CallArguments, CallContext, ExecuteOptions, ToolRun};

use super::{
    ToolLoop, TurnError, TurnEvent,
    answer::{AnswerMeter, ErrorExcerpt, is_answer_limit},
    report::{RoundReport, TurnReport},
    state::TurnState,
};

/// A turn in progress: what it wrote, what it cost, what it may still do.
pub(super) struct Turn<'a> {
    tool_loop: &'a ToolLoop,
    state: TurnState<'a>,
    /// One executor run per turn: run limits (calls, tool time) count over all rounds; the
    /// session's scope is the same in every turn.
    run: CallContext,
    report: TurnReport,
    span: tracing::Span,
    started: Instant,
    /// The current round: one model request and the tools it asked for.
    round: RoundReport,
    round_started: Instant,
    /// Rounds that ran tools.
    tool_rounds: usize,
    /// Calls of this turn handed to the executor (for the turn's cap).
    calls_run: usize,
    /// Whether the caller has heard anything of this turn (for the filler).
    spoken: bool,
}

/// One model answer being read: its size so far and its tool calls.
pub(super) struct Answer {
    meter: AnswerMeter,
    calls: Vec<ToolCall>,
}

/// The tool calls of one round: all announced, the first `allowed` run, the rest refused.
pub(super) struct ToolRound {
    calls: Vec<ToolCall>,
    /// Each call's arguments, parsed once: the start event prints them, the executor
    /// validates the same parse.
    read: Vec<CallArguments>,
    allowed: usize,
}

impl ToolRound {
    /// The start event of every call of the round, refused ones included.
    pub(super) fn started(&self) -> impl Iterator<Item = TurnEvent> + '_ {
        self.calls
            .iter()
            .zip(&self.read)
            .map(|(call, arguments)| TurnEvent::ToolStarted {
                call: call.clone(),
                arguments: arguments.logged(),
            })
    }

    /// The positions of the calls past a cap.
    pub(super) fn refused(&self) -> std::ops::Range<usize> {
        self.allowed..self.calls.len()
    }

    /// The calls that run.
    pub(super) fn to_run(&self) -> &[ToolCall] {
        self.calls.get(..self.allowed).unwrap_or_default()
    }

    /// The parsed arguments of the calls that run, handed to the executor.
    pub(super) fn take_read(&mut self) -> Vec<CallArguments> {
        let mut read = std::mem::take(&mut self.read);
        read.truncate(self.allowed);
        read
    }
}

impl<'a> Turn<'a> {
    /// A turn of `tool_loop` on `context`.
    pub(super) fn start(tool_loop: &'a ToolLoop, context: &'a mut Context) -> Self {
        let run = tool_loop.call_context();
        let now = Instant::now();
        Self {
            state: TurnState::new(context, &tool_loop.tools, run.clone()),
            run,
            report: TurnReport {
                model: tool_loop.model.clone(),
                ..TurnReport::default()
            },
            span: tracing::debug_span!("tool_loop", max_rounds = tool_loop.config.max_tool_rounds),
            started: now,
            round: RoundReport::default(),
            round_started: now,
            tool_rounds: 0,
            calls_run: 0,
            spoken: false,
            tool_loop,
        }
    }

    /// Whether this round is the last: the round cap is reached and the model must answer
    /// without tools, so the caller gets an answer instead of silence.
    fn is_final_round(&self) -> bool {
        self.tool_rounds >= self.tool_loop.config.max_tool_rounds
    }

    /// Starts a round: the request with the conversation so far.
    pub(super) fn request(&mut self) -> ChatRequest {
        self.round = RoundReport::default();
        self.round_started = Instant::now();
        let config = &self.tool_loop.config;
        let mut request = ChatRequest::new(self.state.context.shared_messages())
            .with_options(config.options.clone());
        if !self.tool_loop.definitions.is_empty() {
            request.tools = self.tool_loop.definitions.clone();
            if self.is_final_round() {
                request.tool_choice = Some(ToolChoice::None);
            }
        }
        request
    }

    /// The request failed before any answer came.
    pub(super) fn request_failed(&self, error: LlmError) -> TurnError {
        self.span
            .in_scope(|| tracing::warn!(error = %ErrorExcerpt(&error), "LLM request failed"));
        TurnError::Llm(error)
    }

    /// A reader of the round's answer, bounded by the loop's limits and the context's.
    pub(super) fn answer(&self) -> Answer {
        Answer {
            meter: AnswerMeter::new(
                self.tool_loop.config.answer_limits,
                self.state.context.limits(),
            ),
            calls: Vec::new(),
        }
    }

    /// Takes one item of the answer: a piece of text to speak now, or nothing to say.
    pub(super) fn read(
        &mut self,
        answer: &mut Answer,
        item: Result<StreamItem, LlmError>,
    ) -> Result<Option<String>, LlmError> {
        match item? {
            StreamItem::Text(text) => {
                if text.is_empty() {
                    return Ok(None);
                }
                answer.meter.text(&text)?;
                self.first_token();
                self.report
                    .time_to_first_token
                    .get_or_insert_with(|| self.started.elapsed());
                self.state.text.push_str(&text);
                self.spoken = true;
                return Ok(Some(text));
            }
            StreamItem::ToolCalls(calls) => {
                self.first_token();
                answer.meter.calls(&calls)?;
                answer.calls.extend(calls);
            }
            StreamItem::Usage(usage) => {
                self.report.usage += usage;
                self.round.usage = Some(usage);
            }
            StreamItem::Finish(_) => {}
            StreamItem::Provider(name) => self.answered_by(name),
            // A reasoning model's thinking is never spoken nor kept, but it is part of the
            // answer's size.
            StreamItem::Reasoning(text) => answer.meter.text(&text)?,
        }
        Ok(None)
    }

    fn first_token(&mut self) {
        let started = self.round_started;
        self.round
            .time_to_first_token
            .get_or_insert_with(|| started.elapsed());
    }

    /// A fallback provider answered: its tokens are counted under its own model, unless the
    /// requests name one themselves.
    fn answered_by(&mut self, name: std::sync::Arc<str>) {
        let tool_loop = self.tool_loop;
        if tool_loop.config.options.model.is_none()
            && let Some(model) = tool_loop.llm.provider_model_id(&name)
            && self.report.model.as_deref() != Some(model)
        {
            self.report.model = Some(std::sync::Arc::from(model));
        }
        self.round.provider = Some(name);
    }

    /// The answer failed or broke a limit mid-way.
    pub(super) fn answer_failed(&mut self, error: LlmError) -> TurnError {
        if is_answer_limit(&error) {
            // Nothing of a refused answer enters the conversation: the model would read back
            // the runaway answer on every later turn.
            self.state.text.clear();
        }
        self.span.in_scope(
            || tracing::warn!(error = %ErrorExcerpt(&error), "LLM stream failed mid-way"),
        );
        TurnError::Llm(error)
    }

    /// The answer's tool calls this round runs: none in the last round.
    pub(super) fn calls_to_run(&self, answer: Answer) -> Vec<ToolCall> {
        let mut calls = answer.calls;
        if self.is_final_round() && !calls.is_empty() {
            // Some servers ignore `tool_choice: "none"`. Calls we will not run must not enter
            // the context, or the next request would be invalid.
            self.span.in_scope(|| {
                tracing::warn!(
                    calls = calls.len(),
                    "model called tools after the round cap; ignoring them"
                )
            });
            calls.clear();
        }
        calls
    }

    /// The answer had no calls: it is the turn's, and the turn is over.
    pub(super) fn answered(&mut self) -> TurnReport {
        self.state.commit_text();
        self.end_round();
        self.report.hit_round_cap = self.is_final_round() && self.tool_rounds > 0;
        self.finish()
    }

    /// Words to say before the round's tools run, when the turn said nothing yet: silence
    /// while tools run sounds like a dropped line. They join the round's message.
    pub(super) fn filler(&mut self, calls: &[ToolCall]) -> Option<String> {
        if self.spoken {
            return None;
        }
        let words = self
            .tool_loop
            .filler
            .as_ref()
            .and_then(|filler| filler(calls))?;
        if words.is_empty() {
            return None;
        }
        self.spoken = true;
        self.state.text.push_str(&words);
        Some(words)
    }

    /// Starts the round's tools: which may run under the answer's, the turn's and the run's
    /// caps, the state keeping every call for the drop guard.
    pub(super) fn begin_tools(&mut self, mut calls: Vec<ToolCall>) -> ToolRound {
        // Calls past a cap never reach the executor (no approval prompt, no hook, no run):
        // the model reads why instead.
        let allowed = self
            .tool_loop
            .calls_allowed(&self.run, self.calls_run, calls.len());
        self.calls_run += allowed;
        // A refused call's arguments are not kept nor logged: they never ran, and the model's
        // words of them would cost the conversation and the wire for nothing.
        for call in calls.iter_mut().skip(allowed) {
            call.arguments = String::from("{}");
        }
        if allowed < calls.len() {
            self.span.in_scope(|| {
                tracing::warn!(
                    calls = calls.len(),
                    allowed,
                    "the model asked for more tool calls than the caps allow; refusing the rest"
                )
            });
        }
        // The state keeps the calls for the drop guard; the executor reads the round's copy
        // while the state records results.
        self.state.begin_tools(calls.clone());
        let read = calls
            .iter()
            .map(|call| CallArguments::parse(&call.arguments))
            .collect();
        ToolRound {
            calls,
            read,
            allowed,
        }
    }

    /// Answers the call at `index` of `round`, past a cap, without running it.
    pub(super) fn refuse(&mut self, round: &ToolRound, index: usize) -> Option<ToolRun> {
        let call = round.calls.get(index)?;
        let refused = ToolRun {
            result: self.tool_loop.refuse(call, round.allowed),
            latency: Duration::ZERO,
        };
        self.state.record(index, &refused.result);
        Some(refused)
    }

    /// How the executor runs the round's calls: in this turn's run, with their parsed
    /// arguments.
    pub(super) fn execute_options(&self, read: Vec<CallArguments>) -> ExecuteOptions {
        ExecuteOptions::new()
            .parallel(self.tool_loop.config.parallel_tools)
            .read_arguments(read)
            .in_run(self.run.clone())
    }

    /// Keeps the result of the call at `index` as it lands.
    pub(super) fn finished(&mut self, index: usize, run: ToolRun) -> ToolRun {
        self.round
            .tools
            .push((run.result.name.clone(), run.latency));
        self.state.record(index, &run.result);
        run
    }

    /// Writes the round (its message and one result per call) into the conversation.
    pub(super) fn end_tool_round(&mut self) {
        self.state.commit_tools();
        let round = &self.round;
        let rounds = self.report.rounds.len();
        let duration = self.round_started.elapsed();
        self.span.in_scope(|| {
            tracing::debug!(
                round = rounds,
                ttft_ms = round.time_to_first_token.map(|d| d.as_secs_f64() * 1e3),
                duration_ms = duration.as_secs_f64() * 1e3,
                tools = round.tools.len(),
                "tool round finished"
            )
        });
        self.end_round();
        self.tool_rounds += 1;
    }

    /// A tool ended or transferred the call: the turn ends without asking the model again.
    pub(super) fn ended_by_tools(&mut self) -> TurnReport {
        self.span
            .in_scope(|| tracing::debug!("turn ended after its tools by the caller's condition"));
        self.finish()
    }

    fn end_round(&mut self) {
        let mut round = std::mem::take(&mut self.round);
        round.duration = self.round_started.elapsed();
        self.report.rounds.push(round);
    }

    fn finish(&mut self) -> TurnReport {
        self.report.total = self.started.elapsed();
        // Priced once per turn, never per chunk: a lookup and three multiplications.
        if let (Some(prices), Some(model)) = (&self.tool_loop.prices, &self.report.model)
            && self.report.usage_reported()
        {
            self.report.cost = prices.cost(model, &self.report.usage);
        }
        self.span.in_scope(|| self.report.trace());
        std::mem::take(&mut self.report)
    }
}
