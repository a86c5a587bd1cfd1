//! `crewline eval FILE...`: runs scenario files against their crews (crewline-eval) and
//! writes a summary table, and on request JSON and JUnit XML; fails when a scenario fails,
//! so a CI job goes red.

use std::{
    fs::File,
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

use std::{io::IsTerminal, sync::Mutex, time::Duration};

use clap::builder::TypedValueParser as _;
use crewline_eval::{
    DEFAULT_CONCURRENCY, EvalError, Progress, ProgressHook, RunOptions, Scenario, ScenarioFile,
    ScenarioReport,
    replay::{ReplayError, scenario_from_recording, scenario_text},
    report, run_scenarios,
    scenario::Format,
};
use indicatif::{ProgressBar, ProgressStyle};

/// `crewline eval`'s command line.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// Scenario or suite files (TOML, or YAML when named .yaml or .yml); see docs/evals.md.
    #[arg(value_name = "FILE", required_unless_present_any = ["schema", "from_recording"])]
    pub files: Vec<PathBuf>,
    /// Print the JSON Schema of scenario files (for editors) and exit.
    #[arg(long, conflicts_with_all = ["files", "json", "junit", "html"])]
    pub schema: bool,
    /// Turn a recorded call (the playground's JSONL) into a regression scenario, written to
    /// `--out` or printed, and exit; `--url` becomes its `crew.url`.
    #[arg(long, value_name = "FILE.jsonl", conflicts_with_all = ["files", "json", "junit", "html", "schema", "runs"])]
    pub from_recording: Option<PathBuf>,
    /// With `--from-recording`: write the scenario here (`.yaml`/`.yml` as YAML, otherwise
    /// TOML) instead of printing it as TOML.
    #[arg(long, value_name = "PATH", requires = "from_recording")]
    pub out: Option<PathBuf>,
    /// Place N calls per scenario instead of the file's `runs`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(crewline_eval::scenario::MAX_RUNS)))]
    pub runs: Option<u32>,
    /// Call the crew at this WebSocket URL instead of the files' `crew`.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// A call variable, `key=value` (repeatable), set in every scenario over its file's
    /// `variables` (e.g. `--var task_id=task_...`).
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = crate::chat::parse_var)]
    pub vars: Vec<(String, String)>,
    /// How many calls of one scenario run at once.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CONCURRENCY, value_parser = clap::value_parser!(u16).range(1..=256).map(usize::from))]
    pub concurrency: usize,
    /// Also write the results as JSON to PATH.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Also write the results as JUnit XML to PATH (for CI).
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Also write a self-contained HTML report to PATH: every scenario, each expectation's
    /// pass rate and failures, one run's turns as timelines.
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
}

/// Why `crewline eval` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalCliError {
    /// A file is not a valid scenario (nothing was run).
    #[error(transparent)]
    Scenario(#[from] EvalError),
    /// A report file could not be written.
    #[error("could not write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A recording could not be turned into a scenario.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// Writing the summary failed.
    #[error("could not write the summary")]
    Io(#[source] io::Error),
    /// Scenarios failed (the summary says which and why).
    #[error("{failed} of {total} scenarios failed")]
    Failed {
        /// How many failed.
        failed: usize,
        /// Of how many.
        total: usize,
    },
}

/// Runs `crewline eval`, writing the summary (or the schema) to `out`.
pub async fn run_cli(args: EvalArgs, mut out: impl Write) -> Result<(), EvalCliError> {
    if args.schema {
        let schema = serde_json::to_string_pretty(&ScenarioFile::json_schema())
            .map_err(|e| EvalCliError::Io(e.into()))?;
        return writeln!(out, "{schema}").map_err(EvalCliError::Io);
    }
    if let Some(recording) = &args.from_recording {
        return replay(recording, args.out.as_deref(), args.url.as_deref(), out);
    }
    // Every file is read first: a typo in the last one fails before any call is placed.
    let mut files: Vec<(&Path, Vec<Scenario>)> = Vec::with_capacity(args.files.len());
    for path in &args.files {
        files.push((path.as_path(), ScenarioFile::load(path)?));
    }
    let options = RunOptions {
        runs: args.runs,
        crew_url: args.url.clone(),
        concurrency: args.concurrency,
        // A progress line is for a person watching: not in a CI log or a file.
        progress: io::stderr().is_terminal().then(progress_line),
        crew_factory: None,
        variables: args
            .vars
            .iter()
            .map(|(key, value)| (key.clone(), serde_json::Value::String(value.clone())))
            .collect(),
    };
    let mut reports: Vec<ScenarioReport> = Vec::new();
    for (path, scenarios) in &files {
        // A suite's scenarios share its crew: a started one is started once per file.
        for mut report in run_scenarios(scenarios, &options).await {
            report.file = Some(path.display().to_string());
            reports.push(report);
        }
    }
    report::write_table(&reports, &mut out).map_err(EvalCliError::Io)?;
    out.flush().map_err(EvalCliError::Io)?;
    if let Some(path) = &args.json {
        write_file(path, |file| report::write_json(&reports, file))?;
    }
    if let Some(path) = &args.junit {
        write_file(path, |file| report::write_junit(&reports, file))?;
    }
    if let Some(path) = &args.html {
        write_file(path, |file| report::write_html(&reports, file))?;
    }
    let failed = reports.iter().filter(|r| !r.passed).count();
    if failed > 0 {
        return Err(EvalCliError::Failed {
            failed,
            total: reports.len(),
        });
    }
    Ok(())
}

/// A live line per scenario on stderr: its name and its calls done, then pass or FAIL.
fn progress_line() -> ProgressHook {
    let style = ProgressStyle::with_template("{spinner} {msg} [{bar:20}] {pos}/{len} calls")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let current: Mutex<Option<ProgressBar>> = Mutex::new(None);
    ProgressHook::new(move |progress| {
        let Ok(mut current) = current.lock() else {
            return;
        };
        match progress {
            Progress::Started { scenario, runs } => {
                let bar = ProgressBar::new(u64::from(*runs))
                    .with_style(style.clone())
                    .with_message(scenario.clone());
                bar.enable_steady_tick(Duration::from_millis(120));
                *current = Some(bar);
            }
            Progress::RunDone { done, .. } => {
                if let Some(bar) = current.as_ref() {
                    bar.set_position(u64::from(*done));
                }
            }
            Progress::Finished { scenario, passed } => {
                if let Some(bar) = current.take() {
                    bar.set_style(
                        ProgressStyle::with_template("{msg}")
                            .unwrap_or_else(|_| ProgressStyle::default_bar()),
                    );
                    bar.finish_with_message(format!(
                        "{} {scenario}",
                        if *passed { "pass" } else { "FAIL" }
                    ));
                }
            }
            _ => {}
        }
    })
}

/// `--from-recording`: the recording as a scenario, written to `out_path` or printed.
fn replay(
    recording: &Path,
    out_path: Option<&Path>,
    url: Option<&str>,
    mut out: impl Write,
) -> Result<(), EvalCliError> {
    let mut scenario = scenario_from_recording(recording)?;
    if let Some(url) = url
        && let Some(crew) = scenario.crew.as_mut()
    {
        crew.url = Some(url.to_owned());
    }
    let source = recording
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let format = out_path.map_or(Format::Toml, Format::of_path);
    let text = scenario_text(&scenario, format, &source)?;
    match out_path {
        Some(path) => {
            write_file(path, |file| file.write_all(text.as_bytes()))?;
            writeln!(
                out,
                "wrote {}: {} turns replayed from {}",
                path.display(),
                scenario.turns.len(),
                recording.display()
            )
            .map_err(EvalCliError::Io)
        }
        None => out.write_all(text.as_bytes()).map_err(EvalCliError::Io),
    }
}

fn write_file(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> Result<(), EvalCliError> {
    let failed = |source| EvalCliError::Write {
        path: path.to_owned(),
        source,
    };
    let mut file = BufWriter::new(File::create(path).map_err(failed)?);
    write(&mut file).map_err(failed)?;
    file.flush().map_err(failed)
}
