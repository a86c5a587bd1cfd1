//! Evals for crewline crews: know that a crew still behaves before a caller finds out.
//!
//! A [`Scenario`] (a TOML or YAML file, or one of a suite's: [`ScenarioFile`]) names a crew,
//! the caller's turns (words, barge-ins, silences, hang-ups, faults of the crew's model and
//! tools) and what must hold: tool calls and their arguments, what the replies say, latency
//! budgets, barge-ins, hand-offs, errors, an LLM judge's score against a rubric.
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
pub mod caller;
mod check;
pub mod crew;
mod html;
pub mod judge;
mod matcher;
mod pattern;
mod record;
pub mod replay;
pub mod report;
pub mod scenario;
mod testing;
mod timeline;

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use futures::StreamExt;

pub use crew::CrewFactory;
pub use report::{
    CheckCategory, CheckReport, Conversation, ConversationTurn, RunFailure, ScenarioReport,
    TurnLatency,
};
pub use scenario::{Scenario, ScenarioFile};
pub use testing::{CheckOptions, CrewTarget, SuiteFailure, check_file, check_file_with};

/// The guide, `docs/evals.md`: writing a scenario, running it, CI use, what is not built yet.
// A symlink to docs/evals.md inside the crate, so that the packaged crate has it too.
#[doc = include_str!("guide.md")]
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
    /// The file is not a scenario: bad TOML or YAML, a missing field or an unknown one.
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
    /// Told as scenarios start, as their runs finish and as they end (a progress line).
    pub progress: Option<ProgressHook>,
    /// A crew the caller serves itself on the runner's model, instead of the file's `crew`
    /// and `crew_url` (a test's crew: [`CrewTarget::Serve`]).
    pub crew_factory: Option<crew::CrewFactory>,
    /// Call variables set in every scenario, over the file's `variables` (e.g. a
    /// `task_id` only known when the suite runs).
    pub variables: serde_json::Map<String, serde_json::Value>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            runs: None,
            crew_url: None,
            concurrency: DEFAULT_CONCURRENCY,
            progress: None,
            crew_factory: None,
            variables: serde_json::Map::new(),
        }
    }
}

/// What a suite's run reports as it goes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Progress {
    /// A scenario starts: `runs` calls will be placed.
    Started {
        /// The scenario's name.
        scenario: String,
        /// How many calls.
        runs: u32,
    },
    /// One more of its calls is done.
    RunDone {
        /// The scenario's name.
        scenario: String,
        /// How many are done.
        done: u32,
        /// Of how many.
        runs: u32,
    },
    /// The scenario is judged.
    Finished {
        /// The scenario's name.
        scenario: String,
        /// Whether it passed.
        passed: bool,
    },
}

/// A function told of a run's [`Progress`] (it is called from the runner's tasks: keep it
/// quick).
#[derive(Clone)]
pub struct ProgressHook(std::sync::Arc<dyn Fn(&Progress) + Send + Sync>);

impl ProgressHook {
    /// A hook calling `tell`.
    pub fn new(tell: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(tell))
    }

    fn tell(&self, progress: Progress) {
        (self.0)(&progress);
    }
}

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook")
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
    // The crew of the previous scenario, the spec it was reached by, whether the runner
    // serves its model (a scenario of the same crew on its own model needs a new crew), and
    // the tool faults it was started with (other faults need a crew started with them).
    type Reached<'s> = (
        Option<&'s scenario::CrewSpec>,
        bool,
        crewline::eval_faults::ToolFaults,
    );
    let mut current: Option<(Reached<'_>, crew::RunningCrew)> = None;
    for scenario in scenarios {
        let started = Instant::now();
        if let Some(hook) = &options.progress {
            hook.tell(Progress::Started {
                scenario: scenario.name.clone(),
                runs: runs_of(scenario, options),
            });
        }
        let before = reports.len();
        let spec = (
            scenario.crew.as_ref(),
            scenario.model.is_some(),
            scenario.tool_faults(),
        );
        let reuse = current
            .as_ref()
            .is_some_and(|(reached, _)| *reached == spec);
        if !reuse {
            if let Some((_, crew)) = current.take() {
                crew.stop().await;
            }
            match crew::RunningCrew::start(
                spec.0,
                options.crew_url.as_deref(),
                scenario.model.as_ref(),
                options.crew_factory.as_ref(),
                &spec.2,
            )
            .await
            {
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
                    finished(options, &reports, before);
                    continue;
                }
            }
        }
        if let Some((_, crew)) = &current {
            if let Some(model) = &scenario.model
                && let Err(error) = crew.load_model(model)
            {
                reports.push(ScenarioReport::failed(
                    scenario.name.clone(),
                    runs_of(scenario, options),
                    scenario.pass_threshold,
                    error_chain(&error),
                ));
                finished(options, &reports, before);
                continue;
            }
            let with_variables;
            let scenario = if options.variables.is_empty() {
                scenario
            } else {
                let mut merged = scenario.clone();
                merged.variables.extend(options.variables.clone());
                with_variables = merged;
                &with_variables
            };
            reports.push(run_against(scenario, crew, options, started).await);
            finished(options, &reports, before);
        }
    }
    if let Some((_, crew)) = current {
        crew.stop().await;
    }
    reports
}

/// Tells the progress hook that the scenario whose report follows `before` is done.
fn finished(options: &RunOptions, reports: &[ScenarioReport], before: usize) {
    if let (Some(hook), Some(report)) = (&options.progress, reports.get(before)) {
        hook.tell(Progress::Finished {
            scenario: report.name.clone(),
            passed: report.passed,
        });
    }
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
    let caller = scenario.caller.as_ref().map(caller::SimulatedCaller::new);
    let mut calls: Vec<record::CallRecord> = match &caller {
        // Without its model there is no caller: every run stops before it starts.
        Some(Err(why)) => (0..runs_of(scenario, options))
            .map(|_| record::CallRecord {
                stopped: Some((None, why.clone())),
                ..record::CallRecord::default()
            })
            .collect(),
        _ => {
            let caller = caller.as_ref().and_then(|c| c.as_ref().ok());
            let runs = runs_of(scenario, options);
            futures::stream::iter(0..runs)
                .map(|_| call::place(scenario, crew, caller))
                .buffer_unordered(options.concurrency.max(1))
                .zip(futures::stream::iter(1..))
                .map(|(record, done)| {
                    if let Some(hook) = &options.progress {
                        hook.tell(Progress::RunDone {
                            scenario: scenario.name.clone(),
                            done,
                            runs,
                        });
                    }
                    record
                })
                .collect()
                .await
        }
    };
    let checks = check::checks(scenario);
    ask_judges(scenario, &checks, &mut calls, options.concurrency).await;
    ScenarioReport::judge(
        scenario.name.clone(),
        scenario.pass_threshold,
        &checks,
        &calls,
        started.elapsed(),
    )
}

/// Asks the scenario's judge about every run that reached what a judge check grades, and
/// keeps the verdicts (or why there is none) in the runs' records.
async fn ask_judges(
    scenario: &Scenario,
    checks: &[check::Check],
    calls: &mut [record::CallRecord],
    concurrency: usize,
) {
    let questions: Vec<(usize, &str, Option<usize>, &check::Check)> = checks
        .iter()
        .filter_map(|check| {
            check
                .judge_question()
                .map(|(id, rubric, turn)| (id, rubric, turn, check))
        })
        .collect();
    let Some(spec) = &scenario.judge else {
        return;
    };
    if questions.is_empty() {
        return;
    }
    let judge = match judge::Judge::new(spec) {
        Ok(judge) => judge,
        Err(why) => {
            for call in calls.iter_mut() {
                for (id, ..) in &questions {
                    call.verdicts.insert(*id, Err(why.clone()));
                }
            }
            return;
        }
    };
    let scripted: Vec<Option<&str>> = scenario.turns.iter().map(|t| t.say.as_deref()).collect();
    let mut asks = Vec::new();
    for (run, call) in calls.iter().enumerate() {
        // A simulated caller's words are the run's own.
        let says: Vec<Option<&str>> = if scenario.caller.is_some() {
            // An empty line is a silence: the transcript says so.
            call.said
                .iter()
                .map(|s| (!s.is_empty()).then_some(s.as_str()))
                .collect()
        } else {
            scripted.clone()
        };
        for (id, rubric, turn, check) in &questions {
            if !check.reached(call) {
                continue;
            }
            let conversation = judge::transcript(&says, call, *turn);
            let part = match turn {
                Some(turn) => format!("the agent's reply in turn {}", turn + 1),
                None => "the whole call".to_owned(),
            };
            asks.push((run, *id, rubric.to_string(), conversation, part));
        }
    }
    let verdicts: Vec<(usize, usize, Result<judge::Verdict, String>)> = futures::stream::iter(asks)
        .map(|(run, id, rubric, conversation, part)| {
            let judge = judge.clone();
            async move { (run, id, judge.ask(&rubric, &conversation, &part).await) }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    for (run, id, verdict) in verdicts {
        if let Some(call) = calls.get_mut(run) {
            call.verdicts.insert(id, verdict);
        }
    }
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
