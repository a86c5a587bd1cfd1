//! The HTTP exchange with the server (sending with retries, reading error answers), and how
//! its errors become [`LlmError`]s.

use std::{error::Error as StdError, fmt, sync::Arc, time::Duration};

use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use thread_local::ThreadLocal;
use tokio::runtime::{Handle, RuntimeFlavor};

use super::wire::{error_body_message, snippet};
use crate::LlmError;

/// How much of an error answer's body is read: far more than any server's message; the rest
/// is left unread (the connection is closed), so a huge or endless error body costs nothing.
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// A body read up to a limit.
#[derive(Debug)]
pub(crate) enum Limited {
    /// The whole body, within the limit.
    Whole(Bytes),
    /// The body was longer: its first `limit` bytes (the rest was not read).
    Cut(Bytes),
}

/// Reads `response`'s body, at most `limit` bytes of it.
pub(crate) async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> reqwest::Result<Limited> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok(Limited::Cut(body.into()));
        }
        if body.is_empty() && response.content_length() == Some(chunk.len() as u64) {
            // The whole body in one piece (the usual case): no copy.
            return Ok(Limited::Whole(chunk));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Limited::Whole(body.into()))
}

/// An HTTP error answer, read up to [`ERROR_BODY_LIMIT`].
///
/// Servers write their error bodies differently (OpenAI, vLLM, FastAPI proxies, plain text);
/// reading the final answer ourselves keeps the status and the server's message for every
/// server.
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

/// Why a request got no usable answer.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The connection or the transfer failed.
    Http(reqwest::Error),
    /// The server answered with an error status.
    Status(HttpStatusError),
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Http(error) => write!(f, "http error: {error}"),
            Self::Status(error) => error.fmt(f),
        }
    }
}

/// The first pause before a retry; each further retry doubles it, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause before a retry, also for a server's `Retry-After`.
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// The HTTP clients (connection pools) requests go through: one shared, and one per thread
/// for threads that run a single-threaded runtime.
///
/// A connection's task runs on the runtime that opened it. In a pool shared by
/// single-threaded runtimes (a server's `worker_runtimes`), a call on one thread would often
/// get a connection whose every read wakes another thread; a pool per such thread keeps a
/// call's model traffic on the call's own thread.
struct Clients {
    shared: reqwest::Client,
    per_thread: ThreadLocal<reqwest::Client>,
    connect_timeout: Duration,
}

impl Clients {
    fn new(connect_timeout: Duration) -> reqwest::Result<Self> {
        Ok(Self {
            shared: client(connect_timeout)?,
            per_thread: ThreadLocal::new(),
            connect_timeout,
        })
    }

    /// The client for a request made on this thread.
    fn current(&self) -> reqwest::Result<&reqwest::Client> {
        let single_threaded = Handle::try_current()
            .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::CurrentThread);
        if single_threaded {
            // The first request on a thread builds its client, which reads the system's CA
            // certificates (a few milliseconds, once per thread). Building it on the blocking
            // pool instead was measured: with mimalloc the process kept ~28 MiB more resident.
            self.per_thread.get_or_try(|| client(self.connect_timeout))
        } else {
            Ok(&self.shared)
        }
    }
}

/// A client with its own connection pool.
fn client(connect_timeout: Duration) -> reqwest::Result<reqwest::Client> {
    // No total `timeout` here: it would cut long streams. First-byte and idle limits are
    // enforced around each await instead.
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .build()
}

/// Sends chat-completion requests: retries (connect errors, 429, 5xx, with backoff, before any
/// byte of the answer is read), each attempt carrying `authorization`; a final error answer
/// is read in full into an [`HttpStatusError`].
///
/// The retries are ours: a 429 is retried whatever shape its body has (vLLM and others send
/// `"code": 429` as a number, proxies send text), unless it says the quota is used up.
#[derive(Clone)]
pub(crate) struct Transport {
    clients: Arc<Clients>,
    /// `{base}/chat/completions`.
    url: reqwest::Url,
    /// The key, marked sensitive so no HTTP layer logs it.
    authorization: HeaderValue,
    max_retries: usize,
}

impl Transport {
    /// A transport posting to `{base_url}/chat/completions`.
    pub(crate) fn new(
        connect_timeout: Duration,
        base_url: &str,
        authorization: HeaderValue,
        max_retries: usize,
    ) -> Result<Self, LlmError> {
        let url = reqwest::Url::parse(&format!("{base_url}/chat/completions"))
            .map_err(|e| LlmError::Config(format!("invalid base URL {base_url:?}: {e}")))?;
        let clients = Clients::new(connect_timeout)
            .map_err(|e| LlmError::Config(format!("could not set up the HTTP client: {e}")))?;
        Ok(Self {
            clients: Arc::new(clients),
            url,
            authorization,
            max_retries,
        })
    }

    /// Posts the JSON `body`, retrying what may succeed on another try, at most `max_retries`
    /// times; returns the first successful answer, before reading any of its body.
    pub(crate) async fn send(&self, body: Bytes) -> Result<reqwest::Response, SendError> {
        let mut backoff = FIRST_BACKOFF;
        let mut retries = 0;
        let http = self.clients.current().map_err(SendError::Http)?;
        loop {
            let attempt = http
                .post(self.url.clone())
                .header(AUTHORIZATION, self.authorization.clone())
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body.clone())
                .send()
                .await;
            let (error, retryable, retry_after) = match attempt {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status();
                    let retry_after = retry_after(response.headers());
                    let (message, permanent) = match read_limited(response, ERROR_BODY_LIMIT).await
                    {
                        Ok(Limited::Whole(body)) => {
                            (error_body_message(&body), is_out_of_quota(&body))
                        }
                        // A cut body is no JSON: its start is the message, and it is retried
                        // (or not) by its status alone.
                        Ok(Limited::Cut(body)) => (error_body_message(&body), false),
                        Err(err) => (
                            Some(format!("(the error body could not be read: {err})")),
                            false,
                        ),
                    };
                    let message = message.unwrap_or_else(|| {
                        status.canonical_reason().unwrap_or("no message").to_owned()
                    });
                    // An exhausted quota answers 429 too, but waiting does not help.
                    let retryable =
                        (status.as_u16() == 429 && !permanent) || status.is_server_error();
                    let error = SendError::Status(HttpStatusError {
                        status: status.as_u16(),
                        message,
                    });
                    (error, retryable, retry_after)
                }
                Err(err) if err.is_connect() => (SendError::Http(err), true, None),
                Err(err) => return Err(SendError::Http(err)),
            };
            if !retryable || retries >= self.max_retries {
                return Err(error);
            }
            retries += 1;
            let pause = retry_after.unwrap_or(backoff).min(MAX_BACKOFF);
            tracing::debug!(retry = retries, ?pause, %error, "retrying the LLM request");
            tokio::time::sleep(pause).await;
            backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
        }
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

/// Maps an error from before the first byte of the answer.
pub(crate) fn request_error(error: SendError, connect_timeout: Duration) -> LlmError {
    match error {
        SendError::Http(err) => http_error(&err, connect_timeout),
        SendError::Status(status) => LlmError::Api {
            status: Some(status.status),
            message: status.message,
        },
    }
}

/// Maps a transfer error from before the first byte (or while reading a whole answer).
pub(crate) fn http_error(err: &reqwest::Error, connect_timeout: Duration) -> LlmError {
    if err.is_connect() && err.is_timeout() {
        LlmError::Connect(format!(
            "no connection within {connect_timeout:?}: {}",
            chain(err)
        ))
    } else if err.is_timeout() {
        LlmError::Timeout(connect_timeout)
    } else if err.is_body() || err.is_decode() {
        LlmError::InvalidResponse(chain(err))
    } else {
        LlmError::Connect(chain(err))
    }
}

/// Maps an error while reading the streamed body: the answer is cut.
pub(crate) fn stream_error(error: &reqwest::Error) -> LlmError {
    LlmError::StreamCut(format!("stream failed: {}", chain(error)))
}

/// Reads one event's data: a chunk, `None` for a blank event (skipped), or an unreadable-answer
/// error for anything that is not a JSON chunk.
pub(crate) fn event_chunk(data: &str) -> Result<Option<super::wire::Chunk>, LlmError> {
    match super::wire::decode_chunk(data.as_bytes()) {
        Ok(chunk) => Ok(Some(chunk)),
        Err(_) if data.trim().is_empty() => Ok(None),
        Err(err) => Err(LlmError::InvalidResponse(format!(
            "a stream event is not a JSON chunk ({err}): {}",
            snippet(data, 300)
        ))),
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
        let error = SendError::Status(HttpStatusError {
            status: 400,
            message: "bad model".to_owned(),
        });
        let mapped = request_error(error, Duration::from_secs(1));
        assert!(
            matches!(&mapped, LlmError::Api { status: Some(400), message } if message == "bad model"),
            "{mapped:?}"
        );
    }

    #[test]
    fn blank_events_are_skipped_and_garbage_is_invalid() {
        assert!(matches!(event_chunk(" "), Ok(None)));
        assert!(matches!(event_chunk(""), Ok(None)));
        let garbage = event_chunk("<html>").expect_err("not JSON");
        assert!(
            matches!(&garbage, LlmError::InvalidResponse(m) if m.contains("<html>")),
            "{garbage:?}"
        );
        let chunk = event_chunk(r#"{"choices":[{"delta":{"content":"Hi"}}]}"#)
            .expect("a chunk")
            .expect("not blank");
        assert_eq!(chunk.choices.len(), 1);
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
}
