//! The HTTP exchange with the server (sending with retries, reading error answers), and how
//! its errors become [`LlmError`]s.
//!
//! Requests go through hyper-util's pooled client over rustls (see [`crate::transport`]):
//! HTTP/2 or HTTP/1.1 as ALPN settles, directly or through the proxy the environment (or the
//! builder) names, on one stack.

use std::{error::Error as StdError, fmt, sync::Arc, time::Duration};

use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{
    Method,
    body::{Body as _, Incoming},
    header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue},
};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::{
    client::legacy::{self, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
};
use thread_local::ThreadLocal;
use tokio::runtime::{Handle, RuntimeFlavor};

use super::wire::{error_body_message, snippet};
use crate::{
    ErrorDetail, LlmError, TlsRoots,
    transport::{
        self, Counters,
        proxy::{Proxies, ProxyConnector},
    },
};

/// How much of an error answer's body is read: far more than any server's message; the rest
/// is left unread (the connection is closed), so a huge or endless error body costs nothing.
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// A failure of the HTTP layer: setting a client up, sending a request, or reading a body.
///
/// Its `Display` and `source` are the inner error's, so [`chain`] reads the same words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// hyper-util's client could not send the request (connect, proxy, TLS, the request's
    /// write).
    #[error(transparent)]
    Client(#[from] legacy::Error),
    /// hyper could not read the answer's body.
    #[error(transparent)]
    Body(#[from] hyper::Error),
    /// The TLS settings could not be built (the platform's verifier).
    #[error(transparent)]
    Tls(#[from] rustls::Error),
}

impl HttpError {
    /// Whether the connection could not be made (a retry may succeed).
    fn is_connect(&self) -> bool {
        match self {
            Self::Client(err) => err.is_connect(),
            Self::Body(_) | Self::Tls(_) => false,
        }
    }

    /// Whether a time limit ran out (the connect timeout).
    fn is_timeout(&self) -> bool {
        match self {
            Self::Client(err) => io_timed_out(err),
            Self::Body(err) => err.is_timeout() || io_timed_out(err),
            Self::Tls(_) => false,
        }
    }

    /// Whether the answer's body could not be read.
    fn is_body(&self) -> bool {
        matches!(self, Self::Body(_))
    }

    /// `message`, caused by the error itself (the transport's own type, not this wrapper, so
    /// callers can downcast to it).
    fn detail(self, message: String) -> ErrorDetail {
        match self {
            Self::Client(err) => ErrorDetail::caused_by(message, err),
            Self::Body(err) => ErrorDetail::caused_by(message, err),
            Self::Tls(err) => ErrorDetail::caused_by(message, err),
        }
    }
}

/// Whether `error`'s causes hold an I/O error that timed out (hyper-util's connect timeout).
fn io_timed_out(error: &(dyn StdError + 'static)) -> bool {
    std::iter::successors(error.source(), |e| (*e).source()).any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
    })
}

/// An answer whose status and headers have arrived.
pub(crate) type Response = hyper::Response<Incoming>;

/// The body's next piece of data, `None` at its end.
async fn chunk(response: &mut Response) -> Result<Option<Bytes>, HttpError> {
    loop {
        match response.body_mut().frame().await {
            None => return Ok(None),
            Some(frame) => {
                if let Ok(data) = frame?.into_data() {
                    return Ok(Some(data));
                }
                // Trailers: no data, read on.
            }
        }
    }
}

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
    mut response: Response,
    limit: usize,
) -> Result<Limited, HttpError> {
    let content_length = response.body().size_hint().exact();
    let mut body = Vec::new();
    while let Some(chunk) = chunk(&mut response).await? {
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok(Limited::Cut(body.into()));
        }
        if body.is_empty() && content_length == Some(chunk.len() as u64) {
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
    /// The answer's `Retry-After`, passed on so a fallback client can skip the provider.
    retry_after: Option<Duration>,
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
    Http(HttpError),
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

/// hyper-util's pooled client, over HTTP or HTTPS, direct or through a proxy.
type Client = legacy::Client<HttpsConnector<ProxyConnector>, Full<Bytes>>;

/// The HTTP clients (connection pools) requests go through: one shared, and one per thread
/// for threads that run a single-threaded runtime.
///
/// A connection's task runs on the runtime that opened it. In a pool shared by
/// single-threaded runtimes (a server's `worker_runtimes`), a call on one thread would often
/// get a connection whose every read wakes another thread; a pool per such thread keeps a
/// call's model traffic on the call's own thread.
struct Clients {
    shared: Client,
    per_thread: ThreadLocal<Client>,
    settings: Settings,
}

/// What every connection pool of a client is built with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The proxies connections go through.
    pub(crate) proxies: Proxies,
    /// The time limit for opening a connection.
    pub(crate) connect_timeout: Duration,
    /// The CA certificates trusted beside the platform's roots.
    pub(crate) roots: TlsRoots,
    /// Whether TLS offers `h2` by ALPN (HTTP/1.1 otherwise, and always over plain HTTP).
    pub(crate) http2: bool,
    /// The connection counts every pool of the client adds to.
    pub(crate) counters: Arc<Counters>,
    /// How long an HTTP/2 connection may be silent before it is pinged, and how long the
    /// answer may take before the connection is closed as dead (the client's idle limit).
    pub(crate) ping_after: Duration,
}

impl Clients {
    fn new(settings: Settings) -> Result<Self, HttpError> {
        Ok(Self {
            shared: client(&settings)?,
            per_thread: ThreadLocal::new(),
            settings,
        })
    }

    /// The client for a request made on this thread.
    fn current(&self) -> Result<&Client, HttpError> {
        let single_threaded = Handle::try_current()
            .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::CurrentThread);
        if single_threaded {
            // The first request on a thread builds its client, which reads the system's CA
            // certificates (a few milliseconds, once per thread). Building it on the blocking
            // pool instead was measured: with mimalloc the process kept ~28 MiB more resident.
            self.per_thread.get_or_try(|| client(&self.settings))
        } else {
            Ok(&self.shared)
        }
    }
}

/// hyper-util's pooled client, connecting as reqwest does: `connect_timeout`, no Nagle delay,
/// and for `https` rustls with the process's crypto provider (else aws-lc-rs) and the
/// platform's verifier with the extra roots, offering `h2` then `http/1.1` by ALPN.
///
/// Over HTTP/2 every request to the server is a stream of one pooled connection: a call's
/// stream dropped on barge-in is reset alone (`RST_STREAM`), its neighbours go on.
fn client(settings: &Settings) -> Result<Client, HttpError> {
    let tls = transport::client_config(&settings.roots)?;
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(settings.connect_timeout));
    http.set_nodelay(true);
    // `https` URLs reach the TLS layer wrapped around this connector.
    http.enforce_http(false);
    let http = ProxyConnector::new(http, settings.proxies.clone(), settings.counters.clone());
    let https = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = if settings.http2 {
        https.enable_all_versions().wrap_connector(http)
    } else {
        https.enable_http1().wrap_connector(http)
    };
    // The pool timer lets the pool close connections idle for long (90 s, as reqwest).
    let mut builder = legacy::Client::builder(TokioExecutor::new());
    builder.pool_timer(TokioTimer::new());
    if settings.http2 {
        // Every call on this thread shares an HTTP/2 connection: one that died silently (a
        // NAT or load balancer dropped it) would stall each new call until its first-byte
        // limit. Pinged when silent, it is closed once a ping goes unanswered, and the next
        // call opens a new one.
        builder
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(settings.ping_after)
            .http2_keep_alive_timeout(settings.ping_after)
            .http2_keep_alive_while_idle(true);
    }
    Ok(builder.build(https))
}

/// Sends chat-completion requests: retries (connect errors, 429, 5xx, with backoff, before any
/// byte of the answer is read), each attempt carrying the key header; a final error answer
/// is read in full into an [`HttpStatusError`].
///
/// Which failures are retried is ours (backon only times the retries): a 429 is retried whatever shape its body has (vLLM and others send
/// `"code": 429` as a number, proxies send text), unless it says the quota is used up.
#[derive(Clone)]
pub(crate) struct Transport {
    clients: Arc<Clients>,
    /// The server's `host:port`, named in connection errors.
    host: Arc<str>,
    /// `{base}/chat/completions`, or an Azure deployment's URL.
    uri: hyper::Uri,
    /// The key's header (`authorization`, or Azure's `api-key`).
    key_header: HeaderName,
    /// The key header's value, marked sensitive so no HTTP layer logs it.
    authorization: HeaderValue,
    max_retries: usize,
}

impl Transport {
    /// A transport posting to `url` with the key in `key_header`, its pools built with
    /// `settings`, trusting the roots of `SSL_CERT_FILE` too.
    pub(crate) fn new(
        mut settings: Settings,
        url: &str,
        key_header: HeaderName,
        authorization: HeaderValue,
        max_retries: usize,
    ) -> Result<Self, LlmError> {
        settings.roots = settings.roots.with_env(|name| std::env::var_os(name))?;
        Self::with_settings(settings, url, key_header, authorization, max_retries)
    }

    /// A transport posting to `url`, its pools built with `settings`.
    pub(crate) fn with_settings(
        settings: Settings,
        url: &str,
        key_header: HeaderName,
        authorization: HeaderValue,
        max_retries: usize,
    ) -> Result<Self, LlmError> {
        let url = url::Url::parse(url)
            .map_err(|e| LlmError::config_caused_by(format!("invalid URL {url:?}"), e))?;
        let uri = hyper::Uri::try_from(url.as_str())
            .map_err(|e| LlmError::config(format!("invalid URL {:?}: {e}", url.as_str())))?;
        let clients = Clients::new(settings).map_err(|e| {
            LlmError::config(format!("could not set up the HTTP client: {}", chain(&e)))
        })?;
        let host = match (url.host_str(), url.port_or_known_default()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (host, _) => host.unwrap_or_default().to_owned(),
        };
        Ok(Self {
            clients: Arc::new(clients),
            host: host.into(),
            uri,
            key_header,
            authorization,
            max_retries,
        })
    }

    /// The client's connections to the server, opened and open.
    pub(crate) fn connections(&self) -> crate::ConnectionCounts {
        self.clients.settings.counters.counts()
    }

    /// Whether connections may go through a proxy.
    pub(crate) fn proxied(&self) -> bool {
        self.clients.settings.proxies.is_configured()
    }

    /// Maps an error from before the first byte of the answer, naming the server.
    pub(crate) fn request_error(&self, error: SendError) -> LlmError {
        request_error(error, self.clients.settings.connect_timeout, &self.host)
    }

    /// Maps a transfer error from before the first byte (or while reading a whole answer).
    pub(crate) fn http_error(&self, error: HttpError) -> LlmError {
        http_error(error, self.clients.settings.connect_timeout, &self.host)
    }

    /// Posts the JSON `body`, retrying what may succeed on another try, at most `max_retries`
    /// times; returns the first successful answer, before reading any of its body.
    pub(crate) async fn send(&self, body: Bytes) -> Result<Response, SendError> {
        let http = self.clients.current().map_err(SendError::Http)?;
        with_retries(self.max_retries, || {
            let sent = http.request(self.hyper_request(&body));
            attempt(async move { Ok(sent.await?) })
        })
        .await
    }

    /// The request hyper sends: a POST of `body` with the headers reqwest would send (the
    /// key, `content-type`, `accept: */*`; hyper adds `host` and `content-length`).
    fn hyper_request(&self, body: &Bytes) -> hyper::Request<Full<Bytes>> {
        let mut request = hyper::Request::new(Full::new(body.clone()));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(self.key_header.clone(), self.authorization.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
        request
    }
}

/// A failed attempt: why, whether another attempt may succeed, and the server's `Retry-After`.
#[derive(Debug)]
struct Failed {
    error: SendError,
    retryable: bool,
    retry_after: Option<Duration>,
}

/// Sends one request (`sent` is its answer); an error answer is read (up to
/// [`ERROR_BODY_LIMIT`]) and judged.
async fn attempt(
    sent: impl Future<Output = Result<Response, HttpError>>,
) -> Result<Response, Failed> {
    let response = match sent.await {
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
            retry_after,
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
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(hyper::header::RETRY_AFTER)?
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

/// Maps an error from before the first byte of the answer from `host`.
fn request_error(error: SendError, connect_timeout: Duration, host: &str) -> LlmError {
    match error {
        SendError::Http(err) => http_error(err, connect_timeout, host),
        SendError::Status(status) => LlmError::Api {
            status: Some(status.status),
            message: status.message,
            retry_after: status.retry_after,
        },
    }
}

/// Maps a transfer error with `host` from before the first byte (or while reading a whole
/// answer). A connection error names the host, and a refused certificate says so.
fn http_error(err: HttpError, connect_timeout: Duration, host: &str) -> LlmError {
    let message = chain(&err);
    if err.is_connect() && err.is_timeout() {
        let message = format!("no connection to {host} within {connect_timeout:?}: {message}");
        LlmError::Connect(err.detail(message))
    } else if err.is_timeout() {
        LlmError::Timeout(connect_timeout)
    } else if err.is_body() {
        LlmError::InvalidResponse(err.detail(message))
    } else if let Some(tls) = tls_error(&err) {
        let why = match tls {
            rustls::Error::InvalidCertificate(_) => {
                ": its certificate is not trusted for this host (trust its CA with SSL_CERT_FILE \
                 or OpenAiClientBuilder::add_root_certificate)"
            }
            _ => "",
        };
        let message = format!("TLS with {host} failed{why}: {message}");
        LlmError::Connect(err.detail(message))
    } else {
        let message = format!("could not connect to {host}: {message}");
        LlmError::Connect(err.detail(message))
    }
}

/// The TLS error among `error`'s causes (rustls' error travels inside I/O errors, nested,
/// whose `source` skips what they wrap).
fn tls_error<'e>(error: &'e (dyn StdError + 'static)) -> Option<&'e rustls::Error> {
    std::iter::successors(Some(error), |e| (*e).source()).find_map(|cause| {
        let mut cause: &(dyn StdError + 'static) = cause;
        loop {
            if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
                return Some(tls);
            }
            let inner = cause
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)?;
            cause = inner;
        }
    })
}

/// Maps an error while reading the streamed body: the answer is cut.
pub(crate) fn stream_error(error: HttpError) -> LlmError {
    let message = format!("stream failed: {}", chain(&error));
    LlmError::StreamCut(error.detail(message))
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

/// An error's message with its causes (see [`transport::error_text`]).
fn chain(error: &(dyn StdError + 'static)) -> String {
    transport::error_text(error)
}

#[cfg(test)]
mod tests {
    use hyper::StatusCode;

    use super::*;

    #[test]
    fn status_errors_from_our_layer_keep_status_and_message() {
        let error = SendError::Status(HttpStatusError {
            status: 400,
            message: "bad model".to_owned(),
            retry_after: None,
        });
        let mapped = request_error(error, Duration::from_secs(1), "h:1");
        assert!(
            matches!(&mapped, LlmError::Api { status: Some(400), message, .. } if message == "bad model"),
            "{mapped:?}"
        );
    }

    #[test]
    fn a_429_passes_on_its_retry_after() {
        let error = SendError::Status(HttpStatusError {
            status: 429,
            message: "slow down".to_owned(),
            retry_after: Some(Duration::from_secs(7)),
        });
        let mapped = request_error(error, Duration::from_secs(1), "h:1");
        assert_eq!(mapped.retry_after(), Some(Duration::from_secs(7)));
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
                retry_after,
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

    const ANSWER: &str = "data: {\"choices\":[]}\n\ndata: [DONE]\n\n";

    /// A transport posting to `url` directly, without retries.
    fn transport(url: &str, connect_timeout: Duration) -> Transport {
        let mut key = HeaderValue::from_static("Bearer sk-test");
        key.set_sensitive(true);
        let settings = Settings {
            proxies: Proxies::none(),
            connect_timeout,
            roots: TlsRoots::new(),
            http2: true,
            counters: Arc::default(),
            ping_after: Duration::from_secs(10),
        };
        Transport::with_settings(settings, url, hyper::header::AUTHORIZATION, key, 0)
            .expect("transport")
    }

    /// A one-request HTTP/1.1 server on 127.0.0.1 answering [`ANSWER`] as an event stream;
    /// it hands back the request's head.
    async fn one_answer_server() -> (std::net::SocketAddr, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let served = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut request = Vec::new();
            let mut buffer = [0; 4096];
            // The head, then the body of its content-length.
            let head_end = loop {
                let read = socket.read(&mut buffer).await.expect("read");
                assert!(read > 0, "the request ended early");
                request.extend_from_slice(&buffer[..read]);
                if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                    break end + 4;
                }
            };
            let head = String::from_utf8_lossy(&request[..head_end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse().ok())
                .expect("a content-length");
            while request.len() < head_end + length {
                let read = socket.read(&mut buffer).await.expect("read");
                assert!(read > 0, "the body ended early");
                request.extend_from_slice(&buffer[..read]);
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{ANSWER}",
                ANSWER.len()
            );
            socket.write_all(answer.as_bytes()).await.expect("write");
            head
        });
        (addr, served)
    }

    #[tokio::test]
    async fn the_transport_posts_the_body_with_the_key_and_reads_the_answer() {
        {
            let stack = "hyper";
            let (addr, served) = one_answer_server().await;
            let url = format!("http://{addr}/v1/chat/completions");
            let transport = transport(&url, Duration::from_secs(5));
            let response = transport
                .send(Bytes::from_static(b"{\"model\":\"m\"}"))
                .await
                .expect("an answer");
            assert_eq!(response.status(), StatusCode::OK);
            let body = match read_limited(response, ERROR_BODY_LIMIT).await {
                Ok(Limited::Whole(body)) => body,
                other => panic!("{stack:?}: {other:?}"),
            };
            assert_eq!(body, ANSWER.as_bytes(), "{stack:?}");
            let head = served.await.expect("the server ran");
            assert!(
                head.starts_with("post /v1/chat/completions http/1.1\r\n"),
                "{head}"
            );
            for line in [
                "authorization: bearer sk-test",
                "content-type: application/json",
                "content-length: 13",
                "accept: */*",
                &format!("host: {addr}"),
            ] {
                assert!(head.contains(line), "{stack:?} sent no {line:?}: {head}");
            }
        }
    }

    #[tokio::test]
    async fn the_transport_streams_the_body_to_the_reader_type() {
        use futures::{StreamExt, TryStreamExt};
        {
            let stack = "hyper";
            let (addr, served) = one_answer_server().await;
            let url = format!("http://{addr}/v1/chat/completions");
            let response = transport(&url, Duration::from_secs(5))
                .send(Bytes::from_static(b"{}"))
                .await
                .expect("an answer");
            // The streams `stream_chat` hands its `Reader`.
            let chunks: Vec<Result<Bytes, HttpError>> =
                http_body_util::BodyDataStream::new(response.into_body())
                    .map_err(HttpError::Body)
                    .collect()
                    .await;
            let body: Vec<u8> = chunks
                .into_iter()
                .flat_map(|chunk| chunk.expect("no error"))
                .collect();
            assert_eq!(body, ANSWER.as_bytes(), "{stack:?}");
            served.await.expect("the server ran");
        }
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error_naming_the_host() {
        // Bound but never listening: connecting is refused, and no other test can take the port
        // meanwhile (a port freed by dropping a listener could be reused by a concurrent test's server).
        let refusing = tokio::net::TcpSocket::new_v4().expect("socket");
        refusing.bind(([127, 0, 0, 1], 0).into()).expect("bind");
        let addr = refusing.local_addr().expect("addr");
        {
            let stack = "hyper";
            let timeout = Duration::from_secs(5);
            let transport = transport(&format!("http://{addr}/v1"), timeout);
            let error = transport.send(Bytes::new()).await.expect_err("refused");
            assert!(
                matches!(&error, SendError::Http(err) if err.is_connect() && !err.is_timeout()),
                "{stack:?}: {error:?}"
            );
            let mapped = transport.request_error(error);
            assert!(
                matches!(&mapped, LlmError::Connect(d) if d.message().to_lowercase().contains("connection refused")),
                "{stack:?}: {mapped:?}"
            );
            let io = std::iter::successors(std::error::Error::source(&mapped), |e| (*e).source())
                .find_map(|e| e.downcast_ref::<std::io::Error>())
                .map(std::io::Error::kind);
            assert_eq!(io, Some(std::io::ErrorKind::ConnectionRefused), "{stack:?}");
        }
    }

    #[tokio::test]
    async fn a_connect_timeout_is_a_connect_error_naming_the_host_and_limit() {
        // A listener whose accept queue is full: the kernel drops further SYNs.
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().expect("address"))
            .expect("bind");
        let listener = socket.listen(1).expect("listen");
        let addr = listener.local_addr().expect("addr");
        let mut queued = Vec::new();
        for _ in 0..16 {
            match tokio::time::timeout(
                Duration::from_millis(200),
                tokio::net::TcpStream::connect(addr),
            )
            .await
            {
                Ok(Ok(stream)) => queued.push(stream),
                _ => break,
            }
        }
        {
            let stack = "hyper";
            let timeout = Duration::from_millis(250);
            let transport = transport(&format!("http://{addr}/v1"), timeout);
            let error = transport
                .send(Bytes::new())
                .await
                .expect_err("no connection");
            let mapped = transport.request_error(error);
            assert!(
                matches!(&mapped, LlmError::Connect(d) if d.message().starts_with(&format!("no connection to {addr} within 250ms: "))),
                "{stack:?}: {mapped:?}"
            );
        }
        drop((listener, queued));
    }

    #[tokio::test]
    async fn https_urls_go_through_tls() {
        // A plain-HTTP server: a TLS handshake with it fails, which shows one was attempted.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let (mut socket, _) = listener.accept().await.expect("accept");
            let _ = socket
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        });
        let timeout = Duration::from_secs(5);
        let transport = transport(&format!("https://{addr}/v1"), timeout);
        let error = transport
            .send(Bytes::new())
            .await
            .expect_err("no TLS there");
        assert!(
            matches!(&error, SendError::Http(HttpError::Client(err)) if err.is_connect()),
            "{error:?}"
        );
        let mapped = transport.request_error(error);
        assert!(matches!(mapped, LlmError::Connect(_)), "{mapped:?}");
        server.await.expect("the server ran");
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(hyper::header::RETRY_AFTER, HeaderValue::from_static(" 3"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert(
            hyper::header::RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }
}
