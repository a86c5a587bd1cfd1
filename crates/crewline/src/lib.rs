//! crewline: a Rust runtime for voice-agent crews.
//!
//! A voice platform does speech-to-text and text-to-speech and asks a crew for each LLM turn.
//! crewline runs that turn: it streams a chat completion, gathers the model's tool calls, runs
//! the tools (in parallel or in sequence), feeds the results back, and streams the text as it
//! comes, stopping after [`MAX_TOOL_ROUNDS`] rounds.
//!
//! ```no_run
//! use std::sync::Arc;
//! use crewline::prelude::*;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let llm = Arc::new(OpenAiClient::builder().model("gpt-4o-mini").build()?);
//! let tools = Arc::new(ToolRegistry::new());
//! let turn_loop = ToolLoop::new(llm, tools);
//! let mut context = Context::with_system("You are a helpful voice agent.");
//! context.add(Message::user("Hi!"));
//! let mut turn = turn_loop.run(&mut context);
//! while let Some(event) = turn.next().await {
//!     if let TurnEvent::Text(chunk) = event? {
//!         tracing::info!(%chunk, "speak");
//!     }
//! }
//! # Ok(()) }
//! ```

mod call;
mod crew;
mod loop_agent;
mod node;
mod observer;
pub mod router;
mod runner;
mod session;
mod tool_loop;

pub use call::{CallControl, CallControlError, Handoff};
pub use crew::{Crew, DEFAULT_INBOX_CAPACITY, GraphError};
/// The vocabulary every crewline crate shares (messages, tool calls, contexts): `crewline-core`,
/// re-exported as `types` so it does not shadow the standard library's `core`.
pub use crewline_core as types;
pub use crewline_llm as llm;
pub use crewline_macros::{function_tool, tools};
pub use crewline_protocol as protocol;
pub use crewline_tools as tool;
pub use loop_agent::LoopAgent;
pub use node::{
    BackgroundAgent, BackgroundNode, NodeError, NodeHandle, NodeSpec, OutputAgent, OutputNode,
};
pub use observer::{NoopObserver, Observer, TurnOutcome};
pub use router::{DeterministicRouter, RouterBuilder, RouterError, RouterState, SubAgent};
pub use session::{DEFAULT_INBOX_BYTES, DispatchError, Session, SessionSetup};
pub use tool_loop::{
    MAX_CALLS_PER_ANSWER, MAX_CALLS_PER_TURN, MAX_TOOL_ROUNDS, RoundReport, ToolLoop,
    ToolLoopConfig, TurnError, TurnEvent, TurnReport, TurnStream,
};

#[doc(hidden)]
pub use crewline_tools::__private;

/// The names most crews need, in one import.
pub mod prelude {
    pub use crate::{
        BackgroundAgent, BackgroundNode, CallControl, Crew, DeterministicRouter, LoopAgent,
        MAX_TOOL_ROUNDS, NodeError, NodeHandle, OutputAgent, OutputNode, RouterState, SessionSetup,
        SubAgent, ToolLoop, ToolLoopConfig, TurnError, TurnEvent, TurnReport, TurnStream,
        function_tool, tools,
    };
    pub use crewline_core::{
        Context, ContextLimits, Message, ToolCall, ToolDefinition, ToolErrorKind, ToolResult,
    };
    pub use crewline_llm::{
        ChatRequest, LlmClient, LlmError, OpenAiClient, Reply, RequestOptions, ScriptedLlm,
        StreamItem, ToolChoice, Usage,
    };
    pub use crewline_protocol::{Event, EventBody};
    pub use crewline_tools::{Tool, ToolError, ToolProvider, ToolRegistry};
    pub use futures::StreamExt;
}
