//! crewline: a Rust runtime for voice-agent crews.
//!
//! A voice platform does speech-to-text and text-to-speech and asks a crew for each LLM turn.
//! crewline runs that turn: it streams a chat completion, gathers the model's tool calls, runs
//! the tools (in parallel or in sequence), feeds the results back, and streams the text as it
//! comes, stopping after [`MAX_TOOL_ROUNDS`] rounds.
//!
//! An [`Agent`] is the model, the prompt and the tools; served by `crewline_server::CrewServer`
//! it answers every call. Here one turn runs offline, on a scripted model:
//!
//! ```
//! use crewline::prelude::*;
//! use crewline::{TurnEvent, llm::{Reply, ScriptedLlm}, types::{Context, Message}};
//! use futures::StreamExt;
//!
//! struct Weather;
//!
//! #[tools]
//! impl Weather {
//!     /// Get the current weather for a city.
//!     #[function_tool]
//!     async fn get_weather(&self, city: String) -> Result<String, ToolError> {
//!         Ok(format!("18°C and cloudy in {city}"))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = ScriptedLlm::new([
//!     Reply::tool_call("get_weather", serde_json::json!({"city": "Paris"})),
//!     Reply::text("It is 18°C and cloudy in Paris."),
//! ]);
//! let agent = Agent::builder(model).prompt("You are a weather line.").tools(Weather).build()?;
//!
//! let mut context = Context::with_system("You are a weather line.");
//! context.add(Message::user("What's the weather in Paris?"));
//! let mut turn = agent.tool_loop().run(&mut context);
//! let mut spoken = String::new();
//! while let Some(event) = turn.next().await {
//!     if let TurnEvent::Text(chunk) = event? {
//!         spoken.push_str(&chunk);
//!     }
//! }
//! assert_eq!(spoken, "It is 18°C and cloudy in Paris.");
//! drop(turn);
//! // The conversation holds the tool call, its result and the answer.
//! assert_eq!(context.messages()[3], Message::tool("call_1_0", "18°C and cloudy in Paris"));
//! assert_eq!(context.messages()[4], Message::assistant("It is 18°C and cloudy in Paris."));
//! # Ok(()) }
//! ```

pub mod agent;
pub mod call;
pub mod crew;
pub mod eval_faults;
pub mod idle;
mod inbox;
mod loop_agent;
mod node;
mod observer;
pub mod router;
mod runner;
pub mod session;
pub mod session_store;
mod setup;
pub mod structured;
pub mod summary;
mod tool_loop;
pub mod usage;

/// One turn of an agent: the tool loop, its events and what it cost.
pub mod turn {
    pub use crate::tool_loop::{
        MAX_CALLS_PER_ANSWER, MAX_CALLS_PER_TURN, MAX_TOOL_ROUNDS, RoundReport, ToolLoop,
        ToolLoopConfig, TurnError, TurnEvent, TurnReport, TurnStream,
    };
}

/// The vocabulary every crewline crate shares (messages, tool calls, contexts): `crewline-core`,
/// re-exported as `types` so it does not shadow the standard library's `core`.
pub use crewline_core as types;
/// Model clients: OpenAI-compatible, scripted, with fallback.
pub use crewline_llm as llm;
/// The platform's wire protocol.
pub use crewline_protocol as protocol;
/// Tools, their registry and the executor that runs them.
pub use crewline_tools as tool;

pub use agent::Agent;
/// Implements [`crew::OutputAgent`] and [`crew::BackgroundAgent`],
/// whose methods are async.
pub use async_trait::async_trait;
pub use call::CallControl;
pub use crew::Crew;
pub use session::{Session, SessionSetup};
pub use turn::{MAX_TOOL_ROUNDS, ToolLoop, TurnEvent};

// The names the root held before its modules (0.x): kept so code written against them
// compiles, hidden so that each thing has one place in the docs. See CHANGELOG.md.
#[doc(hidden)]
pub use crate::{
    agent::{AgentBuilder, AgentError, DEFAULT_AGENT_NAME},
    call::{CallControlError, CheckpointError, Handoff, MAX_CREW_CHECKPOINT_BYTES},
    crew::{
        BackgroundAgent, BackgroundNode, DEFAULT_INBOX_CAPACITY, GraphError, NodeError, NodeHandle,
        NodeSpec, OutputAgent, OutputNode,
    },
    loop_agent::{CallEndHook, LoopAgent},
    router::{DeterministicRouter, RouterBuilder, RouterError, RouterState, SubAgent},
    session::{
        BoxError, CrewSetup, DEFAULT_INBOX_BYTES, DispatchError, NoopObserver, Observer,
        TurnOutcome, setup_marker,
    },
    session_store::{CallStore, CallStoreError, Checkpoint, Fenced, MemoryCallStore},
    turn::{
        MAX_CALLS_PER_ANSWER, MAX_CALLS_PER_TURN, RoundReport, ToolLoopConfig, TurnError,
        TurnReport, TurnStream,
    },
};
#[doc(hidden)]
pub use crewline_macros::{function_tool, tools};

/// The examples in `#[function_tool]`'s and `#[tools]`'s docs, run as this crate's doctests:
/// their code expands against this crate, which crewline-macros does not depend on.
#[cfg(doctest)]
#[doc = include_str!("../../crewline-macros/src/doc/function_tool.md")]
#[doc = include_str!("../../crewline-macros/src/doc/tools.md")]
pub struct MacroExamples;

#[doc(hidden)]
pub use crewline_tools::__private;

/// The names a crew author uses, in one import: an agent and its tools, the crew and its
/// nodes, the models. Everything else is imported from its module.
pub mod prelude {
    pub use crate::{
        Agent, Crew, SessionSetup, async_trait,
        crew::{BackgroundAgent, BackgroundNode, OutputNode},
    };
    pub use crewline_core::ToolCall;
    pub use crewline_llm::{LlmClient, OpenAiClient};
    pub use crewline_macros::{function_tool, tools};
    pub use crewline_tools::{IdempotencyKey, ToolError};
}
