//! The `generate_response` tool loop.

use std::{sync::Arc, time::Duration};

use crewline_core::{Context, ToolCall};
use crewline_llm::{LlmClient, LlmError, RequestOptions, Usage};
use crewline_tools::{ToolRegistry, ToolRun};
use futures::stream::BoxStream;

/// How many tool rounds a turn may take by default.
pub const MAX_TOOL_ROUNDS: usize = 4;

/// Settings of a [`ToolLoop`].
#[derive(Debug, Clone)]
pub struct ToolLoopConfig {
    /// The most rounds with tool calls before a last, tool-less answer is forced.
    pub max_tool_rounds: usize,
    /// Whether one round's tool calls run concurrently (`true`) or one after the other.
    pub parallel_tools: bool,
    /// Overrides for every request of the loop.
    pub options: RequestOptions,
}

impl Default for ToolLoopConfig {
    fn default() -> Self {
        Self {
            max_tool_rounds: MAX_TOOL_ROUNDS,
            parallel_tools: true,
            options: RequestOptions::default(),
        }
    }
}

/// Runs an agent's LLM turns with tools.
#[derive(Clone)]
pub struct ToolLoop {
    llm: Arc<dyn LlmClient>,
    tools: Arc<ToolRegistry>,
    config: ToolLoopConfig,
}

/// Something that happened during a turn.
#[derive(Debug, Clone)]
pub enum TurnEvent {
    /// A piece of the answer, to speak at once.
    Text(String),
    /// A tool call is about to run.
    ToolStarted(ToolCall),
    /// A tool call finished (successfully or not).
    ToolFinished(ToolRun),
    /// The turn is over.
    Done(TurnReport),
}

/// Why a turn failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// The model's request failed.
    #[error(transparent)]
    Llm(#[from] LlmError),
}

/// What one turn cost.
#[derive(Debug, Clone, Default)]
pub struct TurnReport {
    /// One entry per LLM request.
    pub rounds: Vec<RoundReport>,
    /// Tokens over all requests.
    pub usage: Usage,
    /// Time from the turn's start to its first text.
    pub time_to_first_token: Option<Duration>,
    /// Time from the turn's start to its end.
    pub total: Duration,
    /// Whether the round cap was reached and a tool-less answer forced.
    pub hit_round_cap: bool,
}

/// What one LLM request of a turn cost.
#[derive(Debug, Clone, Default)]
pub struct RoundReport {
    /// Time from the request to its first text or tool call.
    pub time_to_first_token: Option<Duration>,
    /// Time from the request to the end of its tools.
    pub duration: Duration,
    /// Tokens, when the server reported them.
    pub usage: Option<Usage>,
    /// Each tool call of the round: name and latency.
    pub tools: Vec<(String, Duration)>,
}

/// The events of one turn.
pub type TurnStream<'a> = BoxStream<'a, Result<TurnEvent, TurnError>>;

impl ToolLoop {
    /// A loop over `llm` with `tools`, with default settings.
    pub fn new(llm: Arc<dyn LlmClient>, tools: Arc<ToolRegistry>) -> Self {
        Self {
            llm,
            tools,
            config: ToolLoopConfig::default(),
        }
    }

    /// Replaces the settings.
    pub fn with_config(mut self, config: ToolLoopConfig) -> Self {
        self.config = config;
        self
    }

    /// Runs one turn on `context`.
    pub fn run<'a>(&'a self, _context: &'a mut Context) -> TurnStream<'a> {
        todo!()
    }
}
