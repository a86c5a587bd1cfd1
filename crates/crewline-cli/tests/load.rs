//! `crewline load` against a real crew server on 127.0.0.1:0 serving the weather crew on a
//! scripted model: the report counts turns, tool calls, errors and interrupts correctly.

mod common;

use std::{sync::Arc, time::Duration};

use common::{bounded, start};
use crewline::{
    llm::ScriptedLlm,
    llm::{ChatRequest, Reply},
    types::Message,
};
use crewline_examples::voice_agent::WeatherCrew;
use crewline_server::CrewServer;
use crewline_testkit::load::{LoadConfig, Scenario, run};
use tokio::net::TcpListener;

fn config(url: &str, sessions: usize, turns: usize, scenario: Scenario) -> LoadConfig {
    let mut config = LoadConfig::new(url);
    config.sessions = sessions;
    config.turns = turns;
    config.scenario = scenario;
    config.turn_timeout = Duration::from_secs(30);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_turns_are_all_counted_with_latencies_and_server_usage() {
    bounded(async {
        let server = start(Duration::ZERO).await;
        let mut config = config(&server.url, 4, 3, Scenario::Text);
        // The crew runs in this process: watch it.
        config.pid = Some(std::process::id());
        let report = run(config).await.unwrap();

        assert_eq!(report.connected, 4);
        assert_eq!(report.connect_errors, 0);
        assert_eq!(report.turns_completed, 12);
        assert_eq!(report.turns_ok, 12);
        assert_eq!(report.errors, 0);
        assert_eq!(report.agent_errors, 0);
        assert_eq!(report.stray_chunks, 0);
        assert_eq!(report.turns_interrupted, 0);
        assert_eq!(report.time_to_first_chunk.count, 12);
        assert_eq!(report.time_to_end.count, 12);
        assert!(report.time_to_first_chunk.p50_ms <= report.time_to_end.p50_ms);
        assert!(report.chunks >= 12);
        assert!(report.turns_per_sec > 0.0);
        // Every turn reached the model once, with the conversation growing per turn.
        let requests = server.llm.requests();
        assert_eq!(requests.len(), 12);
        assert!(requests.iter().any(|r| {
            r.messages
                .iter()
                .filter(|m| matches!(m, Message::User { .. }))
                .count()
                == 3
        }));
        let usage = report.server.as_ref().unwrap();
        assert!(usage.cpu_ms_per_turn.is_some());
        assert!(usage.rss_peak_mib > 0.0);
        assert!(usage.memory_per_session_kib.is_some());

        let table = report.to_table();
        assert!(table.contains("request -> first chunk"), "{table}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["turns_completed"], 12);
        assert_eq!(json["scenario"], "text");
        assert_eq!(json["time_to_first_chunk"]["count"], 12);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_turns_count_the_tool_calls() {
    bounded(async {
        let server = start(Duration::ZERO).await;
        let report = run(config(&server.url, 3, 2, Scenario::Tool))
            .await
            .unwrap();
        assert_eq!(report.turns_completed, 6);
        assert_eq!(report.turns_ok, 6);
        assert_eq!(report.tool_calls_ended, 6);
        assert_eq!(report.tool_calls_failed, 0);
        assert_eq!(report.errors, 0);
        // Two model requests per turn: the tool call, then the answer.
        assert_eq!(server.llm.requests().len(), 12);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_turns_stop_early_and_are_measured() {
    bounded(async {
        // Slow enough that the story is far from done when the interrupt lands.
        let server = start(Duration::from_millis(20)).await;
        let report = run(config(&server.url, 3, 2, Scenario::Interrupt))
            .await
            .unwrap();
        assert_eq!(report.turns_completed, 6);
        assert_eq!(report.turns_interrupted, 6);
        assert_eq!(report.errors, 0);
        assert_eq!(report.interrupt_to_end.count, 6);
        assert_eq!(report.interrupt_to_last_chunk.count, 6);
        // The story has about 90 words; an interrupted turn gets only its first few.
        assert!(report.chunks < 6 * 10, "{} chunks", report.chunks);
        assert!(report.chunks_after_interrupt < 6 * 5);
        let table = report.to_table();
        assert!(table.contains("interrupt -> last chunk"), "{table}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_failures_and_refused_connections_are_errors() {
    bounded(async {
        // Caller 1's model stream breaks off mid-way; the others are answered.
        let llm = ScriptedLlm::from_fn(|request: &ChatRequest| {
            let caller_one = request
                .messages
                .iter()
                .any(|m| matches!(m, Message::User { content } if content.contains("caller 1,")));
            if caller_one {
                Reply::CutAfter("Half an ans".to_owned())
            } else {
                Reply::text("A whole answer.")
            }
        });
        let crew = WeatherCrew::new(Arc::new(llm), Duration::ZERO).unwrap();
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let url = format!("ws://{}/ws", listener.local_addr().unwrap());
        let task = tokio::spawn(CrewServer::new(crew.agent().clone()).serve(listener));

        let report = run(config(&url, 3, 2, Scenario::Text)).await.unwrap();
        assert_eq!(report.turns_completed, 6);
        assert_eq!(report.turns_with_agent_error, 2);
        assert_eq!(report.turns_ok, 4);
        assert_eq!(report.errors, 2);
        assert!(report.agent_errors >= 2);
        assert!(!report.error_samples.is_empty());
        task.abort();

        // Nobody listens here any more: every session fails to connect.
        let closed = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let url = format!("ws://{}/ws", closed.local_addr().unwrap());
        drop(closed);
        let report = run(config(&url, 3, 2, Scenario::Text)).await.unwrap();
        assert_eq!(report.connected, 0);
        assert_eq!(report.connect_errors, 3);
        assert_eq!(report.turns_not_run, 6);
        assert_eq!(report.turns_completed, 0);
        assert_eq!(report.errors, 3);
    })
    .await;
}
