//! Evals for crewline crews: know that a crew still behaves before a caller finds out.
//!
//! A [`Scenario`] (a TOML file, or one of a suite's: [`ScenarioFile`]) names a crew, the caller's turns and what must hold: tool
//! calls and their arguments, what the replies say, latency budgets, barge-ins, hand-offs.
//! [`run_scenario`] places the call `runs` times, concurrently, over the real protocol with
//! the testkit's platform client, and judges every expectation in every run: a
//! [`ScenarioReport`] with a pass rate per expectation, passing when each reaches the
//! scenario's threshold. `crewline eval FILE...` is this, with a terminal table, JSON and
//! JUnit XML ([`report`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), crewline_eval::EvalError> {
//! use crewline_eval::{RunOptions, Scenario, run_scenario};
//!
//! let scenario = Scenario::from_toml(r#"
//!     name = "weather in Paris"
//!     runs = 5
//!     crew.url = "ws://127.0.0.1:8080/ws"
//!
//!     [[turns]]
//!     say = "What's the weather in Paris?"
//!     expect.tools = [{ name = "get_weather", args = { location = { regex = "(?i)paris" } } }]
//!     expect.reply.contains = ["Paris"]
//!     expect.budget.first_chunk_ms = 1500
//! "#)?;
//! let report = run_scenario(&scenario, &RunOptions::default()).await;
//! assert!(report.passed, "{:#?}", report.checks);
//! # Ok(()) }
//! ```
//!
//! The guide is [`guide`] (`docs/evals.md`).

mod call;
mod check;
pub mod crew;
mod matcher;
pub mod report;
pub mod scenario;

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use futures::StreamExt;

pub use report::{CheckCategory, CheckReport, RunFailure, ScenarioReport, TurnLatency};
pub use scenario::{Scenario, ScenarioFile};

/// The guide, `docs/evals.md`: writing a scenario, running it, CI use, what is not built yet.
#[doc = include_str!("../../../docs/evals.md")]
pub mod guide {}

/// How many calls of one scenario run at once by default.
pub const DEFAULT_CONCURRENCY: usize = 8;

/// Why a scenario could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The file could not be read.
    #[error("could not read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`scenario::MAX_FILE_BYTES`].
    #[error(
        "{} is {bytes} bytes; a scenario is at most {} bytes",
        shown(path),
        scenario::MAX_FILE_BYTES
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// The file is not a scenario: bad TOML, a missing field or an unknown one.
    #[error("{} is not a valid scenario: {message}", shown(path))]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with the line.
        message: String,
    },
    /// The scenario is well-formed but says something impossible (e.g. `runs = 0`).
    #[error("{}: {message}", shown(path))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
}

fn shown(path: &Path) -> String {
    if path.as_os_str().is_empty() {
        "the scenario".to_owned()
    } else {
        path.display().to_string()
    }
}

impl EvalError {
    /// The same error, naming `file`.
    pub(crate) fn in_file(self, file: &Path) -> Self {
        match self {
            Self::TooLarge { bytes, .. } => Self::TooLarge {
                path: file.to_owned(),
                bytes,
            },
            Self::Parse { message, .. } => Self::Parse {
                path: file.to_owned(),
                message,
            },
            Self::Invalid { message, .. } => Self::Invalid {
                path: file.to_owned(),
                message,
            },
            other => other,
        }
    }
}

/// How scenarios are run, over what their files say.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Place this many calls instead of the file's `runs` (1 to [`scenario::MAX_RUNS`]).
    pub runs: Option<u32>,
    /// Call the crew at this WebSocket URL instead of the file's `crew` (e.g. a staging
    /// crew, or one a test serves).
    pub crew_url: Option<String>,
    /// How many calls run at once (at least 1).
    pub concurrency: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            runs: None,
            crew_url: None,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }
}

/// Runs `scenario`: reaches (or starts) its crew, places its calls, judges every check,
/// and stops the crew if it started it.
///
/// A crew that cannot be started is a failed scenario (its report's `error`), not an `Err`:
/// the other scenarios of a suite still run.
pub async fn run_scenario(scenario: &Scenario, options: &RunOptions) -> ScenarioReport {
    run_scenarios(std::slice::from_ref(scenario), options)
        .await
        .pop()
        .unwrap_or_else(|| {
            ScenarioReport::failed(
                scenario.name.clone(),
                0,
                scenario.pass_threshold,
                "not run".to_owned(),
            )
        })
}

/// Runs `scenarios` one after the other, a report each, in order. Consecutive scenarios
/// naming the same crew share it: a crew started from a `command` is started once for them
/// (and keeps its state between them, as it does between runs).
pub async fn run_scenarios(scenarios: &[Scenario], options: &RunOptions) -> Vec<ScenarioReport> {
    let mut reports = Vec::with_capacity(scenarios.len());
    // The crew of the previous scenario, and the spec it was reached by.
    let mut current: Option<(Option<&scenario::CrewSpec>, crew::RunningCrew)> = None;
    for scenario in scenarios {
        let started = Instant::now();
        let spec = scenario.crew.as_ref();
        let reuse = current
            .as_ref()
            .is_some_and(|(reached, _)| *reached == spec);
        if !reuse {
            if let Some((_, crew)) = current.take() {
                crew.stop().await;
            }
            match crew::RunningCrew::start(spec, options.crew_url.as_deref()).await {
                Ok(crew) => current = Some((spec, crew)),
                Err(error) => {
                    let message = error_chain(&error);
                    tracing::warn!(scenario = %scenario.name, %message, "the crew could not be reached");
                    reports.push(ScenarioReport::failed(
                        scenario.name.clone(),
                        runs_of(scenario, options),
                        scenario.pass_threshold,
                        message,
                    ));
                    continue;
                }
            }
        }
        if let Some((_, crew)) = &current {
            reports.push(run_against(scenario, crew, options, started).await);
        }
    }
    if let Some((_, crew)) = current {
        crew.stop().await;
    }
    reports
}

/// How many calls `scenario` places under `options`.
fn runs_of(scenario: &Scenario, options: &RunOptions) -> u32 {
    options
        .runs
        .unwrap_or(scenario.runs)
        .clamp(1, scenario::MAX_RUNS)
}

/// Places `scenario`'s calls to `crew`, concurrently, and judges them.
async fn run_against(
    scenario: &Scenario,
    crew: &crew::RunningCrew,
    options: &RunOptions,
    started: Instant,
) -> ScenarioReport {
    let calls: Vec<call::CallRecord> = futures::stream::iter(0..runs_of(scenario, options))
        .map(|_| call::place(scenario, crew))
        .buffer_unordered(options.concurrency.max(1))
        .collect()
        .await;
    ScenarioReport::judge(
        scenario.name.clone(),
        scenario.pass_threshold,
        &check::checks(scenario),
        &calls,
        started.elapsed(),
    )
}

/// Reads the scenario or suite at `path` and runs its scenarios ([`run_scenarios`]); each
/// report names the file.
pub async fn run_file(path: &Path, options: &RunOptions) -> Result<Vec<ScenarioReport>, EvalError> {
    let scenarios = ScenarioFile::load(path)?;
    let mut reports = run_scenarios(&scenarios, options).await;
    for report in &mut reports {
        report.file = Some(path.display().to_string());
    }
    Ok(reports)
}

use crewline_core::error_chain;
