use async_trait::async_trait;

use crate::{ChatRequest, ChatResponse, LlmError, LlmStream, collect};

/// A chat model that can stream its answer.
///
/// Implementations must make dropping the returned stream cancel the request at once: that is
/// how barge-in stops a generation.
///
/// # Examples
///
/// A model of your own (a canned answer here; a vendor's SDK in practice) needs only
/// `stream_chat`; `chat` collects the stream:
///
/// ```
/// use async_trait::async_trait;
/// use crewline_core::Message;
/// use crewline_llm::{ChatRequest, FinishReason, LlmClient, LlmError, LlmStream, StreamItem};
/// use futures::StreamExt;
///
/// struct Echo;
///
/// #[async_trait]
/// impl LlmClient for Echo {
///     async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError> {
///         let said = request.messages.last().and_then(Message::text).unwrap_or_default();
///         let items = vec![
///             Ok(StreamItem::Text(format!("You said: {said}"))),
///             Ok(StreamItem::Finish(FinishReason::Stop)),
///         ];
///         Ok(futures::stream::iter(items).boxed())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LlmError> {
/// let answer = Echo.chat(ChatRequest::new(vec![Message::user("hello")])).await?;
/// assert_eq!(answer.content, "You said: hello");
/// assert_eq!(answer.finish_reason, Some(FinishReason::Stop));
/// # Ok(()) }
/// ```
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

    /// The model this client asks for unless a request says otherwise, to label what it
    /// costs (token counters by model); `None` when the client does not know.
    fn model_id(&self) -> Option<&str> {
        None
    }

    /// The model of the provider named `provider` in this client's
    /// [`StreamItem::Provider`](crate::StreamItem::Provider) items (a
    /// [`FallbackLlm`](crate::FallbackLlm)'s), so what a turn a fallback provider answered
    /// cost is labelled with that provider's model, not the first one's; `None` when the
    /// client has no such provider or does not know its model.
    fn provider_model_id(&self, provider: &str) -> Option<&str> {
        let _ = provider;
        None
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

    fn model_id(&self) -> Option<&str> {
        (**self).model_id()
    }

    fn provider_model_id(&self, provider: &str) -> Option<&str> {
        (**self).provider_model_id(provider)
    }
}

#[cfg(any(test, feature = "mock"))]
mockall::mock! {
    /// A mock [`LlmClient`] (feature `mock`): set what `stream_chat` and `chat` return per
    /// call; `model_id` keeps the trait's default, so tests need no expectation for it.
    pub LlmClient {}

    #[async_trait]
    impl LlmClient for LlmClient {
        async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError>;
        async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError>;
    }
}
