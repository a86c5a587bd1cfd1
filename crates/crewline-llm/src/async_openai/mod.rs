//! The [`LlmClient`] over an [`async_openai::Client`] a team already configured (OpenAI,
//! Azure, a proxy, custom headers, its own HTTP client or retry middleware), and conversions
//! between crewline's requests and async-openai's.
//!
//! The request goes through the team's client unchanged (its URL, headers, query, HTTP client
//! and middleware); only its body and the reading of the answer are crewline's: the body is
//! the one [`OpenAiClient`](crate::OpenAiClient) writes, sent as raw JSON (async-openai's
//! `byot`), and each streamed event comes back as raw JSON and is read by the same lenient
//! chunk reader and [`ToolCallAssembler`](crate::ToolCallAssembler), so both clients answer
//! alike on every odd shape a server sends.
//!
//! Differences from the default client, all from async-openai's own HTTP layer:
//!
//! - retries are the team's: async-openai's default client retries 429, 5xx and connect
//!   errors 3 times, a `middleware` stack does what it was built to do;
//! - an error answer that is not OpenAI's `{"error": {..}}` (a 4xx from vLLM, a plain-text
//!   proxy page) reaches us without its status: it is an [`LlmError::Api`] with
//!   `status: None` and the body's message;
//! - **async-openai reads with no size limit of its own**: an error answer's body whole
//!   (and logs it whole at ERROR when it is not OpenAI's JSON), a stream's lines and events
//!   however long. A client from [`AsyncOpenAiClient::bounded_client`], or one whose HTTP
//!   service has the [`AnswerBodyLimit`] layer, reads error bodies up to 16 KiB and stream
//!   lines and events up to 4 MiB (then [`LlmError::TooLarge`]), as the default client
//!   does. **A client built without it is unbounded: a hostile or broken server can make it
//!   hold gigabytes.** The whole answer's [`AnswerLimits`] hold either way, and error
//!   messages are cut to 2,000 characters before crewline logs or reports them;
//! - the answer is read by a task of async-openai's and handed over through a channel (the
//!   default client reads in the caller's task), and the connection is closed at `[DONE]`
//!   instead of going back to the pool.
//!
//! Enabling this feature turns on async-openai's `byot` feature for the whole build: under it
//! async-openai's own `Chat::create_stream` sends the request's `stream` field as it is set,
//! instead of forcing it on, so code of the team's that calls it must set `.stream(true)`.

pub mod convert;
mod error;
mod limit;
mod reader;
mod retry_after;

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use ::async_openai::{Client, config::Config, types::stream::StreamResponse};
use async_trait::async_trait;
use serde_json::value::RawValue;
use tokio::time::Instant;
use tracing::Instrument;

use crate::{
    AnswerLimits, ChatRequest, ChatResponse, ErrorDetail, LlmClient, LlmError, LlmStream,
    MaxTokensField, RequestOptions,
    openai::{
        decode_chunk, explain_refusal, refuses_stream_options, snippet, whole_response, write_body,
    },
};

pub use self::convert::ConversionError;
pub use self::limit::{AnswerBodyLimit, BodyLimited};
pub use self::retry_after::{KeepRetryAfter, RetryAfterKept};
use self::{error::Scrubber, reader::Reader};

/// The default time limit for the answer's headers and first token (the default client's).
const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);
/// The default longest pause between two chunks that carry something (the default client's).
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// A written request body and what it asked for.
struct Body {
    raw: Box<RawValue>,
    token_field: Option<MaxTokensField>,
    stream_options: bool,
}

/// A crewline model over an [`async_openai::Client`]: streams chat completions through the
/// team's client, read as leniently as [`OpenAiClient`](crate::OpenAiClient) reads them.
///
/// Time limits as the default client's: the answer's headers and first token within
/// `first_byte_timeout` (async-openai's retries included), then no two chunks that carry
/// something more than `idle_timeout` apart. Dropping the stream closes the connection.
///
/// ```no_run
/// use async_openai::{Client, config::AzureConfig};
/// use crewline_llm::{AsyncOpenAiClient, ChatRequest, LlmClient};
///
/// # async fn run() -> Result<(), crewline_llm::LlmError> {
/// let azure = Client::with_config(
///     AzureConfig::new()
///         .with_api_base("https://my-resource.openai.azure.com")
///         .with_deployment_id("gpt-4o-mini")
///         .with_api_version("2024-10-21")
///         .with_api_key("..."),
/// );
/// let model = AsyncOpenAiClient::new(azure, "gpt-4o-mini");
/// let answer = model
///     .chat(ChatRequest::new(vec![crewline_core::Message::user("Hello?")]))
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncOpenAiClient<C: Config> {
    client: Client<C>,
    defaults: RequestOptions,
    first_byte_timeout: Duration,
    idle_timeout: Duration,
    /// The bounds of one whole answer.
    answer_limits: AnswerLimits,
    /// Set once the server has refused `stream_options` (a 400 naming it): later requests
    /// leave it out. Shared by clones, as the default client's flag is.
    stream_options_refused: Arc<AtomicBool>,
}

impl<C: Config> fmt::Debug for AsyncOpenAiClient<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the client: its config holds the key.
        f.debug_struct("AsyncOpenAiClient")
            .field("api_base", &self.client.config().api_base())
            .field("defaults", &self.defaults)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("answer_limits", &self.answer_limits)
            .field(
                "stream_options_refused",
                &self.stream_options_refused.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

impl<C: Config> AsyncOpenAiClient<C> {
    /// A model named `model` (sent in each body; Azure reads the deployment from its URL)
    /// served through `client`.
    pub fn new(client: Client<C>, model: impl Into<String>) -> Self {
        Self {
            client,
            defaults: RequestOptions {
                model: Some(model.into()),
                ..RequestOptions::default()
            },
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            answer_limits: AnswerLimits::default(),
            stream_options_refused: Arc::new(AtomicBool::new(false)),
        }
    }

    /// An `async_openai::Client` for `config` that sends through `http` with async-openai's
    /// default retries, each answer bounded by [`AnswerBodyLimit`] and an error's
    /// `Retry-After` kept ([`KeepRetryAfter`]): the client to give [`AsyncOpenAiClient::new`]
    /// unless the team builds its own HTTP service (then add the layers to it). A client built
    /// any other way reads error bodies and stream lines with no limit at all, and loses the
    /// server's `Retry-After` (async-openai's error drops the answer's headers). For a provider
    /// of a [`FallbackLlm`](crate::FallbackLlm), use [`AsyncOpenAiClient::provider_client`]:
    /// its retries would hold the turn on a failing provider.
    ///
    /// ```no_run
    /// use async_openai::config::OpenAIConfig;
    /// use crewline_llm::AsyncOpenAiClient;
    ///
    /// let client = AsyncOpenAiClient::bounded_client(OpenAIConfig::default(), reqwest::Client::new());
    /// let model = AsyncOpenAiClient::new(client, "gpt-4o-mini");
    /// ```
    pub fn bounded_client(config: C, http: reqwest::Client) -> Client<C>
    where
        C: 'static,
    {
        use ::async_openai::middleware::{ReqwestService, retry::OpenAIRetryLayer};

        // The limit innermost, so each attempt of a retry is bounded; `Retry-After` kept
        // outermost, so the retry layer still sees (and waits on) the answer itself.
        let service = tower::ServiceBuilder::new()
            .layer(KeepRetryAfter)
            .layer(OpenAIRetryLayer::default())
            .layer(AnswerBodyLimit::default())
            .service(ReqwestService::new(http));
        Client::with_config(config).with_http_service(service)
    }

    /// An `async_openai::Client` for one provider of a [`FallbackLlm`](crate::FallbackLlm):
    /// as [`AsyncOpenAiClient::bounded_client`] (answers bounded, `Retry-After` kept) but with
    /// no retries of its own, so a provider that fails fails at once and the next one answers
    /// (the fallback is the retry; the default client's equivalent is `max_retries(0)`).
    ///
    /// ```no_run
    /// use std::sync::Arc;
    ///
    /// use async_openai::config::OpenAIConfig;
    /// use crewline_llm::{AsyncOpenAiClient, FallbackLlm};
    ///
    /// let primary = AsyncOpenAiClient::provider_client(OpenAIConfig::default(), reqwest::Client::new());
    /// let backup = AsyncOpenAiClient::provider_client(
    ///     OpenAIConfig::default().with_api_base("https://backup.example/v1"),
    ///     reqwest::Client::new(),
    /// );
    /// let llm = FallbackLlm::builder()
    ///     .provider("primary", Arc::new(AsyncOpenAiClient::new(primary, "gpt-4o-mini")))
    ///     .provider("backup", Arc::new(AsyncOpenAiClient::new(backup, "llama-3.3-70b")))
    ///     .build()?;
    /// # Ok::<(), crewline_llm::LlmError>(())
    /// ```
    pub fn provider_client(config: C, http: reqwest::Client) -> Client<C>
    where
        C: 'static,
    {
        use ::async_openai::middleware::ReqwestService;

        let service = tower::ServiceBuilder::new()
            .layer(KeepRetryAfter)
            .layer(AnswerBodyLimit::default())
            .service(ReqwestService::new(http));
        Client::with_config(config).with_http_service(service)
    }

    /// Sets the settings every request starts from (a request's own options override them);
    /// a `model` left unset here keeps the one given to [`AsyncOpenAiClient::new`].
    pub fn with_defaults(mut self, defaults: RequestOptions) -> Self {
        let model = defaults.model.clone().or(self.defaults.model.take());
        self.defaults = RequestOptions { model, ..defaults };
        self
    }

    /// Sets how long the answer's headers and its first token may take (default 30 s).
    pub fn with_first_byte_timeout(mut self, timeout: Duration) -> Self {
        self.first_byte_timeout = timeout;
        self
    }

    /// Sets the longest pause between two chunks that carry something (default 10 s).
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets the bounds of one whole answer (default [`AnswerLimits::default`]), as
    /// [`OpenAiClientBuilder::answer_limits`](crate::OpenAiClientBuilder::answer_limits) does.
    pub fn with_answer_limits(mut self, limits: AnswerLimits) -> Self {
        self.answer_limits = limits;
        self
    }

    /// The async-openai client requests go through.
    pub fn client(&self) -> &Client<C> {
        &self.client
    }

    /// The default model.
    pub fn model(&self) -> &str {
        self.defaults.model.as_deref().unwrap_or_default()
    }

    /// The debug span of one request (the default client's fields).
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
            client = "async-openai",
            time_to_first_token_ms = tracing::field::Empty
        )
    }

    /// The request body, as the raw JSON async-openai sends as it is, and the field its token
    /// limit went in (to explain a refusal of it).
    fn body(
        &self,
        request: &ChatRequest,
        stream: bool,
        stream_options_allowed: bool,
    ) -> Result<Body, LlmError> {
        let built = write_body(&self.defaults, request, stream, stream_options_allowed)?;
        // The body is JSON we just wrote: this check never fails, and costs one scan per turn.
        let raw = String::from_utf8(built.bytes.into())
            .map_err(|e| LlmError::config_caused_by("the request body is not UTF-8", e))
            .and_then(|text| {
                RawValue::from_string(text)
                    .map_err(|e| LlmError::config_caused_by("the request body is not JSON", e))
            })?;
        Ok(Body {
            raw,
            token_field: built.token_field,
            stream_options: built.stream_options,
        })
    }

    /// Opens the stream for `body` through the team's client, within the first-byte deadline.
    async fn open(
        &self,
        body: Box<RawValue>,
        deadline: Instant,
        scrubber: &Scrubber,
    ) -> Result<StreamResponse<Box<RawValue>>, LlmError> {
        let opened = tokio::time::timeout_at(
            deadline,
            self.client
                .chat()
                .create_stream_byot::<_, Box<RawValue>>(body),
        )
        .await;
        match opened {
            Err(_) => Err(LlmError::Timeout(self.first_byte_timeout)),
            Ok(Err(error)) => {
                Err(scrubber.error(error::before_first_byte(error, self.first_byte_timeout)))
            }
            Ok(Ok(events)) => Ok(events),
        }
    }

    /// A scrubber of the team's API key out of error messages.
    fn scrubber(&self) -> Scrubber {
        Scrubber::new(self.client.config().api_key())
    }
}

#[async_trait]
impl<C: Config + 'static> LlmClient for AsyncOpenAiClient<C> {
    fn model_id(&self) -> Option<&str> {
        Some(self.model())
    }

    async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError> {
        let span = self.span(&request, true);
        let allowed = !self.stream_options_refused.load(Ordering::Relaxed);
        let body = self.body(&request, true, allowed)?;
        let scrubber = self.scrubber();
        let started = Instant::now();
        let deadline = started + self.first_byte_timeout;
        let mut token_field = body.token_field;
        let mut opened = self
            .open(body.raw, deadline, &scrubber)
            .instrument(span.clone())
            .await;
        if body.stream_options
            && let Err(error) = &opened
            && refuses_stream_options(error)
        {
            // Once per client, as the default client does: later requests leave it out.
            if !self.stream_options_refused.swap(true, Ordering::Relaxed) {
                span.in_scope(|| {
                    tracing::warn!(
                        error = %crewline_core::ErrorChain(error),
                        "the server refuses stream_options: retrying without it, and leaving it out from now on (no token usage from this server's streams)"
                    );
                });
            }
            let body = self.body(&request, true, false)?;
            token_field = body.token_field;
            opened = self
                .open(body.raw, deadline, &scrubber)
                .instrument(span.clone())
                .await;
        }
        let events = match opened {
            Err(error) => {
                let error = explain_refusal(error, token_field);
                span.in_scope(|| tracing::warn!(error = %crewline_core::ErrorChain(&error), "request failed before the first byte"));
                return Err(error);
            }
            Ok(events) => events,
        };
        span.in_scope(|| {
            tracing::debug!(
                time_to_headers_ms = started.elapsed().as_millis() as u64,
                "answer headers received"
            );
        });
        Ok(Box::pin(Reader::new(
            events,
            reader::Limits {
                first_byte: self.first_byte_timeout,
                idle: self.idle_timeout,
                answer: self.answer_limits,
            },
            started,
            scrubber,
            span,
        )))
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let span = self.span(&request, false);
        let Body {
            raw: body,
            token_field,
            ..
        } = self.body(&request, false, false)?;
        let scrubber = self.scrubber();
        // As the default client: the whole answer gets both limits together.
        let limit = self.first_byte_timeout.saturating_add(self.idle_timeout);
        let answer = tokio::time::timeout(
            limit,
            self.client.chat().create_byot::<_, Box<RawValue>>(body),
        )
        .instrument(span.clone())
        .await;
        let result = match answer {
            Err(_) => Err(LlmError::Timeout(limit)),
            Ok(Err(error)) => Err(error::whole_answer(error, limit)),
            Ok(Ok(raw)) => decode_chunk(raw.get().as_bytes())
                .map_err(|err| {
                    let message =
                        format!("{err}; the answer began with: {}", snippet(raw.get(), 300));
                    LlmError::InvalidResponse(ErrorDetail::caused_by(message, err))
                })
                .and_then(|chunk| whole_response(chunk, self.answer_limits)),
        }
        .map_err(|e| explain_refusal(scrubber.error(e), token_field));
        if let Err(error) = &result {
            span.in_scope(
                || tracing::warn!(error = %crewline_core::ErrorChain(error), "chat request failed"),
            );
        }
        result
    }
}
