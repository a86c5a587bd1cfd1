//! A running call: the crew's nodes as tasks, wired root → nodes → platform.
// SKELETON: bodies are being written.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use tokio::task::JoinHandle;

use crewline_protocol::{Caller, ConversationType, Event, EventBody, SessionContext, SystemInit};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::{
    CallControl, Crew, GraphError, NodeHandle, NodeSpec, NoopObserver, Observer,
    runner::{LineInterrupt, NodeIo, run_background, run_output},
};

/// What a crew's setup code gets for one call: the handshake, the call's controls, and
/// whether this is the startup dry run.
#[derive(Clone)]
pub struct SessionSetup {
    pub(crate) call: CallControl,
    pub(crate) outbound: mpsc::Sender<Box<Event>>,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) dry_run: bool,
}

impl SessionSetup {
    /// The setup of a call whose handshake was `init`; events for the platform go to `outbound`.
    pub fn new(init: SystemInit, outbound: mpsc::Sender<Box<Event>>) -> Self {
        Self {
            call: CallControl::new(init, outbound.clone()),
            outbound,
            observer: Arc::new(NoopObserver),
            dry_run: false,
        }
    }

    /// The setup used by the startup check: a synthetic web call that nothing is sent to.
    pub fn dry_run() -> Self {
        let init = SystemInit {
            version: "dry-run".to_owned(),
            session_context: SessionContext {
                initial_variables: Map::new(),
                conversation_type: ConversationType::Webcall,
                caller: None,
            },
            output_agent_settings: None,
        };
        // The receiver is dropped at once: anything sent during a dry run goes nowhere.
        let (outbound, _) = mpsc::channel(1);
        Self {
            dry_run: true,
            ..Self::new(init, outbound)
        }
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
///
/// Dropping it stops every node at once; [`Session::shutdown`] also waits for them.
pub struct Session {
    /// Inboxes of the nodes without parents, where platform events enter.
    roots: Vec<Inbox>,
    /// Interrupt lines of the interruptible nodes, which bypass the inboxes.
    interrupts: Vec<InterruptLine>,
    tasks: Vec<JoinHandle<()>>,
    observer: Arc<dyn Observer>,
}

/// Where one node takes events in.
struct Inbox {
    node: Arc<str>,
    sender: mpsc::Sender<Box<Event>>,
    /// Whether platform interrupts reach this node on its interrupt line instead.
    interruptible: bool,
    /// How many events have entered this inbox: an interrupt carries the count, so the node
    /// drops only the requests that came before it.
    delivered: AtomicU64,
}

/// Where one interruptible node takes interrupts in, ahead of its inbox.
struct InterruptLine {
    sender: mpsc::Sender<LineInterrupt>,
    /// The node's place in [`Session::roots`] when the platform feeds its inbox directly.
    root: Option<usize>,
}

/// How many interrupts may wait on a node's interrupt line; more are redundant.
const INTERRUPT_LINE_CAPACITY: usize = 4;

impl Session {
    /// Checks and starts `crew`: sends `agent.ready`, then starts the nodes.
    ///
    /// `agent.ready` goes out before any node starts, so a greeting spoken from a node's
    /// start can never precede it.
    pub async fn start(crew: Crew, setup: SessionSetup) -> Result<Session, GraphError> {
        let children = crew.topology()?;
        let capacity = crew.inbox_capacity;
        let platform_interruptible = setup
            .init()
            .output_agent_settings
            .as_ref()
            .is_none_or(|settings| settings.interruptible);

        let count = crew.nodes.len();
        let mut has_parent = vec![false; count];
        for child in children.iter().flatten() {
            has_parent[*child] = true;
        }
        let (inbox_senders, inbox_receivers): (Vec<_>, Vec<_>) = (0..count)
            .map(|_| mpsc::channel::<Box<Event>>(capacity))
            .unzip();

        // The platform learns the crew is ready before any node can speak.
        if setup
            .outbound
            .send(Box::new(Event::now(EventBody::AgentReady)))
            .await
            .is_err()
        {
            tracing::debug!("the platform left before agent.ready");
        }

        let mut roots = Vec::new();
        let mut interrupts = Vec::new();
        let mut tasks = Vec::with_capacity(count);
        for (index, (spec, inbox)) in crew.nodes.into_iter().zip(inbox_receivers).enumerate() {
            let name: Arc<str> = Arc::from(spec.name());
            let outputs: Arc<[mpsc::Sender<Box<Event>>]> = if children[index].is_empty() {
                Arc::from(vec![setup.outbound.clone()])
            } else {
                children[index]
                    .iter()
                    .map(|&c| inbox_senders[c].clone())
                    .collect()
            };
            let handle = NodeHandle {
                name: name.clone(),
                outputs,
                call: setup.call.clone(),
            };
            let interruptible = matches!(&spec, NodeSpec::Output(node) if node.interruptible)
                && platform_interruptible;
            let root = (!has_parent[index]).then_some(roots.len());
            let interrupt = if interruptible {
                let (sender, receiver) = mpsc::channel(INTERRUPT_LINE_CAPACITY);
                interrupts.push(InterruptLine { sender, root });
                Some(receiver)
            } else {
                None
            };
            if root.is_some() {
                roots.push(Inbox {
                    node: name.clone(),
                    sender: inbox_senders[index].clone(),
                    interruptible,
                    delivered: AtomicU64::new(0),
                });
            }
            let io = NodeIo {
                handle,
                inbox,
                interrupt,
                observer: setup.observer.clone(),
            };
            let span = tracing::debug_span!("node", node = %name);
            let task = match spec {
                NodeSpec::Output(node) => {
                    tokio::spawn(tracing::Instrument::instrument(run_output(node, io), span))
                }
                NodeSpec::Background(node) => tokio::spawn(tracing::Instrument::instrument(
                    run_background(node, io),
                    span,
                )),
            };
            tasks.push(task);
        }
        Ok(Session {
            roots,
            interrupts,
            tasks,
            observer: setup.observer,
        })
    }

    /// Delivers one event from the platform; interrupts overtake queued work. Never blocks.
    ///
    /// An interrupt goes straight to every interruptible node on its interrupt line, so the
    /// running generation stops at once whatever is queued; other events enter the roots'
    /// inboxes in order. A full inbox drops the event (counted) rather than stall the socket
    /// reader, which must stay free to read the next interrupt.
    pub fn dispatch(&self, event: Event) -> Result<(), DispatchError> {
        let interrupt = matches!(event.body, EventBody::Interrupt);
        let event = Box::new(event);
        let mut result = Ok(());
        let mut delivered = false;
        if interrupt {
            for line in &self.interrupts {
                // Only what entered the inbox before the interrupt is stale; a node fed by
                // other nodes cannot tell, and drops every queued request.
                let before = line.root.map_or(u64::MAX, |root| {
                    self.roots[root].delivered.load(Ordering::Relaxed)
                });
                let interrupt = LineInterrupt {
                    event: event.clone(),
                    before,
                };
                match line.sender.try_send(interrupt) {
                    Ok(()) => delivered = true,
                    // Interrupts already waiting there will do the same work.
                    Err(mpsc::error::TrySendError::Full(_)) => delivered = true,
                    Err(mpsc::error::TrySendError::Closed(_)) => {}
                }
            }
        }
        // The last root that takes the event gets it without a copy (an LLM request carries
        // the whole conversation; there is usually one root).
        let takes = |root: &Inbox| !(interrupt && root.interruptible);
        let last = self.roots.iter().rposition(takes);
        let kind = event.body.type_name();
        let mut event = Some(event);
        for (index, root) in self.roots.iter().enumerate() {
            if !takes(root) {
                continue;
            }
            let copy = if Some(index) == last {
                event.take()
            } else {
                event.clone()
            };
            let Some(copy) = copy else { break };
            match root.sender.try_send(copy) {
                Ok(()) => {
                    root.delivered.fetch_add(1, Ordering::Relaxed);
                    delivered = true;
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.observer.event_dropped("inbox_full");
                    tracing::warn!(node = %root.node, event = kind, "inbox full, event dropped");
                    result = Err(DispatchError::Full(root.node.to_string()));
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
        if !delivered && result.is_ok() {
            self.observer.event_dropped("session_closed");
            return Err(DispatchError::Closed);
        }
        result
    }

    /// Whether any node is still running.
    pub fn is_running(&self) -> bool {
        self.tasks.iter().any(|task| !task.is_finished())
    }

    /// Stops every node and waits until all of the session's tasks have ended.
    ///
    /// Running generations and tools are cancelled (a synchronous tool already running on
    /// the blocking pool finishes on its own; its result is discarded).
    pub async fn shutdown(mut self) {
        let tasks = std::mem::take(&mut self.tasks);
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            if let Err(error) = task.await
                && error.is_panic()
            {
                tracing::error!(%error, "a node task panicked");
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
