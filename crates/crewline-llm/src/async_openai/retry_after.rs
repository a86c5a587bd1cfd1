//! A tower layer that keeps a server's `Retry-After` for the error it becomes.
//!
//! async-openai reads an error answer into its `ApiErrorResponse` (status and OpenAI's error
//! object) and drops the headers, so `Retry-After` never reaches the caller: a
//! [`FallbackLlm`](crate::FallbackLlm) would skip a rate-limiting provider for its default
//! pause instead of the server's. Above async-openai's transport (and above any retry layer,
//! so those still see the answer), [`KeepRetryAfter`] turns an error answer that has a
//! `Retry-After` into an error of crewline's own that carries it; the client reads it back as
//! [`LlmError::Api`](crate::LlmError::Api) with `retry_after` set, as the default client
//! reports it.

use std::task::{Context, Poll};

use ::async_openai::{error::OpenAIError, middleware::HttpRequestFactory};
use futures::future::BoxFuture;

use crate::openai::{error_body_message, retry_after};

/// The most bytes of an error answer's body read for its message (a real one is well under a
/// kilobyte; `AnswerBodyLimit`'s default for error bodies).
const MAX_ERROR_BYTES: usize = super::limit::DEFAULT_MAX_ERROR_BYTES;

/// A tower [`Layer`](tower::Layer) for an `async_openai::Client`'s HTTP service that keeps an
/// error answer's `Retry-After` (seconds) in the error the client reports, as
/// [`LlmError::Api`](crate::LlmError::Api)'s `retry_after`.
///
/// [`AsyncOpenAiClient::bounded_client`](crate::AsyncOpenAiClient::bounded_client) and
/// [`AsyncOpenAiClient::provider_client`](crate::AsyncOpenAiClient::provider_client) include
/// it; a service built by hand needs it outermost (outside any retry layer, which must still
/// see the answer itself).
#[derive(Debug, Clone, Copy, Default)]
pub struct KeepRetryAfter;

impl<S> tower::Layer<S> for KeepRetryAfter {
    type Service = RetryAfterKept<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryAfterKept { inner }
    }
}

/// The service [`KeepRetryAfter`] makes: `S` with `Retry-After` kept in its errors.
#[derive(Debug, Clone)]
pub struct RetryAfterKept<S> {
    inner: S,
}

impl<S> tower::Service<HttpRequestFactory> for RetryAfterKept<S>
where
    S: tower::Service<HttpRequestFactory, Response = reqwest::Response, Error = OpenAIError>,
    S::Future: Send + 'static,
{
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = BoxFuture<'static, Result<reqwest::Response, OpenAIError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: HttpRequestFactory) -> Self::Future {
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            if response.status().is_success() {
                return Ok(response);
            }
            let Some(after) = retry_after(response.headers()) else {
                // Nothing to keep: async-openai reads the answer as it always does.
                return Ok(response);
            };
            Err(OpenAIError::Boxed(Box::new(
                RetryAfterAnswer::read(response, after).await,
            )))
        })
    }
}

/// An error answer with the server's `Retry-After`, read by [`KeepRetryAfter`].
#[derive(Debug, thiserror::Error)]
#[error("{status} {message}")]
pub(super) struct RetryAfterAnswer {
    /// The HTTP status.
    pub(super) status: u16,
    /// The server's message, read from its body as the default client reads it.
    pub(super) message: String,
    /// How long the server asked to wait.
    pub(super) retry_after: std::time::Duration,
}

impl RetryAfterAnswer {
    /// Reads `response`'s message from at most [`MAX_ERROR_BYTES`] of its body.
    async fn read(mut response: reqwest::Response, retry_after: std::time::Duration) -> Self {
        let status = response.status();
        let mut body = Vec::new();
        // A body that breaks off leaves what was read: the status and the pause are the point.
        while body.len() < MAX_ERROR_BYTES
            && let Ok(Some(chunk)) = response.chunk().await
        {
            let room = MAX_ERROR_BYTES - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        let message = error_body_message(&body)
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("no message").to_owned());
        Self {
            status: status.as_u16(),
            message,
            retry_after,
        }
    }
}
