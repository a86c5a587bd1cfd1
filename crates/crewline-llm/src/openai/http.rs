//! The HTTP stack under async-openai, and how its errors become [`LlmError`]s.

use std::{error::Error as StdError, fmt, time::Duration};

use async_openai::{
    Client,
    config::OpenAIConfig,
    error::OpenAIError,
    middleware::{HttpRequestFactory, ReqwestService},
};
use reqwest::header::{AUTHORIZATION, HeaderValue};
use tower::ServiceExt;

use super::wire::{error_body_message, snippet};
use crate::LlmError;

/// An HTTP error answer, read in full by our outermost layer.
///
/// async-openai only understands OpenAI's own error body; servers that write theirs
/// differently (vLLM, FastAPI proxies) would lose the HTTP status. Reading the final answer
/// ourselves keeps the status and the server's message for every server.
#[derive(Debug)]
pub(crate) struct HttpStatusError {
    status: u16,
    message: String,
}

impl fmt::Display for HttpStatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.message)
    }
}

impl StdError for HttpStatusError {}

/// The first pause before a retry; each further retry doubles it, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause before a retry, also for a server's `Retry-After`.
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// An async-openai client whose requests go: retries (connect errors, 429, 5xx, with backoff,
/// before any byte of the answer is read) → reqwest, each attempt carrying `authorization`;
/// a final error answer is read in full into an [`HttpStatusError`].
///
/// The retries are ours, not async-openai's `OpenAIRetryLayer`: that layer parses a 429's body
/// as OpenAI's error shape and gives up without retrying when it does not fit (vLLM and
/// others send `"code": 429` as a number, proxies send text), so a plain rate limit became an
/// unreadable-answer error.
pub(crate) fn client(
    config: OpenAIConfig,
    http: reqwest::Client,
    authorization: HeaderValue,
    max_retries: usize,
) -> Client<OpenAIConfig> {
    let transport = ReqwestService::new(http);
    let service = tower::service_fn(move |factory: HttpRequestFactory| {
        let transport = transport.clone();
        let factory = with_authorization(factory, authorization.clone());
        async move { send_with_retries(transport, factory, max_retries).await }
    });
    Client::with_config(config).with_http_service(service)
}

/// Sends the request, retrying what may succeed on another try, at most `max_retries` times.
async fn send_with_retries(
    transport: ReqwestService,
    factory: HttpRequestFactory,
    max_retries: usize,
) -> Result<reqwest::Response, OpenAIError> {
    let mut backoff = FIRST_BACKOFF;
    let mut retries = 0;
    loop {
        let (error, retryable, retry_after) = match transport.clone().oneshot(factory.clone()).await
        {
            Ok(response) if response.status().is_success() => return Ok(response),
            Ok(response) => {
                let status = response.status();
                let retry_after = retry_after(response.headers());
                let (message, permanent) = match response.bytes().await {
                    Ok(body) => (error_body_message(&body), is_out_of_quota(&body)),
                    Err(err) => (
                        Some(format!("(the error body could not be read: {err})")),
                        false,
                    ),
                };
                let message = message.unwrap_or_else(|| {
                    status.canonical_reason().unwrap_or("no message").to_owned()
                });
                // An exhausted quota answers 429 too, but waiting does not help.
                let retryable = (status.as_u16() == 429 && !permanent) || status.is_server_error();
                let error = OpenAIError::Boxed(Box::new(HttpStatusError {
                    status: status.as_u16(),
                    message,
                }));
                (error, retryable, retry_after)
            }
            Err(OpenAIError::Reqwest(err)) if err.is_connect() => {
                (OpenAIError::Reqwest(err), true, None)
            }
            Err(error) => return Err(error),
        };
        if !retryable || retries >= max_retries {
            return Err(error);
        }
        retries += 1;
        let pause = retry_after.unwrap_or(backoff).min(MAX_BACKOFF);
        tracing::debug!(retry = retries, ?pause, %error, "retrying the LLM request");
        tokio::time::sleep(pause).await;
        backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
    }
}

/// The server's `Retry-After`, in whole seconds.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
        .map(Duration::from_secs)
}

/// Whether an error body says the account's quota is used up (OpenAI's `insufficient_quota`).
fn is_out_of_quota(body: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let error = value.get("error").unwrap_or(&value);
    ["type", "code"]
        .iter()
        .any(|key| error.get(key).and_then(serde_json::Value::as_str) == Some("insufficient_quota"))
}

/// `factory`, with `authorization` set on every request it builds.
fn with_authorization(
    factory: HttpRequestFactory,
    authorization: HeaderValue,
) -> HttpRequestFactory {
    HttpRequestFactory::new(move || {
        let factory = factory.clone();
        let authorization = authorization.clone();
        async move {
            let mut request = factory.build().await?;
            request.headers_mut().insert(AUTHORIZATION, authorization);
            Ok(request)
        }
    })
}

/// Maps an error from before the first byte of the answer.
pub(crate) fn request_error(error: OpenAIError, connect_timeout: Duration) -> LlmError {
    match error {
        OpenAIError::Reqwest(err) if err.is_connect() && err.is_timeout() => LlmError::Connect(
            format!("no connection within {connect_timeout:?}: {}", chain(&err)),
        ),
        OpenAIError::Reqwest(err) if err.is_timeout() => LlmError::Timeout(connect_timeout),
        OpenAIError::Reqwest(err) if err.is_body() || err.is_decode() => {
            LlmError::InvalidResponse(chain(&err))
        }
        OpenAIError::Reqwest(err) => LlmError::Connect(chain(&err)),
        OpenAIError::ApiError(api) => LlmError::Api {
            status: Some(api.status_code.as_u16()),
            message: if api.api_error.message.is_empty() {
                api.api_error.to_string()
            } else {
                api.api_error.message
            },
        },
        OpenAIError::Boxed(boxed) => match boxed.downcast::<HttpStatusError>() {
            Ok(status) => LlmError::Api {
                status: Some(status.status),
                message: status.message,
            },
            Err(other) => LlmError::InvalidResponse(chain(other.as_ref())),
        },
        OpenAIError::JSONDeserialize(err, body) => LlmError::InvalidResponse(format!(
            "{err}; the answer began with: {}",
            snippet(&body, 300)
        )),
        OpenAIError::InvalidArgument(message) => LlmError::Config(message),
        other => LlmError::InvalidResponse(chain(&other)),
    }
}

/// What to do with an error that arrives after the first byte.
pub(crate) enum StreamFailure {
    /// An event carrying nothing (blank `data:`); skip it.
    Blank,
    /// The stream is over with this error.
    Fatal(LlmError),
}

/// Maps an error from inside the stream: a broken connection is a cut, an event that is not
/// JSON is an unreadable answer.
pub(crate) fn stream_error(error: OpenAIError) -> StreamFailure {
    match error {
        OpenAIError::JSONDeserialize(_, body) if body.trim().is_empty() => StreamFailure::Blank,
        OpenAIError::JSONDeserialize(err, body) => {
            StreamFailure::Fatal(LlmError::InvalidResponse(format!(
                "a stream event is not a JSON chunk ({err}): {}",
                snippet(&body, 300)
            )))
        }
        other => StreamFailure::Fatal(LlmError::StreamCut(chain(&other))),
    }
}

/// An error's message with its causes, which reqwest keeps out of its own `Display`
/// ("error sending request" alone says nothing about a refused connection).
fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_errors_from_our_layer_keep_status_and_message() {
        let error = OpenAIError::Boxed(Box::new(HttpStatusError {
            status: 400,
            message: "bad model".to_owned(),
        }));
        let mapped = request_error(error, Duration::from_secs(1));
        assert!(
            matches!(&mapped, LlmError::Api { status: Some(400), message } if message == "bad model"),
            "{mapped:?}"
        );
    }

    #[test]
    fn blank_events_are_skipped_and_garbage_is_invalid() {
        let parse = |text: &str| {
            let err = serde_json::from_str::<serde_json::Value>(text).expect_err("not JSON");
            OpenAIError::JSONDeserialize(err, text.to_owned())
        };
        assert!(matches!(stream_error(parse(" ")), StreamFailure::Blank));
        assert!(matches!(
            stream_error(parse("<html>")),
            StreamFailure::Fatal(LlmError::InvalidResponse(_))
        ));
    }

    #[test]
    fn only_an_exhausted_quota_is_a_permanent_429() {
        assert!(is_out_of_quota(
            br#"{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}"#
        ));
        assert!(is_out_of_quota(br#"{"code":"insufficient_quota"}"#));
        assert!(!is_out_of_quota(
            br#"{"error":{"message":"slow down","type":"requests","code":429}}"#
        ));
        assert!(!is_out_of_quota(b"Too Many Requests"));
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(reqwest::header::RETRY_AFTER, HeaderValue::from_static(" 3"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert(
            reqwest::header::RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn invalid_arguments_are_config_errors() {
        let mapped = request_error(
            OpenAIError::InvalidArgument("bad".to_owned()),
            Duration::from_secs(1),
        );
        assert!(matches!(mapped, LlmError::Config(_)));
    }
}
