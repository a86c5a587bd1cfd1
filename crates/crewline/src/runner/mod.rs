//! The tasks that run nodes: the framework's protocol work around user agents.

mod answer;
mod notices;

use std::{collections::VecDeque, panic::AssertUnwindSafe};

use crewline_core::{Message, Role};
use crewline_protocol::{
    Event, EventBody, NodeFailure, Severity, TranscriptRole, TranscriptUpdate,
};
use futures::{FutureExt, future::BoxFuture};
use tokio::sync::mpsc;

use crate::{
    crew::{BackgroundNode, NodeError, NodeHandle, OutputNode},
    idle::{IdleDue, IdleStep, IdleWatch},
    inbox::{LineInterrupt, NodeIo},
    summary::CallSummaries,
};

use self::notices::{Notices, next_notice};

/// Waits for the next interrupt on an optional line (forever when there is none).
async fn next_interrupt(line: &mut Option<mpsc::Receiver<LineInterrupt>>) -> Option<LineInterrupt> {
    match line {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// Waits for what the caller's silence has due (forever when the node has no idle watch).
async fn idle_due(idle: &mut Option<Box<IdleWatch>>) -> IdleDue {
    match idle {
        Some(watch) => std::future::poll_fn(|cx| watch.poll_due(cx)).await,
        None => std::future::pending().await,
    }
}

/// Waits for the running summary's result (forever when none runs).
async fn summary_finished(summaries: &mut Option<Box<CallSummaries>>) {
    match summaries {
        Some(summaries) => summaries.finished().await,
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

/// Ends the call's tool notices when dropped: no background call outlives its output node.
struct EndNotices(crate::CallControl);

impl Drop for EndNotices {
    fn drop(&mut self) {
        self.0.tool_notices().end();
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
    /// The caller's silence, when the node has an idle policy for this call (boxed: most
    /// nodes have none, and their task stays small).
    idle: Option<Box<IdleWatch>>,
    /// What the call's tools say while the conversation goes on (boxed, like `idle`).
    notices: Option<Box<Notices>>,
    /// The call's summaries, when the node summarizes (boxed, like `idle`).
    summaries: Option<Box<CallSummaries>>,
}

/// Runs an output node until its inbox closes.
pub(crate) async fn run_output(mut node: OutputNode, io: NodeIo) {
    let conversation_type = io.handle.session_context().conversation_type;
    let idle = node
        .idle
        .take()
        .and_then(|policy| IdleWatch::new(policy, conversation_type))
        .map(Box::new);
    // The first output node of the call speaks its tools' progress and background results.
    let notices = io
        .handle
        .call()
        .take_tool_notices()
        .map(|inbox| Box::new(Notices::new(inbox)));
    // The node's end is the call's: its background calls are cancelled with it.
    let _ended = notices
        .is_some()
        .then(|| EndNotices(io.handle.call().clone()));
    // Dropped with the runner at the call's end: a summary still being written is cancelled.
    let summaries = node
        .summarizer
        .take()
        .map(|summarizer| Box::new(CallSummaries::new(summarizer)));
    let mut runner = OutputRunner {
        node,
        io,
        kept: VecDeque::new(),
        taken: 0,
        idle,
        notices,
        summaries,
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
                // After the caller's events (the select is biased), before the silence: what a
                // tool says is said between turns, never while the caller speaks.
                Some(notice) = next_notice(&mut runner.notices) => {
                    Box::pin(runner.notice(notice)).await;
                    continue;
                }
                // Between turns only: a summary that landed replaces the turns it covers.
                () = summary_finished(&mut runner.summaries) => {
                    Box::pin(runner.summary_landed()).await;
                    continue;
                }
                // Last (the select is biased): a caller's event that came with the deadline is
                // taken first, so a nudge is never said after the caller started speaking.
                due = idle_due(&mut runner.idle) => {
                    Box::pin(runner.idle_due(due)).await;
                    continue;
                }
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
        if let Some(idle) = &mut self.idle {
            idle.observe(&event.body);
        }
        if let Some(notices) = &mut self.notices {
            notices.observe(&event.body);
        }
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
                if let Some(idle) = &mut self.idle {
                    idle.reply_ended();
                }
                if let Some(notices) = &mut self.notices {
                    notices.reply_ended();
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
        if let Some(idle) = &mut self.idle {
            idle.observe(&interrupt.event.body);
        }
        if let Some(notices) = &mut self.notices {
            notices.observe(&interrupt.event.body);
        }
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

    /// The caller's silence is over, or a generated step's words are ready: says the step.
    /// The node's loop polls the interrupt line and the inbox before the silence, so a
    /// caller's event that reached the node is always taken first, and decides again.
    async fn idle_due(&mut self, due: IdleDue) {
        let Some(idle) = self.idle.as_mut() else {
            return;
        };
        if self.io.handle.call().handoff_requested() {
            // A tool ended or transferred the call: nobody is left to nudge.
            self.idle = None;
            return;
        }
        let (step, words) = match due {
            IdleDue::Silence => {
                let conversation = self.node.agent.context().messages();
                match idle.silence_over(conversation) {
                    (step, Some(words)) => (step, words),
                    // Being worded: said when the words are ready.
                    (_, None) => return,
                }
            }
            IdleDue::Worded(step, worded) => (step, idle.words(step, worded)),
        };
        tracing::info!(?step, "the caller is silent");
        let log = idle.log(step);
        let handle = &self.io.handle;
        handle.emit(log).await;
        let said = handle.call().speak(words).await;
        match step {
            IdleStep::Nudge(_) if said.is_ok() => idle.nudged(),
            IdleStep::Nudge(_) => self.idle = None,
            IdleStep::Goodbye => {
                if let Err(error) = handle.call().end_call().await {
                    tracing::debug!(%error, "the idle goodbye could not end the call");
                }
                self.idle = None;
            }
        }
    }

    /// Applies a summary that landed to the context (between turns), and logs it when the
    /// node logs its usage.
    async fn summary_landed(&mut self) {
        let Some(summaries) = self.summaries.as_mut() else {
            return;
        };
        let landed = summaries.land(self.node.agent.context());
        // The request was paid for whether or not its summary is used.
        let spent = summaries.take_spent();
        let call = spent.map(|spent| self.io.handle.call().add_summary_usage(spent));
        let Some(note) = landed else {
            return;
        };
        if self.node.log_usage {
            self.io.handle.emit(note.log(spent, call)).await;
        }
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
}
