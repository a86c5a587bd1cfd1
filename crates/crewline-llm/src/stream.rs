use crewline_core::ToolCall;
use futures::{StreamExt, stream::BoxStream};
use serde::{Deserialize, Serialize};

use crate::LlmError;

/// The stream of one chat completion.
pub type LlmStream = BoxStream<'static, Result<StreamItem, LlmError>>;

/// One item of a streamed chat completion.
///
/// Order: any number of `Text` items as the model writes; then, if the model called tools, one
/// `ToolCalls` item with every call assembled; then one `Finish`. `Usage` may come anywhere,
/// usually last. `Reasoning` items (a reasoning model's thinking) come as the model writes
/// them, usually before any `Text`: they are never to be spoken.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A piece of the answer's text.
    Text(String),
    /// The turn's tool calls, complete, in the order the model made them.
    ToolCalls(Vec<ToolCall>),
    /// Why the model stopped.
    Finish(FinishReason),
    /// Token usage of the request.
    Usage(Usage),
    /// A piece of the model's reasoning (`reasoning_content` or `reasoning` in a delta, as
    /// DeepSeek, vLLM's reasoning parsers and OpenRouter send): for logs and the node, never
    /// for speech.
    Reasoning(String),
    /// Which provider answers, by the name it was given (from a
    /// [`FallbackLlm`](crate::FallbackLlm), before the provider's first item, and again when
    /// the turn moves to another provider): for the turn's span and logs, never spoken.
    Provider(std::sync::Arc<str>),
}

/// Why the model stopped writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A natural end.
    Stop,
    /// The token limit was reached.
    Length,
    /// The model called tools.
    ToolCalls,
    /// The answer was filtered.
    ContentFilter,
    /// Anything else a server may say.
    Other(String),
}

impl FinishReason {
    /// Reads a wire value; empty strings (sent by some servers mid-stream) mean "not finished".
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "" => return None,
            "stop" => Self::Stop,
            "length" => Self::Length,
            "tool_calls" | "function_call" => Self::ToolCalls,
            "content_filter" => Self::ContentFilter,
            other => Self::Other(other.to_owned()),
        })
    }
}

/// Tokens used by one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Both together.
    pub total_tokens: u32,
    /// Of the completion tokens, those the model spent reasoning
    /// (`completion_tokens_details.reasoning_tokens`; 0 when the server does not say).
    #[serde(default)]
    pub reasoning_tokens: u32,
    /// Of the prompt tokens, those the server read from its prompt cache
    /// (`prompt_tokens_details.cached_tokens`; 0 when the server does not say).
    #[serde(default)]
    pub cached_tokens: u32,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.cached_tokens += other.cached_tokens;
    }
}

/// A whole chat completion.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    /// The answer's text.
    pub content: String,
    /// The model's reasoning, when it sent any (never part of `content`).
    pub reasoning: String,
    /// The tool calls the model made.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped, when the server said.
    pub finish_reason: Option<FinishReason>,
    /// Token usage, when the server reported it.
    pub usage: Option<Usage>,
    /// The provider that answered, when a [`FallbackLlm`](crate::FallbackLlm) said.
    pub provider: Option<std::sync::Arc<str>>,
}

/// Reads a stream to its end into one [`ChatResponse`].
pub async fn collect(mut stream: LlmStream) -> Result<ChatResponse, LlmError> {
    let mut response = ChatResponse::default();
    while let Some(item) = stream.next().await {
        match item? {
            StreamItem::Text(text) => response.content.push_str(&text),
            StreamItem::ToolCalls(calls) => response.tool_calls.extend(calls),
            StreamItem::Finish(reason) => response.finish_reason = Some(reason),
            StreamItem::Usage(usage) => response.usage = Some(usage),
            StreamItem::Reasoning(text) => response.reasoning.push_str(&text),
            StreamItem::Provider(name) => response.provider = Some(name),
        }
    }
    Ok(response)
}
