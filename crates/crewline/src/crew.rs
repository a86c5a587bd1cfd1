//! A crew: the graph of nodes that serves one call.
//!
//! A crew holds one output node, the agent that answers the platform (an agent's
//! [`node`](crate::Agent::node), or an [`OutputAgent`] of your own), and any background nodes
//! that watch the call beside it ([`BackgroundAgent`]). An edge `a -> b` makes `b` see the
//! events `a` forwards; a crew setup builds the crew once per call.
//!
//! ```
//! use crewline::prelude::*;
//! use crewline::{
//!     Session,
//!     crew::{NodeError, NodeHandle},
//!     llm::ScriptedLlm,
//!     protocol::{ConversationType, Event, EventBody, SessionContext, SystemInit},
//! };
//! use tokio::sync::mpsc;
//!
//! /// Watches the call without speaking: tells `seen` each event's type.
//! struct Watcher {
//!     seen: mpsc::UnboundedSender<&'static str>,
//! }
//!
//! #[async_trait]
//! impl BackgroundAgent for Watcher {
//!     async fn on_event(&mut self, event: &Event, _node: &NodeHandle) -> Result<(), NodeError> {
//!         let _ = self.seen.send(event.body.type_name());
//!         Ok(())
//!     }
//! }
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
//! let agent = Agent::builder(ScriptedLlm::new([])).name("voice").build()?;
//! let (seen, mut watched) = mpsc::unbounded_channel();
//!
//! // The crew of one call: the watcher, then the agent.
//! let (to_platform, _from_crew) = mpsc::channel(64);
//! let setup = SessionSetup::new(handshake(), to_platform);
//! let mut crew = Crew::new();
//! crew.add_node(BackgroundNode::new("watcher", Watcher { seen }).forward_events(true))
//!     .add_node(agent.node(&setup))
//!     .add_edge("watcher", "voice");
//! assert_eq!(crew.node_names(), ["watcher", "voice"]);
//!
//! let session = Session::start(crew, setup).await?;
//! session.dispatch(Event::now(EventBody::UserJoined))?;
//! assert_eq!(watched.recv().await, Some("system.user.joined"));
//! session.shutdown().await;
//! # Ok(()) }
//! ```

pub use crate::node::{
    BackgroundAgent, BackgroundNode, NodeError, NodeHandle, NodeSpec, OutputAgent, OutputNode,
};

use std::collections::{HashMap, HashSet};

/// How many events may wait in a node's inbox by default.
pub const DEFAULT_INBOX_CAPACITY: usize = 256;

/// The nodes of one call and the edges between them, before they start.
///
/// Events from the platform enter at the roots (nodes without parents); events leaving the
/// leaves (nodes without children) go to the platform. The graph is checked as a whole by
/// [`Crew::validate`] before anything starts: unknown nodes, duplicate names and cycles are
/// errors that name the nodes.
///
/// # Examples
///
/// A voice agent with an observer beside it: both see every event of the call, only the agent
/// speaks.
///
/// ```
/// use crewline::prelude::*;
/// use crewline::{crew::{GraphError, NodeError, NodeHandle}, llm::ScriptedLlm, protocol::Event};
///
/// struct Sentiment;
///
/// #[async_trait]
/// impl BackgroundAgent for Sentiment {
///     async fn on_event(&mut self, event: &Event, _node: &NodeHandle) -> Result<(), NodeError> {
///         tracing::info!(?event, "observed");
///         Ok(())
///     }
/// }
///
/// let agent = Agent::builder(ScriptedLlm::new([])).name("voice").build()?;
/// let mut crew = Crew::new();
/// crew.add_node(BackgroundNode::new("sentiment", Sentiment))
///     .add_node(agent.node(&SessionSetup::dry_run()))
///     .add_edge("sentiment", "voice");
/// assert_eq!(crew.node_names(), ["sentiment", "voice"]);
/// assert!(crew.validate().is_ok());
///
/// crew.add_edge("voice", "sentiment");
/// assert!(matches!(crew.validate(), Err(GraphError::Cycle(_))));
/// # Ok::<(), crewline::agent::AgentError>(())
/// ```
pub struct Crew {
    pub(crate) nodes: Vec<NodeSpec>,
    pub(crate) edges: Vec<(String, String)>,
    pub(crate) inbox_capacity: usize,
}

impl Default for Crew {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            edges: Vec::new(),
            inbox_capacity: DEFAULT_INBOX_CAPACITY,
        }
    }
}

/// Why a crew's graph is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// The crew has no nodes.
    #[error("the crew has no nodes: add at least one with Crew::add_node")]
    Empty,
    /// Two nodes share a name.
    #[error("two nodes are named `{0}`: node names must be unique")]
    DuplicateNode(String),
    /// An edge names a node that was never added.
    #[error("edge `{from}` -> `{to}` names `{missing}`, which was never added with Crew::add_node")]
    UnknownNode {
        /// The edge's start.
        from: String,
        /// The edge's end.
        to: String,
        /// The name that is not a node.
        missing: String,
    },
    /// The edges form a cycle.
    #[error("the edges form a cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
}

impl Crew {
    /// An empty crew.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a node.
    pub fn add_node(&mut self, node: impl Into<NodeSpec>) -> &mut Self {
        self.nodes.push(node.into());
        self
    }

    /// Adds an edge: events that leave `from` go to `to`.
    pub fn add_edge(&mut self, from: impl Into<String>, to: impl Into<String>) -> &mut Self {
        self.edges.push((from.into(), to.into()));
        self
    }

    /// Sets how many events may wait in each node's inbox.
    pub fn with_inbox_capacity(&mut self, capacity: usize) -> &mut Self {
        self.inbox_capacity = capacity.max(1);
        self
    }

    /// The nodes' names, in the order they were added.
    pub fn node_names(&self) -> Vec<&str> {
        self.nodes.iter().map(NodeSpec::name).collect()
    }

    /// Checks the graph as a whole without starting anything.
    pub fn validate(&self) -> Result<(), GraphError> {
        self.topology().map(|_| ())
    }

    /// Each node's children (by index), after checking the graph.
    pub(crate) fn topology(&self) -> Result<Vec<Vec<usize>>, GraphError> {
        if self.nodes.is_empty() {
            return Err(GraphError::Empty);
        }
        let mut index = HashMap::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            if index.insert(node.name(), i).is_some() {
                return Err(GraphError::DuplicateNode(node.name().to_owned()));
            }
        }
        let mut children = vec![Vec::new(); self.nodes.len()];
        let mut seen = HashSet::new();
        for (from, to) in &self.edges {
            let lookup = |name: &String| {
                index
                    .get(name.as_str())
                    .copied()
                    .ok_or_else(|| GraphError::UnknownNode {
                        from: from.clone(),
                        to: to.clone(),
                        missing: name.clone(),
                    })
            };
            let (a, b) = (lookup(from)?, lookup(to)?);
            // A repeated edge would deliver every event twice.
            if seen.insert((a, b)) {
                children[a].push(b);
            }
        }
        if let Some(cycle) = find_cycle(&children) {
            return Err(GraphError::Cycle(
                cycle
                    .into_iter()
                    .map(|i| self.nodes[i].name().to_owned())
                    .collect(),
            ));
        }
        Ok(children)
    }
}

/// A cycle in the graph as node indexes, first node repeated at the end, if there is one.
fn find_cycle(children: &[Vec<usize>]) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut marks = vec![Mark::New; children.len()];
    for start in 0..children.len() {
        if marks[start] != Mark::New {
            continue;
        }
        // Iterative depth-first search: (node, next child to visit).
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        marks[start] = Mark::OnPath;
        while let Some((node, next)) = path.last_mut() {
            let node = *node;
            if let Some(&child) = children[node].get(*next) {
                *next += 1;
                match marks[child] {
                    Mark::OnPath => {
                        let from = path.iter().position(|(n, _)| *n == child).unwrap_or(0);
                        let mut cycle: Vec<usize> = path[from..].iter().map(|(n, _)| *n).collect();
                        cycle.push(child);
                        return Some(cycle);
                    }
                    Mark::New => {
                        marks[child] = Mark::OnPath;
                        path.push((child, 0));
                    }
                    Mark::Done => {}
                }
            } else {
                marks[node] = Mark::Done;
                path.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crew::{BackgroundAgent, BackgroundNode, NodeError, NodeHandle};
    use crewline_protocol::Event;

    struct Quiet;

    #[async_trait::async_trait]
    impl BackgroundAgent for Quiet {
        async fn on_event(&mut self, _: &Event, _: &NodeHandle) -> Result<(), NodeError> {
            Ok(())
        }
    }

    fn crew(nodes: &[&str], edges: &[(&str, &str)]) -> Crew {
        let mut crew = Crew::new();
        for name in nodes {
            crew.add_node(BackgroundNode::new(*name, Quiet));
        }
        for (a, b) in edges {
            crew.add_edge(*a, *b);
        }
        crew
    }

    #[test]
    fn a_cycle_anywhere_is_named_in_the_error() {
        let err = crew(&["a", "b", "c", "d"], &[("a", "b"), ("c", "d"), ("d", "c")])
            .validate()
            .unwrap_err();
        assert_eq!(
            err,
            GraphError::Cycle(vec!["c".into(), "d".into(), "c".into()])
        );
        assert_eq!(err.to_string(), "the edges form a cycle: c -> d -> c");
    }

    #[test]
    fn self_loops_are_cycles() {
        let err = crew(&["a"], &[("a", "a")]).validate().unwrap_err();
        assert!(matches!(err, GraphError::Cycle(_)));
    }

    #[test]
    fn an_edge_to_a_node_never_added_names_it() {
        let err = crew(&["agent"], &[("agent", "sentiment")])
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "edge `agent` -> `sentiment` names `sentiment`, which was never added with Crew::add_node"
        );
    }

    #[test]
    fn duplicate_names_and_empty_crews_are_errors() {
        assert_eq!(
            crew(&["a", "a"], &[]).validate(),
            Err(GraphError::DuplicateNode("a".into()))
        );
        assert_eq!(Crew::new().validate(), Err(GraphError::Empty));
    }

    #[test]
    fn a_diamond_is_not_a_cycle() {
        let crew = crew(
            &["a", "b", "c", "d"],
            &[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
        );
        assert_eq!(
            crew.topology().unwrap(),
            vec![vec![1, 2], vec![3], vec![3], vec![]]
        );
    }
}
