//! What connects a node to its call: its inbox (counted against the call's byte budget for a
//! root), its interrupt line and its handle. The session builds them, the runner reads them.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use crewline_protocol::Event;
use tokio::sync::mpsc;

use crate::{crew::NodeHandle, session::Observer};

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

/// The bytes of platform events waiting in a call's root inboxes, and their limit.
pub(crate) struct InboxBudget {
    queued: AtomicUsize,
    pub(crate) limit: usize,
}

impl InboxBudget {
    /// An empty budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            queued: AtomicUsize::new(0),
            limit,
        }
    }

    /// Counts `bytes` more as queued, unless that goes past the limit (an event reaching
    /// empty inboxes is always taken); `Err` holds what is queued.
    pub(crate) fn take(&self, bytes: usize) -> Result<(), usize> {
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                (queued == 0 || queued.saturating_add(bytes) <= self.limit)
                    .then(|| queued.saturating_add(bytes))
            })
            .map(|_| ())
    }

    pub(crate) fn release(&self, bytes: usize) {
        self.queued.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// A platform event in a root's inbox, with the bytes it counts for.
pub(crate) struct Queued {
    pub(crate) event: Box<Event>,
    pub(crate) bytes: usize,
}

/// Where a node takes its events from: the platform's (counted against the call's byte
/// budget, for a root) or its parents'.
pub(crate) enum InboxReceiver {
    /// A root's inbox, fed by [`Session::dispatch`].
    Root {
        receiver: mpsc::Receiver<Queued>,
        budget: Arc<InboxBudget>,
    },
    /// The inbox of a node with parents, fed by them.
    Inner(mpsc::Receiver<Box<Event>>),
}

impl InboxReceiver {
    /// The next event; `None` once the inbox is closed and empty. Cancel safe.
    pub(crate) async fn recv(&mut self) -> Option<Box<Event>> {
        match self {
            Self::Root { receiver, budget } => {
                let queued = receiver.recv().await?;
                budget.release(queued.bytes);
                Some(queued.event)
            }
            Self::Inner(receiver) => receiver.recv().await,
        }
    }

    /// The next event if one is waiting.
    pub(crate) fn try_recv(&mut self) -> Option<Box<Event>> {
        match self {
            Self::Root { receiver, budget } => {
                let queued = receiver.try_recv().ok()?;
                budget.release(queued.bytes);
                Some(queued.event)
            }
            Self::Inner(receiver) => receiver.try_recv().ok(),
        }
    }
}
