//! A running call: the crew's nodes as tasks, wired root → nodes → platform.
//!
//! A crew server starts one [`Session`] per call from its crew setup ([`CrewSetup`]); a test,
//! or a transport of your own, starts one directly: the platform's events go in through
//! [`Session::dispatch`], and what the crew says comes out of the channel the call's
//! [`SessionSetup`] was given.
//!
//! ```
//! use crewline::prelude::*;
//! use crewline::{
//!     Session,
//!     llm::{Reply, ScriptedLlm},
//!     protocol::{ConversationType, Event, EventBody, LlmRequest, SessionContext, SystemInit},
//! };
//! use tokio::sync::mpsc;
//!
//! # fn handshake() -> SystemInit {
//! #     SystemInit {
//! #         version: "1.0".into(),
//! #         session_context: SessionContext {
//! #             initial_variables: Default::default(),
//! #             conversation_type: ConversationType::Webcall,
//! #             caller: None,
//! #         },
//! #         output_agent_settings: None,
//! #     }
//! # }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = ScriptedLlm::new([Reply::text("Hello, how can I help?")]);
//! let agent = Agent::builder(model).build()?;
//!
//! // One call: its handshake, and where its events for the platform go.
//! let (to_platform, mut from_crew) = mpsc::channel(64);
//! let setup = SessionSetup::new(handshake(), to_platform);
//! let session = Session::start(agent.crew_for(&setup), setup).await?;
//!
//! // The platform asks for a turn; the answer comes as chunks between a start and an end.
//! session.dispatch(Event::now(EventBody::LlmRequest(LlmRequest::default())))?;
//! let mut said = String::new();
//! while let Some(event) = from_crew.recv().await {
//!     match event.body {
//!         EventBody::ResponseChunk { text } => said.push_str(&text),
//!         EventBody::ResponseEnd => break,
//!         _ => {}
//!     }
//! }
//! assert_eq!(said, "Hello, how can I help?");
//! session.shutdown().await;
//! # Ok(()) }
//! ```

pub use crate::{
    observer::{NoopObserver, Observer, TurnOutcome},
    setup::{BoxError, CrewSetup, marker as setup_marker},
};

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use tokio::task::JoinHandle;

use crewline_protocol::{Caller, ConversationType, Event, EventBody, SessionContext, SystemInit};
use crewline_tools::DetachedTasks;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::{
    CallControl, Crew,
    call::Attached,
    crew::{GraphError, NodeHandle, NodeSpec},
    inbox::{InboxBudget, InboxReceiver, LineInterrupt, NodeIo, Queued},
    runner::{run_background, run_output},
    session_store::{CallStore, Checkpoint, run_checkpointer},
};

/// The default most bytes of platform events waiting in a call's inboxes: 4 MiB.
///
/// Four of the largest frames a crew server takes by default (1 MiB): a node that is busy
/// with a turn can have the next requests and transcript updates waiting, while a platform
/// that floods a stuck node cannot make the call hold its 256-event inbox capacity of large
/// events (256 MiB).
pub const DEFAULT_INBOX_BYTES: usize = 4 << 20;

/// What a crew's setup code gets for one call: the handshake, the call's controls, and
/// whether this is the startup dry run.
#[derive(Clone)]
pub struct SessionSetup {
    pub(crate) call: CallControl,
    pub(crate) outbound: mpsc::Sender<Box<Event>>,
    /// The key the crew's server names the call by when the platform gives no call id.
    crew_key: Option<String>,
    /// The shared store, the owner token and the checkpoint resumed from.
    store: Option<(Arc<dyn CallStore>, String, Option<Checkpoint>)>,
    /// Where the call's tools left running are tracked (its server's).
    detached: Option<DetachedTasks>,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) dry_run: bool,
    pub(crate) inbox_bytes: usize,
}

impl SessionSetup {
    /// The setup of a call whose handshake was `init`; events for the platform go to `outbound`.
    pub fn new(init: SystemInit, outbound: mpsc::Sender<Box<Event>>) -> Self {
        Self {
            call: CallControl::new(init, outbound.clone(), None, None, None, None),
            outbound,
            crew_key: None,
            store: None,
            detached: None,
            observer: Arc::new(NoopObserver),
            dry_run: false,
            inbox_bytes: DEFAULT_INBOX_BYTES,
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

    /// Bounds the bytes of platform events waiting in this call's inboxes, all nodes
    /// together (default [`DEFAULT_INBOX_BYTES`]); an event past it is dropped with
    /// [`DispatchError::OverBudget`]. An event reaching empty inboxes is always taken.
    pub fn with_inbox_bytes(mut self, bytes: usize) -> Self {
        self.inbox_bytes = bytes;
        self
    }

    /// Names the call by `key` when the platform's handshake has no call id (a web call, say):
    /// reconnects with the same key share run-once state and the checkpoint. Only keys the
    /// platform gives belong here: two callers with one key are one call.
    pub fn with_call_key(mut self, key: impl Into<String>) -> Self {
        self.crew_key = Some(key.into());
        self.rebuild_call();
        self
    }

    /// Tracks the non-cancellable tools this call leaves running (its caller stopped waiting)
    /// in `tasks`, through the call's [`scope`](CallControl::scope): the server that serves the
    /// call passes its own set, and waits for it on shutdown.
    pub fn with_detached_tasks(mut self, tasks: DetachedTasks) -> Self {
        self.detached = Some(tasks);
        self.rebuild_call();
        self
    }

    /// Checkpoints the call to `store` as the owner `token` ([`CallStore::claim`]), resuming
    /// from `resumed` (the checkpoint [`CallStore::load`] found). A call with no key (no
    /// call id, no [`with_call_key`](Self::with_call_key)) cannot be resumed and is not
    /// checkpointed.
    pub fn with_call_store(
        mut self,
        store: Arc<dyn CallStore>,
        token: impl Into<String>,
        resumed: Option<Checkpoint>,
    ) -> Self {
        self.store = Some((store, token.into(), resumed));
        self.rebuild_call();
        self
    }

    /// The checkpoint this call resumed from (see [`CallControl::resumed`]).
    pub fn resumed(&self) -> Option<&Checkpoint> {
        self.call.resumed()
    }

    /// Makes the call's controls again from the settings (before any node holds them).
    fn rebuild_call(&mut self) {
        let init = self.call.init().clone();
        let (attached, resumed) = match &self.store {
            Some((store, token, resumed)) => (
                Some(Attached {
                    store: Arc::clone(store),
                    token: token.clone(),
                    dirty: tokio::sync::Notify::new(),
                    lost: Default::default(),
                }),
                resumed.clone(),
            ),
            None => (None, None),
        };
        let call = CallControl::new(
            init,
            self.outbound.clone(),
            self.crew_key.clone(),
            attached,
            resumed,
            self.detached.clone(),
        );
        // A call nothing names cannot be found again: no store.
        self.call = if call.call_key().is_none() && call.is_checkpointed() {
            tracing::debug!("a call without a call id or key is not checkpointed");
            CallControl::new(
                call.init().clone(),
                self.outbound.clone(),
                None,
                None,
                None,
                self.detached.clone(),
            )
        } else {
            call
        };
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
    /// The call's inboxes hold their byte budget already: the nodes are far behind.
    #[error(
        "node `{node}` is too far behind: {queued} bytes of events are waiting (the limit is \
         {limit}); the {event} of {bytes} bytes was dropped"
    )]
    OverBudget {
        /// The node whose inbox the event was for.
        node: String,
        /// The event's type, e.g. `system.llm.request`.
        event: &'static str,
        /// The event's size.
        bytes: usize,
        /// The bytes waiting in the call's inboxes.
        queued: usize,
        /// The call's budget.
        limit: usize,
    },
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
    /// Writes the checkpoint and renews the call's ownership (a checkpointed call only).
    checkpointer: Option<JoinHandle<()>>,
    /// The call's controls.
    call: CallControl,
    observer: Arc<dyn Observer>,
    /// The bytes of platform events waiting in the roots' inboxes.
    budget: Arc<InboxBudget>,
}

/// Where one root node takes platform events in.
struct Inbox {
    node: Arc<str>,
    sender: mpsc::Sender<Queued>,
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

/// The channels between a call's nodes, built before any node starts.
struct Wiring<'c> {
    /// Each node's children, by position in the crew.
    children: &'c [Vec<usize>],
    /// Where the platform feeds each root: a root has no parents, so its inbox carries each
    /// event's size for the call's byte budget.
    root_senders: Vec<Option<mpsc::Sender<Queued>>>,
    /// Where parents feed each other node.
    inbox_senders: Vec<Option<mpsc::Sender<Box<Event>>>>,
    receivers: Vec<Option<InboxReceiver>>,
}

impl<'c> Wiring<'c> {
    /// An inbox of `capacity` events for each node of a crew with `children`.
    fn new(children: &'c [Vec<usize>], capacity: usize, budget: &Arc<InboxBudget>) -> Self {
        let count = children.len();
        let mut has_parent = vec![false; count];
        for child in children.iter().flatten() {
            if let Some(flag) = has_parent.get_mut(*child) {
                *flag = true;
            }
        }
        let mut wiring = Self {
            children,
            root_senders: Vec::with_capacity(count),
            inbox_senders: Vec::with_capacity(count),
            receivers: Vec::with_capacity(count),
        };
        for has_parent in has_parent {
            let receiver = if has_parent {
                let (sender, receiver) = mpsc::channel(capacity);
                wiring.root_senders.push(None);
                wiring.inbox_senders.push(Some(sender));
                InboxReceiver::Inner(receiver)
            } else {
                let (sender, receiver) = mpsc::channel(capacity);
                wiring.root_senders.push(Some(sender));
                wiring.inbox_senders.push(None);
                InboxReceiver::Root {
                    receiver,
                    budget: Arc::clone(budget),
                }
            };
            wiring.receivers.push(Some(receiver));
        }
        wiring
    }

    /// The inbox of the node at `index`, and where the platform feeds it if it is a root.
    fn take(&mut self, index: usize) -> (Option<InboxReceiver>, Option<mpsc::Sender<Queued>>) {
        (
            self.receivers.get_mut(index).and_then(Option::take),
            self.root_senders.get_mut(index).and_then(Option::take),
        )
    }

    /// Where the node at `index` sends: its children's inboxes, or the platform for a leaf.
    fn outputs(
        &self,
        index: usize,
        platform: &mpsc::Sender<Box<Event>>,
    ) -> Arc<[mpsc::Sender<Box<Event>>]> {
        match self.children.get(index) {
            Some(children) if !children.is_empty() => children
                .iter()
                .filter_map(|&child| self.inbox_senders.get(child).cloned().flatten())
                .collect(),
            _ => Arc::from(vec![platform.clone()]),
        }
    }
}

/// Sends `agent.ready`, and a hand-off sent before a reconnect again: it may not have reached
/// the platform, and the crew stays silent as it would have.
async fn announce_ready(setup: &SessionSetup) {
    if setup
        .outbound
        .send(Box::new(Event::now(EventBody::AgentReady)))
        .await
        .is_err()
    {
        tracing::debug!("the platform left before agent.ready");
    }
    if let Some(handoff) = setup.call.resumed().and_then(|c| c.handoff.clone()) {
        tracing::info!("resumed a call that was handed off: the hand-off is sent again");
        let _ = setup
            .outbound
            .send(Box::new(Event::now(handoff.into_body())))
            .await;
    }
}

impl Session {
    /// Checks and starts `crew`: sends `agent.ready`, then starts the nodes.
    ///
    /// `agent.ready` goes out before any node starts, so a greeting spoken from a node's
    /// start can never precede it.
    pub async fn start(crew: Crew, setup: SessionSetup) -> Result<Session, GraphError> {
        let children = crew.topology()?;
        let budget = Arc::new(InboxBudget::new(setup.inbox_bytes));
        // Every inbox exists before any node starts: a node's outputs are its children's.
        let mut wiring = Wiring::new(&children, crew.inbox_capacity, &budget);
        // The platform learns the crew is ready before any node can speak.
        announce_ready(&setup).await;
        let mut session = Session {
            checkpointer: None,
            call: setup.call.clone(),
            roots: Vec::new(),
            interrupts: Vec::new(),
            tasks: Vec::with_capacity(crew.nodes.len()),
            observer: setup.observer.clone(),
            budget,
        };
        for (index, spec) in crew.nodes.into_iter().enumerate() {
            session.start_node(index, spec, &mut wiring, &setup);
        }
        session.checkpointer = setup.call.is_checkpointed().then(|| {
            let span = tracing::debug_span!("checkpointer");
            tokio::spawn(tracing::Instrument::instrument(
                run_checkpointer(setup.call.clone()),
                span,
            ))
        });
        Ok(session)
    }

    /// Starts the node at `index` of the crew as a task on its inbox, its outputs and, when
    /// it can be interrupted, its interrupt line.
    fn start_node(
        &mut self,
        index: usize,
        spec: NodeSpec,
        wiring: &mut Wiring<'_>,
        setup: &SessionSetup,
    ) {
        let name: Arc<str> = Arc::from(spec.name());
        let (inbox, root_sender) = wiring.take(index);
        let Some(inbox) = inbox else {
            // Every node gets its inbox when the wiring is built; none is taken twice.
            tracing::error!(node = %name, "node without an inbox not started");
            return;
        };
        let platform_interruptible = setup
            .init()
            .output_agent_settings
            .as_ref()
            .is_none_or(|settings| settings.interruptible);
        let interruptible =
            matches!(&spec, NodeSpec::Output(node) if node.interruptible) && platform_interruptible;
        let interrupt = interruptible.then(|| {
            let (sender, receiver) = mpsc::channel(INTERRUPT_LINE_CAPACITY);
            let root = root_sender.is_some().then_some(self.roots.len());
            self.interrupts.push(InterruptLine { sender, root });
            receiver
        });
        if let Some(sender) = root_sender {
            self.roots.push(Inbox {
                node: name.clone(),
                sender,
                interruptible,
                delivered: AtomicU64::new(0),
            });
        }
        let io = NodeIo {
            handle: NodeHandle {
                name: name.clone(),
                outputs: wiring.outputs(index, &setup.outbound),
                call: setup.call.clone(),
            },
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
        self.tasks.push(task);
    }

    /// Delivers one event from the platform; interrupts overtake queued work. Never blocks.
    ///
    /// An interrupt goes straight to every interruptible node on its interrupt line, so the
    /// running generation stops at once whatever is queued; other events enter the roots'
    /// inboxes in order. A full inbox, or inboxes holding the call's byte budget, drop the
    /// event (counted) rather than stall the socket reader, which must stay free to read the
    /// next interrupt.
    ///
    /// The event counts for its encoded size; [`dispatch_frame`](Self::dispatch_frame) takes
    /// the size of the frame it was decoded from instead, at no cost.
    pub fn dispatch(&self, event: Event) -> Result<(), DispatchError> {
        let bytes = crewline_protocol::encode(&event).len();
        self.dispatch_frame(event, bytes)
    }

    /// Delivers one event decoded from a frame of `frame_bytes`, as [`dispatch`](Self::dispatch).
    pub fn dispatch_frame(&self, event: Event, frame_bytes: usize) -> Result<(), DispatchError> {
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
            // Each copy is held by its own inbox, so each counts.
            if let Err(queued) = self.budget.take(frame_bytes) {
                self.observer.event_dropped("inbox_bytes");
                tracing::warn!(
                    node = %root.node,
                    event = kind,
                    bytes = frame_bytes,
                    queued,
                    limit = self.budget.limit,
                    "inbox byte budget reached, event dropped"
                );
                result = Err(DispatchError::OverBudget {
                    node: root.node.to_string(),
                    event: kind,
                    bytes: frame_bytes,
                    queued,
                    limit: self.budget.limit,
                });
                continue;
            }
            let queued = Queued {
                event: copy,
                bytes: frame_bytes,
            };
            match root.sender.try_send(queued) {
                Ok(()) => {
                    root.delivered.fetch_add(1, Ordering::Relaxed);
                    delivered = true;
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.budget.release(frame_bytes);
                    self.observer.event_dropped("inbox_full");
                    tracing::warn!(node = %root.node, event = kind, "inbox full, event dropped");
                    result = Err(DispatchError::Full(root.node.to_string()));
                }
                Err(mpsc::error::TrySendError::Closed(_)) => self.budget.release(frame_bytes),
            }
        }
        if !delivered && result.is_ok() {
            self.observer.event_dropped("session_closed");
            return Err(DispatchError::Closed);
        }
        result
    }

    /// The call's controls (its key, its checkpoint, whether it was superseded).
    pub fn call(&self) -> &CallControl {
        &self.call
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
        if let Some(checkpointer) = self.checkpointer.take() {
            checkpointer.abort();
        }
        let tasks = std::mem::take(&mut self.tasks);
        // The last turn's checkpoint may have been in flight: written once more (bounded), so
        // a reconnect after a dropped socket finds it.
        crate::session_store::flush(&self.call).await;
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
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.abort();
        }
        for task in &self.tasks {
            task.abort();
        }
    }
}
