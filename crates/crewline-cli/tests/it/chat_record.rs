//! `crewline chat --record`: a chat recorded through the chat command's own connection and
//! loop, in memory (no terminal), then replayed by `crewline eval --from-recording`'s code:
//! the scenario it makes passes against the same crew.

use crate::common;

use std::time::Duration;

use common::{bounded, start};
use crewline_cli::chat::{ChatOptions, Recording, connect, run_chat};
use crewline_eval::{RunOptions, replay::scenario_from_recording, run_scenario};
use crewline_testkit::platform::PlatformConfig;
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_chat_replays_as_a_passing_scenario() {
    bounded(async {
        let server = start(Duration::from_millis(1)).await;
        let path = std::env::temp_dir().join(format!(
            "crewline-chat-record-{}-{}.jsonl",
            std::process::id(),
            line!()
        ));
        let recording = Recording::create(&path).unwrap();
        let mut client = connect(PlatformConfig::new(&server.url), Some(&recording))
            .await
            .unwrap();
        let (tx, lines) = mpsc::channel(8);
        for line in [
            "Hello there",
            "What's the weather in Paris and Tokyo?",
            "/quit",
        ] {
            tx.send(line.to_owned()).await.unwrap();
        }
        let options = ChatOptions {
            barge_in: false,
            echo_input: true,
            prompt: false,
            ..ChatOptions::default()
        };
        let mut out = Vec::new();
        let outcome = run_chat(&mut client, lines, &mut out, options)
            .await
            .unwrap();
        assert_eq!(outcome.turns, 2);
        client.close().await.unwrap();
        let summary = recording.finish().unwrap();
        assert!(summary.frames > 6, "{summary:?}");
        assert_eq!(summary.dropped, 0);

        // Every line is a recorded frame in the playground's format.
        let text = std::fs::read_to_string(&path).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["dir"], "out");
        assert_eq!(first["frame"]["type"], "system.init");

        let scenario = scenario_from_recording(&path).unwrap();
        assert_eq!(scenario.turns.len(), 2);
        assert_eq!(
            scenario.turns[1].say.as_deref(),
            Some("What's the weather in Paris and Tokyo?")
        );
        let tools = &scenario.turns[1].expect.tools;
        assert_eq!(tools.len(), 2, "{tools:?}");
        let options = RunOptions {
            crew_url: Some(server.url.clone()),
            ..RunOptions::default()
        };
        let report = run_scenario(&scenario, &options).await;
        assert!(report.passed, "{report:#?}");
        let _ = std::fs::remove_file(&path);
    })
    .await;
}

#[test]
fn a_recording_that_cannot_be_created_names_its_file() {
    let error = Recording::create("/nonexistent-dir/for/sure/call.jsonl")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("/nonexistent-dir/for/sure/call.jsonl"),
        "{error}"
    );
}
