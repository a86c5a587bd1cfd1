//! The tasks that run nodes: the framework's protocol work around user agents.

use std::{collections::VecDeque, panic::AssertUnwindSafe, sync::Arc, time::Instant};

use crewline_core::{Message, Role};
use crewline_protocol::{
    Event, EventBody, LlmRequest, Messages, NodeFailure, Severity, ToolCallEnd, ToolCallError,
    ToolCallStart, TranscriptRole, TranscriptUpdate,
};
use crewline_tools::ToolRun;
use futures::{FutureExt, StreamExt, future::BoxFuture};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::{
    BackgroundNode, NodeError, NodeHandle, Observer, OutputNode, TurnError, TurnEvent, TurnOutcome,
    TurnReport, session::InboxReceiver,
};

/// A node's connections to the rest of the session.
pub(crate) struct NodeIo {
    pub(crate) handle: NodeHandle,
    pub(crate) inbox: InboxReceiver,
    /// The interrupt line, for interruptible nodes.
    pub(crate) interrupt: Option<mpsc::Receiver<LineInterrupt>>,
    pub(crate) observer: Arc<dyn Observer>,
}

/// An interrupt on a node's interrupt line.
pub(crate) struct LineInterrupt {
    /// The platform's interrupt event.
    pub(crate) event: Box<Event>,
    /// How many inbox events came before it (`u64::MAX`: unknown, all of them): the line
    /// overtakes the inbox, so a request sent after the interrupt may already be queued and
    /// must not be taken for a stale one.
    pub(crate) before: u64,
}

/// Waits for the next interrupt on an optional line (forever when there is none).
async fn next_interrupt(line: &mut Option<mpsc::Receiver<LineInterrupt>>) -> Option<LineInterrupt> {
    match line {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// Emits `body` unless an interrupt arrives first, which is returned (`body` may then have
/// reached some outputs or none).
///
/// A platform that stops reading fills the outbound queue and blocks the emit; the caller's
/// barge-in must still stop the generation (the model request, the tools) at once, not after
/// the blocked write gives up.
async fn emit_unless_interrupted(
    handle: &NodeHandle,
    line: &mut Option<mpsc::Receiver<LineInterrupt>>,
    body: EventBody,
) -> Option<LineInterrupt> {
    // The emit first: while the queue has room nothing changes, and no log is lost to an
    // interrupt that the next step of the turn would see anyway.
    let interrupt = tokio::select! {
        biased;
        () = handle.emit(body) => None,
        Some(interrupt) = next_interrupt(line) => Some(interrupt),
    };
    // A send to a closed output (the platform's socket is gone) returns at once without
    // using the task's budget: with a model stream that is always ready, the turn would spin
    // without yielding, and the connection could never run to shut the session down.
    tokio::task::consume_budget().await;
    interrupt
}

/// The `agent.error` for a failure of `method` in node code.
fn error_event(node: &str, method: &str, error: &NodeError, severity: Severity) -> Event {
    let failure = NodeFailure {
        node,
        method,
        class: error.class(),
        message: error.message(),
        traceback: error.traceback(),
    };
    Event::now(EventBody::AgentError(failure.into_error(severity)))
}

/// Runs a future of node code, turning a panic into a [`NodeError`].
async fn guarded<F>(future: F) -> Result<(), NodeError>
where
    F: std::future::Future<Output = Result<(), NodeError>>,
{
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(result) => result,
        Err(payload) => Err(NodeError::panic(
            crewline_core::panic_message(payload.as_ref()).to_owned(),
        )),
    }
}

/// Reports a failure of node code to the platform and the observer.
///
/// Not an `async fn`: node code failing is rare, and the sending's state is boxed so that it
/// does not stay in every node task.
fn report<'a>(
    io: &'a NodeIo,
    method: &str,
    error: &NodeError,
    severity: Severity,
) -> BoxFuture<'a, ()> {
    tracing::warn!(node = io.handle.name(), method, %error, "node code failed");
    io.observer.node_error(io.handle.name(), severity);
    Box::pin(
        io.handle
            .send(error_event(io.handle.name(), method, error, severity)),
    )
}

/// Runs a background node until its inbox closes.
pub(crate) async fn run_background(mut node: BackgroundNode, mut io: NodeIo) {
    if let Err(error) = guarded(node.agent.on_start(&io.handle)).await {
        report(&io, "on_start", &error, Severity::Warning).await;
    }
    while let Some(event) = io.inbox.recv().await {
        if let Err(error) = guarded(node.agent.on_event(&event, &io.handle)).await {
            report(&io, "process_event", &error, Severity::Warning).await;
        }
        if node.forward {
            io.handle.send_boxed(event).await;
        }
    }
}

/// An output node at work: its agent, and events kept back from its inbox by an interrupt.
struct OutputRunner {
    node: OutputNode,
    io: NodeIo,
    /// Events that were queued when an interrupt purged stale work, to process first.
    kept: VecDeque<Box<Event>>,
    /// How many events this node has taken from its inbox (see [`LineInterrupt::before`]).
    taken: u64,
}

/// Runs an output node until its inbox closes.
pub(crate) async fn run_output(node: OutputNode, io: NodeIo) {
    let mut runner = OutputRunner {
        node,
        io,
        kept: VecDeque::new(),
        taken: 0,
    };
    if let Err(error) = guarded(runner.node.agent.on_start(&runner.io.handle)).await {
        report(&runner.io, "on_start", &error, Severity::Fatal).await;
    }
    loop {
        let event = if let Some(event) = runner.kept.pop_front() {
            event
        } else {
            tokio::select! {
                biased;
                Some(interrupt) = next_interrupt(&mut runner.io.interrupt) => {
                    // A barge-in is rare next to the events: its state goes on the heap.
                    Box::pin(runner.interrupted(interrupt)).await;
                    continue;
                }
                event = runner.io.inbox.recv() => match event {
                    Some(event) => {
                        runner.taken += 1;
                        event
                    }
                    None => break,
                },
            }
        };
        runner.process(event).await;
    }
}

impl OutputRunner {
    fn interruptible(&self) -> bool {
        self.io.interrupt.is_some()
    }

    /// Handles one event in order: framework routing, the user's hook, then the echo.
    async fn process(&mut self, event: Box<Event>) {
        match &event.body {
            // Interruptible nodes got this on their interrupt line already.
            EventBody::Interrupt if self.interruptible() => return,
            // `event` is this task's own value, so borrowing its request while answering needs
            // no copy of the (possibly long) conversation.
            // The answer's state (the turn's stream, its tool runs) lives on the heap for the
            // turn only: inline, it would make every call's idle node task 2.3 KiB larger.
            EventBody::LlmRequest(request) => {
                if self.io.handle.call().is_handed_off() {
                    tracing::debug!("call handed off; LLM request not answered");
                } else if !Box::pin(self.answer(request)).await {
                    // The reference never echoes a request whose answer was interrupted.
                    return;
                }
            }
            EventBody::TranscriptUpdate(update) => self.add_transcript(update),
            _ => {}
        }
        self.after_routing(event).await;
    }

    /// The user's hook, then the echo (when on).
    async fn after_routing(&mut self, event: Box<Event>) {
        let hook = self.node.agent.on_event(&event, &self.io.handle);
        if let Err(error) = guarded(hook).await {
            report(&self.io, "on_event", &error, Severity::Fatal).await;
        }
        if self.node.echo {
            self.io.handle.send_boxed(event).await;
        }
    }

    /// An interrupt arrived on the interrupt line while no generation was running: drop the
    /// stale generation work queued before it (never a transcript), then process the
    /// interrupt. Work queued after it is the caller's next turn and stays.
    async fn interrupted(&mut self, interrupt: LineInterrupt) {
        while self.taken < interrupt.before {
            let Some(event) = self.io.inbox.try_recv() else {
                break;
            };
            self.taken += 1;
            match event.body {
                EventBody::LlmRequest(_) => {
                    tracing::debug!("stale LLM request dropped by an interrupt");
                }
                EventBody::Interrupt => {}
                _ => self.kept.push_back(event),
            }
        }
        self.after_routing(interrupt.event).await;
    }

    fn add_transcript(&mut self, update: &TranscriptUpdate) {
        let context = self.node.agent.context();
        let message = match update.role {
            TranscriptRole::User => Message::user(update.content.clone()),
            TranscriptRole::Assistant => {
                // The tool loop already recorded what the agent said; the platform's copy of
                // the same words would be a duplicate.
                if context.last().is_some_and(|last| {
                    last.role() == Role::Assistant && last.text() == Some(update.content.as_str())
                }) {
                    return;
                }
                Message::assistant(update.content.clone())
            }
        };
        context.add(message);
    }

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
        let incoming: Vec<Message> = parsed
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
        context.replace(incoming);
    }

    /// Answers one LLM request: `start`, chunks and tool logs, `end`. Returns `false` when an
    /// interrupt stopped it (the interrupt has then been processed too).
    async fn answer(&mut self, request: &LlmRequest) -> bool {
        let received = Instant::now();
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
        let turn_id = uuid::Uuid::new_v4().simple().to_string();
        let handle = self.io.handle.clone();
        let observer = self.io.observer.clone();
        observer.turn_started();
        handle
            .emit(EventBody::ResponseStart {
                request_id: Some(turn_id.clone()),
            })
            .await;
        handle.call().begin_generation(&turn_id);

        let mut interrupt = None;
        let mut failure: Option<NodeError> = None;
        let mut report: Option<TurnReport> = None;
        let mut first_chunk = true;
        let mut tool_arguments = std::collections::HashMap::new();
        let turn_span = turn_span(&handle, &turn_id);
        async {
            let mut turn = self.node.agent.generate_response();
            loop {
                let next = AssertUnwindSafe(turn.next()).catch_unwind();
                let item = tokio::select! {
                    biased;
                    Some(event) = next_interrupt(&mut self.io.interrupt) => {
                        interrupt = Some(event);
                        break;
                    }
                    item = next => item,
                };
                match item {
                    Ok(Some(Ok(TurnEvent::Text(text)))) => {
                        if first_chunk {
                            first_chunk = false;
                            observer.first_chunk(received.elapsed());
                        }
                        let chunk = EventBody::ResponseChunk { text };
                        if let Some(event) =
                            emit_unless_interrupted(&handle, &mut self.io.interrupt, chunk).await
                        {
                            interrupt = Some(event);
                            break;
                        }
                    }
                    Ok(Some(Ok(TurnEvent::ToolStarted { call, arguments }))) => {
                        let log = ToolCallStart {
                            turn_id: &turn_id,
                            tool_call_id: &call.id,
                            function_name: &call.name,
                            arguments: arguments.clone(),
                        }
                        .into_body();
                        tool_arguments.insert(call.id, arguments);
                        if let Some(event) =
                            emit_unless_interrupted(&handle, &mut self.io.interrupt, log).await
                        {
                            interrupt = Some(event);
                            break;
                        }
                    }
                    Ok(Some(Ok(TurnEvent::ToolFinished(run)))) => {
                        observer.tool_finished(
                            &run.result.name,
                            run.latency,
                            run.result.error_kind(),
                        );
                        let arguments = tool_arguments
                            .remove(&run.result.tool_call_id)
                            .unwrap_or_else(|| Value::Object(Map::new()));
                        let log = tool_finished(&turn_id, run, arguments);
                        if let Some(event) =
                            emit_unless_interrupted(&handle, &mut self.io.interrupt, log).await
                        {
                            interrupt = Some(event);
                            break;
                        }
                    }
                    Ok(Some(Ok(TurnEvent::Done(done)))) => report = Some(done),
                    Ok(Some(Err(error))) => {
                        failure = Some(turn_error(error));
                        break;
                    }
                    Ok(None) => break,
                    Err(payload) => {
                        failure = Some(NodeError::panic(
                            crewline_core::panic_message(payload.as_ref()).to_owned(),
                        ));
                        break;
                    }
                }
            }
            // Dropping the turn here cancels the model request and any running tools.
        }
        .instrument(turn_span.clone())
        .await;

        let completed = interrupt.is_none() && failure.is_none();
        if let Some(handoff) = handle.call().finish_generation(completed) {
            handle.emit(handoff.into_body()).await;
        }
        if let Some(error) = &failure {
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
        if interrupt.is_none()
            && let Some(provider) = report.as_ref().and_then(TurnReport::provider)
        {
            handle.emit(provider_log(&turn_id, provider)).await;
        }
        handle.emit(EventBody::ResponseEnd).await;
        // The turn boundary: after its end is sent, never on the chunks' path.
        handle.call().turn_finished(completed);
        let outcome = match (&interrupt, &failure) {
            (Some(_), _) => TurnOutcome::Interrupted,
            (None, Some(_)) => TurnOutcome::Failed,
            (None, None) => TurnOutcome::Completed,
        };
        observer.turn_finished(outcome, report.as_ref());
        turn_span.record("outcome", outcome.as_str());
        if let Some(provider) = report.as_ref().and_then(TurnReport::provider) {
            turn_span.record("provider", provider);
        }
        match interrupt {
            Some(event) => {
                self.interrupted(event).await;
                false
            }
            None => true,
        }
    }
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
