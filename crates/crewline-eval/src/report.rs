//! What a scenario's runs add up to, and the ways it is written out: a terminal table, JSON,
//! JUnit XML for CI, and a self-contained HTML page with each turn's timeline.

use std::{io, time::Duration};

use serde::Serialize;

pub use crate::{
    check::CheckCategory,
    html::write_html,
    timeline::{EventKind, MAX_EVENT_CHARS, MAX_TIMELINE_EVENTS, TimelineEvent},
};

use crate::{
    check::{Check, p95},
    judge::JudgeVerdict,
    record::CallRecord,
    timeline::{cut, ms},
};

/// The most failing runs kept per check (with their messages) in a report.
pub const MAX_FAILURES_KEPT: usize = 5;

/// What one scenario's runs add up to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioReport {
    /// The scenario's name.
    pub name: String,
    /// The file it came from, when it came from one.
    pub file: Option<String>,
    /// Whether every check reached the pass threshold (and the crew could be reached).
    pub passed: bool,
    /// How many runs were placed.
    pub runs: u32,
    /// The share of runs each per-run check must pass in.
    pub pass_threshold: f64,
    /// Why no run was placed (the crew could not be started), if so.
    pub error: Option<String>,
    /// Every check, in file order.
    pub checks: Vec<CheckReport>,
    /// Latencies per turn over the runs.
    pub turns: Vec<TurnLatency>,
    /// The wall time of the whole scenario, in ms.
    pub duration_ms: u64,
    /// With a simulated caller: what was said in the first runs (at most
    /// [`MAX_FAILURES_KEPT`]), each line cut to [`MAX_LINE_CHARS`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conversations: Vec<Conversation>,
    /// One run's turns as they went (the first failing run, else run 1): what the HTML
    /// report draws.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<TurnTimeline>,
    /// The run `timeline` shows, counted from 1 (0 when none was placed).
    pub timeline_run: u32,
    /// Every run's turns as they went, in run order: the HTML report draws each. At most
    /// [`MAX_TIMELINE_RUNS`] are kept, the failing runs first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub run_timelines: Vec<RunTimeline>,
}

/// The most runs whose timelines a report keeps (a turn keeps at most
/// [`MAX_TIMELINE_EVENTS`] events of [`MAX_EVENT_CHARS`] characters each).
pub const MAX_TIMELINE_RUNS: usize = 20;

/// One run's turns, as they went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunTimeline {
    /// The run, counted from 1.
    pub run: u32,
    /// How many of the scenario's per-run checks failed in this run.
    pub failed_checks: usize,
    /// Its turns, in order (the turns it reached).
    pub turns: Vec<TurnTimeline>,
}

/// One turn of a run, as it went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnTimeline {
    /// The turn, counted from 1.
    pub turn: usize,
    /// What the caller said (cut to [`MAX_LINE_CHARS`]; empty for a silence).
    pub said: String,
    /// The reply (cut to [`MAX_LINE_CHARS`]).
    pub reply: String,
    /// From the request to the first chunk, in ms.
    pub first_chunk_ms: Option<f64>,
    /// From the request to `end`, in ms.
    pub turn_ms: Option<f64>,
    /// What the crew sent and when (at most [`MAX_TIMELINE_EVENTS`]).
    pub events: Vec<TimelineEvent>,
}

/// The run the HTML report draws: the first that failed a check, else the first.
fn timeline(checks: &[CheckReport], calls: &[CallRecord]) -> (u32, Vec<TurnTimeline>) {
    let failing = checks
        .iter()
        .flat_map(|c| c.failures.iter().map(|f| f.run))
        .filter(|&run| run > 0)
        .min()
        .map(|run| run as usize - 1)
        .filter(|&index| index < calls.len());
    let Some(index) = failing.or((!calls.is_empty()).then_some(0)) else {
        return (0, Vec::new());
    };
    (
        u32::try_from(index + 1).unwrap_or(u32::MAX),
        turn_timelines(&calls[index]),
    )
}

/// A call's turns, for the report.
fn turn_timelines(call: &CallRecord) -> Vec<TurnTimeline> {
    call.turns
        .iter()
        .enumerate()
        .map(|(turn, record)| TurnTimeline {
            turn: turn + 1,
            said: cut(&record.said, MAX_LINE_CHARS),
            reply: cut(&record.text, MAX_LINE_CHARS),
            first_chunk_ms: record.first_chunk.map(ms),
            turn_ms: record.turn_time.map(ms),
            events: record.timeline.clone(),
        })
        .collect()
}

/// Every run's timeline, in run order: at most [`MAX_TIMELINE_RUNS`], failing runs first.
fn run_timelines(checks: &[Check], calls: &[CallRecord]) -> Vec<RunTimeline> {
    let mut picked: Vec<(usize, usize)> = calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            let failed = checks
                .iter()
                .filter(|check| !check.over_runs() && check.judge(call).is_err())
                .count();
            (index, failed)
        })
        .collect();
    // Failing runs first, then in run order; drawn in run order.
    picked.sort_by_key(|&(index, failed)| (failed == 0, index));
    picked.truncate(MAX_TIMELINE_RUNS);
    picked.sort_by_key(|&(index, _)| index);
    picked
        .into_iter()
        .map(|(index, failed)| RunTimeline {
            run: u32::try_from(index + 1).unwrap_or(u32::MAX),
            failed_checks: failed,
            turns: turn_timelines(&calls[index]),
        })
        .collect()
}

/// The most characters of one line of a kept conversation.
pub const MAX_LINE_CHARS: usize = 500;

/// What a simulated caller and the crew said in one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conversation {
    /// The run, counted from 1.
    pub run: u32,
    /// Turn by turn.
    pub turns: Vec<ConversationTurn>,
}

/// One turn of a kept conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationTurn {
    /// What the simulated caller said.
    pub caller: String,
    /// What the crew said back.
    pub crew: String,
}

/// One expectation's result over the runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    /// The expectation in words.
    pub name: String,
    /// What it is about.
    pub category: CheckCategory,
    /// Judged over all runs at once (a p95 budget) rather than in each run.
    pub over_runs: bool,
    /// In how many runs it held (for an over-runs check: 1 or 0 of 1).
    pub passed_runs: u32,
    /// Of how many.
    pub runs: u32,
    /// `passed_runs / runs`.
    pub pass_rate: f64,
    /// Whether the pass rate reached the threshold.
    pub passed: bool,
    /// The first failing runs (at most [`MAX_FAILURES_KEPT`]): what was expected, what came.
    pub failures: Vec<RunFailure>,
    /// A judge check's verdicts, run by run: the score and the judge's reason (passing runs
    /// too), or why there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<JudgeVerdict>,
}

/// One run in which a check did not hold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFailure {
    /// The run, counted from 1 (0 for an over-runs check).
    pub run: u32,
    /// What was expected and what came.
    pub message: String,
}

/// One turn's latencies over the runs that measured them, in ms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnLatency {
    /// The turn, counted from 1.
    pub turn: usize,
    /// Runs that reached the turn's end.
    pub runs: u32,
    /// The median time to the first chunk.
    pub p50_first_chunk_ms: Option<f64>,
    /// The 95th percentile time to the first chunk.
    pub p95_first_chunk_ms: Option<f64>,
    /// The median turn time (request to `end`).
    pub p50_turn_ms: Option<f64>,
    /// The 95th percentile turn time.
    pub p95_turn_ms: Option<f64>,
}

impl ScenarioReport {
    /// A scenario that could not run at all.
    pub(crate) fn failed(name: String, runs: u32, pass_threshold: f64, error: String) -> Self {
        Self {
            name,
            file: None,
            passed: false,
            runs,
            pass_threshold,
            error: Some(error),
            checks: Vec::new(),
            turns: Vec::new(),
            duration_ms: 0,
            conversations: Vec::new(),
            timeline: Vec::new(),
            timeline_run: 0,
            run_timelines: Vec::new(),
        }
    }

    /// Judges `checks` on the runs' records.
    pub(crate) fn judge(
        name: String,
        pass_threshold: f64,
        checks: &[Check],
        calls: &[CallRecord],
        elapsed: Duration,
    ) -> Self {
        let runs = u32::try_from(calls.len()).unwrap_or(u32::MAX);
        let run_timelines = run_timelines(checks, calls);
        let checks: Vec<CheckReport> = checks
            .iter()
            .map(|check| CheckReport::judge(check, calls, pass_threshold))
            .collect();
        let (timeline_run, timeline) = timeline(&checks, calls);
        Self {
            name,
            file: None,
            passed: checks.iter().all(|c| c.passed),
            runs,
            pass_threshold,
            error: None,
            checks,
            turns: latencies(calls),
            duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            conversations: conversations(calls),
            timeline,
            timeline_run,
            run_timelines,
        }
    }

    /// The lowest pass rate of its checks (1 when it has none).
    pub fn worst_pass_rate(&self) -> f64 {
        self.checks.iter().map(|c| c.pass_rate).fold(1.0, f64::min)
    }
}

impl CheckReport {
    fn judge(check: &Check, calls: &[CallRecord], threshold: f64) -> Self {
        let (runs, failures) = if check.over_runs() {
            let failures = match check.judge_over(calls) {
                Ok(()) => Vec::new(),
                Err(message) => vec![RunFailure { run: 0, message }],
            };
            (1, failures)
        } else {
            let failures: Vec<RunFailure> = calls
                .iter()
                .zip(1..)
                .filter_map(|(call, run)| {
                    check
                        .judge(call)
                        .err()
                        .map(|message| RunFailure { run, message })
                })
                .collect();
            (u32::try_from(calls.len()).unwrap_or(u32::MAX), failures)
        };
        let failed = u32::try_from(failures.len()).unwrap_or(u32::MAX);
        let passed_runs = runs.saturating_sub(failed);
        let pass_rate = if runs == 0 {
            0.0
        } else {
            f64::from(passed_runs) / f64::from(runs)
        };
        // An over-runs check has one verdict, whatever the threshold.
        let passed = if check.over_runs() {
            failed == 0
        } else {
            runs > 0 && pass_rate + f64::EPSILON >= threshold
        };
        let verdicts = match check.judge_question() {
            Some((id, ..)) => calls
                .iter()
                .zip(1..)
                .filter_map(|(call, run)| {
                    call.verdicts.get(&id).map(|verdict| match verdict {
                        Ok(verdict) => JudgeVerdict {
                            run,
                            score: Some(verdict.score),
                            reason: verdict.reason.clone(),
                        },
                        Err(why) => JudgeVerdict {
                            run,
                            score: None,
                            reason: why.clone(),
                        },
                    })
                })
                .collect(),
            None => Vec::new(),
        };
        Self {
            verdicts,
            name: check.name.clone(),
            category: check.category(),
            over_runs: check.over_runs(),
            passed_runs,
            runs,
            pass_rate,
            passed,
            failures: failures.into_iter().take(MAX_FAILURES_KEPT).collect(),
        }
    }
}

/// The simulated callers' conversations of the first runs.
fn conversations(calls: &[CallRecord]) -> Vec<Conversation> {
    let cut = |text: &str| {
        let mut kept: String = text.chars().take(MAX_LINE_CHARS).collect();
        if kept.len() < text.len() {
            kept.push('…');
        }
        kept
    };
    calls
        .iter()
        .zip(1..)
        .filter(|(call, _)| !call.said.is_empty())
        .take(MAX_FAILURES_KEPT)
        .map(|(call, run)| Conversation {
            run,
            turns: call
                .said
                .iter()
                .enumerate()
                .map(|(turn, said)| ConversationTurn {
                    caller: cut(said),
                    crew: call
                        .turns
                        .get(turn)
                        .map(|t| cut(&t.text))
                        .unwrap_or_default(),
                })
                .collect(),
        })
        .collect()
}

fn latencies(calls: &[CallRecord]) -> Vec<TurnLatency> {
    let turns = calls.iter().map(|c| c.turns.len()).max().unwrap_or(0);
    (0..turns)
        .map(|turn| {
            let reached: Vec<_> = calls.iter().filter_map(|c| c.turns.get(turn)).collect();
            let first: Vec<Duration> = reached.iter().filter_map(|t| t.first_chunk).collect();
            let end: Vec<Duration> = reached.iter().filter_map(|t| t.turn_time).collect();
            TurnLatency {
                turn: turn + 1,
                runs: u32::try_from(reached.len()).unwrap_or(u32::MAX),
                p50_first_chunk_ms: p50(first.clone()).map(ms),
                p95_first_chunk_ms: p95(first).map(ms),
                p50_turn_ms: p50(end.clone()).map(ms),
                p95_turn_ms: p95(end).map(ms),
            }
        })
        .collect()
}

fn p50(mut times: Vec<Duration>) -> Option<Duration> {
    times.sort_unstable();
    times.get(times.len().checked_sub(1)? / 2).copied()
}

/// Writes the terminal summary: one row per scenario, then each failing check with the
/// runs it failed in.
pub fn write_table(reports: &[ScenarioReport], mut out: impl io::Write) -> io::Result<()> {
    let width = reports
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(8, 48);
    writeln!(
        out,
        "{:<width$}  {:>5}  {:>7}  {:>6}  {:>10}  {:>10}  result",
        "scenario", "runs", "checks", "worst", "p95 first", "p95 turn"
    )?;
    for report in reports {
        let passed = report.checks.iter().filter(|c| c.passed).count();
        let slowest = |pick: fn(&TurnLatency) -> Option<f64>| {
            report
                .turns
                .iter()
                .filter_map(pick)
                .fold(None, |max: Option<f64>, v| {
                    Some(max.map_or(v, |m| m.max(v)))
                })
                .map_or_else(|| "-".to_owned(), |v| format!("{v:.0} ms"))
        };
        let name: String = report.name.chars().take(width).collect();
        writeln!(
            out,
            "{name:<width$}  {:>5}  {:>7}  {:>5.0}%  {:>10}  {:>10}  {}",
            report.runs,
            format!("{passed}/{}", report.checks.len()),
            report.worst_pass_rate() * 100.0,
            slowest(|t| t.p95_first_chunk_ms),
            slowest(|t| t.p95_turn_ms),
            if report.passed { "pass" } else { "FAIL" },
        )?;
    }
    for report in reports.iter().filter(|r| !r.passed) {
        writeln!(out)?;
        writeln!(out, "FAIL {}", report.name)?;
        if let Some(error) = &report.error {
            writeln!(out, "  {error}")?;
        }
        for check in report.checks.iter().filter(|c| !c.passed) {
            writeln!(
                out,
                "  ✗ {}: held in {}/{} runs (needs {:.0}%)",
                check.name,
                check.passed_runs,
                check.runs,
                report.pass_threshold * 100.0
            )?;
            for failure in &check.failures {
                match failure.run {
                    0 => writeln!(out, "      {}", failure.message)?,
                    run => writeln!(out, "      run {run}: {}", failure.message)?,
                }
            }
        }
        // A simulated call is read before it is judged: the first run's words.
        if let Some(conversation) = report.conversations.first() {
            writeln!(out, "  run {}, as it went:", conversation.run)?;
            for line in conversation_lines(conversation) {
                writeln!(out, "      {line}")?;
            }
        }
    }
    Ok(())
}

/// Writes the reports as one JSON document: `{"scenarios": [...], "passed": bool}`.
pub fn write_json(reports: &[ScenarioReport], out: impl io::Write) -> io::Result<()> {
    let document = serde_json::json!({
        "passed": reports.iter().all(|r| r.passed),
        "scenarios": reports,
    });
    serde_json::to_writer_pretty(out, &document).map_err(io::Error::other)
}

/// Writes JUnit XML: a `<testsuite>` per scenario, a `<testcase>` per check.
///
/// Written by hand: no JUnit or XML writer is in the dependency tree, and the format needs
/// only elements, attributes and escaping.
pub fn write_junit(reports: &[ScenarioReport], mut out: impl io::Write) -> io::Result<()> {
    let failures = |r: &ScenarioReport| r.checks.iter().filter(|c| !c.passed).count();
    let tests: usize = reports.iter().map(|r| r.checks.len().max(1)).sum();
    let failed: usize = reports.iter().map(failures).sum();
    let errors = reports.iter().filter(|r| r.error.is_some()).count();
    writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    writeln!(
        out,
        r#"<testsuites name="crewline eval" tests="{tests}" failures="{failed}" errors="{errors}">"#
    )?;
    for report in reports {
        let suite = xml(&report.name);
        writeln!(
            out,
            r#"  <testsuite name="{suite}" tests="{}" failures="{}" errors="{}" time="{:.3}">"#,
            report.checks.len().max(1),
            failures(report),
            usize::from(report.error.is_some()),
            report.duration_ms as f64 / 1e3,
        )?;
        if let Some(error) = &report.error {
            writeln!(
                out,
                r#"    <testcase classname="{suite}" name="the crew runs">"#
            )?;
            writeln!(out, r#"      <error message="{}"/>"#, xml(error))?;
            writeln!(out, "    </testcase>")?;
        }
        for check in &report.checks {
            let name = xml(&check.name);
            if check.passed && check.verdicts.is_empty() {
                writeln!(out, r#"    <testcase classname="{suite}" name="{name}"/>"#)?;
                continue;
            }
            writeln!(out, r#"    <testcase classname="{suite}" name="{name}">"#)?;
            if !check.verdicts.is_empty() {
                // The judge's reasons, passing runs too: why it thought so is the point.
                let verdicts: Vec<String> = check.verdicts.iter().map(verdict_line).collect();
                writeln!(
                    out,
                    "      <system-out>{}</system-out>",
                    xml(&verdicts.join("\n"))
                )?;
            }
            if check.passed {
                writeln!(out, "    </testcase>")?;
                continue;
            }
            let message = format!(
                "held in {}/{} runs (needs {:.0}%)",
                check.passed_runs,
                check.runs,
                report.pass_threshold * 100.0
            );
            let details: Vec<String> = check
                .failures
                .iter()
                .map(|f| match f.run {
                    0 => f.message.clone(),
                    run => format!("run {run}: {}", f.message),
                })
                .collect();
            writeln!(
                out,
                r#"      <failure message="{}">{}</failure>"#,
                xml(&message),
                xml(&details.join("\n"))
            )?;
            writeln!(out, "    </testcase>")?;
        }
        if !report.conversations.is_empty() {
            let lines: Vec<String> = report
                .conversations
                .iter()
                .flat_map(|c| {
                    std::iter::once(format!("run {}:", c.run)).chain(conversation_lines(c))
                })
                .collect();
            writeln!(
                out,
                "    <system-out>{}</system-out>",
                xml(&lines.join("\n"))
            )?;
        }
        writeln!(out, "  </testsuite>")?;
    }
    writeln!(out, "</testsuites>")
}

/// A kept conversation, a line per thing said.
fn conversation_lines(conversation: &Conversation) -> Vec<String> {
    conversation
        .turns
        .iter()
        .flat_map(|turn| {
            [
                format!("caller: {}", turn.caller),
                format!("crew:   {}", turn.crew),
            ]
        })
        .collect()
}

/// A judge's verdict on one run, in words.
fn verdict_line(verdict: &JudgeVerdict) -> String {
    match verdict.score {
        Some(score) => format!("run {}: scored {score}: {}", verdict.run, verdict.reason),
        None => format!("run {}: no verdict: {}", verdict.run, verdict.reason),
    }
}

/// Text escaped for XML content and attributes; characters XML 1.0 cannot hold at all
/// (most control characters, from a crew's reply) become U+FFFD.
fn xml(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            '\n' => escaped.push_str("&#10;"),
            '\t' | '\r' => escaped.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                escaped.push('\u{FFFD}');
            }
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escapes_markup_and_drops_what_xml_cannot_hold() {
        assert_eq!(
            xml("a<b & \"c\" 'd'>\u{1}\n"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;\u{FFFD}&#10;"
        );
    }

    #[test]
    fn the_median_is_the_middle_run() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        assert_eq!(p50(ms(&[30, 10, 20])), Some(Duration::from_millis(20)));
        assert_eq!(p50(Vec::new()), None);
    }
}
