//! Replay: a call recorded between a caller and a crew (the playground's JSONL) becomes a
//! regression scenario that passes against the same crew and fails against a broken one.

use crate::common;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crewline_eval::{
    RunOptions, Scenario, ScenarioFile,
    replay::{MAX_RECORDING_BYTES, ReplayError, scenario_from_recording, scenario_text},
    run_scenario,
    scenario::Format,
};
use crewline_examples::voice_agent;
use crewline_server::CrewServer;
use futures::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// A WebSocket relay in front of the crew at `crew` (`ws://host:port/ws`) that writes every
/// frame each way as the playground's JSONL does: `{"t", "dir", "frame"}`.
async fn recording_relay(crew: String) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&lines);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            let crew = crew.clone();
            tokio::spawn(async move {
                let Ok(caller) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                let Ok((crew, _)) = tokio_tungstenite::connect_async(crew).await else {
                    return;
                };
                let started = Instant::now();
                let record = |dir: &str, message: &Message| {
                    let text = match message {
                        Message::Text(text) => text.as_str().to_owned(),
                        Message::Binary(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                        _ => return,
                    };
                    if let Ok(frame) = serde_json::from_str::<serde_json::Value>(&text) {
                        let t = started.elapsed().as_secs_f64() * 1000.0;
                        let line = serde_json::json!({"t": t, "dir": dir, "frame": frame});
                        log.lock().expect("the log").push(line.to_string());
                    }
                };
                let (mut caller_tx, mut caller_rx) = caller.split();
                let (mut crew_tx, mut crew_rx) = crew.split();
                loop {
                    tokio::select! {
                        message = caller_rx.next() => match message {
                            Some(Ok(message)) => {
                                record("out", &message);
                                if crew_tx.send(message).await.is_err() { break; }
                            }
                            _ => break,
                        },
                        message = crew_rx.next() => match message {
                            Some(Ok(message)) => {
                                record("in", &message);
                                if caller_tx.send(message).await.is_err() { break; }
                            }
                            _ => break,
                        },
                    }
                }
            });
        }
    });
    (format!("ws://{addr}/ws"), lines)
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("crewline-replay-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    dir
}

async fn run(scenario: &Scenario, url: String) -> crewline_eval::ScenarioReport {
    let options = RunOptions {
        crew_url: Some(url),
        ..RunOptions::default()
    };
    tokio::time::timeout(Duration::from_secs(60), run_scenario(scenario, &options))
        .await
        .expect("the scenario ran within its bound")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_call_replays_as_a_scenario_that_passes_and_catches_a_broken_crew() {
    // Record a call: two turns through the relay, as the playground would have seen them.
    let crew = common::weather_crew(Duration::from_millis(1), Duration::ZERO).await;
    let (relay, lines) = recording_relay(crew.clone()).await;
    let call = Scenario::from_toml(
        r#"
        name = "a call to record"
        crew.url = "ws://127.0.0.1:1/ws" # replaced by the relay
        [[turns]]
        say = "Hi there!"
        [[turns]]
        say = "What's the weather in Paris?"
        "#,
    )
    .expect("the call");
    let recorded = run(&call, relay).await;
    assert!(recorded.passed, "{:#?}", recorded.checks);
    let dir = scratch("roundtrip");
    let path = dir.join("paris-call.jsonl");
    let jsonl = lines.lock().expect("the log").join("\n") + "\n";
    std::fs::write(&path, jsonl).expect("the recording");

    // Replay it into a scenario file, and read that file back as a user would.
    let scenario = scenario_from_recording(&path).expect("the recording replays");
    assert_eq!(scenario.name, "replay of paris-call");
    let says: Vec<_> = scenario.turns.iter().map(|t| t.say.as_deref()).collect();
    assert_eq!(
        says,
        [Some("Hi there!"), Some("What's the weather in Paris?")]
    );
    assert!(scenario.turns[0].expect.tools.is_empty());
    let lookup = &scenario.turns[1].expect.tools;
    assert_eq!(lookup.len(), 1, "{lookup:#?}");
    assert_eq!(lookup[0].name, "get_weather");
    assert_eq!(
        lookup[0].args_subset,
        Some(serde_json::json!({"location": "Paris"}))
    );
    assert_eq!(lookup[0].count, Some(1));
    assert_eq!(lookup[0].succeeded, Some(true));
    assert!(
        scenario.turns[1]
            .expect
            .reply
            .contains
            .iter()
            .any(|w| w.contains("18")),
        "{:#?}",
        scenario.turns[1].expect.reply
    );
    let toml = scenario_text(&scenario, Format::Toml, "paris-call.jsonl").expect("as TOML");
    let file = dir.join("paris-call.toml");
    std::fs::write(&file, &toml).expect("the scenario file");
    let read_back = ScenarioFile::load(&file).expect("the written scenario reads");
    assert_eq!(read_back, vec![scenario.clone()], "{toml}");

    // The same crew passes it.
    let report = run(&scenario, crew).await;
    assert!(report.passed, "{toml}\n{:#?}", report.checks);

    // A crew whose model looks up the wrong city fails it, saying what came.
    use crewline::{
        llm::{Reply, ScriptedLlm},
        types::Message,
    };
    let broken = ScriptedLlm::from_fn(|request| match request.messages.last() {
        Some(Message::Tool { .. }) => Reply::text("Sorry, I found nothing."),
        _ => Reply::tool_call("get_weather", serde_json::json!({"location": "Lyon"})),
    });
    let broken =
        voice_agent::WeatherCrew::new(Arc::new(broken), Duration::ZERO).expect("the weather tools");
    let broken = common::serve(CrewServer::new(broken.agent().clone())).await;
    let report = run(&scenario, broken).await;
    assert!(!report.passed);
    let failure = report
        .checks
        .iter()
        .find(|c| !c.passed && c.name.contains("get_weather"))
        .expect("the lookup check failed");
    assert!(
        failure.failures[0]
            .message
            .contains(r#"get_weather {"location":"Lyon"}"#),
        "{failure:#?}"
    );
}

#[test]
fn a_malformed_line_is_named() {
    let dir = scratch("malformed");
    let path = dir.join("bad.jsonl");
    std::fs::write(
        &path,
        "{\"t\": 0, \"dir\": \"out\", \"frame\": {\"type\": \"system.user.joined\", \"timestamp\": 0}}\n\nnot json\n",
    )
    .expect("the file");
    let error = scenario_from_recording(&path).expect_err("line 3 is not JSON");
    assert!(
        matches!(error, ReplayError::Line { line: 3, .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("bad.jsonl, line 3: not a recorded frame"),
        "{error}"
    );

    std::fs::write(&path, "{\"t\": 0, \"dir\": \"sideways\", \"frame\": {}}\n").expect("the file");
    let error = scenario_from_recording(&path).expect_err("no such direction");
    assert!(
        matches!(error, ReplayError::Line { line: 1, .. }),
        "{error:?}"
    );
}

#[test]
fn a_recording_without_turns_or_too_large_is_refused() {
    let dir = scratch("refused");
    let path = dir.join("empty.jsonl");
    std::fs::write(&path, "\n").expect("the file");
    let error = scenario_from_recording(&path).expect_err("no turns");
    assert!(matches!(error, ReplayError::NoTurns { .. }), "{error:?}");

    let huge = dir.join("huge.jsonl");
    let file = std::fs::File::create(&huge).expect("the file");
    // A sparse file: its size is over the cap without writing it.
    file.set_len(MAX_RECORDING_BYTES + 1).expect("the size");
    let error = scenario_from_recording(&huge).expect_err("too large");
    assert!(matches!(error, ReplayError::TooLarge { .. }), "{error:?}");
    assert!(
        error.to_string().contains("is over 16777216 bytes"),
        "{error}"
    );
}
