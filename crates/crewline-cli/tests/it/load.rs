//! `crewline load` against a real crew server on 127.0.0.1:0 serving the weather crew on a
//! scripted model: the report counts turns, tool calls, errors and interrupts correctly; the
//! open loop does not hold a call for the others, and the turn log has a line per turn.

// Test helpers set up what the tests drive: a failed step should panic and fail the test.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::{sync::Arc, time::Duration};

use common::{bounded, start};
use crewline::{
    llm::ScriptedLlm,
    llm::{ChatRequest, Reply},
    types::Message,
};
use crewline_examples::voice_agent::WeatherCrew;
use crewline_load::{LoadConfig, Scenario, TurnOutcome, TurnRecord, run};
use crewline_server::{CrewServer, ServerError};
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

/// A crew server on 127.0.0.1:0 whose model stream breaks off mid-way for caller 1 and
/// answers everyone else; its URL and task.
async fn caller_one_breaks() -> (String, tokio::task::JoinHandle<Result<(), ServerError>>) {
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
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_failures_and_refused_connections_are_errors() {
    bounded(async {
        let (url, task) = caller_one_breaks().await;

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

/// A crew whose model answers every turn and counts the requests it has seen.
async fn counting_crew() -> (String, tokio::sync::watch::Receiver<usize>) {
    let (seen, requests) = tokio::sync::watch::channel(0_usize);
    let llm = ScriptedLlm::from_fn(move |_: &ChatRequest| {
        seen.send_modify(|n| *n += 1);
        Reply::text("An answer.")
    });
    let crew = WeatherCrew::new(Arc::new(llm), Duration::ZERO).unwrap();
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(CrewServer::new(crew.agent().clone()).serve(listener));
    (addr.to_string(), requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_open_loop_a_call_talks_without_waiting_for_the_next_to_connect() {
    bounded(async {
        let (crew, mut requests) = counting_crew().await;
        // In front of the crew: the first call goes straight through; the second is held
        // until the model has answered every turn of the first. Behind a start line both calls
        // would wait for each other until the second's connect timed out.
        let front = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let url = format!("ws://{}/ws", front.local_addr().unwrap());
        let turns = 3;
        let gate = requests.clone();
        tokio::spawn(async move {
            for index in 0.. {
                let (mut caller, _) = front.accept().await.unwrap();
                let crew = crew.clone();
                let mut requests = gate.clone();
                tokio::spawn(async move {
                    if index > 0 {
                        requests.wait_for(|n| *n >= turns).await.unwrap();
                    }
                    let mut upstream = tokio::net::TcpStream::connect(crew).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut caller, &mut upstream).await;
                });
            }
        });
        let mut config = config(&url, 2, turns, Scenario::Text);
        config.open_loop = true;
        config.connect_timeout = Duration::from_secs(20);
        let report = run(config).await.unwrap();

        assert!(report.open_loop);
        assert_eq!(report.connect_errors, 0, "{:?}", report.error_samples);
        assert_eq!(report.turns_started, 6);
        assert_eq!(report.turns_completed, 6);
        assert_eq!(report.errors, 0);
        assert_eq!(*requests.borrow_and_update(), 6);
    })
    .await;
}

fn read_turn_log(path: &std::path::Path) -> Vec<TurnRecord> {
    let text = std::fs::read_to_string(path).unwrap();
    let _ = std::fs::remove_file(path);
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_log_has_one_line_per_turn_and_per_failed_connection() {
    bounded(async {
        let server = start(Duration::ZERO).await;
        let path = std::env::temp_dir().join(format!(
            "crewline-turn-log-{}-turns.jsonl",
            std::process::id()
        ));
        let mut answered = config(&server.url, 3, 2, Scenario::Text);
        answered.open_loop = true;
        answered.turn_log = Some(path.clone());
        let report = run(answered).await.unwrap();
        assert_eq!(report.turns_started, 6);

        let records = read_turn_log(&path);
        assert_eq!(records.len(), 6, "{records:?}");
        let mut turns: Vec<(usize, Option<usize>)> =
            records.iter().map(|r| (r.session, r.turn)).collect();
        turns.sort_unstable();
        let expected: Vec<(usize, Option<usize>)> = (0..3)
            .flat_map(|session| (0..2).map(move |turn| (session, Some(turn))))
            .collect();
        assert_eq!(turns, expected);
        for record in &records {
            assert_eq!(record.outcome, TurnOutcome::Ok, "{record:?}");
            let first = record.first_chunk_ms.unwrap();
            assert!(first <= record.end_ms.unwrap(), "{record:?}");
            assert!(record.at_ms >= 0.0 && record.error.is_none(), "{record:?}");
        }
        // A call's second turn starts after its first.
        for session in 0..3 {
            let at = |turn| {
                records
                    .iter()
                    .find(|r| r.session == session && r.turn == Some(turn))
                    .map(|r| r.at_ms)
                    .unwrap()
            };
            assert!(at(0) < at(1));
        }

        // Nobody listens here: one line per call, each a failed connection with its reason.
        let closed = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let url = format!("ws://{}/ws", closed.local_addr().unwrap());
        drop(closed);
        let path = std::env::temp_dir().join(format!(
            "crewline-turn-log-{}-refused.jsonl",
            std::process::id()
        ));
        let mut refused = config(&url, 3, 2, Scenario::Text);
        refused.open_loop = true;
        refused.turn_log = Some(path.clone());
        let report = run(refused).await.unwrap();
        assert_eq!(report.turns_started, 0);
        let records = read_turn_log(&path);
        assert_eq!(records.len(), 3, "{records:?}");
        for record in &records {
            assert_eq!(record.outcome, TurnOutcome::ConnectFailed);
            assert_eq!(record.turn, None);
            assert!(record.error.is_some());
            assert!(record.first_chunk_ms.is_none() && record.end_ms.is_none());
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_with_an_agent_error_is_logged_as_such() {
    bounded(async {
        let (url, task) = caller_one_breaks().await;
        let path = std::env::temp_dir().join(format!(
            "crewline-turn-log-{}-agent-error.jsonl",
            std::process::id()
        ));
        let mut config = config(&url, 2, 1, Scenario::Text);
        config.open_loop = true;
        config.turn_log = Some(path.clone());
        run(config).await.unwrap();
        task.abort();

        let records = read_turn_log(&path);
        let outcome = |session| {
            records
                .iter()
                .find(|r| r.session == session)
                .map(|r| r.outcome)
        };
        assert_eq!(outcome(0), Some(TurnOutcome::Ok));
        assert_eq!(outcome(1), Some(TurnOutcome::AgentError));
    })
    .await;
}
