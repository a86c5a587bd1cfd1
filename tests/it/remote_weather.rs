//! The remote weather example over real HTTP on 127.0.0.1: the crew server (task API merged)
//! in this process, the weather station client in a separate process (the example binary in
//! `--client` mode), and a platform call driven over the WebSocket.

use crate::common;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use crewline::llm::LlmClient;
use crewline_examples::remote_weather as crew;
use crewline_examples::remote_weather::station;
use crewline_remote::{ClientConfig, TaskApi, TaskClient, wire::TaskRequest};
use crewline_server::CrewServer;
use crewline_testkit::platform::{PlatformClient, PlatformConfig, PlatformError, ToolOutcome};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, BufReader, Lines},
    process::{Child, ChildStdout, Command},
};

/// Serves the remote weather crew with `tasks` merged on 127.0.0.1:0; returns the address.
async fn serve(tasks: TaskApi) -> SocketAddr {
    let llm: Arc<dyn LlmClient> = Arc::new(crew::scripted_model(Duration::ZERO));
    let weather = crew::RemoteWeatherCrew::new(llm, tasks.clone());
    let server = CrewServer::new(move |setup: crewline::SessionSetup| {
        let weather = weather.clone();
        async move { weather.build(&setup).await }
    })
    .merge(tasks.router());
    common::listen(server).await
}

/// A call to the crew at `addr` with these call variables.
async fn call(
    addr: SocketAddr,
    variables: &[(&str, Value)],
) -> Result<PlatformClient, PlatformError> {
    let mut config = PlatformConfig::new(format!("ws://{addr}/ws"));
    for (name, value) in variables {
        config
            .initial_variables
            .insert((*name).to_owned(), value.clone());
    }
    common::connect_with(config).await
}

/// The example binary, rebuilt if needed (`cargo test --workspace` builds it anyway; a
/// filtered run such as `--test it remote_weather::` does not). `--workspace` resolves features as
/// CI's `cargo build --workspace --examples` does, so there this is a no-op.
fn example_binary() -> PathBuf {
    let test_exe = std::env::current_exe().expect("the test's path");
    // target/<profile>/deps/<test> -> target/<profile>
    let profile_dir = test_exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile>/deps");
    if let Ok(cargo) = std::env::var("CARGO") {
        let mut build = std::process::Command::new(cargo);
        build
            .args([
                "build",
                "--quiet",
                "--workspace",
                "--example",
                "remote_weather",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir
            .file_name()
            .is_some_and(|name| name == "release")
        {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(
            status.success(),
            "building the remote_weather example failed"
        );
    }
    let binary = profile_dir
        .join("examples")
        .join(format!("remote_weather{}", std::env::consts::EXE_SUFFIX));
    assert!(binary.exists(), "no example binary at {}", binary.display());
    binary
}

/// The weather station client in its own process, and its stdout lines.
struct StationProcess {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl StationProcess {
    /// Starts the client against the task API at `addr`; returns it with its task id.
    async fn start(addr: SocketAddr) -> (Self, String) {
        let mut child = Command::new(example_binary())
            .args(["--client", "--url", &format!("http://{addr}/api/v1")])
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the client process starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut process = Self {
            child,
            stdout: BufReader::new(stdout).lines(),
        };
        let line = process.line().await;
        let task_id = line
            .strip_prefix("task_id=")
            .unwrap_or_else(|| panic!("the client's first line names its task: {line}"))
            .to_owned();
        (process, task_id)
    }

    async fn line(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(20), self.stdout.next_line())
            .await
            .expect("the client wrote in time")
            .expect("the client's stdout")
            .expect("a line before the client exited")
    }

    /// Waits for the client to exit; returns its summary line.
    async fn finish(mut self) -> String {
        let summary = self.line().await;
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("the client exited in time")
            .expect("the client's exit status");
        assert!(status.success(), "client exit: {status}; {summary}");
        summary
    }
}

#[tokio::test]
async fn the_weather_tool_is_answered_by_a_separate_client_process() {
    let addr = serve(TaskApi::new()).await;
    let (station, task_id) = StationProcess::start(addr).await;
    let mut platform = call(addr, &[("task_id", json!(task_id))])
        .await
        .expect("handshake");

    let oslo = platform
        .user_turn("What's the weather in Oslo?")
        .expect("turn")
        .finish()
        .await
        .expect("turn finished");

    assert!(
        oslo.text.contains("In Oslo it is 4 degrees and snowing."),
        "{}",
        oslo.text
    );
    assert_eq!(oslo.tools.len(), 1, "{:?}", oslo.tools);
    assert_eq!(oslo.tools[0].name, "get_weather");
    match &oslo.tools[0].outcome {
        ToolOutcome::Ok(response) => assert!(
            response.to_string().contains("client weather station"),
            "the answer came from the client: {response}"
        ),
        other => panic!("the tool failed: {other:?}"),
    }

    let atlantis = platform
        .user_turn("And in Atlantis?")
        .expect("turn")
        .finish()
        .await
        .expect("turn finished");

    assert!(
        atlantis
            .text
            .contains("The station has no data for Atlantis; ask for a larger city nearby."),
        "the client's tool error (400) reaches the model: {}",
        atlantis.text
    );
    assert!(matches!(atlantis.tools[0].outcome, ToolOutcome::Failed(_)));

    // Hanging up ends the task; the client sees it and exits.
    platform.close().await.expect("closed");
    let summary = station.finish().await;
    // ... with what the call concluded: the agent's last reply, as the task's output.
    assert_eq!(
        summary,
        "status=done answered=2 rejected=0 output=\"The station has no data for Atlantis; ask \
         for a larger city nearby.\""
    );
}

#[tokio::test]
async fn without_an_answer_the_model_hears_the_tool_was_not_called_and_the_turn_still_ends() {
    let tasks = TaskApi::new().tool_timeout(Duration::from_millis(300));
    let addr = serve(tasks).await;
    // A client that registers the station's tool and then never answers.
    let registry = station::registry().expect("station tools");
    let task = TaskClient::new(ClientConfig::new(format!("http://{addr}")))
        .expect("client")
        .create_task(&TaskRequest {
            custom_tools: TaskClient::custom_tools(&registry).expect("specs"),
            ..TaskRequest::default()
        })
        .await
        .expect("task");
    let mut platform = call(addr, &[("task_id", json!(task.id))])
        .await
        .expect("handshake");

    let turn = platform
        .user_turn("What's the weather in Paris?")
        .expect("turn")
        .finish()
        .await
        .expect("the turn ends");

    assert!(turn.ended);
    // The scripted model says NO_ANSWER only for an error of kind `Timeout`.
    assert!(turn.text.contains(crew::NO_ANSWER), "{}", turn.text);
    match &turn.tools[0].outcome {
        ToolOutcome::Failed(error) => {
            // Nobody polled, so the store is certain the call was never handed out.
            assert!(
                error.contains("was not called: its client did not take the call within 300 ms"),
                "{error}"
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[tokio::test]
async fn a_call_naming_an_unknown_task_is_refused_with_the_reason() {
    let addr = serve(TaskApi::new()).await;

    let error = call(addr, &[("task_id", json!("task_nope"))])
        .await
        .expect_err("the setup fails");

    match error {
        PlatformError::Rejected { message } => {
            assert!(message.contains("no task `task_nope`"), "{message}");
        }
        other => panic!("expected a rejected handshake, got {other}"),
    }
}

#[tokio::test]
async fn a_tool_the_client_never_registered_is_refused_at_once_and_never_reaches_it() {
    // The longest tool timeout there is: were the call sent to the client and left waiting,
    // this test would hang instead of passing.
    let tasks = TaskApi::new().tool_timeout(crewline_remote::MAX_TOOL_TIMEOUT);
    let addr = serve(tasks.clone()).await;
    // The client offers a forecast tool only; the crew's model asks for `get_weather`.
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("http://{addr}/api/v1/task"))
        .json(
            &json!({"custom_tools": [{"name": "get_forecast", "description": "A forecast.",
            "inputs": {"location": {"type": "string"}}, "output": "string"}]}),
        )
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("body");
    let task_id = created["r"]["id"].as_str().expect("id").to_owned();
    let mut platform = call(addr, &[("task_id", json!(task_id))])
        .await
        .expect("handshake");

    let turn = tokio::time::timeout(
        Duration::from_secs(60),
        platform
            .user_turn("What's the weather in Paris?")
            .expect("turn")
            .finish(),
    )
    .await
    .expect("the turn did not wait for a client that would never answer")
    .expect("the turn ends");

    assert!(
        turn.text
            .contains("there is no tool named `get_weather`; available tools: get_forecast"),
        "the model hears which tools there are: {}",
        turn.text
    );
    assert!(matches!(turn.tools[0].outcome, ToolOutcome::Failed(_)));
    let polled: Value = http
        .get(format!("http://{addr}/api/v1/task/{task_id}?event_t=0"))
        .send()
        .await
        .expect("poll")
        .json()
        .await
        .expect("body");
    assert_eq!(
        polled["r"]["events"],
        json!([]),
        "no call reached the client"
    );
}
