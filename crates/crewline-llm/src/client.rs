use async_trait::async_trait;

use crate::{ChatRequest, ChatResponse, LlmError, LlmStream, collect};

/// A chat model that can stream its answer.
///
/// Implementations must make dropping the returned stream cancel the request at once: that is
/// how barge-in stops a generation.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait LlmClient: Send + Sync {
    /// Starts a streamed chat completion.
    ///
    /// Errors before the first byte (connect, HTTP status) are returned here; errors after it
    /// arrive as items of the stream.
    async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError>;

    /// Runs a chat completion to the end and returns the whole answer.
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        collect(self.stream_chat(request).await?).await
    }
}

/// A shared model is a model: an `Arc<dyn LlmClient>` goes wherever an `impl LlmClient` does.
#[async_trait]
impl<T: LlmClient + ?Sized> LlmClient for std::sync::Arc<T> {
    async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError> {
        (**self).stream_chat(request).await
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        (**self).chat(request).await
    }
}
