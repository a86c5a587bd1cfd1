//! What `crewline eval` hands a crew it starts: a live model named by `crew.model` (as the
//! `OPENAI_*` variables the demo crew reads; here a mock model stands in for the provider),
//! and the tool faults of the scenario's turns (`CREWLINE_EVAL_TOOL_FAULTS`).

// Test helpers: a failed setup should panic and fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use crewline_testkit::mock_llm::{MockLlm, Script};

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "crewline-eval-started-{test}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn eval(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_crewline"))
        .arg("eval")
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_MODEL")
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_crew_runs_on_the_live_model_its_scenario_names() {
    let script = Script::from_json_str(
        r#"{"replies": [
            {"when": {"last_role": "tool"}, "reply": {"content_chunks": ["The provider says ", "18 degrees."]}},
            {"when": {"last_user_contains": "weather"}, "reply": {"tool_calls": [{"id": "call_1", "name": "get_weather", "arguments_chunks": ["{\"location\": \"Paris\"}"]}]}}
        ]}"#,
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let provider = MockLlm::new(script).serve(listener).unwrap();
    let dir = scratch("model");
    let file = dir.join("live.toml");
    std::fs::write(
        &file,
        format!(
            r#"
name = "the crew answers on the named provider's model"
[crew]
command = [{:?}, "demo", "--serve", "--port", "{{port}}"]
ready_timeout_ms = 20000
model = {{ base_url = "{}", model = "live-model-7", api_key_env = "CREWLINE_TEST_LIVE_KEY" }}

[[turns]]
say = "What's the weather in Paris?"
expect.reply.contains = ["The provider says"]
expect.tools = [{{ name = "get_weather", once = true }}]
"#,
            env!("CARGO_BIN_EXE_crewline"),
            provider.base_url()
        ),
    )
    .unwrap();

    let (code, stdout, stderr) = eval(
        &[file.to_str().unwrap()],
        &[("CREWLINE_TEST_LIVE_KEY", "sk-test-live")],
    )
    .await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let requests = provider.mock().requests();
    assert!(!requests.is_empty());
    assert!(
        requests.iter().all(|r| r.body["model"] == "live-model-7"),
        "{:#?}",
        requests
            .iter()
            .map(|r| &r.body["model"])
            .collect::<Vec<_>>()
    );

    // Without the key in the runner's environment, the crew is not started, and the report
    // names the variable (never a value).
    let (code, stdout, stderr) = eval(&[file.to_str().unwrap()], &[]).await;
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("CREWLINE_TEST_LIVE_KEY is not set"),
        "{stdout}\n{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_crew_gets_its_scenario_s_tool_faults_and_copes() {
    let dir = scratch("tool-faults");
    let file = dir.join("faults.toml");
    let crew = format!(
        "[crew]\ncommand = [{:?}, \"demo\", \"--serve\", \"--scripted\", \"--chunk-delay-ms\", \"1\", \"--port\", \"{{port}}\"]\nready_timeout_ms = 20000\n",
        env!("CARGO_BIN_EXE_crewline")
    );
    let scenarios = r#"
[[scenarios]]
name = "the weather service fails once; the crew says so, then recovers"
runs = 2
[[scenarios.turns]]
say = "What's the weather in Paris?"
fault.tool = { name = "get_weather", kind = "error", message = "The weather service is down." }
expect.reply.contains = ["weather service is down"]
expect.tools = [{ name = "get_weather", succeeded = false, once = true }]
[[scenarios.turns]]
say = "And in Tokyo?"
expect.reply.contains = ["24 degrees"]

[[scenarios]]
name = "without a fault the same crew looks it up"
[[scenarios.turns]]
say = "What's the weather in Paris?"
expect.reply.contains = ["18 degrees"]
"#;
    std::fs::write(&file, format!("{crew}{scenarios}")).unwrap();
    let (code, stdout, stderr) = eval(&[file.to_str().unwrap()], &[]).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
