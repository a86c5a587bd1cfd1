//! Streaming LLM clients for crewline.
//!
//! Everything that talks to a model goes through the [`LlmClient`] trait: a streamed chat
//! completion yields [`StreamItem`]s (text deltas, the turn's completed tool calls, the finish
//! reason, token usage). Two clients ship here:
//!
//! - [`OpenAiClient`]: OpenAI and any OpenAI-compatible server, parsed leniently so the odd
//!   shapes real servers send never break a turn;
//! - [`ScriptedLlm`]: a deterministic, offline model for tests, examples and demos.
//!
//! [`FallbackLlm`] puts several clients behind one: failover, hedged first tokens, circuit
//! breakers and a retry budget, so no call is dropped by one provider (see [`fallback`]).
//!
//! With the `async-openai` feature, `AsyncOpenAiClient` streams through an
//! `async_openai::Client` a team already configured (Azure, a proxy, its own retry policy),
//! read by the same lenient reader; `async_openai_convert` converts requests both ways.
//!
//! Tool-call deltas are put together by the [`ToolCallAssembler`], which both clients use.
//! [`TextToolCalls`] wraps any client whose model writes its tool calls as text in the
//! answer (some local servers), so they are run rather than spoken.

mod assembler;
#[cfg(feature = "async-openai")]
mod async_openai;
mod client;
mod error;
pub mod fallback;
mod limits;
mod openai;
mod price;
mod request;
mod scripted;
mod stream;
mod text_tool_calls;
#[cfg(feature = "tiktoken")]
mod tokens;
mod transport;

pub use assembler::{ToolCallAssembler, ToolCallDelta};
#[cfg(feature = "async-openai")]
pub use async_openai::{
    AnswerBodyLimit, AsyncOpenAiClient, BodyLimited, ConversionError, KeepRetryAfter,
    RetryAfterKept, convert as async_openai_convert,
};
pub use client::LlmClient;
#[cfg(any(test, feature = "mock"))]
pub use client::MockLlmClient;
pub use error::{ErrorDetail, LlmError};
pub use fallback::{
    AfterText, BreakerConfig, BreakerState, FallbackBuilder, FallbackLlm, Hedge, ProviderStats,
    RetryBudget, SharedBreakers,
};
pub use limits::AnswerLimits;
pub use openai::{OpenAiClient, OpenAiClientBuilder};
pub use price::{Money, Price, PriceError, PriceTable};
pub use request::{
    ChatRequest, JsonSchemaFormat, MaxTokensField, RequestOptions, ResponseFormat, ToolChoice,
};
pub use scripted::{REQUEST_LOG_LIMIT, Reply, ScriptError, ScriptedLlm};
pub use stream::{ChatResponse, FinishReason, LlmStream, StreamItem, Usage, collect};
pub use text_tool_calls::{TextToolCallFormat, TextToolCalls};
#[cfg(feature = "tiktoken")]
pub use tokens::TiktokenCounter;
pub use transport::{ConnectionCounts, TlsRoots};
