//! A running call: the crew's nodes as tasks, wired root → nodes → platform.
// SKELETON: bodies are being written.

use std::sync::Arc;

use crewline_protocol::{Caller, Event, SessionContext, SystemInit};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::{CallControl, Crew, GraphError, NoopObserver, Observer};

/// What a crew's setup code gets for one call: the handshake, the call's controls, and
/// whether this is the startup dry run.
#[derive(Clone)]
pub struct SessionSetup {
    pub(crate) call: CallControl,
    pub(crate) outbound: mpsc::Sender<Event>,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) dry_run: bool,
}

impl SessionSetup {
    /// The setup of a call whose handshake was `init`; events for the platform go to `outbound`.
    pub fn new(init: SystemInit, outbound: mpsc::Sender<Event>) -> Self {
        Self {
            call: CallControl::new(init, outbound.clone()),
            outbound,
            observer: Arc::new(NoopObserver),
            dry_run: false,
        }
    }

    /// The setup used by the startup check: a synthetic web call that nothing is sent to.
    pub fn dry_run() -> Self {
        todo!()
    }

    /// Reports this session's measurements to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = observer;
        self
    }

    /// Whether this is the startup dry run (build the crew, connect to nothing).
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// The handshake.
    pub fn init(&self) -> &SystemInit {
        self.call.init()
    }

    /// The call's context: channel, caller, variables.
    pub fn session_context(&self) -> &SessionContext {
        self.call.session_context()
    }

    /// The call's variables (the ones the agent prompt is rendered from).
    pub fn initial_variables(&self) -> &Map<String, Value> {
        &self.session_context().initial_variables
    }

    /// The caller's identity on a phone call.
    pub fn caller(&self) -> Option<&Caller> {
        self.session_context().caller.as_ref()
    }

    /// The call's controls, to give to tools that speak, end or transfer the call.
    pub fn call(&self) -> &CallControl {
        &self.call
    }
}

/// Why an inbound event was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// A node's inbox is full: the node is far behind the platform.
    #[error("node `{0}` is too far behind; the event was dropped")]
    Full(String),
    /// The session has stopped.
    #[error("the session has stopped")]
    Closed,
}

/// A running call.
pub struct Session {}

impl Session {
    /// Checks and starts `crew`: sends `agent.ready`, then starts the nodes.
    pub async fn start(_crew: Crew, _setup: SessionSetup) -> Result<Session, GraphError> {
        todo!()
    }

    /// Delivers one event from the platform; interrupts overtake queued work. Never blocks.
    pub fn dispatch(&self, _event: Event) -> Result<(), DispatchError> {
        todo!()
    }

    /// Stops every node and waits until all of the session's tasks have ended.
    pub async fn shutdown(self) {
        todo!()
    }
}
