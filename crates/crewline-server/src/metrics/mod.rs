//! The server's measurements: plain atomics on the hot path, Prometheus text on scrape.
//!
//! Kept hand-written on purpose (not prometheus-client's `Family`/`Counter`/`Histogram`): measured
//! ~3x cheaper per turn and per tool call, and no label `String` per tool call (a micro-benchmark of both).
//!
//! The label families are in `labels`, the atomic storage in `storage`, the scrape-time
//! encoding in `export`.

mod export;
mod labels;
mod storage;

use std::{
    collections::HashMap,
    fmt,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
    },
    time::Duration,
};

use crewline::{
    llm::FallbackLlm,
    protocol::Severity,
    session::{Observer, TurnOutcome},
    turn::TurnReport,
    types::ToolErrorKind,
};
use prometheus_client::{encoding::prometheus_text, registry::Registry};

pub use self::labels::{ErrorKind, FrameDrop, HandshakeFailure};
use self::{
    export::Exporter,
    storage::{Histogram, LabeledCounters},
};

/// The `Content-Type` of `GET /metrics` (Prometheus text format 0.0.4).
pub const METRICS_CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Distinct tool names kept as labels; further names share `other`.
const MAX_TOOL_LABELS: usize = 128;

/// The label of every tool call whose name is not a registered tool: the model invents names
/// of any length, and one 8 MiB name as a label took a scrape from 6 KB to 143 MB.
const UNKNOWN_TOOL: &str = "unknown";

/// The longest model name kept as a label (longer names are cut at a character boundary).
const MAX_MODEL_LABEL: usize = 128;

/// Distinct model names kept as labels; further names share `other`.
const MAX_MODEL_LABELS: usize = 32;

/// The most [`FallbackLlm`]s [`Metrics::watch_providers`] keeps.
const MAX_WATCHED_CLIENTS: usize = 16;

/// The token kinds counted per model, in `crewline_llm_tokens_total{kind}`.
const TOKEN_KINDS: [&str; 4] = ["prompt", "completion", "cached", "reasoning"];

/// One model's token counts, by [`TOKEN_KINDS`], and what its priced turns cost.
#[derive(Default)]
struct TokenStats {
    tokens: [AtomicU64; TOKEN_KINDS.len()],
    /// Pico-units of money over the model's priced turns (none until one was priced): an
    /// exact integer sum, 128 bits so a long-lived server never wraps; locked once per
    /// priced turn, never per chunk.
    cost_picos: Mutex<Option<u128>>,
}

impl TokenStats {
    /// The model's money so far in whole micro-units, if any turn of it was priced.
    fn cost_micros(&self) -> Option<u64> {
        let picos = (*self
            .cost_picos
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))?;
        Some(u64::try_from(picos / 1_000_000).unwrap_or(u64::MAX))
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
/// `crewline_handshake_failures_total{reason}`, `crewline_llm_tokens_total{model,kind}` (kind
/// `prompt`, `completion`, `cached` or `reasoning`, as the model server reported them),
/// `crewline_llm_cost_micros_total{model}` (what the turns cost in micro-units of the agent's
/// price table's currency, for models it prices; see
/// [`AgentBuilder::prices`](crewline::agent::AgentBuilder::prices)); with a
/// [`FallbackLlm`] watched ([`Metrics::watch_providers`]), per provider:
/// `crewline_llm_provider_requests_total`, `crewline_llm_provider_answered_total`,
/// `crewline_llm_provider_failures_total`, `crewline_llm_provider_failovers_total`,
/// `crewline_llm_provider_hedges_total{outcome}` (`won`, `lost`),
/// `crewline_llm_provider_cancelled_total`, `crewline_llm_provider_skipped_total` and the gauge
/// `crewline_llm_provider_breaker_state` (0 closed, 1 open, 2 half-open), all by `provider`.
///
/// # Examples
///
/// ```
/// # use std::sync::Arc;
/// # use crewline::{Crew, agent::LoopAgent, crew::OutputNode, SessionSetup, ToolLoop};
/// # use crewline::{llm::{Reply, ScriptedLlm}, tool::ToolRegistry};
/// # async fn setup(_session: SessionSetup) -> Result<Crew, std::io::Error> {
/// #     let llm = ScriptedLlm::new([Reply::text("Hello!")]);
/// #     let agent = LoopAgent::new("Be brief.", ToolLoop::new(Arc::new(llm), Arc::new(ToolRegistry::new())));
/// #     let mut crew = Crew::new();
/// #     crew.add_node(OutputNode::new("assistant", agent));
/// #     Ok(crew)
/// # }
/// use crewline::session::TurnOutcome;
/// use crewline_server::CrewServer;
/// # use crewline_testkit::{PlatformClient, PlatformConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = CrewServer::new(setup);
/// let metrics = server.handle().metrics().clone();
/// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let url = format!("ws://{}/ws", listener.local_addr()?);
/// # let handle = server.handle();
/// # let serving = tokio::spawn(server.serve(listener));
/// // ... one call of one turn ...
/// # let mut platform = PlatformClient::connect(PlatformConfig::new(url)).await?;
/// # platform.user_turn("Hi")?.finish().await?;
/// # platform.close().await?;
/// # handle.shutdown();
/// # serving.await??;
///
/// assert_eq!(metrics.sessions_total(), 1);
/// assert_eq!(metrics.turns(TurnOutcome::Completed), 1);
/// let text = metrics.render(); // what `GET /metrics` serves
/// assert!(text.contains("crewline_sessions_total 1"));
/// # Ok(()) }
/// ```
pub struct Metrics {
    active_sessions: AtomicUsize,
    sessions_total: AtomicU64,
    turns_started: AtomicU64,
    turns: [AtomicU64; 3],
    first_chunk: Histogram,
    turn_duration: Histogram,
    llm_first_token: Histogram,
    tools: RwLock<HashMap<Box<str>, Arc<ToolStats>>>,
    tokens: RwLock<HashMap<Box<str>, Arc<TokenStats>>>,
    node_errors: [AtomicU64; 2],
    errors: [AtomicU64; ErrorKind::ALL.len()],
    dropped_frames: [AtomicU64; FrameDrop::ALL.len()],
    dropped_events: LabeledCounters<&'static str>,
    handshake_failures: [AtomicU64; HandshakeFailure::ALL.len()],
    gauges: RwLock<Vec<Gauge>>,
    providers: RwLock<Vec<FallbackLlm>>,
}

/// A gauge another part of the process owns (the MCP sessions of a merged router, say), read
/// at each scrape.
struct Gauge {
    name: &'static str,
    help: &'static str,
    read: Box<dyn Fn() -> u64 + Send + Sync>,
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
            tokens: RwLock::new(HashMap::new()),
            node_errors: Default::default(),
            errors: Default::default(),
            dropped_frames: Default::default(),
            dropped_events: LabeledCounters::new(),
            handshake_failures: Default::default(),
            gauges: RwLock::new(Vec::new()),
            providers: RwLock::new(Vec::new()),
        }
    }

    /// Adds a gauge to `GET /metrics`, read by `read` at each scrape: how a merged router
    /// exports its own count, e.g. `crewline_mcp_sessions` from `McpServer::open_sessions`.
    ///
    /// `name` must be a valid Prometheus metric name not used by the server's own metrics;
    /// adding a name again replaces its gauge. `read` runs during the scrape: keep it cheap.
    pub fn gauge(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        let mut gauges = self
            .gauges
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        gauges.retain(|gauge| gauge.name != name);
        gauges.push(Gauge {
            name,
            help,
            read: Box::new(read),
        });
    }

    /// Serves `llm`'s counts per provider (requests, failovers, hedges, breaker state) on
    /// `GET /metrics`, read at each scrape. Clients watched with the same provider names add
    /// up; at most 16 clients are kept (a crew builds its fallback
    /// client once, not per call).
    pub fn watch_providers(&self, llm: &FallbackLlm) {
        let mut providers = self
            .providers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if providers.len() < MAX_WATCHED_CLIENTS {
            providers.push(llm.clone());
        } else {
            tracing::warn!("more than {MAX_WATCHED_CLIENTS} fallback clients watched: ignored");
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

    /// What `model`'s priced turns cost since the start, in whole micro-units of the price
    /// table's currency; `None` when no turn of it was priced.
    pub fn cost_micros(&self, model: &str) -> Option<u64> {
        let model = crewline::types::prefix(model, MAX_MODEL_LABEL);
        self.tokens
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(model)
            .and_then(|stats| stats.cost_micros())
    }

    /// Tokens of `kind` (`prompt`, `completion`, `cached` or `reasoning`) that `model` used
    /// since the start.
    pub fn tokens(&self, model: &str, kind: &str) -> u64 {
        let Some(index) = TOKEN_KINDS.iter().position(|k| *k == kind) else {
            return 0;
        };
        self.tokens
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(model)
            .map_or(0, |stats| stats.tokens[index].load(Relaxed))
    }

    fn model_tokens(&self, model: &str) -> Arc<TokenStats> {
        // The name comes from the team's settings or the model server's answer: bounded.
        let model = crewline::types::prefix(model, MAX_MODEL_LABEL);
        let models = self
            .tokens
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(stats) = models.get(model) {
            return Arc::clone(stats);
        }
        drop(models);
        let mut models = self
            .tokens
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = if models.len() >= MAX_MODEL_LABELS && !models.contains_key(model) {
            "other"
        } else {
            model
        };
        Arc::clone(models.entry(key.into()).or_default())
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

    /// The watched providers' counts, added up by name (bounded like model labels), sorted.
    fn providers_stats(&self) -> Vec<crewline::llm::ProviderStats> {
        let clients = self
            .providers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut by_name: std::collections::BTreeMap<String, crewline::llm::ProviderStats> =
            std::collections::BTreeMap::new();
        for stats in clients.iter().flat_map(FallbackLlm::stats) {
            let name = crewline::types::prefix(&stats.name, MAX_MODEL_LABEL);
            let name = if by_name.len() >= MAX_MODEL_LABELS && !by_name.contains_key(name) {
                "other".to_owned()
            } else {
                name.to_owned()
            };
            match by_name.get_mut(&name) {
                Some(sum) => sum.add(&stats),
                None => {
                    let mut stats = stats;
                    stats.name.clone_from(&name);
                    by_name.insert(name, stats);
                }
            }
        }
        by_name.into_values().collect()
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
            let usage = &report.usage;
            if usage.prompt_tokens > 0 || usage.completion_tokens > 0 {
                let stats = self.model_tokens(report.model.as_deref().unwrap_or("unknown"));
                let counts = [
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.cached_tokens,
                    usage.reasoning_tokens,
                ];
                for (counter, count) in stats.tokens.iter().zip(counts) {
                    counter.fetch_add(u64::from(count), Relaxed);
                }
                if let Some(cost) = report.cost {
                    let mut picos = stats
                        .cost_picos
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    *picos.get_or_insert(0) += u128::from(cost.picos());
                }
            }
        }
    }

    fn tool_finished(&self, tool: &str, latency: Duration, error: Option<ToolErrorKind>) {
        let known =
            error != Some(ToolErrorKind::UnknownTool) && crewline::tool::is_valid_tool_name(tool);
        let stats = self.tool(if known { tool } else { UNKNOWN_TOOL });
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
