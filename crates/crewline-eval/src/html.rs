//! The HTML report: one self-contained page (inline CSS, no script, nothing loaded from
//! elsewhere) with every scenario, each expectation's pass rate and failures, and every
//! run's turns drawn as timelines (one `<details>` per run).
//!
//! Everything a crew or a model said is peer-controlled text: it is escaped wherever it is
//! written, and the page's Content-Security-Policy forbids scripts and any fetch, so even a
//! missed escape could not run or phone home.

use std::{fmt::Write as _, io};

use crate::report::{
    CheckReport, EventKind, ScenarioReport, TimelineEvent, TurnLatency, TurnTimeline,
};

/// `text` safe inside an HTML element or a quoted attribute.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than whitespace have no place in a page.
            c if c.is_control() && !matches!(c, '\n' | '\t') => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
:root { --ok: #1a7f37; --bad: #cf222e; --wait: #c8d6f0; --speak: #3b6fd1; --tool: #b07d19; --ink: #1f2328; --muted: #656d76; --line: #d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); margin: 0 auto; padding: 1.5rem; max-width: 72rem; }
h1 { font-size: 1.4rem; margin: 0 0 .25rem; }
h2 { font-size: 1.15rem; margin: 2rem 0 .5rem; border-bottom: 1px solid var(--line); padding-bottom: .25rem; }
h3 { font-size: 1rem; margin: 1.25rem 0 .5rem; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: var(--muted); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: var(--ok); font-weight: 600; }
.fail { color: var(--bad); font-weight: 600; }
.muted { color: var(--muted); }
.error { color: var(--bad); white-space: pre-wrap; }
.rate { display: inline-block; width: 5rem; height: .6rem; background: #eee; border-radius: .3rem; overflow: hidden; vertical-align: middle; margin-right: .4rem; }
.rate > span { display: block; height: 100%; background: var(--ok); }
.rate.low > span { background: var(--bad); }
ul.failures { margin: .25rem 0 .25rem 1rem; padding: 0; }
ul.failures li { white-space: pre-wrap; word-break: break-word; }
.turn { margin: .75rem 0 1.25rem; }
.said, .reply { white-space: pre-wrap; word-break: break-word; }
.said::before { content: "caller: "; color: var(--muted); }
.reply::before { content: "crew: "; color: var(--muted); }
.track { position: relative; height: 1.1rem; background: #f6f8fa; border: 1px solid var(--line); border-radius: .2rem; margin: .3rem 0; }
.track.tools { height: auto; min-height: 1.1rem; background: none; border: none; }
.bar { position: absolute; top: 0; height: 100%; }
.bar.wait { background: var(--wait); }
.bar.speak { background: var(--speak); }
.toolbar { position: relative; height: 1.1rem; margin: .15rem 0; }
.toolbar .bar { background: var(--tool); border-radius: .2rem; }
.toolbar .bar.failed { background: var(--bad); }
.toolbar .label { position: absolute; top: 0; font-size: 12px; line-height: 1.1rem; padding-left: .3rem; white-space: nowrap; color: var(--ink); }
.tick { position: absolute; top: 15%; height: 70%; width: 1px; background: #fff; opacity: .8; }
.mark { position: absolute; top: -0.2rem; font-size: 12px; transform: translateX(-50%); }
.mark.barge { color: var(--bad); }
.scale { font-size: 12px; color: var(--muted); }
details { margin: .25rem 0; }
details.run { border: 1px solid var(--line); border-radius: .3rem; padding: .25rem .75rem; margin: .5rem 0; }
details.run > summary { cursor: pointer; font-weight: 600; }
details ol { margin: .25rem 0; padding-left: 1.5rem; font-size: 13px; }
details li { white-space: pre-wrap; word-break: break-word; }
"#;

/// Writes the HTML report of `reports`.
pub fn write_html(reports: &[ScenarioReport], mut out: impl io::Write) -> io::Result<()> {
    let failed = reports.iter().filter(|r| !r.passed).count();
    let mut page = String::new();
    // Writing to a String does not fail.
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>crewline eval: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>crewline eval</h1>\n<p class=\"{}\" id=\"verdict\">{} of {} scenarios passed</p>\n",
        if failed == 0 { "pass" } else { "fail" },
        if failed == 0 { "pass" } else { "fail" },
        reports.len() - failed,
        reports.len(),
    );
    summary_table(&mut page, reports);
    for (index, report) in reports.iter().enumerate() {
        scenario_section(&mut page, index, report);
    }
    page.push_str("</body>\n</html>\n");
    out.write_all(page.as_bytes())
}

fn slowest(turns: &[TurnLatency], pick: fn(&TurnLatency) -> Option<f64>) -> String {
    turns
        .iter()
        .filter_map(pick)
        .fold(None, |max: Option<f64>, v| {
            Some(max.map_or(v, |m| m.max(v)))
        })
        .map_or_else(|| "–".to_owned(), |v| format!("{v:.0} ms"))
}

fn summary_table(page: &mut String, reports: &[ScenarioReport]) {
    page.push_str(
        "<table id=\"scenarios\">\n<thead><tr><th>scenario</th><th>file</th><th class=\"num\">runs</th>\
         <th class=\"num\">checks</th><th class=\"num\">worst</th><th class=\"num\">p95 first chunk</th>\
         <th class=\"num\">p95 turn</th><th>result</th></tr></thead>\n<tbody>\n",
    );
    for (index, report) in reports.iter().enumerate() {
        let passed = report.checks.iter().filter(|c| c.passed).count();
        let _ = writeln!(
            page,
            "<tr><td><a href=\"#s{index}\">{}</a></td><td class=\"muted\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{passed}/{}</td><td class=\"num\">{:.0}%</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"{}\">{}</td></tr>",
            escape(&report.name),
            escape(report.file.as_deref().unwrap_or("")),
            report.runs,
            report.checks.len(),
            report.worst_pass_rate() * 100.0,
            slowest(&report.turns, |t| t.p95_first_chunk_ms),
            slowest(&report.turns, |t| t.p95_turn_ms),
            if report.passed { "pass" } else { "fail" },
            if report.passed { "pass" } else { "FAIL" },
        );
    }
    page.push_str("</tbody>\n</table>\n");
}

fn scenario_section(page: &mut String, index: usize, report: &ScenarioReport) {
    let _ = writeln!(
        page,
        "<section id=\"s{index}\" class=\"scenario\">\n<h2>{} <span class=\"{}\">{}</span></h2>\n\
         <p class=\"muted\">{} runs, each expectation must hold in {:.0}% of them; {} ms in all</p>",
        escape(&report.name),
        if report.passed { "pass" } else { "fail" },
        if report.passed { "pass" } else { "FAIL" },
        report.runs,
        report.pass_threshold * 100.0,
        report.duration_ms,
    );
    if let Some(error) = &report.error {
        let _ = writeln!(page, "<p class=\"error\">{}</p>", escape(error));
    }
    if !report.checks.is_empty() {
        page.push_str(
            "<table class=\"checks\">\n<thead><tr><th>expectation</th><th>about</th>\
             <th>pass rate</th><th class=\"num\">runs</th><th>result</th></tr></thead>\n<tbody>\n",
        );
        for check in &report.checks {
            check_row(page, check);
        }
        page.push_str("</tbody>\n</table>\n");
    }
    if !report.run_timelines.is_empty() {
        let kept = report.run_timelines.len();
        let _ = writeln!(
            page,
            "<h3>Every run, turn by turn</h3>\n<p class=\"scale muted\">{} · light: waiting for \
             the first chunk · dark: speaking · ticks: chunks · amber: tool calls (red: failed) · \
             ▼ barge-in · ✆ hand-off</p>",
            if u32::try_from(kept).is_ok_and(|kept| kept < report.runs) {
                format!(
                    "{kept} of {} runs kept, the failing ones first",
                    report.runs
                )
            } else {
                format!("{kept} runs")
            }
        );
        for run in &report.run_timelines {
            // The run the failures point to first is open; the others are a click away.
            let _ = writeln!(
                page,
                "<details class=\"run\" id=\"s{index}r{}\"{}>\n<summary>Run {} <span class=\"{}\">{}</span></summary>",
                run.run,
                if run.run == report.timeline_run {
                    " open"
                } else {
                    ""
                },
                run.run,
                if run.failed_checks == 0 {
                    "pass"
                } else {
                    "fail"
                },
                match run.failed_checks {
                    0 => "every check held".to_owned(),
                    1 => "1 check failed".to_owned(),
                    n => format!("{n} checks failed"),
                },
            );
            for turn in &run.turns {
                turn_timeline(page, turn);
            }
            if run.turns.is_empty() {
                page.push_str("<p class=\"muted\">no turn was reached</p>\n");
            }
            page.push_str("</details>\n");
        }
    }
    for conversation in &report.conversations {
        let _ = writeln!(
            page,
            "<details><summary>Run {}, as the simulated caller spoke</summary><ol>",
            conversation.run
        );
        for turn in &conversation.turns {
            let _ = writeln!(
                page,
                "<li><span class=\"said\">{}</span><br><span class=\"reply\">{}</span></li>",
                escape(&turn.caller),
                escape(&turn.crew)
            );
        }
        page.push_str("</ol></details>\n");
    }
    page.push_str("</section>\n");
}

fn check_row(page: &mut String, check: &CheckReport) {
    let percent = check.pass_rate * 100.0;
    let _ = writeln!(
        page,
        "<tr class=\"check\"><td>{}</td><td class=\"muted\">{}</td>\
         <td><span class=\"rate{}\"><span style=\"width:{percent:.0}%\"></span></span>{percent:.0}%</td>\
         <td class=\"num\">{}/{}</td><td class=\"{}\">{}</td></tr>",
        escape(&check.name),
        escape(&format!("{:?}", check.category).to_lowercase()),
        if check.passed { "" } else { " low" },
        check.passed_runs,
        check.runs,
        if check.passed { "pass" } else { "fail" },
        if check.passed { "pass" } else { "FAIL" },
    );
    let mut notes: Vec<String> = check
        .failures
        .iter()
        .map(|failure| match failure.run {
            0 => escape(&failure.message),
            run => format!("run {run}: {}", escape(&failure.message)),
        })
        .collect();
    for verdict in &check.verdicts {
        let text = serde_json::to_string(verdict).unwrap_or_default();
        notes.push(format!("judge: {}", escape(&text)));
    }
    if !notes.is_empty() {
        page.push_str("<tr class=\"notes\"><td colspan=\"5\"><ul class=\"failures\">");
        for note in notes {
            let _ = write!(page, "<li>{note}</li>");
        }
        page.push_str("</ul></td></tr>\n");
    }
}

/// A tool call's bar: from its start to its end (or the turn's end), named.
struct ToolBar<'e> {
    start: f64,
    end: Option<f64>,
    failed: bool,
    label: &'e str,
}

fn tool_bars(events: &[TimelineEvent]) -> Vec<ToolBar<'_>> {
    let mut bars: Vec<ToolBar<'_>> = Vec::new();
    for event in events {
        match event.kind {
            EventKind::ToolStart => bars.push(ToolBar {
                start: event.at_ms,
                end: None,
                failed: false,
                label: &event.text,
            }),
            EventKind::ToolEnd | EventKind::ToolError => {
                let name = match event.kind {
                    EventKind::ToolError => event.text.split(':').next().unwrap_or_default(),
                    _ => event.text.as_str(),
                };
                // The first open call of that name: the crew logs ends in any order.
                if let Some(bar) = bars.iter_mut().find(|bar| {
                    bar.end.is_none() && bar.label.split(' ').next().is_some_and(|n| n == name)
                }) {
                    bar.end = Some(event.at_ms);
                    bar.failed = event.kind == EventKind::ToolError;
                }
            }
            _ => {}
        }
    }
    bars
}

fn turn_timeline(page: &mut String, turn: &TurnTimeline) {
    let last_event = turn.events.iter().map(|e| e.at_ms).fold(0.0, f64::max);
    let span = turn.turn_ms.unwrap_or(0.0).max(last_event).max(1.0);
    let at = |ms: f64| (ms / span * 100.0).clamp(0.0, 100.0);
    let _ = writeln!(
        page,
        "<div class=\"turn\">\n<div class=\"said\">{}</div>\n<div class=\"scale\">turn {}: first chunk {}, end {}</div>",
        if turn.said.is_empty() {
            "(silence)".to_owned()
        } else {
            escape(&turn.said)
        },
        turn.turn,
        turn.first_chunk_ms
            .map_or_else(|| "–".to_owned(), |v| format!("{v:.0} ms")),
        turn.turn_ms
            .map_or_else(|| "–".to_owned(), |v| format!("{v:.0} ms")),
    );
    page.push_str("<div class=\"track\">");
    let first = turn.first_chunk_ms.unwrap_or(span);
    let _ = write!(
        page,
        "<span class=\"bar wait\" style=\"left:0%;width:{:.2}%\"></span>",
        at(first)
    );
    if let Some(first) = turn.first_chunk_ms {
        let end = turn.turn_ms.unwrap_or(span);
        let _ = write!(
            page,
            "<span class=\"bar speak\" style=\"left:{:.2}%;width:{:.2}%\"></span>",
            at(first),
            (at(end) - at(first)).max(0.3)
        );
    }
    for event in &turn.events {
        let (class, mark) = match event.kind {
            EventKind::Chunk => ("tick", ""),
            EventKind::BargeIn => ("mark barge", "▼"),
            EventKind::EndCall | EventKind::Transfer => ("mark", "✆"),
            EventKind::Error => ("mark barge", "!"),
            _ => continue,
        };
        let _ = write!(
            page,
            "<span class=\"{class}\" style=\"left:{:.2}%\" title=\"{:.0} ms {}\">{mark}</span>",
            at(event.at_ms),
            event.at_ms,
            escape(&event.text)
        );
    }
    page.push_str("</div>\n");
    for bar in tool_bars(&turn.events) {
        let end = bar.end.unwrap_or(span);
        let _ = writeln!(
            page,
            "<div class=\"toolbar\"><span class=\"bar{}\" style=\"left:{:.2}%;width:{:.2}%\"></span>\
             <span class=\"label\" style=\"left:{:.2}%\">{} ({:.0} ms)</span></div>",
            if bar.failed { " failed" } else { "" },
            at(bar.start),
            (at(end) - at(bar.start)).max(0.5),
            at(bar.start).min(60.0),
            escape(bar.label),
            end - bar.start,
        );
    }
    let _ = writeln!(page, "<div class=\"reply\">{}</div>", escape(&turn.reply));
    if !turn.events.is_empty() {
        let _ = write!(
            page,
            "<details><summary>{} events</summary><ol>",
            turn.events.len()
        );
        for event in &turn.events {
            let kind = serde_json::to_value(event.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let _ = write!(
                page,
                "<li>{:.0} ms {kind} {}</li>",
                event.at_ms,
                escape(&event.text)
            );
        }
        page.push_str("</ol></details>\n");
    }
    page.push_str("</div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_quotes_are_escaped() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(escape("a\u{0}b\nc"), "a\u{FFFD}b\nc");
    }
}
