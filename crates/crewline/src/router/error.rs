//! Why a router's graph cannot be built.

/// A problem in a router's sub-agents or transitions, found once by
/// [`RouterBuilder::build`](super::RouterBuilder::build) before any call uses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouterError {
    /// No sub-agent was added.
    #[error("the router has no sub-agents: add at least one with RouterBuilder::sub_agent")]
    NoSubAgents,
    /// Two sub-agents share an id.
    #[error("two sub-agents have the id `{0}`: sub-agent ids must be unique")]
    DuplicateSubAgent(String),
    /// The start names no sub-agent.
    #[error("the start `{start}` is not a sub-agent (sub-agents: {})", .known.join(", "))]
    UnknownStart {
        /// The start that was asked for.
        start: String,
        /// The sub-agents' ids.
        known: Vec<String>,
    },
    /// A transition names a sub-agent that was never added.
    #[error(
        "transition `{from}` -> `{to}` names `{missing}`, which is not a sub-agent (sub-agents: {})",
        .known.join(", ")
    )]
    UnknownSubAgent {
        /// The transition's source.
        from: String,
        /// The transition's target.
        to: String,
        /// The id that is not a sub-agent.
        missing: String,
        /// The sub-agents' ids.
        known: Vec<String>,
    },
    /// A sub-agent has two unconditional transitions: the second could never be taken.
    #[error(
        "sub-agent `{from}` has two default transitions (to `{first}` and to `{second}`): \
         the second could never be taken"
    )]
    DuplicateDefault {
        /// The sub-agent they leave.
        from: String,
        /// The first default's target.
        first: String,
        /// The second default's target.
        second: String,
    },
    /// A sub-agent's tool is not in the router's registry.
    #[error(
        "sub-agent `{sub_agent}` uses the tool `{tool}`, which is not in the router's registry"
    )]
    UnknownTool {
        /// The sub-agent.
        sub_agent: String,
        /// The tool's name.
        tool: String,
    },
    /// A sub-agent lists a tool twice.
    #[error("sub-agent `{sub_agent}` lists the tool `{tool}` twice")]
    DuplicateTool {
        /// The sub-agent.
        sub_agent: String,
        /// The tool's name.
        tool: String,
    },
    /// A classification step names a sub-agent that was never added.
    #[error(
        "the classification step of `{sub_agent}` names no sub-agent (sub-agents: {})",
        .known.join(", ")
    )]
    UnknownClassifier {
        /// The id it names.
        sub_agent: String,
        /// The sub-agents' ids.
        known: Vec<String>,
    },
    /// A sub-agent has two classification steps: the second would never run.
    #[error("sub-agent `{0}` has two classification steps: give it one")]
    DuplicateClassifier(String),
}
