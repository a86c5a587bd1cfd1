//! The HTTP exchange with the server (sending with retries, reading error answers), and how
//! its errors become [`LlmError`]s.

use std::{error::Error as StdError, fmt, sync::Arc, time::Duration};

use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use thread_local::ThreadLocal;
use tokio::runtime::{Handle, RuntimeFlavor};

use super::wire::{error_body_message, snippet};
use crate::{ErrorDetail, LlmError};

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
/// Which failures are retried is ours (backon only times the retries): a 429 is retried whatever shape its body has (vLLM and others send
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
        let http = self.clients.current().map_err(SendError::Http)?;
        with_retries(self.max_retries, || {
            let request = http
                .post(self.url.clone())
                .header(AUTHORIZATION, self.authorization.clone())
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body.clone());
            async move { attempt(request).await }
        })
        .await
    }
}

/// A failed attempt: why, whether another attempt may succeed, and the server's `Retry-After`.
#[derive(Debug)]
struct Failed {
    error: SendError,
    retryable: bool,
    retry_after: Option<Duration>,
}

/// Sends one request; an error answer is read (up to [`ERROR_BODY_LIMIT`]) and judged.
async fn attempt(request: reqwest::RequestBuilder) -> Result<reqwest::Response, Failed> {
    let response = match request.send().await {
        Ok(response) if response.status().is_success() => return Ok(response),
        Ok(response) => response,
        Err(err) => {
            let retryable = err.is_connect();
            return Err(Failed {
                error: SendError::Http(err),
                retryable,
                retry_after: None,
            });
        }
    };
    let status = response.status();
    let retry_after = retry_after(response.headers());
    let (message, permanent) = match read_limited(response, ERROR_BODY_LIMIT).await {
        Ok(Limited::Whole(body)) => (error_body_message(&body), is_out_of_quota(&body)),
        // A cut body is no JSON: its start is the message, and it is retried (or not) by its
        // status alone.
        Ok(Limited::Cut(body)) => (error_body_message(&body), false),
        Err(err) => (
            Some(format!("(the error body could not be read: {err})")),
            false,
        ),
    };
    let message =
        message.unwrap_or_else(|| status.canonical_reason().unwrap_or("no message").to_owned());
    // An exhausted quota answers 429 too, but waiting does not help.
    let retryable = (status.as_u16() == 429 && !permanent) || status.is_server_error();
    Err(Failed {
        error: SendError::Status(HttpStatusError {
            status: status.as_u16(),
            message,
        }),
        retryable,
        retry_after,
    })
}

/// The pauses between attempts, `max_retries` of them: nominally [`FIRST_BACKOFF`], doubling,
/// at most [`MAX_BACKOFF`], each one jittered to between half its nominal length and all of
/// it. The jitter spreads the retries of calls that failed together (a provider's blip hits
/// every session at once); keeping each pause at most its nominal length keeps a call's
/// retries inside the bound its first-byte limit was set for.
fn backoff(max_retries: usize) -> ExponentialBuilder {
    // backon's jitter adds up to one more delay (`d` becomes `d..2d`): half delays, jittered.
    ExponentialBuilder::new()
        .with_min_delay(FIRST_BACKOFF / 2)
        .with_max_delay(MAX_BACKOFF / 2)
        .with_factor(2.0)
        .with_jitter()
        .with_max_times(max_retries)
}

/// Runs `attempt` until it succeeds, fails for good or has been retried `max_retries` times,
/// pausing as [`backoff`] says, or as long as the server's `Retry-After` (at most
/// [`MAX_BACKOFF`]).
async fn with_retries<T, F, Fut>(max_retries: usize, attempt: F) -> Result<T, SendError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failed>>,
{
    let mut retries = 0;
    attempt
        .retry(backoff(max_retries))
        .when(|failed: &Failed| failed.retryable)
        .adjust(|failed, pause| pause.map(|pause| failed.retry_after.unwrap_or(pause).min(MAX_BACKOFF)))
        .notify(|failed, pause| {
            retries += 1;
            tracing::debug!(retry = retries, ?pause, error = %failed.error, "retrying the LLM request");
        })
        .await
        .map_err(|failed| failed.error)
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
        SendError::Http(err) => http_error(err, connect_timeout),
        SendError::Status(status) => LlmError::Api {
            status: Some(status.status),
            message: status.message,
        },
    }
}

/// Maps a transfer error from before the first byte (or while reading a whole answer).
pub(crate) fn http_error(err: reqwest::Error, connect_timeout: Duration) -> LlmError {
    if err.is_connect() && err.is_timeout() {
        let message = format!("no connection within {connect_timeout:?}: {}", chain(&err));
        LlmError::Connect(ErrorDetail::caused_by(message, err))
    } else if err.is_timeout() {
        LlmError::Timeout(connect_timeout)
    } else if err.is_body() || err.is_decode() {
        LlmError::InvalidResponse(ErrorDetail::caused_by(chain(&err), err))
    } else {
        LlmError::Connect(ErrorDetail::caused_by(chain(&err), err))
    }
}

/// Maps an error while reading the streamed body: the answer is cut.
pub(crate) fn stream_error(error: reqwest::Error) -> LlmError {
    let message = format!("stream failed: {}", chain(&error));
    LlmError::StreamCut(ErrorDetail::caused_by(message, error))
}

/// Reads one event's data: a chunk, `None` for a blank event (skipped), or an unreadable-answer
/// error for anything that is not a JSON chunk.
pub(crate) fn event_chunk(data: &str) -> Result<Option<super::wire::Chunk>, LlmError> {
    match super::wire::decode_chunk(data.as_bytes()) {
        Ok(chunk) => Ok(Some(chunk)),
        Err(_) if data.trim().is_empty() => Ok(None),
        Err(err) => Err(LlmError::InvalidResponse(ErrorDetail::caused_by(
            format!(
                "a stream event is not a JSON chunk ({err}): {}",
                snippet(data, 300)
            ),
            err,
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
            matches!(&garbage, LlmError::InvalidResponse(m) if m.message().contains("<html>")),
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

    /// A failed attempt, answered with `status` and the server's `Retry-After`.
    fn failed(status: u16, retryable: bool, retry_after: Option<Duration>) -> Failed {
        Failed {
            error: SendError::Status(HttpStatusError {
                status,
                message: "busy".to_owned(),
            }),
            retryable,
            retry_after,
        }
    }

    /// When each attempt started, from the first, in a run whose every attempt fails so.
    async fn attempt_times(
        max_retries: usize,
        fail: impl Fn() -> Failed,
    ) -> (Vec<u128>, SendError) {
        let started = tokio::time::Instant::now();
        let mut times = Vec::new();
        let error = with_retries(max_retries, || {
            times.push(started.elapsed().as_millis());
            let failure = fail();
            async move { Err::<(), _>(failure) }
        })
        .await
        .expect_err("every attempt fails");
        (times, error)
    }

    /// Checks the pauses between attempts against their nominal lengths `expected` (ms): a
    /// jittered pause is between half its nominal length and all of it. backon computes delays
    /// in `f32` seconds and tokio's timer rounds up to the millisecond, so a pause may be 1 ms
    /// off either end.
    fn assert_pauses(times: &[u128], expected: &[u128]) {
        let pauses: Vec<u128> = times.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(pauses.len(), expected.len(), "{pauses:?}");
        for (pause, nominal) in pauses.iter().zip(expected) {
            assert!(
                (nominal / 2 - 1..=nominal + 1).contains(pause),
                "{pauses:?} not within half of and all of {expected:?}"
            );
        }
    }

    /// Checks pauses that are not jittered (the server's `Retry-After`) against `expected`
    /// (ms), give or take the timer's rounding up to the millisecond.
    fn assert_exact_pauses(times: &[u128], expected: &[u128]) {
        let pauses: Vec<u128> = times.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(pauses.len(), expected.len(), "{pauses:?}");
        for (pause, nominal) in pauses.iter().zip(expected) {
            assert!(
                (*nominal..=nominal + 1).contains(pause),
                "{pauses:?} != {expected:?}"
            );
        }
    }

    /// The schedule's pauses in ms, as backon hands them out (no waiting).
    fn schedule(max_retries: usize) -> Vec<u128> {
        use backon::BackoffBuilder;
        backoff(max_retries)
            .build()
            .map(|d| d.as_millis())
            .collect()
    }

    #[test]
    fn retry_schedules_are_jittered_within_their_nominal_pauses() {
        let nominal = [100, 200, 400, 800, 1600, 3200, 6400, 8000, 8000, 8000];
        let (first, second) = (schedule(nominal.len()), schedule(nominal.len()));
        for pauses in [&first, &second] {
            assert_eq!(pauses.len(), nominal.len(), "{pauses:?}");
            for (pause, nominal) in pauses.iter().zip(nominal) {
                assert!(
                    (nominal / 2 - 1..=nominal).contains(pause),
                    "{pauses:?} not within half of and all of {nominal}"
                );
            }
        }
        // Calls that failed together retry at different times (the chance of ten equal
        // random pauses is nil).
        assert_ne!(first, second);
        // The retries of a call with the default allowance fit well inside a second.
        let total: u128 = schedule(super::super::builder::DEFAULT_MAX_RETRIES)
            .iter()
            .sum();
        assert!(total <= 300, "{total} ms");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_pause_100_ms_doubling_up_to_8_s() {
        let (times, error) = attempt_times(super::super::builder::DEFAULT_MAX_RETRIES, || {
            failed(503, true, None)
        })
        .await;
        assert_pauses(&times, &[100, 200]);
        assert!(matches!(
            error,
            SendError::Status(HttpStatusError { status: 503, .. })
        ));

        let (times, _) = attempt_times(9, || failed(503, true, None)).await;
        assert_pauses(&times, &[100, 200, 400, 800, 1600, 3200, 6400, 8000, 8000]);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_sets_the_pause_up_to_8_s_and_a_permanent_failure_is_not_retried() {
        // The server's own pause is kept as it says (no jitter), up to the cap.
        let (times, _) = attempt_times(2, || failed(429, true, Some(Duration::from_secs(3)))).await;
        assert_exact_pauses(&times, &[3000, 3000]);
        let (times, _) =
            attempt_times(1, || failed(429, true, Some(Duration::from_secs(60)))).await;
        assert_exact_pauses(&times, &[8000]);
        let (times, error) = attempt_times(2, || failed(400, false, None)).await;
        assert_eq!(times, [0]);
        assert!(matches!(
            error,
            SendError::Status(HttpStatusError { status: 400, .. })
        ));
        let (times, _) = attempt_times(0, || failed(503, true, None)).await;
        assert_eq!(times, [0], "no retries when none are allowed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_retried_attempt_that_succeeds_ends_the_retries() {
        let mut attempts = 0;
        let answer = with_retries(2, || {
            attempts += 1;
            let result = if attempts == 1 {
                Err(failed(502, true, None))
            } else {
                Ok(attempts)
            };
            async move { result }
        })
        .await
        .expect("the retry succeeds");
        assert_eq!(answer, 2);
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
