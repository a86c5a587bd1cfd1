//! Faults per scenario: a turn's `fault.model` makes the crew's model fail that turn (through
//! a crewline mock model), and the expectations say whether the crew coped: it reported the
//! error or apologised, ran no tool twice, and the call went on.

use crate::common;

use std::{sync::Arc, time::Duration};

use common::{check, serve};
use crewline::llm::LlmClient;
use crewline_eval::{RunOptions, Scenario, ScenarioReport, run_scenario};
use crewline_examples::voice_agent;
use crewline_server::CrewServer;
use crewline_testkit::mock_llm::{MockLlm, RunningMockLlm};

/// The weather crew's conversation as a mock model's script, in a scenario's `[model]`.
const MODEL: &str = r#"
[[model.replies]]
when = { last_role = "tool" }
reply = { content_chunks = ["In Paris ", "it is ", "18 degrees."] }

[[model.replies]]
when = { last_user_contains = "weather" }
reply = { tool_calls = [{ id = "call_1", name = "get_weather", arguments_chunks = ['{"location": "Paris"}'] }] }

[[model.replies]]
reply = { content_chunks = ["Hello! ", "Ask me about the weather."] }
"#;

/// Runs `toml` against the weather crew on crewline's OpenAI client, pointed at a mock model
/// playing the scenario's `[model]` script (as the runner does for a crew it starts, here in
/// process); returns the report and the model.
async fn run_on_mock(toml: &str) -> (ScenarioReport, RunningMockLlm) {
    let mut scenario = Scenario::from_toml(toml).expect("a valid scenario");
    // The test serves the model itself: the runner only serves one for a crew it starts.
    let script = scenario
        .model
        .take()
        .expect("a [model]")
        .script()
        .expect("a valid script");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let model = MockLlm::new(script)
        .serve(listener)
        .expect("serve the mock");
    let client = model
        .client_builder()
        .model("mock")
        .max_retries(0)
        .build()
        .expect("a client");
    let llm: Arc<dyn LlmClient> = Arc::new(client);
    let crew = voice_agent::WeatherCrew::new(llm, Duration::from_millis(5)).expect("tools");
    let url = serve(CrewServer::new(crew.agent().clone())).await;
    let options = RunOptions {
        crew_url: Some(url),
        ..RunOptions::default()
    };
    let report = tokio::time::timeout(Duration::from_secs(60), run_scenario(&scenario, &options))
        .await
        .expect("the scenario ran within its bound");
    (report, model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_fails_one_turn_is_reported_and_the_call_goes_on() {
    let toml = format!(
        r#"
name = "the model is down for one turn"
runs = 3
crew.url = "ws://replaced.invalid/ws"
{MODEL}
[[turns]]
say = "What's the weather in Paris?"
fault.model = "503"
expect.agent_error = true
expect.tools = [{{ name = "get_weather", never = true }}]

[[turns]]
say = "What's the weather in Paris, then?"
expect.agent_error = false
expect.reply.contains = ["18 degrees"]
expect.tools = [{{ name = "get_weather", once = true }}]

[expect]
tools = [{{ name = "get_weather", once = true }}]
"#
    );
    let (report, model) = run_on_mock(&toml).await;
    assert!(report.passed, "{:#?}", report.checks);
    assert_eq!(
        check(&report, "turn 1: the crew reports an error (agent.error)").passed_runs,
        3
    );
    // Each run's first turn asked the model and was refused; the second was answered.
    let refused = model
        .mock()
        .requests()
        .iter()
        .filter(|r| r.outcome == "http_503")
        .count();
    assert_eq!(refused, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_inside_a_tool_call_runs_no_half_call() {
    let toml = format!(
        r#"
name = "the model breaks off inside the tool call"
runs = 2
crew.url = "ws://replaced.invalid/ws"
{MODEL}
[[turns]]
say = "What's the weather in Paris?"
fault.model = "cut:tool"
expect.agent_error = true
expect.tools = [{{ name = "get_weather", never = true }}]

[[turns]]
say = "Hello?"
expect.reply.contains = ["Ask me about the weather"]
"#
    );
    let (report, _model) = run_on_mock(&toml).await;
    assert!(report.passed, "{:#?}", report.checks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_the_runner_serves_needs_a_crew_it_starts() {
    // A crew reached by URL runs on whatever model it was started with: the scenario's
    // faults could not reach it, so the scenario fails saying why instead of passing vacuously.
    let toml = format!(
        "name = \"x\"\ncrew.url = \"ws://127.0.0.1:9/ws\"\n{MODEL}\n[[turns]]\nsay = \"hi\"\nfault.model = \"503\"\n"
    );
    let scenario = Scenario::from_toml(&toml).expect("a valid scenario");
    let report = run_scenario(&scenario, &RunOptions::default()).await;
    assert!(!report.passed);
    let error = report.error.expect("an error");
    assert!(
        error.contains("needs a crew the runner starts (`crew.command`)"),
        "{error}"
    );
}
