//! Suites inside `cargo test`: one call per suite file, failing the test with the same
//! readable text `crewline eval` prints.

use std::{fmt, path::Path};

use crate::{CheckCategory, EvalError, RunOptions, ScenarioFile, ScenarioReport, report};

/// Which crew a suite's scenarios call when run by [`check_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrewTarget {
    /// The crew each scenario's `crew` names (a URL, or a command the runner starts).
    FromFile,
    /// The crew at this WebSocket URL, whatever the file says: typically one the test
    /// serves on `127.0.0.1:0`.
    Url(String),
    /// A crew the test serves on the runner's model: for a suite with a `[model]`, the
    /// runner serves that script and the factory serves the crew pointed at it.
    Serve(crate::crew::CrewFactory),
}

/// How [`check_file_with`] runs a suite, over what its file says.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CheckOptions {
    /// Place this many calls per scenario instead of the file's `runs`.
    pub runs: Option<u32>,
    /// Whether a missed latency budget fails the suite (default `true`). A test machine
    /// under load is not a phone line: a crew author may keep budgets for `crewline eval`
    /// on a quiet machine and only report them in `cargo test`.
    pub latency_fails: bool,
    /// How many calls of one scenario run at once.
    pub concurrency: usize,
    /// Call variables set in every scenario, over the file's.
    pub variables: serde_json::Map<String, serde_json::Value>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            runs: None,
            latency_fails: true,
            concurrency: crate::DEFAULT_CONCURRENCY,
            variables: serde_json::Map::new(),
        }
    }
}

impl CheckOptions {
    /// Missed latency budgets are reported but do not fail the suite.
    #[must_use]
    pub fn latency_reported_only(mut self) -> Self {
        self.latency_fails = false;
        self
    }

    /// Sets the call variable `name` to `value` in every scenario (e.g. an id the test
    /// made, which the file cannot know).
    #[must_use]
    pub fn variable(
        mut self,
        name: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.variables.insert(name.into(), value.into());
        self
    }

    /// Place `runs` calls per scenario.
    #[must_use]
    pub fn runs(mut self, runs: u32) -> Self {
        self.runs = Some(runs);
        self
    }
}

/// A suite file that did not pass: its reports and the text that says why.
///
/// Its `Debug` is that text too, so a test that returns `Result<(), SuiteFailure>` (or
/// calls `unwrap`) fails showing the summary table and each failed expectation.
pub struct SuiteFailure {
    /// The file's scenarios' reports (empty when the file could not be read).
    pub reports: Vec<ScenarioReport>,
    /// The file could not be read or is not a valid suite.
    pub error: Option<EvalError>,
    text: String,
}

impl SuiteFailure {
    /// What failed, as `crewline eval` prints it.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for SuiteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for SuiteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The test harness prints a returned error's Debug: the readable text, not a struct.
        f.write_str(&self.text)
    }
}

impl std::error::Error for SuiteFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Runs every scenario of the suite at `path` against `crew` and returns their reports if
/// all passed, or a [`SuiteFailure`] whose text is the summary and every failed expectation
/// (what was expected, what came). A relative `path` is read from the working directory,
/// which `cargo test` sets to the crate's folder.
///
/// ```no_run
/// # async fn crew_url() -> String { String::new() }
/// use crewline_eval::{CrewTarget, SuiteFailure, check_file};
///
/// #[tokio::test]
/// async fn the_booking_suite_passes() -> Result<(), SuiteFailure> {
///     let url = crew_url().await; // the crew, served on 127.0.0.1:0
///     check_file("evals/booking.toml", CrewTarget::Url(url)).await?;
///     Ok(())
/// }
/// ```
pub async fn check_file(
    path: impl AsRef<Path>,
    crew: CrewTarget,
) -> Result<Vec<ScenarioReport>, SuiteFailure> {
    check_file_with(path, crew, &CheckOptions::default()).await
}

/// [`check_file`], with [`CheckOptions`].
pub async fn check_file_with(
    path: impl AsRef<Path>,
    crew: CrewTarget,
    options: &CheckOptions,
) -> Result<Vec<ScenarioReport>, SuiteFailure> {
    let path = path.as_ref();
    let run_options = RunOptions {
        runs: options.runs,
        crew_url: match &crew {
            CrewTarget::Url(url) => Some(url.clone()),
            CrewTarget::FromFile | CrewTarget::Serve(_) => None,
        },
        crew_factory: match crew {
            CrewTarget::Serve(factory) => Some(factory),
            CrewTarget::FromFile | CrewTarget::Url(_) => None,
        },
        concurrency: options.concurrency.max(1),
        progress: None,
        variables: options.variables.clone(),
    };
    let scenarios = match ScenarioFile::load(path) {
        Ok(scenarios) => scenarios,
        Err(error) => {
            return Err(SuiteFailure {
                reports: Vec::new(),
                text: format!("{}: {}", path.display(), crate::error_chain(&error)),
                error: Some(error),
            });
        }
    };
    let mut reports = crate::run_scenarios(&scenarios, &run_options).await;
    for report in &mut reports {
        report.file = Some(path.display().to_string());
        if !options.latency_fails && report.error.is_none() {
            report.passed = report
                .checks
                .iter()
                .all(|c| c.passed || c.category == CheckCategory::Latency);
        }
    }
    let failed = reports.iter().filter(|r| !r.passed).count();
    if failed == 0 {
        return Ok(reports);
    }
    let mut table = Vec::new();
    // Writing to a Vec does not fail; if it did, the header alone still says what failed.
    let _ = report::write_table(&reports, &mut table);
    let text = format!(
        "{}: {failed} of {} scenarios failed\n\n{}",
        path.display(),
        reports.len(),
        String::from_utf8_lossy(&table)
    );
    Err(SuiteFailure {
        reports,
        error: None,
        text,
    })
}
