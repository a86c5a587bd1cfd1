//! A scriptable, OpenAI-compatible mock LLM: the Rust twin of `reference/mock_llm.py`.
//!
//! It serves `POST /v1/chat/completions` (and `/chat/completions`, and Azure's
//! `/openai/deployments/{name}/chat/completions`, also under `/v1`): streaming SSE in OpenAI's
//! exact chunk shape, or a plain `chat.completion` object when the request has no
//! `"stream": true`. Each request's answer comes from a [`Script`], in the same JSON format as
//! the Python mock, so the reference recordings' scripts play unchanged: text deltas, tool
//! calls (one header delta per call, or all headers in one delta), pauses, an HTTP error
//! status (500, 429...) before the first byte, a stall before the headers, and a connection cut
//! after N events. Control endpoints:
//!
//! | route | what |
//! |---|---|
//! | `GET /health` | `{"status": "ok"}` |
//! | `POST /_mock/script` | load a script (JSON body); clears the request log and counter |
//! | `POST /_mock/reset` | clears the request log and counter, keeps the script |
//! | `GET /_mock/requests` | the requests received, each `{index, method, path, headers, body, outcome}` |
//! | `GET /_mock/stats` | counters that no load or reset clears: requests, connections (accepted, open now, over TLS by protocol), resets, requests per fault, the schedule's phases ([`MockStats`]) |
//! | `POST /_mock/fault` | the fault of every request from now (body: a fault name, or `ok` for none) |
//! | `POST /_mock/fault-schedule` | a [`FaultSchedule`] starting now (body: e.g. `down for 20s, stall:3000 for 20s`) |
//!
//! Any request can also be made to fail whatever the script says, with the `x-mock-fault`
//! header or a `[[mock:FAULT]]` marker in its last user message: `down` (the connection reset),
//! `503`, `429:SECS` (any status, with a `Retry-After`), `cut`, `cut:N`, `cut:role`,
//! `cut:tool`, `cut:text` (the stream aborted before or after text), `stall:MS` (no byte for
//! a while), `slow:MS` (a pause before every event); see [`Fault`]. A whole server is made to
//! fail with [`MockLlm::set_fault`] or a timed [`FaultSchedule`] (an outage, then a slow
//! spell, then recovery).
//!
//! The outcome of a request is `pending`, `completed`, `client_disconnected`,
//! `cut_by_script_after_N_chunks`, `connection_reset` or `http_<status>`.
//!
//! ```no_run
//! use crewline_testkit::mock_llm::{MockLlm, Script};
//!
//! # async fn run() -> std::io::Result<()> {
//! let mock = MockLlm::new(Script::text(5, std::time::Duration::from_millis(20)));
//! let running = mock.spawn("127.0.0.1:0".parse().expect("address")).await?;
//! tracing::info!(base_url = %running.base_url(), "point the OpenAI client here");
//! # Ok(()) }
//! ```
//!
//! Efficiency (it also serves the load benchmarks): a request's SSE frames are built once, up
//! front; streaming them allocates nothing more, and the only lock is the one that records the
//! request and, at the end, its outcome.
//!
//! Over HTTPS ([`MockLlm::serve_tls`], `crewline mock-llm --tls-cert --tls-key`), as every
//! provider is: rustls, ALPN offering `h2` then `http/1.1`, handshakes on tasks of their own
//! ([`MockTls`]); `/_mock/stats` then counts the connections by protocol.
//!
//! One mock, two modes: [`MockLlm::new`] answers from a script through axum (above);
//! [`MockLlm::raw`] and [`MockLlm::raw_fn`] answer byte for byte on the bare socket ([`raw`]),
//! for client tests that need broken bodies, stalls and endless lines an HTTP framework would
//! not send. Both are served by the same listener and accept loop ([`MockLlm::serve`]).

mod conn;
mod fault;
pub mod raw;
mod reply;
mod schedule;
mod schema_args;
mod script;
mod tls;

use std::{
    collections::{BTreeMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    extract::{ConnectInfo, DefaultBodyLimit, State},
    http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::{net::TcpListener, sync::watch, task::JoinHandle, time::Instant};

use conn::{ConnCounters, ConnHandle, MockIo};
pub use fault::{CutPoint, FAULT_HEADER, Fault};
pub use schedule::{FaultSchedule, Phase, ScheduleError};
pub use schema_args::{answer_for_response_format, arguments_for_schema, first_tool_call};
pub use script::{
    MAX_SSE_BODY_BYTES, Reply, Rule, Script, ScriptError, ScriptedCall, When, sse_transcript_body,
};
pub use tls::{HANDSHAKE_TIMEOUT, MAX_HANDSHAKES, MockTls, TlsError};

/// The largest request body accepted (as the Python mock: 64 MiB).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The request headers kept in the log.
const LOGGED_HEADERS: [&str; 3] = ["content-type", "accept", "x-stainless-retry-count"];

/// One request the mock received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// Its number since the script was loaded (or the log reset).
    pub index: usize,
    /// The HTTP method.
    pub method: String,
    /// The path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The `content-type`, `accept` and `x-stainless-retry-count` headers, when sent.
    pub headers: Map<String, Value>,
    /// The JSON body (`{"_unparseable": text}` when it was not JSON).
    pub body: Value,
    /// How it ended: `pending`, `completed`, `client_disconnected`,
    /// `cut_by_script_after_N_chunks` or `http_<status>`.
    pub outcome: String,
}

impl RecordedRequest {
    /// The entry as the Python mock writes it in `GET /_mock/requests`.
    pub fn to_json(&self) -> Value {
        json!({
            "index": self.index,
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "body": self.body,
            "outcome": self.outcome,
        })
    }
}

/// A scriptable mock of an OpenAI-compatible server; cheap to clone (clones share state).
///
/// # Examples
///
/// A script with a rule per situation, a fault on demand, and the requests it received:
///
/// ```
/// use crewline::llm::{ChatRequest, LlmClient, LlmError, OpenAiClient};
/// use crewline::types::Message;
/// use crewline_testkit::mock_llm::{MockLlm, Script};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let script = Script::from_json_str(r#"{"replies": [
///     {"when": {"last_user_contains": "Paris"}, "reply": {"content_chunks": ["Sunny ", "in Paris."]}},
///     {"reply": {"content_chunks": ["Which city?"]}}
/// ]}"#)?;
/// let mock = MockLlm::new(script);
/// let running = mock.spawn("127.0.0.1:0".parse()?).await?;
///
/// let client = OpenAiClient::builder()
///     .model("mock")
///     .base_url(running.base_url())
///     .api_key("sk-test")
///     .max_retries(0)
///     .build()?;
/// let ask = |text: &str| ChatRequest::new(vec![Message::user(text)]);
/// assert_eq!(client.chat(ask("Weather in Paris?")).await?.content, "Sunny in Paris.");
/// assert_eq!(client.chat(ask("Weather?")).await?.content, "Which city?");
///
/// // Any request can be made to fail: with the `x-mock-fault` header, or a marker in its words.
/// let failed = client.chat(ask("Weather in Paris? [[mock:500]]")).await;
/// assert!(matches!(failed, Err(LlmError::Api { status: Some(500), .. })));
///
/// let requests = mock.requests();
/// assert_eq!(requests.len(), 3);
/// assert_eq!(requests[0].body["messages"][0]["content"], "Weather in Paris?");
/// assert_eq!(requests[2].outcome, "http_500");
/// running.shutdown(std::time::Duration::from_secs(1)).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MockLlm {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.state();
        f.debug_struct("MockLlm")
            .field("raw", &self.shared.raw.is_some())
            .field("rules", &state.script.rules.len())
            .field("requests", &self.request_count())
            .finish()
    }
}

struct Shared {
    /// In raw mode, the byte-exact answers; the script and its log are then unused.
    raw: Option<Arc<raw::RawState>>,
    state: Mutex<LogState>,
    /// The server-wide fault and the counters no load or reset clears.
    faults: Mutex<ServerFaults>,
    /// Bumped whenever an outcome changes, so waiters need not poll.
    changed: watch::Sender<u64>,
    /// Connections open now, and TLS connections by protocol.
    connections: Arc<ConnCounters>,
}

struct LogState {
    script: Arc<Script>,
    /// Bumped by every script load and reset: late outcomes of older requests are ignored.
    generation: u64,
    /// The index the next request gets.
    next_index: usize,
    /// The recorded requests; the oldest are dropped beyond `limit`.
    log: VecDeque<RecordedRequest>,
    limit: Option<usize>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn faults(&self) -> MutexGuard<'_, ServerFaults> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed
            .send_modify(|version| *version = version.wrapping_add(1));
    }
}

/// Sets the outcome of one recorded request.
pub(crate) struct Recorder {
    shared: Arc<Shared>,
    generation: u64,
    index: usize,
}

impl Recorder {
    pub(crate) fn set_outcome(&self, outcome: String) {
        {
            let mut state = self.shared.state();
            if state.generation != self.generation {
                return;
            }
            let first = state.log.front().map_or(0, |entry| entry.index);
            if let Some(entry) = self
                .index
                .checked_sub(first)
                .and_then(|at| state.log.get_mut(at))
            {
                entry.outcome = outcome;
            }
        }
        self.shared.bump();
    }
}

/// Marks a request whose handler was dropped before it answered (the client went away during
/// `first_byte_delay`).
struct PendingGuard(Option<Recorder>);

impl PendingGuard {
    fn answer(mut self, outcome: Option<String>) -> Option<Recorder> {
        let recorder = self.0.take();
        if let (Some(recorder), Some(outcome)) = (&recorder, outcome) {
            recorder.set_outcome(outcome);
        }
        recorder
    }
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if let Some(recorder) = self.0.take() {
            recorder.set_outcome("client_disconnected".to_owned());
        }
    }
}

/// How many distinct faults `requests_by_fault` names; more are counted under `other` (a
/// client can name any `stall:MS`).
const FAULT_LABELS: usize = 64;

/// The server-wide fault, and counters that no script load or reset clears.
#[derive(Default)]
struct ServerFaults {
    mode: ServerFault,
    requests: u64,
    connections: u64,
    connections_reset: u64,
    by_fault: BTreeMap<String, u64>,
}

/// Which fault every request of the server gets.
#[derive(Default)]
enum ServerFault {
    #[default]
    None,
    Fixed(Fault),
    Schedule(RunningSchedule),
}

/// A schedule and when it started.
struct RunningSchedule {
    schedule: FaultSchedule,
    /// `None` while it waits for the first request ([`MockLlm::arm_schedule`]).
    started: Option<Started>,
    /// Per phase: requests read and connections reset in it.
    requests: Vec<u64>,
    resets: Vec<u64>,
}

#[derive(Clone, Copy)]
struct Started {
    at: Instant,
    unix_ms: u64,
}

impl Started {
    fn now() -> Self {
        Self::at(Instant::now())
    }

    /// A start at `at`, dated on the wall clock from how long ago it was.
    fn at(at: Instant) -> Self {
        let now = SystemTime::now();
        let wall = now.checked_sub(at.elapsed()).unwrap_or(now);
        let unix_ms = wall.duration_since(UNIX_EPOCH).map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
        Self { at, unix_ms }
    }
}

impl RunningSchedule {
    fn new(schedule: FaultSchedule, started: Option<Started>) -> Self {
        let phases = schedule.phases().len();
        Self {
            schedule,
            started,
            requests: vec![0; phases],
            resets: vec![0; phases],
        }
    }

    /// The phase in force now, if the schedule has started.
    fn phase(&self) -> Option<usize> {
        let started = self.started?;
        self.schedule.phase_at(started.at.elapsed())
    }
}

impl ServerFaults {
    /// The fault in force now, and the schedule's phase it comes from.
    fn current(&self) -> (Option<Fault>, Option<usize>) {
        match &self.mode {
            ServerFault::None => (None, None),
            ServerFault::Fixed(fault) => (Some(*fault), None),
            ServerFault::Schedule(running) => {
                let phase = running.phase();
                let fault = phase
                    .and_then(|i| running.schedule.phases().get(i))
                    .and_then(|phase| phase.fault);
                (fault, phase)
            }
        }
    }

    /// A connection was accepted: whether it must be reset (`down`).
    fn accept(&mut self) -> bool {
        self.connections += 1;
        let (fault, phase) = self.current();
        let reset = fault == Some(Fault::Down);
        if reset {
            self.connections_reset += 1;
            if let (ServerFault::Schedule(running), Some(i)) = (&mut self.mode, phase)
                && let Some(resets) = running.resets.get_mut(i)
            {
                *resets += 1;
            }
        }
        reset
    }

    /// A completion request was read whose own fault is `own`: starts an armed schedule,
    /// counts the request, returns the fault it gets.
    fn request(&mut self, own: Option<Fault>) -> Option<Fault> {
        self.requests += 1;
        if let ServerFault::Schedule(running) = &mut self.mode
            && running.started.is_none()
        {
            running.started = Some(Started::now());
        }
        let (server, phase) = self.current();
        if let (ServerFault::Schedule(running), Some(i)) = (&mut self.mode, phase)
            && let Some(requests) = running.requests.get_mut(i)
        {
            *requests += 1;
        }
        let fault = own.or(server);
        let label = fault.map_or_else(|| "none".to_owned(), |fault| fault.to_string());
        let known = self.by_fault.contains_key(&label);
        let label = if known || self.by_fault.len() < FAULT_LABELS {
            label
        } else {
            "other".to_owned()
        };
        *self.by_fault.entry(label).or_default() += 1;
        fault
    }
}

/// The mock's counters since it was made (no script load or reset clears them): what a load
/// run reads to count the requests per turn a fallback or a hedge costs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MockStats {
    /// Completion requests read (scripted mode), or raw requests (raw mode).
    pub requests: u64,
    /// Connections accepted (control requests included).
    pub connections: u64,
    /// Connections open now (scripted mode: handed to the HTTP server and not yet closed;
    /// over TLS, once the handshake is done).
    pub connections_open: u64,
    /// The most connections open at once since the mock was made (scripted mode).
    pub connections_open_peak: u64,
    /// Over TLS: connections whose handshake settled on HTTP/2 (`h2` by ALPN).
    pub connections_h2: u64,
    /// Over TLS: connections whose handshake settled on HTTP/1.1.
    pub connections_http1: u64,
    /// Over TLS: handshakes that failed (e.g. the client refused the certificate) or stalled
    /// past [`HANDSHAKE_TIMEOUT`].
    pub tls_handshakes_failed: u64,
    /// Connections reset as soon as accepted, by a server-wide `down` (no request read: add
    /// them to `requests` to count a client's attempts).
    pub connections_reset: u64,
    /// Requests read per fault they got (`none`: the script's answer).
    pub requests_by_fault: BTreeMap<String, u64>,
    /// The server-wide fault in force now.
    pub fault: Option<String>,
    /// The server's fault schedule, when it has one.
    pub schedule: Option<ScheduleStats>,
}

/// A fault schedule's progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScheduleStats {
    /// The schedule, as [`FaultSchedule::parse`] reads it.
    pub spec: String,
    /// When it started, in ms since the Unix epoch (`None`: waiting for a first request).
    pub started_unix_ms: Option<u64>,
    /// The phase in force now (`None`: not started, or after the last timed phase).
    pub phase: Option<usize>,
    /// Each phase.
    pub phases: Vec<PhaseStats>,
}

/// One phase of a schedule and what happened in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseStats {
    /// Its fault (`ok`: none).
    pub fault: String,
    /// Its start, in ms from the schedule's.
    pub from_ms: u64,
    /// Its end, in ms from the schedule's (`None`: never).
    pub to_ms: Option<u64>,
    /// Completion requests read in it.
    pub requests: u64,
    /// Connections reset as soon as accepted in it.
    pub connections_reset: u64,
}

impl MockLlm {
    /// A mock playing `script`, recording every request.
    pub fn new(script: Script) -> Self {
        Self::with_mode(script, None)
    }

    /// A mock in raw mode answering requests with `replies` byte for byte, in order, then
    /// with HTTP 500 `no reply left`. See [`raw`] for what the replies can do.
    pub fn raw(replies: Vec<raw::RawReply>) -> Self {
        Self::with_mode(Script::default(), Some(raw::RawState::in_order(replies)))
    }

    /// A mock in raw mode answering each request with what `respond` returns for it.
    pub fn raw_fn(
        respond: impl Fn(&raw::RawRequest) -> raw::RawReply + Send + Sync + 'static,
    ) -> Self {
        Self::with_mode(Script::default(), Some(raw::RawState::new(respond)))
    }

    fn with_mode(script: Script, raw: Option<raw::RawState>) -> Self {
        let (changed, _) = watch::channel(0);
        Self {
            shared: Arc::new(Shared {
                raw: raw.map(Arc::new),
                state: Mutex::new(LogState {
                    script: Arc::new(script),
                    generation: 0,
                    next_index: 0,
                    log: VecDeque::new(),
                    limit: None,
                }),
                faults: Mutex::new(ServerFaults::default()),
                changed,
                connections: Arc::default(),
            }),
        }
    }

    /// Keeps at most `limit` requests in the log (the oldest go first); for long load tests.
    /// Request indexes keep counting.
    pub fn with_record_limit(self, limit: usize) -> Self {
        self.shared.state().limit = Some(limit);
        self
    }

    /// Loads `script`, clearing the request log and the request counter.
    pub fn load(&self, script: Script) {
        {
            let mut state = self.shared.state();
            state.script = Arc::new(script);
            state.clear();
        }
        self.shared.bump();
    }

    /// Clears the request log and the request counter; keeps the script.
    pub fn reset(&self) {
        self.shared.state().clear();
        self.shared.bump();
    }

    /// Gives every request from now `fault` (`None`: the script's answers again), replacing a
    /// schedule; a request's own fault (header or marker) still wins. With [`Fault::Down`],
    /// every new connection is reset as soon as it is accepted, and a request on a connection
    /// already open resets it.
    pub fn set_fault(&self, fault: Option<Fault>) {
        self.shared.faults().mode = fault.map_or(ServerFault::None, ServerFault::Fixed);
    }

    /// Runs `schedule` from now, replacing the server-wide fault.
    pub fn set_schedule(&self, schedule: FaultSchedule) {
        self.set_schedule_started_at(schedule, Instant::now());
    }

    /// Runs `schedule` as if it had started at `at` (in the past: a test starts mid-schedule
    /// without waiting).
    pub fn set_schedule_started_at(&self, schedule: FaultSchedule, at: Instant) {
        self.shared.faults().mode =
            ServerFault::Schedule(RunningSchedule::new(schedule, Some(Started::at(at))));
    }

    /// Runs `schedule` from the next completion request, so that whatever comes before the
    /// first turn (a crew's start-up, health checks, `/_mock/stats`) does not eat into its first
    /// phase.
    pub fn arm_schedule(&self, schedule: FaultSchedule) {
        self.shared.faults().mode = ServerFault::Schedule(RunningSchedule::new(schedule, None));
    }

    /// The server-wide fault in force now.
    pub fn fault(&self) -> Option<Fault> {
        self.shared.faults().current().0
    }

    /// The counters since the mock was made.
    pub fn stats(&self) -> MockStats {
        let faults = self.shared.faults();
        let schedule = match &faults.mode {
            ServerFault::Schedule(running) => Some(ScheduleStats {
                spec: running.schedule.to_string(),
                started_unix_ms: running.started.map(|started| started.unix_ms),
                phase: running.phase(),
                phases: running
                    .schedule
                    .phases()
                    .iter()
                    .zip(running.schedule.bounds())
                    .enumerate()
                    .map(|(i, (phase, (from, to)))| {
                        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                        PhaseStats {
                            fault: phase
                                .fault
                                .map_or_else(|| "ok".to_owned(), |f| f.to_string()),
                            from_ms: ms(from),
                            to_ms: to.map(ms),
                            requests: running.requests.get(i).copied().unwrap_or(0),
                            connections_reset: running.resets.get(i).copied().unwrap_or(0),
                        }
                    })
                    .collect(),
            }),
            _ => None,
        };
        let requests = match &self.shared.raw {
            Some(raw) => raw.request_count() as u64,
            None => faults.requests,
        };
        let counters = &self.shared.connections;
        let count = |counter: &std::sync::atomic::AtomicU64| {
            counter.load(std::sync::atomic::Ordering::Relaxed)
        };
        MockStats {
            requests,
            connections: faults.connections,
            connections_open: match &self.shared.raw {
                Some(raw) => raw.open_connections() as u64,
                None => count(&counters.open),
            },
            connections_open_peak: count(&counters.open_peak),
            connections_h2: count(&counters.h2),
            connections_http1: count(&counters.http1),
            tls_handshakes_failed: count(&counters.tls_failed),
            connections_reset: faults.connections_reset,
            requests_by_fault: faults.by_fault.clone(),
            fault: faults.current().0.map(|fault| fault.to_string()),
            schedule,
        }
    }

    /// The requests received since the last load or reset (up to the record limit); empty
    /// in raw mode, which keeps [`MockLlm::raw_requests`] instead.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.state().log.iter().cloned().collect()
    }

    /// Whether this mock answers byte for byte ([`MockLlm::raw`]).
    pub fn is_raw(&self) -> bool {
        self.shared.raw.is_some()
    }

    /// How many requests were received: since the last load or reset, or in raw mode since
    /// the start.
    pub fn request_count(&self) -> usize {
        match &self.shared.raw {
            Some(raw) => raw.request_count(),
            None => self.shared.state().next_index,
        }
    }

    /// Raw mode: the requests received so far (the latest
    /// [`RAW_REQUEST_LOG_LIMIT`](raw::RAW_REQUEST_LOG_LIMIT) of them), each with all its headers
    /// (empty in scripted mode; see [`MockLlm::requests`]).
    pub fn raw_requests(&self) -> Vec<raw::RawRequest> {
        self.shared
            .raw
            .as_ref()
            .map(|raw| raw.requests())
            .unwrap_or_default()
    }

    /// Raw mode: how many connections the client has opened.
    pub fn connections(&self) -> usize {
        self.shared.raw.as_ref().map_or(0, |raw| raw.connections())
    }

    /// Raw mode: how many connections are open now (the mock has not finished with them).
    pub fn open_connections(&self) -> usize {
        self.shared
            .raw
            .as_ref()
            .map_or(0, |raw| raw.open_connections())
    }

    /// Raw mode: how many bytes of endless lines and bodies were sent before the client
    /// closed.
    pub fn flooded(&self) -> usize {
        self.shared.raw.as_ref().map_or(0, |raw| raw.flooded())
    }

    /// Raw mode: how many stalled or flooded connections the client has closed.
    pub fn disconnects(&self) -> usize {
        self.shared.raw.as_ref().map_or(0, |raw| raw.disconnects())
    }

    /// Raw mode: whether the client closes a stalled connection within `limit` (always
    /// `false` in scripted mode).
    pub async fn disconnected_within(&self, limit: Duration) -> bool {
        match &self.shared.raw {
            Some(raw) => raw.disconnected_within(limit).await,
            None => false,
        }
    }

    /// Waits until no recorded request is `pending` any more, at most `timeout`; returns
    /// whether that happened.
    pub async fn wait_settled(&self, timeout: Duration) -> bool {
        let mut changes = self.shared.changed.subscribe();
        let settled = async {
            loop {
                if !self
                    .shared
                    .state()
                    .log
                    .iter()
                    .any(|request| request.outcome == "pending")
                {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(timeout, settled).await.is_ok()
    }

    /// The routes: the completions endpoints and the control endpoints.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/health", get(health))
            .route("/_mock/script", post(load_script))
            .route("/_mock/reset", post(reset))
            .route("/_mock/requests", get(requests))
            .route("/_mock/stats", get(stats))
            .route("/_mock/fault", post(set_fault))
            .route("/_mock/fault-schedule", post(set_schedule))
            .route("/v1/chat/completions", post(chat_completions))
            .route("/chat/completions", post(chat_completions))
            // Azure OpenAI's deployment URL, so a crew on an Azure client runs against it too.
            .route(
                "/openai/deployments/{deployment}/chat/completions",
                post(chat_completions),
            )
            // ...and under `/v1`, for an Azure client given the base URL other clients get
            // (an eval's `{model_url}`).
            .route(
                "/v1/openai/deployments/{deployment}/chat/completions",
                post(chat_completions),
            )
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(self.clone())
    }

    /// Serves on `listener` until the returned server is shut down or dropped; call it inside
    /// a Tokio runtime.
    pub fn serve(&self, listener: TcpListener) -> std::io::Result<RunningMockLlm> {
        self.serve_with(listener, None)
    }

    /// Serves HTTPS with `tls` on `listener` (HTTP/1.1 or HTTP/2 as ALPN settles), as
    /// [`MockLlm::serve`]; the base URL names `localhost`, so the certificate must too. Raw mode
    /// is served in plain HTTP only (an `Unsupported` error).
    pub fn serve_tls(
        &self,
        listener: TcpListener,
        tls: &MockTls,
    ) -> std::io::Result<RunningMockLlm> {
        if self.is_raw() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the raw mock answers on the bare socket: plain HTTP only",
            ));
        }
        self.serve_with(listener, Some(tls))
    }

    fn serve_with(
        &self,
        listener: TcpListener,
        tls: Option<&MockTls>,
    ) -> std::io::Result<RunningMockLlm> {
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = self.router();
        let shared = Arc::clone(&self.shared);
        let listener = MockListener {
            incoming: match tls {
                None => Incoming::Plain(listener),
                Some(tls) => {
                    Incoming::Tls(tls::Handshakes::start(listener, Arc::clone(&shared), tls))
                }
            },
            addr,
            shared,
        };
        // The connect info is each connection's handle, so that `down` can reset one.
        let app = app.into_make_service_with_connect_info::<ConnHandle>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(RunningMockLlm {
            addr,
            tls: tls.is_some(),
            mock: self.clone(),
            stop: Some(stop),
            task,
        })
    }

    /// Binds `addr` (use port 0 for a free one) and serves there.
    pub async fn spawn(&self, addr: SocketAddr) -> std::io::Result<RunningMockLlm> {
        let listener = TcpListener::bind(addr).await?;
        self.serve(listener)
    }

    /// Serves on 127.0.0.1, a free port.
    pub async fn start(&self) -> std::io::Result<RunningMockLlm> {
        self.spawn(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Binds `addr` (use port 0 for a free one) and serves HTTPS there with `tls`.
    pub async fn spawn_tls(
        &self,
        addr: SocketAddr,
        tls: &MockTls,
    ) -> std::io::Result<RunningMockLlm> {
        let listener = TcpListener::bind(addr).await?;
        self.serve_tls(listener, tls)
    }

    /// Records a request and picks its reply (while the body is at hand).
    fn record(&self, method: &Method, path: &str, headers: &HeaderMap, body: Value) -> Picked {
        let logged: Map<String, Value> = LOGGED_HEADERS
            .iter()
            .filter_map(|name| {
                let value = headers.get(*name)?.to_str().ok()?;
                Some(((*name).to_owned(), Value::from(value)))
            })
            .collect();
        let mut state = self.shared.state();
        let index = state.next_index;
        state.next_index += 1;
        let script = Arc::clone(&state.script);
        let rule = script.pick_rule(index, &body);
        let own_reply = script.reply(rule).for_request(&body);
        let model = script
            .model
            .clone()
            .or_else(|| {
                body.get("model")
                    .and_then(Value::as_str)
                    .filter(|m| !m.is_empty())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "mock-gpt".to_owned());
        state.log.push_back(RecordedRequest {
            index,
            method: method.as_str().to_owned(),
            path: path.to_owned(),
            headers: logged,
            body,
            outcome: "pending".to_owned(),
        });
        if let Some(limit) = state.limit {
            while state.log.len() > limit {
                state.log.pop_front();
            }
        }
        let recorder = Recorder {
            shared: Arc::clone(&self.shared),
            generation: state.generation,
            index,
        };
        Picked {
            index,
            script,
            rule,
            own_reply,
            model,
            recorder,
        }
    }
}

/// The mock's one listener: every connection is accepted here, then reset (the server-wide
/// fault `down`), or served by the scripted server (axum), or in raw mode by the byte-exact
/// handler, on a task of its own.
pub(crate) struct MockListener {
    incoming: Incoming,
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// Where connections come from: the socket itself, or (TLS) the handshake tasks.
enum Incoming {
    Plain(TcpListener),
    Tls(tls::Handshakes),
}

impl axum::serve::Listener for MockListener {
    type Io = MockIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (MockIo, SocketAddr) {
        let inner = match &mut self.incoming {
            Incoming::Plain(inner) => inner,
            Incoming::Tls(handshakes) => {
                return match handshakes.ready.recv().await {
                    Some(connection) => connection,
                    // The accepting task is gone (it never ends on its own): accept nothing.
                    None => std::future::pending().await,
                };
            }
        };
        loop {
            // axum's own accept: it logs and retries accept errors.
            let (tcp, addr) = axum::serve::Listener::accept(inner).await;
            if self.shared.faults().accept() {
                // A reset (RST), not a polite close: what a client meets at a crashed server.
                if let Err(error) = tcp.set_zero_linger() {
                    tracing::debug!(error = %crewline::types::ErrorChain(&error), "could not set SO_LINGER");
                }
                drop(tcp);
                continue;
            }
            let Some(raw) = &self.shared.raw else {
                // Without TCP_NODELAY, each small SSE event after the first waits for the
                // client's delayed ACK (about 40 ms on Linux): streamed answers would crawl.
                if let Err(error) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %crewline::types::ErrorChain(&error), "could not set TCP_NODELAY");
                }
                return (MockIo::new(tcp, Arc::clone(&self.shared.connections)), addr);
            };
            tokio::spawn(raw::handle(tcp, Arc::clone(raw)));
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

/// A recorded request and the reply chosen for it.
struct Picked {
    index: usize,
    script: Arc<Script>,
    rule: Option<usize>,
    /// The rule's reply made for this request (`call_first_tool`, `answer_schema`), when it
    /// differs.
    own_reply: Option<Reply>,
    model: String,
    recorder: Recorder,
}

impl LogState {
    fn clear(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.next_index = 0;
        self.log.clear();
    }
}

/// A mock serving on a socket; dropping it stops the server.
#[derive(Debug)]
pub struct RunningMockLlm {
    addr: SocketAddr,
    /// Whether it serves HTTPS.
    tls: bool,
    mock: MockLlm,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl RunningMockLlm {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI base URL to give a client: `http://<addr>/v1`, or over TLS
    /// `https://localhost:<port>/v1` (the name a test certificate is made for).
    pub fn base_url(&self) -> String {
        if self.tls {
            format!("https://localhost:{}/v1", self.addr.port())
        } else {
            format!("http://{}/v1", self.addr)
        }
    }

    /// Whether it serves HTTPS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// A builder for crewline's real OpenAI client pointed at this mock: no environment read,
    /// a dummy key; the test sets the model and the limits it needs.
    pub fn client_builder(&self) -> crewline::llm::OpenAiClientBuilder {
        crewline::llm::OpenAiClient::builder()
            .api_key("sk-test-not-a-real-key")
            .base_url(self.base_url())
            .read_env(false)
    }

    /// The mock's state (script, request log).
    pub fn mock(&self) -> &MockLlm {
        &self.mock
    }

    /// Gives every request from now `fault` (`None`: none); see [`MockLlm::set_fault`].
    pub fn set_fault(&self, fault: Option<Fault>) {
        self.mock.set_fault(fault);
    }

    /// Stops accepting requests and waits (at most `timeout`) for the open ones to end.
    pub async fn shutdown(mut self, timeout: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(timeout, &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

impl Drop for RunningMockLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn health() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

async fn load_script(State(mock): State<MockLlm>, body: Bytes) -> Response {
    let script = serde_json::from_slice::<Value>(&body)
        .map_err(|e| e.to_string())
        .and_then(|value| Script::from_json(&value).map_err(|e| e.to_string()));
    match script {
        Ok(script) => {
            mock.load(script);
            Json(json!({"ok": true})).into_response()
        }
        Err(error) => (
            StatusCode::BAD_REQUEST,
            Json(json!({"ok": false, "error": error})),
        )
            .into_response(),
    }
}

async fn reset(State(mock): State<MockLlm>) -> Response {
    mock.reset();
    Json(json!({"ok": true})).into_response()
}

async fn requests(State(mock): State<MockLlm>) -> Response {
    let entries: Vec<Value> = mock
        .requests()
        .iter()
        .map(RecordedRequest::to_json)
        .collect();
    Json(Value::Array(entries)).into_response()
}

async fn stats(State(mock): State<MockLlm>) -> Response {
    Json(mock.stats()).into_response()
}

async fn set_fault(State(mock): State<MockLlm>, body: String) -> Response {
    let fault = match body.trim() {
        "ok" | "none" | "" => None,
        name => match Fault::parse(name) {
            Some(fault) => Some(fault),
            None => {
                let error = format!("`{name}` is not a fault");
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"ok": false, "error": error})),
                )
                    .into_response();
            }
        },
    };
    mock.set_fault(fault);
    Json(json!({"ok": true})).into_response()
}

async fn set_schedule(State(mock): State<MockLlm>, body: String) -> Response {
    match FaultSchedule::parse(&body) {
        Ok(schedule) => {
            mock.set_schedule(schedule);
            Json(json!({"ok": true})).into_response()
        }
        Err(error) => (
            StatusCode::BAD_REQUEST,
            Json(json!({"ok": false, "error": error.to_string()})),
        )
            .into_response(),
    }
}

async fn chat_completions(
    State(mock): State<MockLlm>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
    raw: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&raw)
        .unwrap_or_else(|_| json!({"_unparseable": String::from_utf8_lossy(&raw)}));
    let stream = body.get("stream").is_some_and(truthy);
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .is_some_and(truthy);
    let fault = mock
        .shared
        .faults()
        .request(Fault::of_request(&headers, &body));
    let Picked {
        index,
        script,
        rule,
        own_reply,
        model,
        recorder,
    } = mock.record(&method, uri.path(), &headers, body);
    if fault == Some(Fault::Down) {
        recorder.set_outcome("connection_reset".to_owned());
        return match extensions.get::<ConnectInfo<ConnHandle>>() {
            Some(ConnectInfo(connection)) => {
                connection.reset();
                // Never written: the connection fails its first write.
                StatusCode::SERVICE_UNAVAILABLE.into_response()
            }
            // The router served by another listener: the closest it can do is a body broken
            // off before its first byte.
            None => Response::new(Body::from_stream(futures::stream::once(async {
                Err::<Bytes, _>(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "mock LLM: fault `down`",
                ))
            }))),
        };
    }
    let scripted = own_reply.as_ref().unwrap_or_else(|| script.reply(rule));
    let reply = match fault {
        Some(fault) => {
            let events = reply::sse_frames(scripted, &model, index, include_usage).len();
            fault.apply(scripted, events)
        }
        None => std::borrow::Cow::Borrowed(scripted),
    };
    let reply = reply.as_ref();
    let guard = PendingGuard(Some(recorder));

    if !reply.first_byte_delay.is_zero() {
        tokio::time::sleep(reply.first_byte_delay).await;
    }
    if let Some(status) = reply.http_status {
        guard.answer(Some(format!("http_{status}")));
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(reply.error_body())).into_response();
        if let Some(secs) = reply.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        return response;
    }
    if !stream {
        guard.answer(Some("completed".to_owned()));
        return Json(reply::completion(reply, &model, index)).into_response();
    }
    let frames = reply::sse_frames(reply, &model, index, include_usage);
    let Some(recorder) = guard.answer(None) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let stream =
        reply::ReplyStream::new(frames, reply.chunk_delay, reply.cut_after_chunks, recorder);
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Python truthiness, for the request's `stream` and `include_usage`.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}
