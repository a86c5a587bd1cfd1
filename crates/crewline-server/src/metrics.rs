//! The server's measurements: plain atomics on the hot path, Prometheus text on scrape.

use std::{
    collections::HashMap,
    fmt,
    sync::{
        Arc, RwLock,
        atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
    },
    time::Duration,
};

use crewline::{
    Observer, TurnOutcome, TurnReport,
    protocol::{DecodeErrorKind, Severity},
    types::ToolErrorKind,
};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, NoLabelSet, prometheus_text},
    metrics::MetricType,
    registry::Registry,
};

/// The `Content-Type` of `GET /metrics` (Prometheus text format 0.0.4).
pub const METRICS_CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Distinct tool names kept as labels; further names (a model inventing tools) share `other`.
const MAX_TOOL_LABELS: usize = 128;

/// Upper bounds (seconds) of the latency histograms' buckets.
const LATENCY_BUCKETS: [f64; 14] = [
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    f64::INFINITY,
];

/// Why an inbound frame was dropped (the decode error's kind, or its size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameDrop {
    /// The bytes are not UTF-8.
    NotUtf8,
    /// The text is not JSON.
    NotJson,
    /// The JSON is not an object.
    NotAnObject,
    /// The object has no string `type`.
    MissingType,
    /// The `type` is not a protocol event.
    UnknownType,
    /// A field is missing or has the wrong type.
    InvalidFields,
    /// The JSON is nested too deeply.
    TooDeep,
    /// The frame is over the connection's size limit (the connection is closed with 1009).
    TooBig,
}

impl From<DecodeErrorKind> for FrameDrop {
    fn from(kind: DecodeErrorKind) -> Self {
        match kind {
            DecodeErrorKind::NotUtf8 => Self::NotUtf8,
            DecodeErrorKind::NotJson => Self::NotJson,
            DecodeErrorKind::NotAnObject => Self::NotAnObject,
            DecodeErrorKind::MissingType => Self::MissingType,
            DecodeErrorKind::UnknownType => Self::UnknownType,
            DecodeErrorKind::InvalidFields => Self::InvalidFields,
            DecodeErrorKind::TooDeep => Self::TooDeep,
        }
    }
}

impl FrameDrop {
    const ALL: [Self; 8] = [
        Self::NotUtf8,
        Self::NotJson,
        Self::NotAnObject,
        Self::MissingType,
        Self::UnknownType,
        Self::InvalidFields,
        Self::TooDeep,
        Self::TooBig,
    ];

    /// The label value, e.g. `not_json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotUtf8 => "not_utf8",
            Self::NotJson => "not_json",
            Self::NotAnObject => "not_an_object",
            Self::MissingType => "missing_type",
            Self::UnknownType => "unknown_type",
            Self::InvalidFields => "invalid_fields",
            Self::TooDeep => "too_deep",
            Self::TooBig => "too_big",
        }
    }
}

/// Why a call ended before its session started (no `agent.ready` was sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// `/ws` without a valid token (answered 401, not upgraded).
    Unauthorized,
    /// `/ws` while the server drains (answered 503, not upgraded).
    Draining,
    /// `/ws` while `max_sessions` calls are in progress (answered 503, not upgraded).
    Full,
    /// No first frame within the handshake timeout.
    Timeout,
    /// The first frame did not decode.
    BadFrame,
    /// The first frame was over the size limit.
    TooBig,
    /// The first frame was an event other than `system.init`.
    NotInit,
    /// The platform closed the socket before the handshake ended.
    Closed,
    /// The crew's setup code returned an error.
    SetupFailed,
    /// The crew's setup code panicked.
    SetupPanicked,
    /// The crew's setup code did not finish in time.
    SetupTimeout,
    /// The crew's graph is invalid.
    InvalidGraph,
    /// The server began shutting down during the handshake.
    ShuttingDown,
}

impl HandshakeFailure {
    const ALL: [Self; 13] = [
        Self::Unauthorized,
        Self::Draining,
        Self::Full,
        Self::Timeout,
        Self::BadFrame,
        Self::TooBig,
        Self::NotInit,
        Self::Closed,
        Self::SetupFailed,
        Self::SetupPanicked,
        Self::SetupTimeout,
        Self::InvalidGraph,
        Self::ShuttingDown,
    ];

    /// The label value, e.g. `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::Draining => "draining",
            Self::Full => "full",
            Self::Timeout => "timeout",
            Self::BadFrame => "bad_frame",
            Self::TooBig => "too_big",
            Self::NotInit => "not_init",
            Self::Closed => "closed",
            Self::SetupFailed => "setup_failed",
            Self::SetupPanicked => "setup_panicked",
            Self::SetupTimeout => "setup_timeout",
            Self::InvalidGraph => "invalid_graph",
            Self::ShuttingDown => "shutting_down",
        }
    }
}

/// A class of error, for `crewline_errors_total{kind}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A failed handshake or crew setup.
    Handshake,
    /// A WebSocket I/O or protocol error.
    Socket,
    /// An inbound frame that could not be used.
    BadFrame,
    /// Node code failed (`agent.error` sent).
    Node,
    /// A turn failed (`agent.error` fatal sent).
    Turn,
    /// A tool call failed.
    Tool,
    /// A call sent no frame and answered no ping within the idle timeout (closed).
    IdleTimeout,
    /// A socket write did not complete within the write timeout (the call was ended).
    WriteTimeout,
}

impl ErrorKind {
    const ALL: [Self; 8] = [
        Self::Handshake,
        Self::Socket,
        Self::BadFrame,
        Self::Node,
        Self::Turn,
        Self::Tool,
        Self::IdleTimeout,
        Self::WriteTimeout,
    ];

    /// The label value, e.g. `socket`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Handshake => "handshake",
            Self::Socket => "socket",
            Self::BadFrame => "bad_frame",
            Self::Node => "node",
            Self::Turn => "turn",
            Self::Tool => "tool",
            Self::IdleTimeout => "idle_timeout",
            Self::WriteTimeout => "write_timeout",
        }
    }
}

/// A latency histogram made of atomics (no lock on observe).
struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn new() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn observe(&self, value: Duration) {
        let secs = value.as_secs_f64();
        let index = LATENCY_BUCKETS
            .iter()
            .position(|bound| secs <= *bound)
            .unwrap_or(LATENCY_BUCKETS.len() - 1);
        self.buckets[index].fetch_add(1, Relaxed);
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Relaxed);
    }

    fn encode(&self, name: &str, help: &str, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
        let (sum, count, buckets) = self.snapshot();
        metric.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(bound, count)| (*bound, count.load(Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_nanos.load(Relaxed) as f64 / 1e9;
        (sum, count, buckets)
    }
}

/// Counters keyed by a label value not known in advance; a read lock on the common path.
struct LabeledCounters<K> {
    counters: RwLock<HashMap<K, Arc<AtomicU64>>>,
}

impl<K: std::hash::Hash + Eq + Clone + Ord> LabeledCounters<K> {
    fn new() -> Self {
        Self {
            counters: RwLock::new(HashMap::new()),
        }
    }

    fn inc(&self, key: &K) {
        let counters = self
            .counters
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(counter) = counters.get(key) {
            counter.fetch_add(1, Relaxed);
            return;
        }
        drop(counters);
        self.counters
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> Vec<(K, u64)> {
        let mut values: Vec<(K, u64)> = self
            .counters
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(key, value)| (key.clone(), value.load(Relaxed)))
            .collect();
        values.sort_by(|a, b| a.0.cmp(&b.0));
        values
    }
}

/// One tool's measurements.
struct ToolStats {
    latency: Histogram,
    errors: LabeledCounters<&'static str>,
}

/// The server's measurements, shared by every call; also the [`Observer`] given to sessions.
///
/// Metric names (Prometheus text, `GET /metrics`):
/// `crewline_active_sessions`, `crewline_sessions_total`, `crewline_turns_started_total`,
/// `crewline_turns_total{outcome}`, `crewline_time_to_first_chunk_seconds`,
/// `crewline_turn_duration_seconds`, `crewline_llm_time_to_first_token_seconds`,
/// `crewline_tool_duration_seconds{tool}`, `crewline_tool_errors_total{tool,kind}`,
/// `crewline_node_errors_total{severity}`, `crewline_errors_total{kind}`,
/// `crewline_dropped_frames_total{reason}`, `crewline_dropped_events_total{reason}`,
/// `crewline_handshake_failures_total{reason}`.
pub struct Metrics {
    active_sessions: AtomicUsize,
    sessions_total: AtomicU64,
    turns_started: AtomicU64,
    turns: [AtomicU64; 3],
    first_chunk: Histogram,
    turn_duration: Histogram,
    llm_first_token: Histogram,
    tools: RwLock<HashMap<Box<str>, Arc<ToolStats>>>,
    node_errors: [AtomicU64; 2],
    errors: [AtomicU64; ErrorKind::ALL.len()],
    dropped_frames: [AtomicU64; FrameDrop::ALL.len()],
    dropped_events: LabeledCounters<&'static str>,
    handshake_failures: [AtomicU64; HandshakeFailure::ALL.len()],
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("active_sessions", &self.active_sessions())
            .field("sessions_total", &self.sessions_total())
            .finish_non_exhaustive()
    }
}

fn turn_index(outcome: TurnOutcome) -> usize {
    match outcome {
        TurnOutcome::Completed => 0,
        TurnOutcome::Interrupted => 1,
        TurnOutcome::Failed => 2,
    }
}

const TURN_OUTCOMES: [&str; 3] = ["completed", "interrupted", "failed"];

fn severity_index(severity: Severity) -> usize {
    match severity {
        Severity::Warning => 0,
        Severity::Fatal => 1,
    }
}

const SEVERITIES: [&str; 2] = ["warning", "fatal"];

fn index_of<T: PartialEq>(all: &[T], item: &T) -> usize {
    all.iter().position(|x| x == item).unwrap_or(0)
}

impl Metrics {
    /// Empty measurements.
    pub fn new() -> Self {
        Self {
            active_sessions: AtomicUsize::new(0),
            sessions_total: AtomicU64::new(0),
            turns_started: AtomicU64::new(0),
            turns: Default::default(),
            first_chunk: Histogram::new(),
            turn_duration: Histogram::new(),
            llm_first_token: Histogram::new(),
            tools: RwLock::new(HashMap::new()),
            node_errors: Default::default(),
            errors: Default::default(),
            dropped_frames: Default::default(),
            dropped_events: LabeledCounters::new(),
            handshake_failures: Default::default(),
        }
    }

    /// Calls in progress (WebSocket connections upgraded and not yet closed).
    pub fn active_sessions(&self) -> usize {
        self.active_sessions.load(Relaxed)
    }

    /// Calls accepted since the start.
    pub fn sessions_total(&self) -> u64 {
        self.sessions_total.load(Relaxed)
    }

    /// Frames dropped for `reason` since the start.
    pub fn dropped_frames(&self, reason: FrameDrop) -> u64 {
        self.dropped_frames[index_of(&FrameDrop::ALL, &reason)].load(Relaxed)
    }

    /// Handshakes that failed for `reason` since the start.
    pub fn handshake_failures(&self, reason: HandshakeFailure) -> u64 {
        self.handshake_failures[index_of(&HandshakeFailure::ALL, &reason)].load(Relaxed)
    }

    /// Errors of `kind` since the start.
    pub fn errors(&self, kind: ErrorKind) -> u64 {
        self.errors[index_of(&ErrorKind::ALL, &kind)].load(Relaxed)
    }

    /// Inbound events the sessions dropped for `reason` (e.g. `inbox_full`) since the start.
    pub fn dropped_events(&self, reason: &str) -> u64 {
        self.dropped_events
            .snapshot()
            .into_iter()
            .find(|(key, _)| *key == reason)
            .map_or(0, |(_, count)| count)
    }

    /// Turns that ended with `outcome` since the start.
    pub fn turns(&self, outcome: TurnOutcome) -> u64 {
        self.turns[turn_index(outcome)].load(Relaxed)
    }

    /// Counts a call as started; the returned guard counts it as ended when dropped.
    pub(crate) fn call_started(self: &Arc<Self>) -> ActiveCall {
        self.active_sessions.fetch_add(1, Relaxed);
        self.sessions_total.fetch_add(1, Relaxed);
        ActiveCall {
            metrics: Arc::clone(self),
        }
    }

    pub(crate) fn frame_dropped(&self, reason: FrameDrop) {
        self.dropped_frames[index_of(&FrameDrop::ALL, &reason)].fetch_add(1, Relaxed);
        self.error(ErrorKind::BadFrame);
    }

    pub(crate) fn handshake_failed(&self, reason: HandshakeFailure) {
        self.handshake_failures[index_of(&HandshakeFailure::ALL, &reason)].fetch_add(1, Relaxed);
        self.error(ErrorKind::Handshake);
    }

    pub(crate) fn error(&self, kind: ErrorKind) {
        self.errors[index_of(&ErrorKind::ALL, &kind)].fetch_add(1, Relaxed);
    }

    fn tool(&self, name: &str) -> Arc<ToolStats> {
        let tools = self
            .tools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(stats) = tools.get(name) {
            return Arc::clone(stats);
        }
        drop(tools);
        let mut tools = self
            .tools
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = if tools.len() >= MAX_TOOL_LABELS && !tools.contains_key(name) {
            "other"
        } else {
            name
        };
        Arc::clone(tools.entry(key.into()).or_insert_with(|| {
            Arc::new(ToolStats {
                latency: Histogram::new(),
                errors: LabeledCounters::new(),
            })
        }))
    }

    /// The measurements in the Prometheus text format.
    pub fn render(self: &Arc<Self>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Exporter(Arc::clone(self))));
        let mut text = String::new();
        // Writing to a String cannot fail, and the collector only fails on write errors.
        let _ = prometheus_text::encode(&mut text, &registry);
        text
    }
}

impl Observer for Metrics {
    fn turn_started(&self) {
        self.turns_started.fetch_add(1, Relaxed);
    }

    fn first_chunk(&self, latency: Duration) {
        self.first_chunk.observe(latency);
    }

    fn turn_finished(&self, outcome: TurnOutcome, report: Option<&TurnReport>) {
        self.turns[turn_index(outcome)].fetch_add(1, Relaxed);
        if outcome == TurnOutcome::Failed {
            self.error(ErrorKind::Turn);
        }
        if let Some(report) = report {
            self.turn_duration.observe(report.total);
            for round in &report.rounds {
                if let Some(ttft) = round.time_to_first_token {
                    self.llm_first_token.observe(ttft);
                }
            }
        }
    }

    fn tool_finished(&self, tool: &str, latency: Duration, error: Option<ToolErrorKind>) {
        let stats = self.tool(tool);
        stats.latency.observe(latency);
        if let Some(kind) = error {
            stats.errors.inc(&kind.as_str());
            self.error(ErrorKind::Tool);
        }
    }

    fn node_error(&self, _node: &str, severity: Severity) {
        self.node_errors[severity_index(severity)].fetch_add(1, Relaxed);
        self.error(ErrorKind::Node);
    }

    fn event_dropped(&self, reason: &'static str) {
        self.dropped_events.inc(&reason);
    }
}

/// Counts one live call; dropping it ends the count, also on panic.
pub(crate) struct ActiveCall {
    metrics: Arc<Metrics>,
}

impl Drop for ActiveCall {
    fn drop(&mut self) {
        self.metrics.active_sessions.fetch_sub(1, Relaxed);
    }
}

/// Writes [`Metrics`] through prometheus-client's encoder at scrape time.
#[derive(Debug)]
struct Exporter(Arc<Metrics>);

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    encoder
        .encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&value, None)
}

fn counter_family<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (label_value, value) in values {
        metric
            .encode_family(&[(label, label_value)])?
            .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
    }
    Ok(())
}

fn loads<'a>(labels: &[&'a str], counters: &[AtomicU64]) -> Vec<(&'a str, u64)> {
    labels
        .iter()
        .zip(counters)
        .map(|(label, counter)| (*label, counter.load(Relaxed)))
        .collect()
}

impl Collector for Exporter {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let m = &self.0;
        let e = &mut encoder;
        e.encode_descriptor(
            "crewline_active_sessions",
            "Calls in progress (live WebSocket sessions).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(m.active_sessions() as u64))?;
        counter(
            e,
            "crewline_sessions",
            "Calls accepted (WebSocket upgrades).",
            m.sessions_total(),
        )?;
        counter(
            e,
            "crewline_turns_started",
            "LLM turns started.",
            m.turns_started.load(Relaxed),
        )?;
        counter_family(
            e,
            "crewline_turns",
            "LLM turns ended, by outcome.",
            "outcome",
            loads(&TURN_OUTCOMES, &m.turns),
        )?;
        m.first_chunk.encode(
            "crewline_time_to_first_chunk_seconds",
            "Time from an LLM request to the first chunk sent.",
            e,
        )?;
        m.turn_duration.encode(
            "crewline_turn_duration_seconds",
            "Time from an LLM request to the end of its turn.",
            e,
        )?;
        m.llm_first_token.encode(
            "crewline_llm_time_to_first_token_seconds",
            "Time from each LLM request to its first token.",
            e,
        )?;

        let mut tools: Vec<(Box<str>, Arc<ToolStats>)> = m
            .tools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(name, stats)| (name.clone(), Arc::clone(stats)))
            .collect();
        tools.sort_by(|a, b| a.0.cmp(&b.0));
        {
            let mut metric = e.encode_descriptor(
                "crewline_tool_duration_seconds",
                "Tool call latency, by tool.",
                None,
                MetricType::Histogram,
            )?;
            for (name, stats) in &tools {
                let (sum, count, buckets) = stats.latency.snapshot();
                metric
                    .encode_family(&[("tool", &**name)])?
                    .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            }
        }
        {
            let mut metric = e.encode_descriptor(
                "crewline_tool_errors",
                "Tool calls that failed, by tool and kind.",
                None,
                MetricType::Counter,
            )?;
            for (name, stats) in &tools {
                for (kind, value) in stats.errors.snapshot() {
                    metric
                        .encode_family(&[("tool", &**name), ("kind", kind)])?
                        .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
                }
            }
        }
        counter_family(
            e,
            "crewline_node_errors",
            "Errors raised by node code, by severity.",
            "severity",
            loads(&SEVERITIES, &m.node_errors),
        )?;
        let kinds: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        counter_family(
            e,
            "crewline_errors",
            "Errors, by kind.",
            "kind",
            loads(&kinds, &m.errors),
        )?;
        let drops: Vec<&str> = FrameDrop::ALL.iter().map(|k| k.as_str()).collect();
        counter_family(
            e,
            "crewline_dropped_frames",
            "Inbound frames dropped, by reason.",
            "reason",
            loads(&drops, &m.dropped_frames),
        )?;
        counter_family(
            e,
            "crewline_dropped_events",
            "Inbound events the session dropped, by reason.",
            "reason",
            m.dropped_events.snapshot(),
        )?;
        let failures: Vec<&str> = HandshakeFailure::ALL.iter().map(|k| k.as_str()).collect();
        counter_family(
            e,
            "crewline_handshake_failures",
            "Calls that ended before agent.ready, by reason.",
            "reason",
            loads(&failures, &m.handshake_failures),
        )
    }
}
