//! The OpenAI-compatible streaming client.
//!
//! Requests are JSON bodies written straight from the request (see `body`) and posted with
//! hyper-util's pooled client (HTTP/2 or HTTP/1.1, direct or through a proxy, see
//! [`crate::transport`]); a streamed
//! answer's server-sent events are parsed in the caller's own task, as it polls the stream (no
//! reader task, no channel), and read with our own lenient types (see `wire`), so the small
//! differences between OpenAI-compatible servers never break a turn.
//!
//! Time limits: the connection must be up within `connect_timeout`; the answer's headers *and*
//! its first token (text, a tool call, the finish reason) must arrive within
//! `first_byte_timeout` of the request (retries included); after that, no two chunks that
//! carry something may be more than `idle_timeout` apart (keepalives, comments and empty
//! deltas do not count: the caller hears nothing of them); once the model has sent
//! its `finish_reason`, the rest (usage, `[DONE]`) gets [`crate::transport::deadline::FINISH_GRACE`], after which the answer
//! ends without it. Retries (connect errors, 429, 5xx) happen only before the first byte: once
//! text may have been spoken, a failure is reported, never replayed.
//!
//! Size limits: one line or one event of a stream, and a whole non-streamed answer, may be at
//! most `max_event_bytes` (the call fails with [`LlmError::TooLarge`]); an error answer's body
//! is read up to [`http::ERROR_BODY_LIMIT`] and cut there.

mod body;
mod builder;
mod decode;
mod http;
mod key;
mod quirks;
mod reader;
mod schemas;
mod sse;
mod wire;

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use futures::TryStreamExt;
use http_body_util::BodyDataStream;
use tokio::time::Instant;
use tracing::Instrument;

use crate::{
    AnswerLimits, ChatRequest, ChatResponse, ErrorDetail, LlmClient, LlmError, LlmStream,
    RequestOptions,
};

pub use self::builder::OpenAiClientBuilder;
use self::{http::Transport, key::ApiKey, reader::Reader};
// What the async-openai client shares with this one, so both write the same bodies and read
// the same chunks the same way.
#[cfg(feature = "async-openai")]
pub(crate) use self::{
    body::{build as build_body, build_body as write_body},
    decode::{Decoder, Flow, Pending, response as whole_response},
    http::retry_after,
    quirks::{explain as explain_refusal, refuses_stream_options},
    wire::{decode_chunk, error_body_message, snippet},
};

/// A client for OpenAI and OpenAI-compatible servers (vLLM, Ollama, Groq, OpenRouter...).
///
/// Cheap to clone: clones share the connection pool.
///
/// # Examples
///
/// Stream an answer from any OpenAI-compatible server (here the testkit's mock model, on a
/// free local port):
///
/// ```
/// use crewline_core::Message;
/// use crewline_llm::{ChatRequest, LlmClient, OpenAiClient, StreamItem};
/// use futures::StreamExt;
/// # use crewline_testkit::mock_llm::{MockLlm, Script};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let script = Script::from_json(&serde_json::json!({
/// #     "replies": [{"reply": {"content_chunks": ["Sunny ", "in Paris."]}}]
/// # }))?;
/// # let mock = MockLlm::new(script).spawn("127.0.0.1:0".parse()?).await?;
/// # let base_url = mock.base_url();
/// let client = OpenAiClient::builder()
///     .model("gpt-4o-mini")
///     .base_url(base_url) // e.g. "http://localhost:8000/v1" for vLLM
///     .api_key("sk-test")
///     .build()?;
///
/// let request = ChatRequest::new(vec![Message::user("Weather in Paris?")]);
/// let mut stream = client.stream_chat(request).await?;
/// let mut said = String::new();
/// while let Some(item) = stream.next().await {
///     if let StreamItem::Text(piece) = item? {
///         said.push_str(&piece); // speak each piece as it arrives
///     }
/// }
/// assert_eq!(said, "Sunny in Paris.");
///
/// // Or wait for the whole answer.
/// let answer = client.chat(ChatRequest::new(vec![Message::user("Again?")])).await?;
/// assert_eq!(answer.content, "Sunny in Paris.");
/// # Ok(()) }
/// ```
///
/// With a real key, [`from_env`](Self::from_env) reads `OPENAI_API_KEY` (and
/// `OPENAI_BASE_URL`):
///
/// ```no_run
/// # fn main() -> Result<(), crewline_llm::LlmError> {
/// let client = crewline_llm::OpenAiClient::from_env("gpt-4o-mini")?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct OpenAiClient {
    transport: Transport,
    defaults: RequestOptions,
    base_url: String,
    api_key: ApiKey,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    idle_timeout: Duration,
    max_retries: usize,
    max_event_bytes: usize,
    /// The bounds of one whole answer.
    answer_limits: AnswerLimits,
    /// Set once the server has refused `stream_options` (a 400 naming it): later requests
    /// leave it out. Shared by clones, like the connection pool.
    stream_options_refused: Arc<AtomicBool>,
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("model", &self.defaults.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key)
            .field("temperature", &self.defaults.temperature)
            .field("max_tokens", &self.defaults.max_tokens)
            .field("extra", &self.defaults.extra)
            .field("connect_timeout", &self.connect_timeout)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_retries", &self.max_retries)
            .field("max_event_bytes", &self.max_event_bytes)
            .field("answer_limits", &self.answer_limits)
            .field("proxied", &self.transport.proxied())
            .field(
                "stream_options_refused",
                &self.stream_options_refused.load(Ordering::Relaxed),
            )
            .finish()
    }
}

#[cfg(feature = "fuzzing")]
impl OpenAiClient {
    /// Reads a streamed answer whose body arrives as `parts`, as this client reads one from a
    /// server, with no connection: for the fuzz targets (feature `fuzzing`, not a stable API).
    /// Needs a Tokio runtime with time enabled.
    #[doc(hidden)]
    pub fn read_body_for_fuzzing(&self, parts: Vec<bytes::Bytes>) -> LlmStream {
        let body = futures::stream::iter(parts.into_iter().map(Ok::<_, http::HttpError>));
        Box::pin(Reader::new(
            body,
            self,
            Instant::now(),
            tracing::Span::none(),
        ))
    }
}

impl OpenAiClient {
    /// Settings for a client.
    pub fn builder() -> OpenAiClientBuilder {
        OpenAiClientBuilder::default()
    }

    /// A client for `model`, with the key from `OPENAI_API_KEY` and the URL from
    /// `OPENAI_BASE_URL` (or OpenAI's).
    pub fn from_env(model: impl Into<String>) -> Result<Self, LlmError> {
        Self::builder().model(model).build()
    }

    /// The default model.
    pub fn model(&self) -> &str {
        self.defaults.model.as_deref().unwrap_or_default()
    }

    /// The connections this client (and its clones) opened to the server, and how many are
    /// open now: over HTTP/2 a few carry every call's stream, over HTTP/1.1 one per
    /// concurrent stream.
    pub fn connections(&self) -> crate::ConnectionCounts {
        self.transport.connections()
    }

    /// The API base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The debug span of one request.
    fn span(&self, request: &ChatRequest, stream: bool) -> tracing::Span {
        let model = request
            .options
            .model
            .as_deref()
            .unwrap_or_else(|| self.model());
        tracing::debug_span!(
            "llm_request",
            model = %model,
            messages = request.messages.len(),
            tools = request.tools.len(),
            stream,
            time_to_first_token_ms = tracing::field::Empty
        )
    }

    /// Sends the streaming request and waits for the answer's headers.
    async fn open_stream(
        &self,
        body: bytes::Bytes,
        started: Instant,
        deadline: Instant,
    ) -> Result<http::Response, LlmError> {
        match tokio::time::timeout_at(deadline, self.transport.send(body)).await {
            Err(_) => {
                tracing::warn!(timeout = ?self.first_byte_timeout, "no answer before the first-byte time limit");
                Err(LlmError::Timeout(self.first_byte_timeout))
            }
            Ok(Err(error)) => {
                let error = self
                    .api_key
                    .scrub_error(self.transport.request_error(error));
                tracing::warn!(error = %crewline_core::ErrorChain(&error), "request failed before the first byte");
                Err(error)
            }
            Ok(Ok(response)) => {
                tracing::debug!(
                    time_to_headers_ms = started.elapsed().as_millis() as u64,
                    "answer headers received"
                );
                Ok(response)
            }
        }
    }

    /// Sends a non-streaming request and reads its whole answer.
    async fn whole_answer(&self, body: bytes::Bytes) -> Result<ChatResponse, LlmError> {
        let response = self
            .transport
            .send(body)
            .await
            .map_err(|e| self.transport.request_error(e))?;
        let bytes = match http::read_limited(response, self.max_event_bytes).await {
            Ok(http::Limited::Whole(bytes)) => bytes,
            Ok(http::Limited::Cut(_)) => {
                return Err(LlmError::TooLarge {
                    what: "the answer",
                    limit: self.max_event_bytes,
                });
            }
            Err(e) => return Err(self.transport.http_error(e)),
        };
        let chunk = wire::decode_chunk(&bytes).map_err(|err| {
            let message = format!(
                "{err}; the answer began with: {}",
                wire::snippet(&String::from_utf8_lossy(&bytes), 300)
            );
            LlmError::InvalidResponse(ErrorDetail::caused_by(message, err))
        })?;
        decode::response(chunk, self.answer_limits)
    }
}

#[async_trait]
impl LlmClient for OpenAiClient {
    fn model_id(&self) -> Option<&str> {
        Some(self.model())
    }

    async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError> {
        let span = self.span(&request, true);
        let allowed = !self.stream_options_refused.load(Ordering::Relaxed);
        let built = body::build_body(&self.defaults, &request, true, allowed)?;
        let started = Instant::now();
        let deadline = started + self.first_byte_timeout;
        let mut token_field = built.token_field;
        let mut response = self
            .open_stream(built.bytes, started, deadline)
            .instrument(span.clone())
            .await;
        if built.stream_options
            && let Err(error) = &response
            && quirks::refuses_stream_options(error)
        {
            // Once per client: every later request leaves `stream_options` out.
            if !self.stream_options_refused.swap(true, Ordering::Relaxed) {
                span.in_scope(|| {
                    tracing::warn!(
                        error = %crewline_core::ErrorChain(error),
                        "the server refuses stream_options: retrying without it, and leaving it out from now on (no token usage from this server's streams)"
                    );
                });
            }
            let built = body::build_body(&self.defaults, &request, true, false)?;
            token_field = built.token_field;
            response = self
                .open_stream(built.bytes, started, deadline)
                .instrument(span.clone())
                .await;
        }
        let response = response.map_err(|e| quirks::explain(e, token_field))?;
        Ok(Box::pin(Reader::new(
            BodyDataStream::new(response.into_body()).map_err(http::HttpError::Body),
            self,
            started,
            span,
        )))
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let span = self.span(&request, false);
        let built = body::build_body(&self.defaults, &request, false, false)?;
        let (body, token_field) = (built.bytes, built.token_field);
        // The server usually sends nothing until the whole answer is written, so the answer
        // gets both limits together.
        let limit = self.first_byte_timeout.saturating_add(self.idle_timeout);
        let started = Instant::now();
        let answer = tokio::time::timeout(limit, self.whole_answer(body))
            .instrument(span.clone())
            .await;
        let result = match answer {
            Err(_) => Err(LlmError::Timeout(limit)),
            Ok(result) => {
                result.map_err(|e| quirks::explain(self.api_key.scrub_error(e), token_field))
            }
        };
        span.in_scope(|| match &result {
            Ok(_) => tracing::debug!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "answer received"
            ),
            Err(error) => {
                tracing::warn!(error = %crewline_core::ErrorChain(error), "chat request failed")
            }
        });
        result
    }
}
