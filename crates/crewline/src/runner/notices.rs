//! What the call's tools say while the conversation goes on: progress (spoken between the
//! agent's sentences, never over the caller, or only logged) and the results of background
//! calls, which the model is asked to tell the caller when they land.

use std::{collections::VecDeque, time::Instant};

use crewline_core::{Message, ToolResult};
use crewline_protocol::EventBody;
use crewline_tools::ToolNotice;
use futures::StreamExt;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::{OutputRunner, answer::Relay, emit_unless_interrupted, next_interrupt};
use crate::TurnEvent;

/// The most notices taken off the queue while a reply streams, to handle after it.
const MAX_HELD: usize = 8;
/// The most bytes of a background result's report that are said.
pub(crate) const MAX_REPORT_BYTES: usize = 1_000;

/// What the model is told when a background call lands outside a turn.
const REPORT_INSTRUCTION: &str = "A task you started in the background has finished; its \
     result is above. Tell the caller the result now, in one or two short sentences, as \
     part of the conversation.";

/// The call's tool notices as the output node reads them.
pub(crate) struct Notices {
    inbox: mpsc::Receiver<ToolNotice>,
    /// The caller is speaking (started without stopped, or a barge-in): nothing is said.
    speaking: bool,
    /// Notices taken while a reply streamed, handled after it.
    held: VecDeque<ToolNotice>,
}

impl Notices {
    pub(crate) fn new(inbox: mpsc::Receiver<ToolNotice>) -> Self {
        Self {
            inbox,
            speaking: false,
            held: VecDeque::new(),
        }
    }

    /// Takes in one of the call's events: whether the caller is speaking.
    pub(crate) fn observe(&mut self, body: &EventBody) {
        match body {
            EventBody::UserStartedSpeaking | EventBody::Interrupt => self.speaking = true,
            EventBody::UserStoppedSpeaking | EventBody::LlmRequest(_) => self.speaking = false,
            _ => {}
        }
    }

    /// The next notice to handle between turns: a held one, else the queue's (never while the
    /// caller speaks: what comes then waits in the bounded queue).
    pub(crate) async fn next(&mut self) -> Option<ToolNotice> {
        if self.speaking {
            return std::future::pending().await;
        }
        if let Some(held) = self.held.pop_front() {
            return Some(held);
        }
        self.inbox.recv().await
    }

    /// The next notice while a reply streams (until [`MAX_HELD`] are held).
    pub(crate) async fn next_in_turn(&mut self) -> Option<ToolNotice> {
        if self.held.len() >= MAX_HELD {
            return std::future::pending().await;
        }
        self.inbox.recv().await
    }

    /// Keeps `notice` for after the reply.
    pub(crate) fn hold(&mut self, notice: ToolNotice) {
        self.held.push_back(notice);
    }

    /// Drops held progress (said after its reply it would be stale), keeping results.
    pub(crate) fn reply_ended(&mut self) {
        self.held
            .retain(|notice| matches!(notice, ToolNotice::Landed(_)));
    }
}

/// Waits for the next notice between turns (forever without notices).
pub(crate) async fn next_notice(notices: &mut Option<Box<Notices>>) -> Option<ToolNotice> {
    match notices {
        Some(notices) => notices.next().await,
        None => std::future::pending().await,
    }
}

/// Waits for the next notice while a reply streams (forever without notices).
pub(crate) async fn next_notice_in_turn(notices: &mut Option<Box<Notices>>) -> Option<ToolNotice> {
    match notices {
        Some(notices) => notices.next_in_turn().await,
        None => std::future::pending().await,
    }
}

/// The `agent.log` entry (`tool_progress`) of a progress update.
pub(crate) fn progress_log(tool_call_id: &str, name: &str, text: &str, spoken: bool) -> EventBody {
    let mut payload = Map::new();
    payload.insert("tool_call_id".to_owned(), Value::from(tool_call_id));
    payload.insert("function_name".to_owned(), Value::from(name));
    payload.insert("text".to_owned(), Value::from(text));
    payload.insert("spoken".to_owned(), Value::from(spoken));
    EventBody::Log {
        name: "tool_progress".to_owned(),
        payload,
    }
}

/// The `agent.log` entry (`tool_background`) of a background call that landed.
fn landed_log(result: &ToolResult) -> EventBody {
    let mut payload = Map::new();
    payload.insert(
        "tool_call_id".to_owned(),
        Value::from(result.tool_call_id.as_str()),
    );
    payload.insert(
        "function_name".to_owned(),
        Value::from(result.name.as_str()),
    );
    match &result.outcome {
        Ok(response) => {
            payload.insert("response".to_owned(), response.clone());
        }
        Err(failure) => {
            payload.insert("error".to_owned(), Value::from(failure.message.as_str()));
            payload.insert("error_kind".to_owned(), Value::from(failure.kind.as_str()));
        }
    }
    EventBody::Log {
        name: "tool_background".to_owned(),
        payload,
    }
}

/// What the model reads of a background call's result.
fn outcome_note(result: &ToolResult) -> String {
    let content = result.content();
    let content = crewline_core::prefix(&content, crate::session_store::MAX_OUTCOME_BYTES / 2);
    format!(
        "The background task {} (call {}) finished: {content}",
        result.name, result.tool_call_id
    )
}

impl OutputRunner {
    /// Handles a notice between turns (the caller is not speaking, no reply streams).
    pub(super) async fn notice(&mut self, notice: ToolNotice) {
        match notice {
            ToolNotice::Progress {
                tool_call_id,
                name,
                text,
                speak,
            } => self.progress(&tool_call_id, &name, text, speak).await,
            ToolNotice::Landed(result) => self.landed(result).await,
            // A notice of a later version of the tools: nothing to say.
            _ => {}
        }
    }

    /// Logs a progress update, and says it when it is for the caller.
    pub(super) async fn progress(
        &mut self,
        tool_call_id: &str,
        name: &str,
        text: String,
        speak: bool,
    ) {
        let handle = &self.io.handle;
        if handle.call().handoff_requested() {
            return;
        }
        handle
            .emit(progress_log(tool_call_id, name, &text, speak))
            .await;
        if speak && !text.trim().is_empty() && handle.call().speak(text).await.is_ok() {
            // The caller heard the agent: the silence starts again.
            if let Some(idle) = &mut self.idle {
                idle.reply_ended();
            }
        }
    }

    /// A background call landed: its result is kept as an outcome the caller has not heard
    /// (in the checkpoint: a reconnect still tells it), and the model is asked to tell it now.
    async fn landed(&mut self, result: ToolResult) {
        let handle = self.io.handle.clone();
        handle.emit(landed_log(&result)).await;
        if handle.call().handoff_requested() {
            return;
        }
        // Written with the outcome: a resume asked for the call again says that it ran.
        handle.call().record_background_calls();
        if let Err(error) = handle.call().push_outcome(outcome_note(&result)) {
            tracing::warn!(%error, "a background result could not be kept as untold");
        }
        let Some(note) = handle.call().untold_note() else {
            return;
        };
        let context = self.node.agent.context();
        context.add(Message::system(format!("{note}\n\n{REPORT_INSTRUCTION}")));
        let mut words = String::new();
        // A turn of the crew's own: the tools it calls are logged as any turn's are, under
        // its own id, and what it cost goes into the call's tally.
        let turn_id = uuid::Uuid::new_v4().simple().to_string();
        let mut relay = Relay::new(&turn_id, Instant::now(), self.io.observer.clone());
        let mut turn = self.node.agent.generate_response();
        loop {
            let next = tokio::select! {
                biased;
                Some(interrupt) = next_interrupt(&mut self.io.interrupt) => {
                    // The caller spoke: the result stays untold, for the next turn.
                    drop(turn);
                    Box::pin(self.interrupted(interrupt)).await;
                    return;
                }
                next = turn.next() => next,
            };
            match next {
                Some(Ok(TurnEvent::Text(text))) => {
                    if words.len() < MAX_REPORT_BYTES {
                        words.push_str(&text);
                    }
                }
                Some(Ok(event)) => {
                    if let Some(log) = relay.body(event)
                        && let Some(interrupt) =
                            emit_unless_interrupted(&handle, &mut self.io.interrupt, log).await
                    {
                        drop(turn);
                        Box::pin(self.interrupted(interrupt)).await;
                        return;
                    }
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, "the model could not word a background result; it is told in the next turn");
                    return;
                }
                None => break,
            }
        }
        drop(turn);
        if let Some(report) = relay.into_report() {
            let call = handle.call().add_usage(&report);
            if self.node.log_usage {
                let payload = crate::usage::usage_payload(&turn_id, &report, call);
                handle
                    .emit(EventBody::Log {
                        name: crate::usage::USAGE_LOG.to_owned(),
                        payload,
                    })
                    .await;
            }
        }
        let words = crewline_core::prefix(words.trim(), MAX_REPORT_BYTES).to_owned();
        if words.is_empty() {
            return;
        }
        if handle.call().speak(words).await.is_ok() {
            handle.call().outcomes_told();
            if let Some(idle) = &mut self.idle {
                idle.reply_ended();
            }
        }
    }
}
