//! `crewline eval` end to end: the binary starts the demo crew from a scenario's command
//! line, places the calls, writes the table, JSON and JUnit, and fails when a scenario does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::PathBuf, process::Command};

/// A fresh directory for one test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("crewline-eval-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The `[crew]` table that starts this binary's demo crew (scripted model) on a free port.
fn demo_crew() -> String {
    format!(
        "[crew]\ncommand = [{:?}, \"demo\", \"--serve\", \"--scripted\", \"--chunk-delay-ms\", \"1\", \"--port\", \"{{port}}\"]\nready_timeout_ms = 20000\n",
        env!("CARGO_BIN_EXE_crewline")
    )
}

const GREETING: &str = r#"
[[scenarios]]
name = "a greeting"
runs = 2
[[scenarios.turns]]
say = "Hello!"
expect.reply.contains = ["weather"]
expect.tools = [{ name = "get_weather", never = true }]
"#;

const WRONG_CITY: &str = r#"
[[scenarios]]
name = "the wrong city"
[[scenarios.turns]]
say = "What's the weather in Paris?"
expect.tools = [{ name = "get_weather", args.location = { equals = "Lyon" } }]
"#;

fn eval(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_crewline"))
        .arg("eval")
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn a_failing_scenario_fails_the_command_and_every_report_says_why() {
    let dir = scratch("fail");
    let suite = dir.join("suite.toml");
    std::fs::write(&suite, format!("{}{GREETING}{WRONG_CITY}", demo_crew())).unwrap();
    let (json, junit) = (dir.join("out.json"), dir.join("out.xml"));
    let html = dir.join("out.html");

    let (code, stdout, stderr) = eval(&[
        suite.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);

    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("crewline: 1 of 2 scenarios failed"),
        "{stderr}"
    );
    let rows: Vec<&str> = stdout.lines().take(3).collect();
    assert!(
        rows[1].starts_with("a greeting") && rows[1].ends_with("pass"),
        "{stdout}"
    );
    assert!(
        rows[2].starts_with("the wrong city") && rows[2].ends_with("FAIL"),
        "{stdout}"
    );
    assert!(
        stdout.contains(r#"run 1: expected a call of get_weather(location = "Lyon"); 0 matched, came: get_weather {"location":"Paris"}"#),
        "{stdout}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(json["passed"], false);
    assert_eq!(json["scenarios"][0]["passed"], true);
    assert_eq!(json["scenarios"][0]["runs"], 2);
    let failing = &json["scenarios"][1]["checks"][1];
    assert_eq!(failing["category"], "tool");
    assert_eq!(failing["pass_rate"], 0.0);
    assert!(
        failing["failures"][0]["message"]
            .as_str()
            .unwrap()
            .contains("came: get_weather")
    );

    // Not a terminal: no progress line in the log.
    assert!(!stderr.contains("calls"), "{stderr}");
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(html.contains("1 of 2 scenarios passed"), "{html}");
    assert!(
        html.contains("<a href=\"#s1\">the wrong city</a>"),
        "{html}"
    );

    let junit = std::fs::read_to_string(&junit).unwrap();
    assert!(
        junit.starts_with(r#"<?xml version="1.0" encoding="UTF-8"?>"#),
        "{junit}"
    );
    assert!(
        junit.contains(r#"<testsuites name="crewline eval" tests="5" failures="1" errors="0">"#),
        "{junit}"
    );
    assert!(junit.contains(r#"<testcase classname="the wrong city" name="turn 1: get_weather(location = &quot;Lyon&quot;) called">"#), "{junit}");
    assert!(junit.contains(r#"<failure message="held in 0/1 runs (needs 100%)">run 1: expected a call of get_weather(location = &quot;Lyon&quot;)"#), "{junit}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn passing_scenarios_exit_zero_with_the_summary() {
    let dir = scratch("pass");
    let suite = dir.join("greeting.toml");
    std::fs::write(&suite, format!("{}{GREETING}", demo_crew())).unwrap();

    let (code, stdout, stderr) = eval(&[suite.to_str().unwrap(), "--runs", "3"]);

    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let row = stdout.lines().nth(1).unwrap();
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(cells[..4], ["a greeting", "3", "3/3", "100%"], "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_invalid_file_fails_before_any_call_naming_the_file_and_the_field() {
    let dir = scratch("invalid");
    let good = dir.join("good.toml");
    std::fs::write(&good, format!("{}{GREETING}", demo_crew())).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"x\"\ncrew.url = \"ws://127.0.0.1:9/ws\"\nruns = 0\n[[turns]]\nsay = \"hi\"\n",
    )
    .unwrap();

    let (code, stdout, stderr) = eval(&[good.to_str().unwrap(), bad.to_str().unwrap()]);

    assert_eq!(code, Some(1));
    assert!(stdout.is_empty(), "nothing ran: {stdout}");
    assert!(
        stderr.contains("bad.toml: `runs` is 0; it must be 1 to 200"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_schema_flag_prints_the_committed_schema() {
    let (code, stdout, _) = eval(&["--schema"]);
    let committed = include_str!("../../../../docs/eval-scenario.schema.json");
    assert_eq!(code, Some(0));
    assert_eq!(stdout, committed);
}

#[test]
fn a_suite_starts_its_crew_once_for_all_its_scenarios() {
    let dir = scratch("once");
    let starts = dir.join("starts");
    // A wrapper that counts its starts, then execs the crew (so stopping it stops the crew).
    let crew = format!(
        "[crew]\ncommand = [\"sh\", \"-c\", \"echo start >> '{}'; exec '{}' demo --serve --scripted --chunk-delay-ms 1 --port \\\"$0\\\"\", \"{{port}}\"]\nready_timeout_ms = 20000\n",
        starts.display(),
        env!("CARGO_BIN_EXE_crewline"),
    );
    let suite = dir.join("suite.toml");
    std::fs::write(&suite, format!("{crew}{GREETING}{WRONG_CITY}")).unwrap();

    let (code, stdout, stderr) = eval(&[suite.to_str().unwrap()]);

    assert_eq!(code, Some(1), "the wrong city fails: {stdout}\n{stderr}");
    assert!(stdout.lines().nth(1).unwrap().ends_with("pass"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&starts).unwrap(), "start\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_scenario_s_model_is_served_by_the_runner_and_its_faults_reach_the_crew() {
    let dir = scratch("model");
    let suite = dir.join("faults.toml");
    // The demo crew without --scripted reads OPENAI_BASE_URL and OPENAI_API_KEY: the runner
    // sets them to the mock model it serves for the suite's [model].
    let crew = format!(
        "[crew]\ncommand = [{:?}, \"demo\", \"--serve\", \"--port\", \"{{port}}\"]\nready_timeout_ms = 20000\n",
        env!("CARGO_BIN_EXE_crewline")
    );
    let scenarios = r#"
[[model.replies]]
when = { last_role = "tool" }
reply = { content_chunks = ["Mock says ", "it is 18 degrees."] }

[[model.replies]]
when = { last_user_contains = "weather" }
reply = { tool_calls = [{ id = "call_1", name = "get_weather", arguments_chunks = ['{"location": "Paris"}'] }] }

[[scenarios]]
name = "the model fails, then recovers"
runs = 2
[[scenarios.turns]]
say = "What's the weather in Paris?"
fault.model = "500"
expect.agent_error = true
expect.tools = [{ name = "get_weather", never = true }]
[[scenarios.turns]]
say = "And the weather in Paris now?"
expect.reply.contains = ["Mock says"]
expect.tools = [{ name = "get_weather", once = true }]
"#;
    std::fs::write(&suite, format!("{crew}{scenarios}")).unwrap();

    let (code, stdout, stderr) = eval(&[suite.to_str().unwrap()]);

    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let row = stdout.lines().nth(1).unwrap();
    assert!(row.contains(" 5/5 ") && row.ends_with("pass"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A call to the weather crew recorded as the playground's "Download the call" writes it
/// (a greeting, then Paris looked up).
const RECORDING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/weather-call.jsonl");

#[test]
fn a_recording_becomes_a_scenario_file_that_the_demo_crew_passes() {
    let dir = scratch("replay");
    let scenario = dir.join("replayed.toml");
    let (code, stdout, stderr) = eval(&[
        "--from-recording",
        RECORDING,
        "--out",
        scenario.to_str().unwrap(),
        "--url",
        "ws://127.0.0.1:9/ws",
    ]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("wrote "), "{stdout}");
    assert!(stdout.contains(": 2 turns replayed from "), "{stdout}");
    let text = std::fs::read_to_string(&scenario).unwrap();
    assert!(
        text.starts_with(
            "# A regression scenario replayed from the recorded call weather-call.jsonl"
        ),
        "{text}"
    );
    assert!(text.contains("url = \"ws://127.0.0.1:9/ws\""), "{text}");
    assert!(
        text.contains("say = \"What's the weather in Paris?\""),
        "{text}"
    );
    assert!(text.contains("name = \"get_weather\""), "{text}");
    assert!(text.contains("location = \"Paris\""), "{text}");

    // Pointed at the demo crew (the same scripted weather crew), it passes.
    let crew_table = text.find("[crew]").unwrap();
    let after = crew_table + text[crew_table..].find("\n\n").unwrap();
    let runnable = format!("{}{}{}", &text[..crew_table], demo_crew(), &text[after..]);
    std::fs::write(&scenario, runnable).unwrap();
    let (code, stdout, stderr) = eval(&[scenario.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");

    // Printed without --out, as TOML.
    let (code, stdout, _) = eval(&["--from-recording", RECORDING]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("[[turns]]"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_malformed_recording_fails_naming_the_line() {
    let dir = scratch("replay-bad");
    let bad = dir.join("bad.jsonl");
    let mut text = std::fs::read_to_string(RECORDING).unwrap();
    text.push_str("{\"t\": 1, \"dir\": \"in\"\n");
    let line = text.lines().count();
    std::fs::write(&bad, text).unwrap();
    let (code, stdout, stderr) = eval(&["--from-recording", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("bad.jsonl, line {line}: not a recorded frame")),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_call_variable_must_be_key_equals_value() {
    let (code, _, stderr) = eval(&["suite.toml", "--var", "task_id"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("expected key=value, got `task_id`"),
        "{stderr}"
    );
}
