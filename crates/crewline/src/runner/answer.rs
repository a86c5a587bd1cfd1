//! One LLM request answered: the conversation prepared, `agent.response.start`, the turn's
//! chunks and tool logs relayed until it ends or the caller barges in, `agent.response.end`.

use std::{collections::HashMap, panic::AssertUnwindSafe, sync::Arc, time::Instant};

use crewline_core::{Message, Role};
use crewline_protocol::{
    EventBody, LlmRequest, Messages, Severity, ToolCallEnd, ToolCallError, ToolCallStart,
};
use crewline_tools::{ToolNotice, ToolRun};
use futures::{FutureExt, StreamExt};
use serde_json::{Map, Value};
use tracing::Instrument;

use super::{
    OutputRunner, emit_unless_interrupted, error_event, next_interrupt,
    notices::{Notices, next_notice_in_turn, progress_log},
};
use crate::{
    TurnEvent,
    crew::{NodeError, NodeHandle},
    inbox::LineInterrupt,
    session::{Observer, TurnOutcome},
    turn::{TurnError, TurnReport},
};

impl OutputRunner {
    /// Takes the platform's authoritative conversation, keeping the agent's system prompts.
    fn sync_context(&mut self, messages: &Messages) {
        // Each message is read straight from the request's text: no tree of JSON values.
        let parsed = match messages.parse::<Message>() {
            Ok(parsed) => parsed,
            Err(error) => {
                tracing::warn!(error = %crewline_core::ErrorChain(&error), "unreadable conversation in system.llm.request ignored");
                return;
            }
        };
        let mut incoming: Vec<Message> = parsed
            .filter_map(|message| {
                message
                    .map_err(|error| {
                        tracing::warn!(error = %crewline_core::ErrorChain(&error), "unreadable message in system.llm.request skipped")
                    })
                    .ok()
            })
            .collect();
        if !incoming.iter().any(|m| m.role() != Role::System) {
            return;
        }
        let context = self.node.agent.context();
        let has_prompt = context.messages().iter().any(|m| m.role() == Role::System);
        if !has_prompt {
            // An agent without a prompt of its own takes the platform's.
            context.add_many(
                incoming
                    .iter()
                    .filter(|m| m.role() == Role::System)
                    .cloned(),
            );
        }
        // A summary in effect replaces the turns it covers in the platform's copy too.
        if let Some(summaries) = &mut self.summaries {
            summaries.apply_to_incoming(&mut incoming);
        }
        self.node.agent.context().replace(incoming);
    }

    /// Answers one LLM request: `start`, chunks and tool logs, `end`. Returns `false` when an
    /// interrupt stopped it (the interrupt has then been processed too).
    pub(super) async fn answer(&mut self, request: &LlmRequest) -> bool {
        let received = Instant::now();
        // A summary that landed with this request is in effect for it.
        if self.summaries.is_some() {
            self.summary_landed().await;
        }
        self.prepare_context(request);
        let turn_id = self.begin_turn().await;
        let span = turn_span(&self.io.handle, &turn_id);
        let ending = self
            .relay_turn(&turn_id, received)
            .instrument(span.clone())
            .await;
        let outcome = self.end_turn(&turn_id, &ending).await;
        span.record("outcome", outcome.as_str());
        let context = self.node.agent.context();
        span.record("context_tokens", context.tokens());
        if let Some(summaries) = &mut self.summaries {
            summaries.after_turn(context);
        }
        if let Some(report) = &ending.report {
            if let Some(provider) = report.provider() {
                span.record("provider", provider);
            }
            crate::usage::record_on_span(&span, report);
        }
        match ending.interrupt {
            Some(event) => {
                self.interrupted(event).await;
                false
            }
            None => true,
        }
    }

    /// The conversation the model reads: the platform's, and the outcomes the caller has not
    /// heard yet.
    fn prepare_context(&mut self, request: &LlmRequest) {
        if let Some(messages) = &request.messages {
            self.sync_context(messages);
        }
        // Outcomes the caller has not heard (a reconnect after a dropped socket or a crash):
        // the model hears them before this turn. An assistant note, not a system one: the next
        // request's conversation replaces it, so it never outlives the outcomes it tells.
        if let Some(note) = self.io.handle.call().untold_note() {
            let context = self.node.agent.context();
            if context.last().and_then(Message::text) != Some(note.as_str()) {
                context.add(Message::assistant(note));
            }
        }
    }

    /// Opens the turn: its id, `agent.response.start`, the call's generation begun.
    async fn begin_turn(&mut self) -> String {
        let turn_id = uuid::Uuid::new_v4().simple().to_string();
        self.io.observer.turn_started();
        self.io
            .handle
            .emit(EventBody::ResponseStart {
                request_id: Some(turn_id.clone()),
            })
            .await;
        self.io.handle.call().begin_generation(&turn_id);
        turn_id
    }

    /// Streams the agent's turn to the platform until it ends, fails or is interrupted.
    /// Returning drops the turn, which cancels the model request and any running tools.
    async fn relay_turn(&mut self, turn_id: &str, received: Instant) -> TurnEnding {
        let handle = self.io.handle.clone();
        let mut relay = Relay::new(turn_id, received, self.io.observer.clone());
        let mut turn = self.node.agent.generate_response();
        let failure = loop {
            let next = AssertUnwindSafe(turn.next()).catch_unwind();
            let item = tokio::select! {
                biased;
                Some(event) = next_interrupt(&mut self.io.interrupt) => {
                    return relay.end(Some(event), None);
                }
                item = next => item,
                // What a tool says while the turn runs (its tools are running then): said
                // between sentences, else held for later. After the turn's own stream, so the
                // notices are polled only when the stream waits (as it does while a tool
                // runs), not on every chunk (BENCHMARKS.md, issue 36's row); a notice waits
                // until the stream next waits, or the turn's end and then the node's loop.
                Some(notice) = next_notice_in_turn(&mut self.notices) => {
                    if let Some(log) = relay.notice(notice, &mut self.notices)
                        && let Some(event) =
                            emit_unless_interrupted(&handle, &mut self.io.interrupt, log).await
                    {
                        return relay.end(Some(event), None);
                    }
                    if let Some(words) = relay.progress_due() {
                        // Spoken between sentences; a closed session ends the turn anyway.
                        let _ = handle.call().speak(words).await;
                    }
                    continue;
                }
            };
            let body = match item {
                Ok(Some(Ok(event))) => match relay.body(event) {
                    Some(body) => body,
                    None => continue,
                },
                Ok(Some(Err(error))) => break Some(turn_error(error)),
                Ok(None) => break None,
                Err(payload) => {
                    break Some(NodeError::panic(
                        crewline_core::panic_message(payload.as_ref()).to_owned(),
                    ));
                }
            };
            if let Some(event) =
                emit_unless_interrupted(&handle, &mut self.io.interrupt, body).await
            {
                return relay.end(Some(event), None);
            }
            // Progress held back for the end of a sentence is said once it ended.
            if let Some(words) = relay.progress_due() {
                let _ = handle.call().speak(words).await;
            }
        };
        relay.end(None, failure)
    }

    /// Closes the turn: the hand-off or the failure, the provider, `agent.response.end`, the
    /// call's turn boundary and the observer.
    async fn end_turn(&mut self, turn_id: &str, ending: &TurnEnding) -> TurnOutcome {
        let handle = &self.io.handle;
        let completed = ending.interrupt.is_none() && ending.failure.is_none();
        if let Some(handoff) = handle.call().finish_generation(completed) {
            handle.emit(handoff.into_body()).await;
        }
        if let Some(error) = &ending.failure {
            self.io.observer.node_error(handle.name(), Severity::Fatal);
            tracing::warn!(%error, "generation failed");
            handle
                .send(error_event(
                    handle.name(),
                    "generate_response",
                    error,
                    Severity::Fatal,
                ))
                .await;
        }
        // Which provider answered, when a fallback client says so (a crew on one model sends
        // nothing more than the reference); never after a barge-in, whose turn is over.
        if ending.interrupt.is_none()
            && let Some(provider) = ending.report.as_ref().and_then(TurnReport::provider)
        {
            handle.emit(provider_log(turn_id, provider)).await;
        }
        // What the turn cost: into the call's tally always (once per turn, never per chunk),
        // to the platform only when the crew asked; never after a barge-in, like the provider.
        if let Some(report) = &ending.report {
            let call = handle.call().add_usage(report);
            let context = self.node.agent.context();
            take_prompt_count(context, report);
            if self.node.log_usage && ending.interrupt.is_none() {
                let mut payload = crate::usage::usage_payload(turn_id, report, call);
                payload.insert("context_tokens".to_owned(), context.tokens().into());
                handle
                    .emit(EventBody::Log {
                        name: crate::usage::USAGE_LOG.to_owned(),
                        payload,
                    })
                    .await;
            }
        }
        handle.emit(EventBody::ResponseEnd).await;
        // The background calls the turn started go into the checkpoint with the turn.
        handle.call().record_background_calls();
        // The turn boundary: after its end is sent, never on the chunks' path.
        handle.call().turn_finished(completed);
        let outcome = match (&ending.interrupt, &ending.failure) {
            (Some(_), _) => TurnOutcome::Interrupted,
            (None, Some(_)) => TurnOutcome::Failed,
            (None, None) => TurnOutcome::Completed,
        };
        self.io
            .observer
            .turn_finished(outcome, ending.report.as_ref());
        outcome
    }
}

/// Takes the server's prompt count of the turn's last request: it carried every message but
/// the answer the turn ended with.
fn take_prompt_count(context: &mut crewline_core::Context, report: &TurnReport) {
    let Some(usage) = report.rounds.last().and_then(|round| round.usage) else {
        return;
    };
    if let Some(Message::Assistant { tool_calls, .. }) = context.last()
        && tool_calls.is_empty()
    {
        let carried = context.len() - 1;
        context.report_prompt_tokens(carried, usage.prompt_tokens as usize);
    }
}

/// How a turn ended: interrupted, failed, or done with its report.
struct TurnEnding {
    interrupt: Option<LineInterrupt>,
    failure: Option<NodeError>,
    report: Option<TurnReport>,
}

/// Turns a turn's events into the platform's events: chunks, tool logs.
pub(super) struct Relay<'t> {
    turn_id: &'t str,
    received: Instant,
    first_chunk: bool,
    observer: Arc<dyn Observer>,
    /// Each running call's arguments as its start log showed them, for its end log.
    tool_arguments: HashMap<String, Value>,
    report: Option<TurnReport>,
    /// Whether the text said so far ends a sentence (or nothing was said): progress may be
    /// spoken now.
    between_sentences: bool,
    /// The latest progress to say, held until the current sentence ends.
    to_say: Option<String>,
}

impl<'t> Relay<'t> {
    pub(super) fn new(turn_id: &'t str, received: Instant, observer: Arc<dyn Observer>) -> Self {
        Self {
            turn_id,
            received,
            first_chunk: true,
            observer,
            tool_arguments: HashMap::new(),
            report: None,
            between_sentences: true,
            to_say: None,
        }
    }

    /// What the platform gets for `event`, if anything.
    pub(super) fn body(&mut self, event: TurnEvent) -> Option<EventBody> {
        match event {
            TurnEvent::Text(text) => {
                if self.first_chunk {
                    self.first_chunk = false;
                    self.observer.first_chunk(self.received.elapsed());
                }
                self.between_sentences = ends_sentence(&text);
                Some(EventBody::ResponseChunk { text })
            }
            TurnEvent::ToolStarted { call, arguments } => {
                // The round's text is complete when its tools start.
                self.between_sentences = true;
                let log = ToolCallStart {
                    turn_id: self.turn_id,
                    tool_call_id: &call.id,
                    function_name: &call.name,
                    arguments: arguments.clone(),
                }
                .into_body();
                self.tool_arguments.insert(call.id, arguments);
                Some(log)
            }
            TurnEvent::ToolFinished(run) => {
                self.observer
                    .tool_finished(&run.result.name, run.latency, run.result.error_kind());
                let arguments = self
                    .tool_arguments
                    .remove(&run.result.tool_call_id)
                    .unwrap_or_else(|| Value::Object(Map::new()));
                Some(tool_finished(self.turn_id, run, arguments))
            }
            TurnEvent::Done(report) => {
                self.report = Some(report);
                None
            }
        }
    }

    /// Takes a tool's notice during the turn: the `agent.log` entry to send now, if any. A
    /// spoken progress is said at once between sentences, else when the sentence ends
    /// ([`progress_due`](Self::progress_due)); a background result waits for the end of the reply.
    fn notice(
        &mut self,
        notice: ToolNotice,
        notices: &mut Option<Box<Notices>>,
    ) -> Option<EventBody> {
        match notice {
            ToolNotice::Progress {
                tool_call_id,
                name,
                text,
                speak,
            } => {
                let log = progress_log(&tool_call_id, &name, &text, speak);
                if speak && !text.trim().is_empty() {
                    // The latest replaces an unsaid one: a caller needs the news, not a queue.
                    self.to_say = Some(text);
                }
                Some(log)
            }
            landed => {
                if let Some(notices) = notices {
                    notices.hold(landed);
                }
                None
            }
        }
    }

    /// Progress to say now: held, and the text said so far ends a sentence.
    fn progress_due(&mut self) -> Option<String> {
        if self.between_sentences {
            self.to_say.take()
        } else {
            None
        }
    }

    /// What the turn reported at its end, if it got there.
    pub(super) fn into_report(self) -> Option<TurnReport> {
        self.report
    }

    fn end(self, interrupt: Option<LineInterrupt>, failure: Option<NodeError>) -> TurnEnding {
        TurnEnding {
            interrupt,
            failure,
            report: self.report,
        }
    }
}

/// Whether `text` ends a sentence (trailing spaces aside).
fn ends_sentence(text: &str) -> bool {
    text.trim_end()
        .ends_with(['.', '!', '?', ':', ';', '…', '。'])
}

/// The root span of one turn's trace (`debug`: built only when a layer such as crewline-otel's
/// wants it): a turn is found by the platform's call id and its own request id, and follows
/// from the node's span, whose parent is the call's session.
fn turn_span(handle: &NodeHandle, turn_id: &str) -> tracing::Span {
    // Field values are only evaluated when the span is enabled: with tracing off, a turn
    // neither looks up nor cuts the call id.
    let span = tracing::debug_span!(
        parent: None,
        "crewline.turn",
        request_id = %turn_id,
        // The platform's id, bounded as the server's logs bound it: it goes into every span.
        call_id = call_id_of(handle).as_deref(),
        node = %handle.name(),
        outcome = tracing::field::Empty,
        // Which model provider answered (from a fallback client), at the turn's end.
        provider = tracing::field::Empty,
        // What the turn cost (see `crate::usage`), at its end: the model its tokens are
        // counted under, the tokens the server reported, the money with prices.
        model = tracing::field::Empty,
        prompt_tokens = tracing::field::Empty,
        completion_tokens = tracing::field::Empty,
        cached_tokens = tracing::field::Empty,
        reasoning_tokens = tracing::field::Empty,
        cost = tracing::field::Empty,
        // The context's size in tokens after the turn (see `Context::tokens`).
        context_tokens = tracing::field::Empty,
    );
    span.follows_from(tracing::Span::current());
    span
}

/// The platform's call id, cut to [`crewline_core::MAX_ID_BYTES`].
fn call_id_of(handle: &NodeHandle) -> Option<std::borrow::Cow<'_, str>> {
    let caller = handle.call().init().session_context.caller.as_ref()?;
    caller.call_id.as_deref().map(crewline_core::id_excerpt)
}

/// The `agent.log` entry (`llm_provider`) that names the provider which answered a turn.
fn provider_log(turn_id: &str, provider: &str) -> EventBody {
    let mut payload = Map::new();
    payload.insert("turn_id".to_owned(), Value::String(turn_id.to_owned()));
    payload.insert("provider".to_owned(), Value::String(provider.to_owned()));
    EventBody::Log {
        name: "llm_provider".to_owned(),
        payload,
    }
}

/// The most bytes of a failed turn's message (and traceback) that reach a log line or the
/// platform's `agent.error`: the model server writes the message, and any real one is short.
const MAX_TURN_ERROR_BYTES: usize = 2_048;

fn turn_error(error: TurnError) -> NodeError {
    match error {
        TurnError::Llm(error) => NodeError::from(error).bounded(MAX_TURN_ERROR_BYTES),
    }
}

/// The end (or error) log of a call; `arguments` as logged at its start, like the reference.
///
/// The result is still the tool's value (or the failure's kind and message): nothing is
/// parsed back from the model's text.
fn tool_finished(turn_id: &str, run: ToolRun, arguments: Value) -> EventBody {
    let latency_ms = u64::try_from(run.latency.as_millis()).unwrap_or(u64::MAX);
    let result = run.result;
    match result.outcome {
        Ok(response) => ToolCallEnd {
            turn_id,
            tool_call_id: &result.tool_call_id,
            function_name: &result.name,
            arguments,
            response,
            latency_ms,
        }
        .into_body(),
        Err(failure) => ToolCallError {
            turn_id,
            tool_call_id: &result.tool_call_id,
            function_name: &result.name,
            arguments,
            error: &failure.message,
            error_kind: failure.kind,
            latency_ms,
        }
        .into_body(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(text: &str) -> ToolNotice {
        ToolNotice::Progress {
            tool_call_id: "call_1".to_owned(),
            name: "search".to_owned(),
            text: text.to_owned(),
            speak: true,
        }
    }

    #[test]
    fn progress_waits_for_the_end_of_a_sentence_and_the_latest_replaces_an_unsaid_one() {
        let observer: Arc<dyn Observer> = Arc::new(crate::observer::NoopObserver);
        let mut relay = Relay::new("turn", Instant::now(), observer);
        let mut notices = None;
        // Nothing said yet: at once.
        assert!(
            relay
                .notice(progress("One moment."), &mut notices)
                .is_some()
        );
        assert_eq!(relay.progress_due().as_deref(), Some("One moment."));
        // Mid-sentence: held, and a newer update replaces it.
        relay.body(TurnEvent::Text("Let me".to_owned()));
        relay.notice(progress("Still looking..."), &mut notices);
        relay.notice(progress("Nearly there..."), &mut notices);
        assert_eq!(relay.progress_due(), None);
        relay.body(TurnEvent::Text(" check. ".to_owned()));
        assert_eq!(relay.progress_due().as_deref(), Some("Nearly there..."));
        assert_eq!(relay.progress_due(), None);
    }
}
