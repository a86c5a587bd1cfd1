//! Where the task API is, the key sent to it, and how failed requests are retried.

use std::{fmt, time::Duration};

use backon::ExponentialBuilder;
use secrecy::{ExposeSecret, SecretString};

/// An API key: sent in the `apikey` header, never shown by `Debug` or in logs, and zeroed in
/// memory when dropped.
#[derive(Clone)]
pub struct ApiKey(SecretString);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(SecretString::from(key.into()))
    }

    /// The key itself, for the header.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl PartialEq for ApiKey {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for ApiKey {}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// How failed requests are retried: exponential delays from `initial`, doubling, capped at
/// `max`, for at most `max_attempts` attempts in a row. Each delay is jittered to between half
/// its nominal length and all of it, so clients that failed together do not retry together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay (nominal: the pause is between half of it and all of it).
    pub initial: Duration,
    /// The longest delay.
    pub max: Duration,
    /// Attempts (the first one included) before giving up.
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
            max_attempts: 8,
        }
    }
}

impl Backoff {
    /// The delays between attempts, as backon runs them: nominally `initial`, doubling, at most
    /// `max`, `max_attempts - 1` of them, each jittered to between half its nominal length and
    /// all of it (so the total stays within the nominal schedule's).
    pub(super) fn schedule(&self) -> ExponentialBuilder {
        // backon's jitter adds up to one more delay (`d` becomes `d..2d`): half delays, jittered.
        ExponentialBuilder::new()
            .with_min_delay(self.initial.min(self.max) / 2)
            .with_max_delay(self.max / 2)
            .with_factor(2.0)
            .with_jitter()
            .with_max_times(self.max_attempts.max(1) as usize - 1)
    }
}

/// Where the task API is and how to talk to it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use crewline_remote::{Backoff, ClientConfig, ClientError, TaskClient};
///
/// let config = ClientConfig::new("https://api.smooth.sh/api/v1")
///     .api_key("sk-task-123")
///     .poll_interval(Duration::from_millis(500))
///     .long_poll(None) // a server without `wait_ms`
///     .request_timeout(Duration::from_secs(10))
///     .backoff(Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(2), max_attempts: 4 });
/// assert!(!format!("{config:?}").contains("sk-task-123")); // the key is never printed
/// let client = TaskClient::new(config)?;
/// assert_eq!(client.config().api_key.as_ref().map(|k| k.expose()), Some("sk-task-123"));
///
/// // The URL is checked when the client is made.
/// let bad = TaskClient::new(ClientConfig::new("not a url"));
/// assert!(matches!(bad, Err(ClientError::Config(_))));
/// # Ok::<(), ClientError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The API's base URL, e.g. `https://api.smooth.sh/api/v1` or `http://127.0.0.1:8080`.
    pub base_url: String,
    /// Sent as the `apikey` header.
    pub api_key: Option<ApiKey>,
    /// The shortest time between two polls that brought nothing new.
    pub poll_interval: Duration,
    /// Asks the server to hold a poll open until an event comes, up to this long (`wait_ms`,
    /// a crewline extension; other servers ignore it and answer at once).
    pub long_poll: Option<Duration>,
    /// The longest a request may take (a long poll gets its wait on top).
    pub request_timeout: Duration,
    /// How failed requests are retried.
    pub backoff: Backoff,
    /// The largest response body read from the API (default 8 MiB, [`MAX_RESPONSE_BYTES`]);
    /// a larger one is [`ClientError::TooLarge`](crate::ClientError::TooLarge), read no
    /// further. An error body is read up to 64 KiB whatever this says.
    pub max_response_bytes: usize,
    /// The most tool calls run at once (default 64, [`MAX_CONCURRENT_CALLS`]); past it the
    /// client runs the rest of a poll's calls as earlier ones finish, and polls again after.
    pub max_concurrent_calls: usize,
}

/// The default [`ClientConfig::max_response_bytes`]: 8 MiB. A task's whole state is a few tool
/// specs and calls of a few KiB (a crewline task API holds at most 1 MiB per task), so this is
/// far above any real answer and far below harm.
pub const MAX_RESPONSE_BYTES: usize = 8 << 20;

/// The default [`ClientConfig::max_concurrent_calls`]: 64. A model asks for at most a few
/// calls at once (crewline runs 16 per answer), so only a broken or hostile API meets it.
pub const MAX_CONCURRENT_CALLS: usize = 64;

impl ClientConfig {
    /// A configuration for `base_url`, without a key: 250 ms between idle polls, 10 s long
    /// polls, 30 s request timeout, default backoff, bodies up to 8 MiB, 64 calls at once.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            poll_interval: Duration::from_millis(250),
            long_poll: Some(Duration::from_secs(10)),
            request_timeout: Duration::from_secs(30),
            backoff: Backoff::default(),
            max_response_bytes: MAX_RESPONSE_BYTES,
            max_concurrent_calls: MAX_CONCURRENT_CALLS,
        }
    }

    /// With this API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(key));
        self
    }

    /// With this time between idle polls.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// With long polls of at most `wait` (`None`: plain polling).
    pub fn long_poll(mut self, wait: Option<Duration>) -> Self {
        self.long_poll = wait;
        self
    }

    /// With this retry policy.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// With this request timeout.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// With response bodies of at most `bytes`.
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// With at most `calls` tool calls running at once (at least one).
    pub fn max_concurrent_calls(mut self, calls: usize) -> Self {
        self.max_concurrent_calls = calls.max(1);
        self
    }
}
