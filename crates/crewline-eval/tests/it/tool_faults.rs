//! Tool faults per scenario: a turn's `fault.tool` makes one of the crew's tools fail or time
//! out in that turn of every call, and the expectations say whether the crew coped (it said
//! it could not get the weather, and the next turn worked again).

use crate::common;

use std::{sync::Arc, time::Duration};

use common::serve;
use crewline_eval::{RunOptions, Scenario, ScenarioReport, run_scenario};
use crewline_examples::voice_agent;
use crewline_server::CrewServer;

/// Serves the weather crew (its scripted model reads a failed lookup's message back) armed
/// with `scenario`'s tool faults, as a crew the runner starts is armed through
/// `CREWLINE_EVAL_TOOL_FAULTS`, and runs the scenario against it.
async fn run_armed(scenario: &Scenario, arm: bool) -> ScenarioReport {
    let llm = Arc::new(voice_agent::scripted_weather_model(Duration::ZERO));
    let crew = voice_agent::WeatherCrew::new(llm, Duration::from_millis(5)).expect("tools");
    let mut agent = crew.agent().clone();
    if arm {
        agent = agent
            .with_tool_faults(scenario.tool_faults())
            .expect("a plan the tools take");
    }
    let url = serve(CrewServer::new(agent)).await;
    let options = RunOptions {
        crew_url: Some(url),
        ..RunOptions::default()
    };
    tokio::time::timeout(Duration::from_secs(60), run_scenario(scenario, &options))
        .await
        .expect("the scenario ran within its bound")
}

fn scenario(fault: &str, reply: &str) -> Scenario {
    Scenario::from_toml(&format!(
        r#"
name = "the weather service fails in turn 2; the crew says so, then recovers"
runs = 2
crew.url = "ws://replaced.invalid/ws"

[[turns]]
say = "Hello there"

[[turns]]
say = "What's the weather in Paris?"
fault.tool = {fault}
expect.reply.contains = ["{reply}"]
expect.reply.not_contains = ["18 degrees"]
expect.tools = [{{ name = "get_weather", succeeded = false, once = true }}]

[[turns]]
say = "And in Tokyo?"
expect.reply.contains = ["24 degrees"]
expect.tools = [{{ name = "get_weather", succeeded = true, once = true }}]
"#
    ))
    .expect("a valid scenario")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_in_one_turn_is_told_to_the_caller_and_the_next_turn_works() {
    let scenario = scenario(
        r#"{ name = "get_weather", kind = "error", message = "The weather service is down." }"#,
        "weather service is down",
    );
    let faults = scenario.tool_faults();
    assert_eq!(faults.faults().len(), 1);
    assert_eq!(faults.faults()[0].on_turn, Some(2));

    let report = run_armed(&scenario, true).await;
    assert!(report.passed, "{report:#?}");

    // The same expectations on a crew without the fault: the lookup works, and the turn's
    // checks say what came instead.
    let report = run_armed(&scenario, false).await;
    assert!(!report.passed);
    let failed: Vec<&str> = report
        .checks
        .iter()
        .filter(|check| !check.passed)
        .map(|check| check.name.as_str())
        .collect();
    assert!(
        failed.iter().any(|name| name.starts_with("turn 2")),
        "{failed:?}"
    );
    assert!(
        !failed.iter().any(|name| name.starts_with("turn 3")),
        "{failed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_timeout_goes_through_the_executors_timeout_and_the_model_reads_it() {
    // The scripted model reads the error's message back: the executor's own timeout message.
    let scenario = scenario(
        r#"{ name = "get_weather", kind = "timeout", timeout_ms = 200 }"#,
        "did not finish within 200ms",
    );
    let report = run_armed(&scenario, true).await;
    assert!(report.passed, "{report:#?}");
    let report = run_armed(&scenario, false).await;
    assert!(!report.passed);
}

#[test]
fn a_tool_fault_is_checked_and_counted_by_the_calls_requests() {
    let bad = [
        (r#"{ name = "", kind = "error" }"#, "name"),
        (r#"{ name = "t", kind = "explode" }"#, "explode"),
        (
            r#"{ name = "t", kind = "error", timeout_ms = 5 }"#,
            "timeout_ms",
        ),
        (
            r#"{ name = "t", kind = "timeout", message = "x" }"#,
            "message",
        ),
        (
            r#"{ name = "t", kind = "timeout", timeout_ms = 0 }"#,
            "1 to",
        ),
    ];
    for (fault, says) in bad {
        let error = Scenario::from_toml(&format!(
            "name = \"x\"\ncrew.url = \"ws://a/ws\"\n[[turns]]\nsay = \"hi\"\nfault.tool = {fault}\n"
        ))
        .expect_err(fault)
        .to_string();
        assert!(error.contains(says), "{fault}: {error}");
    }
    // A silence sends no request: the fault after it is on the call's second request.
    let scenario = Scenario::from_toml(
        r#"
name = "x"
crew.url = "ws://a/ws"
[[turns]]
say = "hi"
[[turns]]
silence_ms = 10
[[turns]]
say = "Paris?"
fault = { tool = { name = "get_weather", kind = "error" }, model = "503" }
"#,
    )
    .expect("a valid scenario");
    assert_eq!(scenario.tool_faults().faults()[0].on_turn, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_voice_agent_tool_fault_suite_passes_against_the_example_crew() {
    let path = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/evals/voice_agent_tool_faults.toml"
    ));
    let scenarios = crewline_eval::ScenarioFile::load(path).expect("the suite reads");
    assert!(scenarios.iter().all(|s| !s.tool_faults().is_empty()));
    // What the runner does for the suite's command crew, in process: the example's crew on
    // its scripted model, armed with each scenario's faults.
    for scenario in &scenarios {
        let report = run_armed(scenario, true).await;
        assert!(report.passed, "{}: {:#?}", scenario.name, report.checks);
    }
}
