//! Crews the eval tests call, served on 127.0.0.1 (port 0) on their scripted models.
#![allow(dead_code)] // each test file uses some of these

use std::{sync::Arc, time::Duration};

use crewline::{SessionSetup, llm::LlmClient};
use crewline_eval::{RunOptions, Scenario, ScenarioReport, run_scenario};
use crewline_examples::{call_control, voice_agent};
use crewline_server::CrewServer;

/// Serves `server` on 127.0.0.1 (port 0) in the background; returns its WebSocket URL.
pub(crate) async fn serve(server: CrewServer) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(server.serve(listener));
    format!("ws://{addr}/ws")
}

/// The voice_agent example's weather crew on its scripted model: `chunk_delay` per streamed
/// piece, `service_delay` per weather lookup.
pub(crate) async fn weather_crew(chunk_delay: Duration, service_delay: Duration) -> String {
    let llm = Arc::new(voice_agent::scripted_weather_model(chunk_delay));
    let crew = voice_agent::WeatherCrew::new(llm, service_delay).expect("the weather tools");
    serve(CrewServer::new(crew.agent().clone())).await
}

/// The call_control example's support crew (goodbye ends the call, asking for a person
/// transfers it) on its scripted model.
pub(crate) async fn support_crew() -> String {
    let llm: Arc<dyn LlmClient> = Arc::new(call_control::scripted_support_model());
    serve(CrewServer::new(move |setup: SessionSetup| {
        let crew = call_control::support_crew(&setup, llm.clone());
        async move { crew }
    }))
    .await
}

/// Parses `toml` (its `crew.url` is replaced by `url`) and runs it, bounded so that a hang
/// fails the test.
pub(crate) async fn run(toml: &str, url: &str) -> ScenarioReport {
    let scenario = Scenario::from_toml(toml).expect("a valid scenario");
    let options = RunOptions {
        crew_url: Some(url.to_owned()),
        ..RunOptions::default()
    };
    tokio::time::timeout(Duration::from_secs(60), run_scenario(&scenario, &options))
        .await
        .expect("the scenario ran within its bound")
}

/// The report's check named `name`; it must exist.
pub(crate) fn check<'r>(report: &'r ScenarioReport, name: &str) -> &'r crewline_eval::CheckReport {
    report
        .checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {:#?}", report.checks))
}
