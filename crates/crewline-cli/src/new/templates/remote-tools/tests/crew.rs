//! The crew on its scripted model, called over a real WebSocket as the voice platform would,
//! with the weather station answering its tool calls from this process over HTTP.

use std::sync::Arc;

use crewline::prelude::*;
use crewline_eval::{CheckOptions, CrewTarget, SuiteFailure, check_file_with};
use crewline_remote::{ClientConfig, TaskOutcome};
use crewline_server::CrewServer;
use crewline_testkit::TestCrew;
use serde_json::json;
use tokio::{sync::oneshot, task::JoinHandle};

use crew_template::{CrewError, crew, scripted_model, station, task_api};

/// The crew and its task API served on a free port, and a station registered with it: the
/// crew, the task's id and the station's run.
async fn serve_with_station() -> (TestCrew, String, JoinHandle<Result<TaskOutcome, CrewError>>) {
    let llm: Arc<dyn LlmClient> = Arc::new(scripted_model());
    let tasks = task_api();
    let server = CrewServer::new({
        let tasks = tasks.clone();
        move |setup: SessionSetup| {
            let (llm, tasks) = (Arc::clone(&llm), tasks.clone());
            async move { crew(&setup, llm, &tasks).await }
        }
    })
    .merge(tasks.router());
    let crew = TestCrew::serve_server(server).await.unwrap();
    let api = crew
        .url()
        .unwrap()
        .replace("ws://", "http://")
        .replace("/ws", "");
    let (task_tx, task_rx) = oneshot::channel();
    let station = tokio::spawn(station::run(ClientConfig::new(api), move |task_id| {
        let _ = task_tx.send(task_id.to_owned());
    }));
    let task_id = task_rx.await.unwrap();
    (crew, task_id, station)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_station_answers_the_crews_tool_calls() {
    let (crew, task_id, station) = serve_with_station().await;
    let mut config = crew.config();
    config
        .initial_variables
        .insert("task_id".into(), json!(task_id));
    let mut call = crew.call_with(config).await.unwrap();

    let turn = call.say("What's the weather in Oslo?").await.unwrap();
    turn.assert_tool_call("get_weather", json!({"city": "Oslo"}))
        .succeeded();
    turn.assert_text_contains("4 degrees and snowing")
        .assert_no_errors();
    call.hang_up().await.unwrap();

    // The call ended: the task is done, and the station stops.
    let outcome = station.await.unwrap().unwrap();
    assert_eq!(outcome.calls_answered, 1, "{outcome:?}");
}

/// The eval scenarios of `evals/crew.toml`, run against the crew served here, the task's id
/// given as the call's `task_id` variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eval_scenarios_pass() -> Result<(), SuiteFailure> {
    let (crew, task_id, _station) = serve_with_station().await;
    let url = crew.url().unwrap().to_owned();
    let options = CheckOptions::default().variable("task_id", task_id);
    check_file_with("evals/crew.toml", CrewTarget::Url(url), &options).await?;
    Ok(())
}
