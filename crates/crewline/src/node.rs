//! Nodes: the agents of a crew, and the handle they act through.

use std::{error::Error as StdError, fmt, sync::Arc};

use async_trait::async_trait;
use crewline_core::Context;
use crewline_protocol::{Event, EventBody, SessionContext};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::{CallControl, idle::IdlePolicy, summary::Summarizer, turn::TurnStream};

/// The agent behind an output node: it holds the conversation and answers LLM requests.
///
/// The framework does the protocol work around it: `start` / `chunk` / `end` for each request,
/// context sync from the platform's messages and transcripts, barge-in, tool logs, errors.
#[async_trait]
pub trait OutputAgent: Send + 'static {
    /// The conversation, kept in sync with the platform by the framework.
    fn context(&mut self) -> &mut Context;

    /// Streams one answer; usually `self.tool_loop.run(&mut self.context)`.
    fn generate_response(&mut self) -> TurnStream<'_>;

    /// Runs once when the node starts (after `agent.ready`): a greeting goes here.
    async fn on_start(&mut self, _node: &NodeHandle) -> Result<(), NodeError> {
        Ok(())
    }

    /// Runs for every event, after the framework's own routing.
    async fn on_event(&mut self, _event: &Event, _node: &NodeHandle) -> Result<(), NodeError> {
        Ok(())
    }
}

/// The agent behind a background node: it observes the call without speaking.
#[async_trait]
pub trait BackgroundAgent: Send + 'static {
    /// Runs once when the node starts.
    async fn on_start(&mut self, _node: &NodeHandle) -> Result<(), NodeError> {
        Ok(())
    }

    /// Runs for every event that reaches the node.
    async fn on_event(&mut self, event: &Event, node: &NodeHandle) -> Result<(), NodeError>;
}

/// An output node: a named [`OutputAgent`] with its settings.
pub struct OutputNode {
    pub(crate) name: String,
    pub(crate) agent: Box<dyn OutputAgent>,
    pub(crate) interruptible: bool,
    pub(crate) echo: bool,
    /// What the node does when the caller goes silent (none: nothing).
    pub(crate) idle: Option<Arc<IdlePolicy>>,
    /// Whether each answered turn's usage goes to the platform as an `agent.log` entry.
    pub(crate) log_usage: bool,
    /// How the node summarizes a long call's oldest turns (none: it does not).
    pub(crate) summarizer: Option<Arc<Summarizer>>,
}

impl OutputNode {
    /// An interruptible output node that echoes the events it processes, as the reference does.
    pub fn new(name: impl Into<String>, agent: impl OutputAgent) -> Self {
        Self {
            name: name.into(),
            agent: Box::new(agent),
            interruptible: true,
            echo: true,
            idle: None,
            log_usage: false,
            summarizer: None,
        }
    }

    /// Summarizes the call's oldest turns in the background when its context passes a share
    /// of its token budget (see [`crate::summary`]); off by default.
    pub fn summarize(self, summarizer: Summarizer) -> Self {
        self.summarize_shared(Arc::new(summarizer))
    }

    /// [`summarize`](Self::summarize) with a summarizer shared by every call (an agent's).
    pub(crate) fn summarize_shared(mut self, summarizer: Arc<Summarizer>) -> Self {
        self.summarizer = Some(summarizer);
        self
    }

    /// Sends each answered turn's token usage and cost to the platform as an `agent.log`
    /// entry (see [`crate::usage`]); off by default, so a crew's wire stays the reference's.
    pub fn log_usage(mut self, log: bool) -> Self {
        self.log_usage = log;
        self
    }

    /// Whether the caller may interrupt this node (default `true`).
    pub fn interruptible(mut self, interruptible: bool) -> Self {
        self.interruptible = interruptible;
        self
    }

    /// Nudges a silent caller, then says goodbye and ends the call, as `policy` says (see
    /// [`crate::idle`]); off by default.
    pub fn idle(self, policy: IdlePolicy) -> Self {
        self.idle_shared(Arc::new(policy))
    }

    /// [`idle`](Self::idle) with a policy shared by every call (an agent's).
    pub(crate) fn idle_shared(mut self, policy: Arc<IdlePolicy>) -> Self {
        self.idle = Some(policy);
        self
    }

    /// Whether the events this node processes are forwarded on (default `true`, like the
    /// reference, so the platform receives the same stream).
    pub fn echo_events(mut self, echo: bool) -> Self {
        self.echo = echo;
        self
    }
}

/// A background node: a named [`BackgroundAgent`].
pub struct BackgroundNode {
    pub(crate) name: String,
    pub(crate) agent: Box<dyn BackgroundAgent>,
    pub(crate) forward: bool,
}

impl BackgroundNode {
    /// A background node that keeps the events it observes to itself, as in the reference.
    pub fn new(name: impl Into<String>, agent: impl BackgroundAgent) -> Self {
        Self {
            name: name.into(),
            agent: Box::new(agent),
            forward: false,
        }
    }

    /// Whether the events it observes are forwarded to its children (default `false`).
    pub fn forward_events(mut self, forward: bool) -> Self {
        self.forward = forward;
        self
    }
}

/// Either kind of node, as added to a [`Crew`](crate::Crew).
pub enum NodeSpec {
    /// An output node.
    Output(OutputNode),
    /// A background node.
    Background(BackgroundNode),
}

impl NodeSpec {
    /// The node's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Output(node) => &node.name,
            Self::Background(node) => &node.name,
        }
    }
}

impl From<OutputNode> for NodeSpec {
    fn from(node: OutputNode) -> Self {
        Self::Output(node)
    }
}

impl From<BackgroundNode> for NodeSpec {
    fn from(node: BackgroundNode) -> Self {
        Self::Background(node)
    }
}

/// What a node's code acts through: sending events on, logging to the call's timeline, and
/// the call's controls.
#[derive(Clone)]
pub struct NodeHandle {
    pub(crate) name: std::sync::Arc<str>,
    pub(crate) outputs: std::sync::Arc<[mpsc::Sender<Box<Event>>]>,
    pub(crate) call: CallControl,
}

impl NodeHandle {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The call's controls (speak, end, transfer).
    pub fn call(&self) -> &CallControl {
        &self.call
    }

    /// The call's context from the handshake.
    pub fn session_context(&self) -> &SessionContext {
        self.call.session_context()
    }

    /// Sends an event to this node's children (or to the platform from a leaf).
    // Boxed before the future is made: held inline, the event would make every future that
    // awaits a send (and the node tasks around them) several hundred bytes larger.
    pub fn send(&self, event: Event) -> impl Future<Output = ()> + Send + '_ {
        self.send_boxed(Box::new(event))
    }

    /// Sends an event that is already boxed (as the channels carry them) without moving it.
    pub(crate) async fn send_boxed(&self, event: Box<Event>) {
        if let Some((last, rest)) = self.outputs.split_last() {
            for output in rest {
                // A closed output means that node stopped: the session is ending.
                let _ = output.send(event.clone()).await;
            }
            let _ = last.send(event).await;
        }
    }

    /// Sends a body stamped now.
    pub fn emit(&self, body: EventBody) -> impl Future<Output = ()> + Send + '_ {
        self.send(Event::now(body))
    }

    /// Adds an `agent.log` entry to the call's event timeline.
    pub fn log(
        &self,
        name: impl Into<String>,
        payload: Map<String, Value>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.emit(EventBody::Log {
            name: name.into(),
            payload,
        })
    }
}

impl fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeHandle")
            .field("name", &self.name)
            .finish()
    }
}

/// An error raised by node code; it reaches the platform as `agent.error`.
#[derive(Debug, Clone)]
pub struct NodeError {
    class: String,
    message: String,
    traceback: String,
}

impl NodeError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            class: "NodeError".to_owned(),
            message: message.into(),
            traceback: String::new(),
        }
    }

    /// An error from a panic in node code.
    pub(crate) fn panic(message: String) -> Self {
        Self {
            class: "Panic".to_owned(),
            traceback: format!("panicked: {message}"),
            message,
        }
    }

    /// This error with its message and traceback cut to `max_bytes` each (on a character
    /// boundary, marked `…`): what a peer wrote into an error (a model server's error body)
    /// must not become a megabyte log line or `agent.error`.
    pub(crate) fn bounded(mut self, max_bytes: usize) -> Self {
        fn cut(text: &mut String, max: usize) {
            if text.len() > max {
                let end = crewline_core::prefix(text, max).len();
                text.truncate(end);
                text.push('…');
            }
        }
        cut(&mut self.message, max_bytes);
        cut(&mut self.traceback, max_bytes);
        self
    }

    /// The error's class (the Rust type's name), as `error_class` in `agent.error`.
    pub fn class(&self) -> &str {
        &self.class
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The chain of causes, one per line, as `traceback` in `agent.error`.
    pub fn traceback(&self) -> &str {
        &self.traceback
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class, self.message)
    }
}

// Like `ToolError`, NodeError is not itself `std::error::Error`, so that `?` works on any error.
impl<E: StdError + Send + Sync + 'static> From<E> for NodeError {
    fn from(error: E) -> Self {
        let full = std::any::type_name::<E>();
        let class = full.rsplit("::").next().unwrap_or(full).to_owned();
        let mut traceback = format!("{class}: {error}");
        let mut layer: &(dyn StdError + 'static) = &error;
        while let Some(cause) = layer.source() {
            // An `ErrorDetail`'s words already say its causes (scrubbed of secrets, bounded):
            // the raw causes below it are for code, not for the platform.
            if layer.is::<crewline_core::ErrorDetail>() {
                break;
            }
            traceback.push_str(&format!("\ncaused by: {cause}"));
            layer = cause;
        }
        Self {
            class,
            // Each layer once: errors keep their causes out of their own `Display`.
            message: crewline_core::error_chain(&error),
            traceback,
        }
    }
}
