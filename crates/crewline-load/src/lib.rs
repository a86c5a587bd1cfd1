//! The load generator behind `crewline load`: many concurrent platform connections driving a crew, with latency
//! percentiles, error counts and (given the server's pid) its CPU time per turn and memory.
//!
//! Each session connects (`system.init`, `agent.ready`), waits until every session has
//! connected (in the open loop, [`LoadConfig::open_loop`], it starts at once), then runs its
//! turns: `agent.transcript.update` and `system.llm.request` with the conversation so far,
//! reading until `agent.llm.response.end`. Measured per turn: the time from sending the request to the first
//! chunk and to `end`; in the interrupt scenario, `system.control.interrupt` is sent on the
//! first chunk and the time to the last chunk after it (zero when none came) and to `end` is
//! measured.
//!
//! Each call sends a platform call id. With [`LoadConfig::reconnect`], a call whose socket
//! drops (or stays silent past the turn timeout) connects again through the same URL with the
//! same call id and sends the turn in flight again with the conversation so far, as a platform
//! does; the report counts drops and the turns in flight at one. [`Scenario::Bank`] drives the
//! `bank_support` crew with transfers of amounts unique in the run (`deploy/test/chaos.sh`).
//!
//! ```no_run
//! use crewline_load::{LoadConfig, Scenario, run};
//!
//! # async fn go() -> Result<(), crewline_load::LoadError> {
//! let mut config = LoadConfig::new("ws://127.0.0.1:8080/ws");
//! config.sessions = 100;
//! config.turns = 5;
//! config.scenario = Scenario::Tool;
//! let report = run(config).await?;
//! tracing::info!(p99 = report.time_to_first_chunk.p99_ms, "done");
//! # Ok(()) }
//! ```

mod procfs;
pub mod route;
mod script;
mod session;
mod stats;
mod turn_log;

use std::{
    path::PathBuf,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use serde::Serialize;
use tokio::{sync::watch, task::JoinSet, time::Instant};

pub use script::{BANK_YES, bank_amount, bank_transfer_words};
pub use stats::Percentiles;
pub use turn_log::{TurnOutcome, TurnRecord};

/// What each simulated caller says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// A question answered with text.
    #[default]
    Text,
    /// A weather question: the model calls `get_weather`, then answers.
    Tool,
    /// A question interrupted (`system.control.interrupt`) on its first chunk.
    Interrupt,
    /// A bank customer (the `bank_support` crew): a balance question, then "send $X to
    /// Alice" with an amount unique in the run, then "yes" to approve it, and again; a
    /// transfer the caller did not hear confirmed is asked for once more.
    Bank,
    /// A debtor on the `collections_router` crew: the account number (intake), the date of
    /// birth (verify), then a monthly payment (resolve) each later turn; the sub-agent each
    /// turn is in is followed from the router's `agent.transition` logs, and a turn answered
    /// after a reconnect is checked to be in the sub-agent the call was in ([`route`]).
    Router,
}

impl Scenario {
    /// The user's words for `turn` of `session`.
    pub fn user_text(self, session: usize, turn: usize) -> String {
        match self {
            Self::Text => format!("Hello, this is caller {session}, turn {turn}."),
            Self::Tool => "What's the weather in Paris?".to_owned(),
            Self::Interrupt => format!("Tell me a long story, caller {session} turn {turn}."),
            // The amount is filled in per call (`bank_amount`), so that it is unique in a run.
            Self::Bank => match turn % 3 {
                0 => "What's my balance?".to_owned(),
                1 => "Please send {amount} to Alice.".to_owned(),
                _ => BANK_YES.to_owned(),
            },
            Self::Router => route::router_words(session, turn),
        }
    }
}

/// A load run's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadConfig {
    /// The crew's WebSocket address.
    pub url: String,
    /// Shared secret, sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Concurrent sessions (calls).
    pub sessions: usize,
    /// Turns per session.
    pub turns: usize,
    /// What the callers say.
    pub scenario: Scenario,
    /// New connections per second while ramping up (0: all at once).
    pub ramp_per_sec: u32,
    /// The pause between a session's turns; when set, the first turns are spread over one
    /// such pause too.
    pub think: Duration,
    /// Connecting plus the handshake.
    pub connect_timeout: Duration,
    /// One whole turn.
    pub turn_timeout: Duration,
    /// The server process to watch (CPU time and memory from `/proc`).
    pub pid: Option<u32>,
    /// How often the server's memory is sampled.
    pub sample_every: Duration,
    /// Open loop: no start line. Sessions arrive at `ramp_per_sec`, each runs its turns as
    /// soon as it has connected (`think` apart) and hangs up after the last, so calls come and
    /// go as on a real line instead of all talking at once; `sessions` is then the number of
    /// calls over the run, not how many are live together.
    pub open_loop: bool,
    /// Write one JSON line per turn and per failed connection to this file
    /// ([`TurnRecord`]), so that figures can be computed per time window.
    pub turn_log: Option<PathBuf>,
    /// Reconnect a dropped call, as a platform does; `None` ends a call at its first drop.
    pub reconnect: Option<Reconnect>,
    /// The start of each call's id (`<prefix>-<session>`), sent as the platform's call id;
    /// `None` picks one unique to the run.
    pub call_id_prefix: Option<String>,
    /// Report the turns per window of this length, by when they began
    /// ([`LoadReport::windows`]): how a run went through an outage, minute by minute.
    pub window: Option<Duration>,
}

/// How a dropped call is reconnected: through the same URL (the balancer), with the same call
/// id and the conversation so far, sending the turn in flight again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconnect {
    /// Connection attempts per turn (a turn still not answered after them is lost).
    pub retries: u32,
    /// The wait before the first attempt, doubled before each next one.
    pub backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
}

impl Default for Reconnect {
    fn default() -> Self {
        Self {
            retries: 5,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(4),
        }
    }
}

impl LoadConfig {
    /// One text session of one turn against `url`, with generous timeouts.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            token: None,
            sessions: 1,
            turns: 1,
            scenario: Scenario::Text,
            ramp_per_sec: 0,
            think: Duration::ZERO,
            connect_timeout: Duration::from_secs(30),
            turn_timeout: Duration::from_secs(60),
            pid: None,
            sample_every: Duration::from_millis(100),
            open_loop: false,
            turn_log: None,
            reconnect: None,
            call_id_prefix: None,
            window: None,
        }
    }
}

/// Why a load run could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The settings are unusable.
    #[error("invalid load settings: {0}")]
    Invalid(String),
    /// The server process named by `pid` cannot be read.
    #[error("cannot read the server process {pid}")]
    Process {
        /// The pid.
        pid: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The turn log cannot be created or written.
    #[error("cannot write the turn log {}", path.display())]
    TurnLog {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The result of a load run (also its JSON form).
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// The crew's address.
    pub url: String,
    /// The scenario.
    pub scenario: Scenario,
    /// Sessions asked for.
    pub sessions: usize,
    /// Turns per session asked for.
    pub turns_per_session: usize,
    /// Sessions that completed the handshake.
    pub connected: u64,
    /// Sessions that could not connect or were refused.
    pub connect_errors: u64,
    /// Turns whose request was sent: completed, timed out or lost.
    pub turns_started: u64,
    /// Turns that ended with `agent.llm.response.end`.
    pub turns_completed: u64,
    /// Completed turns with chunks (or interrupted) and no `agent.error`.
    pub turns_ok: u64,
    /// Completed turns that carried an `agent.error`.
    pub turns_with_agent_error: u64,
    /// Completed, not interrupted turns without a single chunk.
    pub turns_without_chunks: u64,
    /// Turns with no `end` within the turn timeout (the session stops there).
    pub turns_timed_out: u64,
    /// Turns whose connection was lost (the session stops there).
    pub turns_lost: u64,
    /// Turns never started because their session failed earlier.
    pub turns_not_run: u64,
    /// All errors: connect errors, turns with an agent error, timed out or lost.
    pub errors: u64,
    /// `agent.error` frames received.
    pub agent_errors: u64,
    /// Chunks received in turns.
    pub chunks: u64,
    /// Chunks that arrived outside a turn (before its `start`).
    pub stray_chunks: u64,
    /// `tool_call_end` logs received.
    pub tool_calls_ended: u64,
    /// `tool_call_error` logs received.
    pub tool_calls_failed: u64,
    /// Connect plus handshake.
    pub connect_time: Percentiles,
    /// From `system.llm.request` sent to the first chunk.
    pub time_to_first_chunk: Percentiles,
    /// From `system.llm.request` sent to `end`.
    pub time_to_end: Percentiles,
    /// Turns the client interrupted.
    pub turns_interrupted: u64,
    /// Chunks that arrived after an interrupt was sent.
    pub chunks_after_interrupt: u64,
    /// From the interrupt to the last chunk after it (zero when none came).
    pub interrupt_to_last_chunk: Percentiles,
    /// From the interrupt to `end`.
    pub interrupt_to_end: Percentiles,
    /// Whether the run was open loop (no start line).
    pub open_loop: bool,
    /// When the run began, in ms since the Unix epoch: the turn log's times count from here,
    /// so that other events (a server restart, say) can be placed among the turns.
    pub began_unix_ms: u64,
    /// Seconds from the start line (all sessions connected; in the open loop, the run's start)
    /// to the last turn's end.
    pub turn_phase_secs: f64,
    /// Completed turns per second over the turn phase.
    pub turns_per_sec: f64,
    /// Seconds for the whole run, connecting included.
    pub total_secs: f64,
    /// The server's figures, when `pid` was given.
    pub server: Option<ServerUsage>,
    /// CPU time the load generator itself used, in ms.
    pub load_generator_cpu_ms: Option<f64>,
    /// Whether dropped calls were reconnected.
    pub reconnect: bool,
    /// Connections that dropped (closed, failed or silent past the turn timeout) in a call.
    pub drops: u64,
    /// Connections made again after a drop.
    pub reconnects: u64,
    /// Reconnection attempts that failed.
    pub reconnect_failures: u64,
    /// Turns whose connection dropped while they were in flight (counted once per turn).
    pub turns_in_flight_at_drop: u64,
    /// Bank scenario: transfers the callers asked for (each a unique amount).
    pub transfers_requested: u64,
    /// Bank scenario: transfers the callers heard confirmed.
    pub transfers_confirmed: u64,
    /// Bank scenario: transfers asked for a second time (not heard confirmed after the yes).
    pub transfers_asked_again: u64,
    /// Router scenario: calls that had a turn answered after a reconnect.
    pub resumed_calls: u64,
    /// Router scenario: turns answered after a reconnect (each checked for its sub-agent).
    pub resumed_turns: u64,
    /// Router scenario: resumed calls with a turn answered by a sub-agent the call was not in.
    pub resumed_in_wrong_sub_agent: u64,
    /// Router scenario: the first few such calls (call id, turn, expected and answering
    /// sub-agent).
    pub wrong_sub_agent_samples: Vec<String>,
    /// The first few distinct error messages.
    pub error_samples: Vec<String>,
    /// With [`LoadConfig::window`], the turns of each window, by when they began.
    pub windows: Vec<WindowReport>,
}

/// The turns that began in one window of a run ([`LoadConfig::window`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowReport {
    /// Its start, in seconds since the run began.
    pub from_secs: f64,
    /// Its end, in seconds since the run began.
    pub to_secs: f64,
    /// Turns that began in it.
    pub turns_started: u64,
    /// Of those, turns completed with chunks (or interrupted) and no `agent.error`.
    pub turns_ok: u64,
    /// Of those, turns with an `agent.error`, without chunks, lost or timed out.
    pub turns_failed: u64,
    /// Their time to first chunk.
    pub time_to_first_chunk: Percentiles,
}

/// The turns of `records` (sorted by start) in windows of `window`, from the run's start to the
/// last turn's.
fn windows(records: &[TurnRecord], window: Duration) -> Vec<WindowReport> {
    let window_ms = window.as_secs_f64() * 1000.0;
    if window_ms <= 0.0 {
        return Vec::new();
    }
    let mut out: Vec<(WindowReport, stats::Latencies)> = Vec::new();
    for record in records.iter().filter(|record| record.turn.is_some()) {
        // Records come sorted, so a window is only ever opened after the previous ones.
        let at = (record.at_ms.max(0.0) / window_ms).floor() as usize;
        while out.len() <= at {
            let n = out.len() as f64;
            out.push((
                WindowReport {
                    from_secs: n * window_ms / 1000.0,
                    to_secs: (n + 1.0) * window_ms / 1000.0,
                    turns_started: 0,
                    turns_ok: 0,
                    turns_failed: 0,
                    time_to_first_chunk: Percentiles::default(),
                },
                stats::Latencies::new(),
            ));
        }
        let (report, first_chunk) = &mut out[at];
        report.turns_started += 1;
        match record.outcome {
            TurnOutcome::Ok => report.turns_ok += 1,
            _ => report.turns_failed += 1,
        }
        if let Some(ms) = record.first_chunk_ms {
            first_chunk.record(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
        }
    }
    out.into_iter()
        .map(|(mut report, first_chunk)| {
            report.time_to_first_chunk = first_chunk.summary();
            report
        })
        .collect()
}

/// The watched server's CPU time and memory.
#[derive(Debug, Clone, Serialize)]
pub struct ServerUsage {
    /// The pid.
    pub pid: u32,
    /// CPU time (user + system) over the whole run, in ms.
    pub cpu_ms_total: f64,
    /// CPU time over the turn phase, in ms.
    pub cpu_ms_turn_phase: f64,
    /// CPU time over the turn phase per completed turn, in ms.
    pub cpu_ms_per_turn: Option<f64>,
    /// CPU time over the connect phase per connected session, in ms.
    pub cpu_ms_per_connect: Option<f64>,
    /// Resident memory before the first connection, in MiB.
    pub rss_baseline_mib: f64,
    /// The highest resident memory sampled during the run, in MiB.
    pub rss_peak_mib: f64,
    /// Resident memory with every session connected (at the start line), in MiB.
    pub rss_connected_mib: f64,
    /// `VmHWM` at the end (the process's peak since it started), in MiB.
    pub vm_hwm_mib: f64,
    /// (peak sampled RSS − baseline) / connected sessions, in KiB.
    pub memory_per_session_kib: Option<f64>,
}

/// State shared by the sessions of a run.
pub(crate) struct Shared {
    pub(crate) config: LoadConfig,
    /// The start of every call id of the run.
    pub(crate) call_prefix: String,
    /// When the run began: the turn log's times are counted from here.
    pub(crate) began: Instant,
    totals: Mutex<stats::Totals>,
    /// The turn log's lines so far, when one was asked for.
    records: Option<Mutex<Vec<TurnRecord>>>,
    arrived: AtomicUsize,
    start: watch::Sender<bool>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, stats::Totals> {
        self.totals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `record` for the turn log (nothing when none was asked for).
    pub(crate) fn log(&self, record: TurnRecord) {
        if let Some(records) = &self.records {
            records
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(record);
        }
    }

    /// A session has connected (or failed to); the last one opens the start line.
    pub(crate) fn arrive(&self) {
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.config.sessions {
            self.start.send_replace(true);
        }
    }

    /// Waits until every session has arrived.
    pub(crate) async fn wait_start(&self) {
        let mut start = self.start.subscribe();
        // The sender lives as long as `self`, so this only ends when the line opens.
        let _ = start.wait_for(|open| *open).await;
    }
}

/// Samples the server's memory until dropped; keeps the highest RSS.
struct MemorySampler {
    peak: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl MemorySampler {
    fn start(pid: u32, every: Duration) -> Self {
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = Arc::clone(&peak);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                if let Ok(memory) = procfs::memory(pid) {
                    seen.fetch_max(memory.rss_kib, Ordering::Relaxed);
                }
            }
        });
        Self { peak, task }
    }

    fn peak_kib(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for MemorySampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Raises this process's open-file limit to its hard limit (each session is one socket);
/// returns the soft limit in force afterwards.
pub fn raise_fd_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(error = %crewline::types::ErrorChain(&error), "could not raise the open-file limit");
            rlimit::Resource::NOFILE
                .get()
                .map_or(0, |(soft, _hard)| soft)
        }
    }
}

/// Runs the load described by `config` and reports.
pub async fn run(config: LoadConfig) -> Result<LoadReport, LoadError> {
    if config.sessions == 0 {
        return Err(LoadError::Invalid("sessions must be at least 1".to_owned()));
    }
    let limit = raise_fd_limit();
    if (config.sessions as u64).saturating_add(64) > limit {
        tracing::warn!(
            limit,
            sessions = config.sessions,
            "the open-file limit is below the session count; raise it (ulimit -n)"
        );
    }
    let pid = config.pid;
    let cpu_before = match pid {
        Some(pid) => {
            Some(procfs::cpu_time(pid).map_err(|source| LoadError::Process { pid, source })?)
        }
        None => None,
    };
    let baseline = match pid {
        Some(pid) => {
            Some(procfs::memory(pid).map_err(|source| LoadError::Process { pid, source })?)
        }
        None => None,
    };
    // Created before the run, so that a bad path fails at once rather than after it.
    let turn_log = match &config.turn_log {
        Some(path) => Some(turn_log::Writer::create(path)?),
        None => None,
    };
    let self_cpu_before = procfs::cpu_time(std::process::id()).ok();
    let sampler = pid.map(|pid| MemorySampler::start(pid, config.sample_every));

    let (start, _) = watch::channel(false);
    let sessions = config.sessions;
    let ramp = config.ramp_per_sec;
    let open_loop = config.open_loop;
    let began = Instant::now();
    let began_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
    let call_prefix = config
        .call_id_prefix
        .clone()
        .unwrap_or_else(|| format!("load-{began_unix_ms}-{}", std::process::id()));
    let shared = Arc::new(Shared {
        call_prefix,
        records: (turn_log.is_some() || config.window.is_some()).then(|| Mutex::new(Vec::new())),
        config,
        began,
        totals: Mutex::new(stats::Totals::new()),
        arrived: AtomicUsize::new(0),
        start,
    });
    let mut tasks = JoinSet::new();
    for index in 0..sessions {
        if ramp > 0 && index > 0 {
            let due = began + Duration::from_secs_f64(index as f64 / f64::from(ramp));
            tokio::time::sleep_until(due).await;
        }
        tasks.spawn(session::run(Arc::clone(&shared), index));
    }
    // In the open loop there is no line: the turns began with the first call.
    let line = if open_loop {
        began
    } else {
        shared.wait_start().await;
        Instant::now()
    };
    let cpu_at_line = if open_loop {
        cpu_before
    } else {
        pid.and_then(|pid| procfs::cpu_time(pid).ok())
    };
    let rss_connected = pid.and_then(|pid| procfs::memory(pid).ok());
    while let Some(joined) = tasks.join_next().await {
        if let Err(error) = joined {
            shared
                .lock()
                .note_error(format!("session task failed: {error}"));
        }
    }
    let ended = Instant::now();
    let cpu_after = pid.and_then(|pid| procfs::cpu_time(pid).ok());
    let memory_after = pid.and_then(|pid| procfs::memory(pid).ok());
    let self_cpu_after = procfs::cpu_time(std::process::id()).ok();

    let totals = shared.lock().clone();
    let mut windowed = Vec::new();
    if let Some(records) = &shared.records {
        let mut records =
            std::mem::take(&mut *records.lock().unwrap_or_else(PoisonError::into_inner));
        records.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
        if let Some(window) = shared.config.window {
            windowed = windows(&records, window);
        }
        if let Some(writer) = turn_log {
            writer.write(&records)?;
        }
    }
    let turn_phase = ended - line;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let server = match (
        pid,
        cpu_before,
        cpu_at_line,
        cpu_after,
        baseline,
        memory_after,
    ) {
        (Some(pid), Some(before), Some(at_line), Some(after), Some(baseline), Some(after_mem)) => {
            let sampled_peak = sampler
                .as_ref()
                .map_or(0, MemorySampler::peak_kib)
                .max(after_mem.rss_kib)
                .max(rss_connected.map_or(0, |m| m.rss_kib));
            let turn_cpu = after.saturating_sub(at_line);
            Some(ServerUsage {
                pid,
                cpu_ms_total: ms(after.saturating_sub(before)),
                cpu_ms_turn_phase: ms(turn_cpu),
                cpu_ms_per_turn: (totals.turns_completed > 0)
                    .then(|| ms(turn_cpu) / totals.turns_completed as f64),
                cpu_ms_per_connect: (totals.connected > 0)
                    .then(|| ms(at_line.saturating_sub(before)) / totals.connected as f64),
                rss_baseline_mib: mib(baseline.rss_kib),
                rss_peak_mib: mib(sampled_peak),
                rss_connected_mib: mib(rss_connected.map_or(0, |m| m.rss_kib)),
                vm_hwm_mib: mib(after_mem.hwm_kib),
                memory_per_session_kib: (totals.connected > 0).then(|| {
                    sampled_peak.saturating_sub(baseline.rss_kib) as f64 / totals.connected as f64
                }),
            })
        }
        _ => None,
    };
    drop(sampler);
    let errors = totals.connect_errors
        + totals.turns_with_agent_error
        + totals.turns_timed_out
        + totals.turns_lost;
    let config = &shared.config;
    Ok(LoadReport {
        url: config.url.clone(),
        scenario: config.scenario,
        sessions: config.sessions,
        turns_per_session: config.turns,
        connected: totals.connected,
        connect_errors: totals.connect_errors,
        turns_started: totals.turns_completed + totals.turns_timed_out + totals.turns_lost,
        turns_completed: totals.turns_completed,
        turns_ok: totals.turns_ok,
        turns_with_agent_error: totals.turns_with_agent_error,
        turns_without_chunks: totals.turns_without_chunks,
        turns_timed_out: totals.turns_timed_out,
        turns_lost: totals.turns_lost,
        turns_not_run: totals.turns_not_run,
        errors,
        agent_errors: totals.agent_errors,
        chunks: totals.chunks,
        stray_chunks: totals.stray_chunks,
        tool_calls_ended: totals.tool_calls_ended,
        tool_calls_failed: totals.tool_calls_failed,
        connect_time: totals.connect.summary(),
        time_to_first_chunk: totals.first_chunk.summary(),
        time_to_end: totals.end.summary(),
        turns_interrupted: totals.turns_interrupted,
        chunks_after_interrupt: totals.chunks_after_interrupt,
        interrupt_to_last_chunk: totals.interrupt_to_last_chunk.summary(),
        interrupt_to_end: totals.interrupt_to_end.summary(),
        open_loop: config.open_loop,
        began_unix_ms,
        turn_phase_secs: turn_phase.as_secs_f64(),
        turns_per_sec: if turn_phase.is_zero() {
            0.0
        } else {
            totals.turns_completed as f64 / turn_phase.as_secs_f64()
        },
        total_secs: (ended - began).as_secs_f64(),
        server,
        load_generator_cpu_ms: match (self_cpu_before, self_cpu_after) {
            (Some(before), Some(after)) => Some(ms(after.saturating_sub(before))),
            _ => None,
        },
        reconnect: config.reconnect.is_some(),
        drops: totals.drops,
        reconnects: totals.reconnects,
        reconnect_failures: totals.reconnect_failures,
        turns_in_flight_at_drop: totals.turns_in_flight_at_drop,
        transfers_requested: totals.transfers_requested,
        transfers_confirmed: totals.transfers_confirmed,
        transfers_asked_again: totals.transfers_asked_again,
        resumed_calls: totals.resumed_calls,
        resumed_turns: totals.resumed_turns,
        resumed_in_wrong_sub_agent: totals.resumed_in_wrong_sub_agent,
        wrong_sub_agent_samples: totals.wrong_sub_agent_samples,
        error_samples: totals.error_samples,
        windows: windowed,
    })
}

impl LoadReport {
    /// The report as a plain-text table.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let row = |out: &mut String, name: &str, p: &Percentiles| {
            let _ = writeln!(
                out,
                "  {name:<26} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                p.count, p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms
            );
        };
        let _ = writeln!(
            out,
            "crewline load: {} sessions x {} turns, scenario {:?}{}, {}",
            self.sessions,
            self.turns_per_session,
            self.scenario,
            if self.open_loop { ", open loop" } else { "" },
            self.url
        );
        let _ = writeln!(
            out,
            "  connected {} ({} failed); turns started {}, completed {} (ok {}, with agent.error \
             {}, without chunks {}), timed out {}, lost {}, not run {}; errors {}",
            self.connected,
            self.connect_errors,
            self.turns_started,
            self.turns_completed,
            self.turns_ok,
            self.turns_with_agent_error,
            self.turns_without_chunks,
            self.turns_timed_out,
            self.turns_lost,
            self.turns_not_run,
            self.errors
        );
        let _ = writeln!(
            out,
            "  chunks {} (stray {}), tool calls ended {} (failed {}), agent.error frames {}",
            self.chunks,
            self.stray_chunks,
            self.tool_calls_ended,
            self.tool_calls_failed,
            self.agent_errors
        );
        let _ = writeln!(
            out,
            "  {:<26} {:>8} {:>9} {:>9} {:>9} {:>9}",
            "latency (ms)", "count", "p50", "p90", "p99", "max"
        );
        row(&mut out, "connect + handshake", &self.connect_time);
        row(
            &mut out,
            "request -> first chunk",
            &self.time_to_first_chunk,
        );
        row(&mut out, "request -> end", &self.time_to_end);
        if self.turns_interrupted > 0 {
            row(
                &mut out,
                "interrupt -> last chunk",
                &self.interrupt_to_last_chunk,
            );
            row(&mut out, "interrupt -> end", &self.interrupt_to_end);
            let _ = writeln!(
                out,
                "  interrupted turns {}, chunks after the interrupt {}",
                self.turns_interrupted, self.chunks_after_interrupt
            );
        }
        if !self.windows.is_empty() {
            let _ = writeln!(
                out,
                "  {:<26} {:>8} {:>9} {:>9} {:>9} {:>9}",
                "by turn start (s)", "turns", "ok", "failed", "ttfc p50", "ttfc p99"
            );
            for window in &self.windows {
                let _ = writeln!(
                    out,
                    "  {:<26} {:>8} {:>9} {:>9} {:>9.3} {:>9.3}",
                    format!("{:.0}-{:.0}", window.from_secs, window.to_secs),
                    window.turns_started,
                    window.turns_ok,
                    window.turns_failed,
                    window.time_to_first_chunk.p50_ms,
                    window.time_to_first_chunk.p99_ms
                );
            }
        }
        let _ = writeln!(
            out,
            "  turns/s {:.1} over {:.2} s (whole run {:.2} s)",
            self.turns_per_sec, self.turn_phase_secs, self.total_secs
        );
        if let Some(server) = &self.server {
            let or_dash = |value: Option<f64>, digits: usize| {
                value.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
            };
            let _ = writeln!(
                out,
                "  server pid {}: CPU {} ms/turn ({:.0} ms in turns, {:.0} ms total); RSS \
                 {:.1} MiB before, {:.1} MiB connected, {:.1} MiB peak (VmHWM {:.1}); {} \
                 KiB/session",
                server.pid,
                or_dash(server.cpu_ms_per_turn, 3),
                server.cpu_ms_turn_phase,
                server.cpu_ms_total,
                server.rss_baseline_mib,
                server.rss_connected_mib,
                server.rss_peak_mib,
                server.vm_hwm_mib,
                or_dash(server.memory_per_session_kib, 1)
            );
        }
        if self.reconnect {
            let _ = writeln!(
                out,
                "  drops {}, reconnected {} (failed attempts {}), turns in flight at a drop {}",
                self.drops, self.reconnects, self.reconnect_failures, self.turns_in_flight_at_drop
            );
        }
        if self.scenario == Scenario::Bank {
            let _ = writeln!(
                out,
                "  transfers requested {}, confirmed to the caller {}, asked for again {}",
                self.transfers_requested, self.transfers_confirmed, self.transfers_asked_again
            );
        }
        if self.scenario == Scenario::Router {
            let _ = writeln!(
                out,
                "  resumed calls {} ({} turns), in the wrong sub-agent {}",
                self.resumed_calls, self.resumed_turns, self.resumed_in_wrong_sub_agent
            );
            for sample in &self.wrong_sub_agent_samples {
                let _ = writeln!(out, "  wrong sub-agent: {sample}");
            }
        }
        for sample in &self.error_samples {
            let _ = writeln!(out, "  error: {sample}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(at_ms: f64, outcome: TurnOutcome, first_chunk_ms: Option<f64>) -> TurnRecord {
        TurnRecord {
            at_ms,
            session: 0,
            turn: Some(0),
            outcome,
            first_chunk_ms,
            end_ms: None,
            error: None,
        }
    }

    #[test]
    fn turns_are_counted_in_the_window_they_began_in() {
        let records = [
            turn(10.0, TurnOutcome::Ok, Some(2.0)),
            turn(900.0, TurnOutcome::Ok, Some(4.0)),
            TurnRecord {
                turn: None,
                ..turn(950.0, TurnOutcome::ConnectFailed, None)
            },
            // Nothing began in the second window: it is reported empty.
            turn(2_100.0, TurnOutcome::AgentError, Some(3_000.0)),
            turn(2_500.0, TurnOutcome::Lost, None),
        ];
        let windows = windows(&records, Duration::from_secs(1));
        assert_eq!(windows.len(), 3);
        assert_eq!((windows[0].from_secs, windows[0].to_secs), (0.0, 1.0));
        assert_eq!(
            (
                windows[0].turns_started,
                windows[0].turns_ok,
                windows[0].turns_failed
            ),
            (2, 2, 0)
        );
        assert_eq!(windows[0].time_to_first_chunk.count, 2);
        assert!((windows[0].time_to_first_chunk.p99_ms - 4.0).abs() < 0.01);
        assert_eq!(windows[1].turns_started, 0);
        assert_eq!(windows[1].time_to_first_chunk, Percentiles::default());
        assert_eq!(
            (
                windows[2].turns_started,
                windows[2].turns_ok,
                windows[2].turns_failed
            ),
            (2, 0, 2)
        );
        assert!((windows[2].time_to_first_chunk.p99_ms - 3_000.0).abs() < 3.0);
        assert!(super::windows(&records, Duration::ZERO).is_empty());
    }
}
