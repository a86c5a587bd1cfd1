//! `crewline load`: the load generator from the command line.

use std::{io::Write, path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};
use crewline_load::{LoadConfig, Reconnect, Scenario};

/// `--scenario`: what each simulated caller says (the testkit's [`Scenario`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ScenarioArg {
    /// A question answered with text.
    #[default]
    Text,
    /// A weather question: the model calls `get_weather`, then answers.
    Tool,
    /// A question interrupted (`system.control.interrupt`) on its first chunk.
    Interrupt,
    /// A bank customer (`bank_support`): balance, "send $X to Alice" (X unique in the run),
    /// "yes", and again; a transfer not heard confirmed is asked for once more.
    Bank,
    /// A debtor on `collections_router`: account number, date of birth, then payments; a
    /// reconnected call is checked to be answered by the sub-agent it was in.
    Router,
}

impl From<ScenarioArg> for Scenario {
    fn from(arg: ScenarioArg) -> Self {
        match arg {
            ScenarioArg::Text => Self::Text,
            ScenarioArg::Tool => Self::Tool,
            ScenarioArg::Interrupt => Self::Interrupt,
            ScenarioArg::Bank => Self::Bank,
            ScenarioArg::Router => Self::Router,
        }
    }
}

/// The options of `crewline load`.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// The crew's WebSocket address.
    #[arg(long, default_value = "ws://127.0.0.1:8080/ws")]
    pub url: String,
    /// Shared secret, sent as `Authorization: Bearer <token>` (default: `CREWLINE_AUTH_TOKEN`,
    /// as the crew server and `demo` read it).
    #[arg(long, env = crewline_server::TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// Concurrent sessions (calls).
    #[arg(long, default_value_t = 10)]
    pub sessions: usize,
    /// Turns per session.
    #[arg(long, default_value_t = 5)]
    pub turns: usize,
    /// What the callers do.
    #[arg(long, value_enum, default_value_t = ScenarioArg::Text)]
    pub scenario: ScenarioArg,
    /// New connections per second while ramping up (0: all at once).
    #[arg(long, default_value_t = 1000)]
    pub ramp_per_sec: u32,
    /// Pause between a session's turns, in ms; with it, the sessions' first turns are also
    /// spread over one such pause instead of starting together.
    #[arg(long, default_value_t = 0)]
    pub think_ms: u64,
    /// Connect plus handshake limit, in seconds.
    #[arg(long, default_value_t = 60)]
    pub connect_timeout_secs: u64,
    /// One turn's limit, in seconds.
    #[arg(long, default_value_t = 60)]
    pub turn_timeout_secs: u64,
    /// The server's pid: report its CPU time per turn and its memory (Linux `/proc`).
    #[arg(long)]
    pub pid: Option<u32>,
    /// Write the report as JSON to this file (`-` for stdout, instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Open loop: no start line; calls arrive at --ramp-per-sec, each runs its turns as soon
    /// as it is connected and hangs up after the last, so calls come and go as on a real line
    /// (--sessions is then the number of calls over the run).
    #[arg(long)]
    pub open_loop: bool,
    /// Write one JSON line per turn (and per failed connection) to this file: its start in ms
    /// since the run began, its time to first chunk and to end, its outcome.
    #[arg(long, value_name = "FILE")]
    pub turn_log: Option<PathBuf>,
    /// Reconnect a dropped call (closed, reset, or silent past --turn-timeout-secs) as a
    /// platform does: through --url, with the same call id and the conversation so far,
    /// sending the turn in flight again.
    #[arg(long)]
    pub reconnect: bool,
    /// With --reconnect: connection attempts per turn before it counts as lost.
    #[arg(long, default_value_t = 5)]
    pub reconnect_retries: u32,
    /// With --reconnect: the wait before the first attempt, in seconds, doubled before each
    /// next one (at most 8 times as long).
    #[arg(long, default_value_t = 0.5)]
    pub reconnect_backoff_secs: f64,
    /// The start of each call's id (`<prefix>-<n>`); default: one unique to the run.
    #[arg(long)]
    pub call_id_prefix: Option<String>,
    /// Also report the turns per window of this many seconds, by when they began: turns,
    /// failures and time to first chunk (p50, p99) in each (e.g. through a provider outage).
    #[arg(long, value_name = "SECS")]
    pub window_secs: Option<u64>,
}

impl LoadArgs {
    /// The run these options describe.
    pub fn config(&self) -> LoadConfig {
        LoadConfig {
            url: self.url.clone(),
            token: self.token.clone(),
            sessions: self.sessions,
            turns: self.turns,
            scenario: self.scenario.into(),
            ramp_per_sec: self.ramp_per_sec,
            think: Duration::from_millis(self.think_ms),
            connect_timeout: Duration::from_secs(self.connect_timeout_secs.max(1)),
            turn_timeout: Duration::from_secs(self.turn_timeout_secs.max(1)),
            pid: self.pid,
            open_loop: self.open_loop,
            turn_log: self.turn_log.clone(),
            reconnect: self.reconnect.then(|| {
                // A negative or NaN value is read as no wait, a huge one as a minute.
                let secs = self.reconnect_backoff_secs;
                let secs = if secs.is_finite() {
                    secs.clamp(0.0, 60.0)
                } else {
                    0.0
                };
                let backoff = Duration::from_secs_f64(secs);
                Reconnect {
                    retries: self.reconnect_retries,
                    backoff,
                    max_backoff: backoff.saturating_mul(8),
                }
            }),
            call_id_prefix: self.call_id_prefix.clone(),
            window: self
                .window_secs
                .filter(|secs| *secs > 0)
                .map(Duration::from_secs),
            ..LoadConfig::new(self.url.clone())
        }
    }
}

/// Runs the load and writes the table (and the JSON, if asked) to `out`.
pub async fn run(
    args: LoadArgs,
    mut out: impl Write,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let report = crewline_load::run(args.config()).await?;
    let json = serde_json::to_string_pretty(&report)?;
    match args.json.as_deref() {
        Some(path) if path.as_os_str() == "-" => writeln!(out, "{json}")?,
        Some(path) => {
            std::fs::write(path, format!("{json}\n"))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            write!(out, "{}", report.to_table())?;
        }
        None => write!(out, "{}", report.to_table())?,
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn config(args: &[&str]) -> LoadConfig {
        let mut all = vec!["crewline-load"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
            .map(|cli| cli.load.config())
            .unwrap_or_else(|e| {
                panic!("{e}");
            })
    }

    #[test]
    fn reconnecting_is_off_unless_asked_and_bounded_when_on() {
        assert_eq!(config(&[]).reconnect, None);
        let on = config(&[
            "--scenario",
            "bank",
            "--reconnect",
            "--reconnect-retries",
            "3",
            "--reconnect-backoff-secs",
            "0.25",
            "--call-id-prefix",
            "chaos",
        ]);
        assert_eq!(on.scenario, Scenario::Bank);
        assert_eq!(on.call_id_prefix.as_deref(), Some("chaos"));
        assert_eq!(
            on.reconnect,
            Some(Reconnect {
                retries: 3,
                backoff: Duration::from_millis(250),
                max_backoff: Duration::from_secs(2),
            })
        );
        // A backoff that is not a number of seconds is no wait, not a panic.
        let odd = config(&["--reconnect", "--reconnect-backoff-secs", "NaN"]);
        assert_eq!(odd.reconnect.map(|r| r.backoff), Some(Duration::ZERO));
        assert_eq!(config(&["--scenario", "router"]).scenario, Scenario::Router);
        assert_eq!(config(&[]).window, None);
        assert_eq!(
            config(&["--window-secs", "20"]).window,
            Some(Duration::from_secs(20))
        );
        assert_eq!(config(&["--window-secs", "0"]).window, None);
        let huge = config(&["--reconnect", "--reconnect-backoff-secs", "1e30"]);
        assert_eq!(
            huge.reconnect.map(|r| r.backoff),
            Some(Duration::from_secs(60))
        );
    }
}
