//! The platform client against the real crew server on 127.0.0.1:0.

use crate::common;

use std::time::Duration;

use common::{bounded, start, start_with};
use crewline::{Crew, SessionSetup, types::Message};
use crewline_server::CrewServer;
use crewline_testkit::platform::{
    CrewFrame, PlatformClient, PlatformConfig, PlatformError, ToolOutcome,
};
use serde_json::json;

fn config(url: &str) -> PlatformConfig {
    PlatformConfig::new(url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_turn_streams_start_chunks_end_and_the_answer_joins_the_conversation() {
    bounded(async {
        let server = start(Duration::from_millis(5)).await;
        let mut client = PlatformClient::connect(config(&server.url)).await.unwrap();

        let mut turn = client.user_turn("Hi there!").unwrap();
        let mut seen = Vec::new();
        while let Some(frame) = turn.next().await.unwrap() {
            seen.push(frame.frame.wire_type());
        }
        let summary = turn.finish().await.unwrap();

        assert_eq!(seen.first(), Some(&"agent.llm.response.start"));
        assert_eq!(seen.last(), Some(&"agent.llm.response.end"));
        assert!(summary.started && summary.ended);
        assert!(summary.chunks > 1, "{summary:?}");
        assert_eq!(
            summary.text,
            "Hi! I can tell you the weather in any big city. Which one?"
        );
        let first = summary.time_to_first_chunk.unwrap();
        assert!(first <= summary.time_to_end.unwrap());
        assert!(summary.errors.is_empty() && summary.interrupt.is_none());
        assert_eq!(
            client.messages(),
            [
                json!({"role": "user", "content": "Hi there!"}),
                json!({"role": "assistant", "content": summary.text}),
            ]
        );

        // The next request carries the whole conversation, as the platform's does.
        let second = client.user_turn("Thanks, bye!").unwrap().finish().await.unwrap();
        assert!(second.text.contains("Thanks for calling"));
        let requests = server.llm.requests();
        let last = requests.last().unwrap();
        assert!(
            last.messages
                .iter()
                .any(|m| matches!(m, Message::Assistant { content, .. } if content.as_deref() == Some(summary.text.as_str()))),
            "{:?}",
            last.messages
        );
        // The crew echoes the platform's events; the client recognised and skipped them.
        assert!(client.stats().echoes >= 3, "{:?}", client.stats());
        assert_eq!(client.stats().undecodable, 0);
        client.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_turn_logs_each_call_start_and_end() {
    bounded(async {
        let server = start(Duration::from_millis(5)).await;
        let mut client = PlatformClient::connect(config(&server.url)).await.unwrap();
        let summary = client
            .user_turn("What's the weather in Paris and Tokyo?")
            .unwrap()
            .finish()
            .await
            .unwrap();

        let events = summary.tool_events();
        assert_eq!(
            events.iter().filter(|e| **e == "tool_call_start").count(),
            2
        );
        assert_eq!(events.iter().filter(|e| **e == "tool_call_end").count(), 2);
        let cities: Vec<_> = summary
            .tools
            .iter()
            .map(|t| t.arguments["location"].as_str().unwrap())
            .collect();
        assert_eq!(cities, ["Paris", "Tokyo"]);
        for tool in &summary.tools {
            assert_eq!(tool.name, "get_weather");
            assert!(matches!(&tool.outcome, ToolOutcome::Ok(v) if v["temperature_c"].is_number()));
            assert!(tool.started_after.unwrap() <= tool.finished_after.unwrap());
            assert!(tool.duration().is_some());
        }
        assert!(summary.text.contains("In Paris it is 18 degrees"));
        assert!(summary.text.contains("In Tokyo it is 24 degrees"));
        assert_eq!(summary.wire_types().last(), Some(&"agent.llm.response.end"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_the_turn_without_leaks_and_the_call_goes_on() {
    bounded(async {
        let server = start(Duration::from_millis(30)).await;
        let mut client = PlatformClient::connect(config(&server.url)).await.unwrap();
        let mut turn = client.user_turn("Tell me a long story.").unwrap();
        let mut chunks = 0;
        while let Some(frame) = turn.next().await.unwrap() {
            if matches!(frame.frame, CrewFrame::Chunk { .. }) {
                chunks += 1;
                if chunks == 2 {
                    break;
                }
            }
        }
        let summary = turn.interrupt().await.unwrap();
        let report = summary.interrupt.clone().unwrap();
        assert!(summary.ended, "{summary:?}");
        assert!(!report.before_start && !report.after_end);
        assert!(report.time_to_end.is_some());
        assert!(report.leaked_chunks.is_empty(), "{report:?}");
        // Nothing of the turn comes after its end.
        let end = summary
            .wire_types()
            .iter()
            .position(|t| *t == "agent.llm.response.end");
        assert_eq!(end, Some(summary.frames.len() - 1));
        assert!(summary.chunks < 20, "the story was cut: {}", summary.text);
        // What was heard before the barge-in is the assistant's turn in the conversation.
        assert_eq!(
            client.messages()[1],
            json!({"role": "assistant", "content": summary.text})
        );

        let next = client
            .user_turn("Never mind.")
            .unwrap()
            .finish()
            .await
            .unwrap();
        assert!(next.started && next.ended && next.chunks > 0);
        assert_eq!(next.stray_chunks_before_start, 0);
        assert_eq!(client.stats().stray_chunks, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_and_the_right_one_connects() {
    bounded(async {
        let server = start_with(Duration::ZERO, |s| s.auth_token("s3cret")).await;
        let mut wrong = config(&server.url);
        wrong.token = Some("nope".into());
        let error = PlatformClient::connect(wrong).await.unwrap_err();
        assert!(
            matches!(error, PlatformError::Refused { status: 401 }),
            "{error}"
        );

        let mut right = config(&server.url);
        right.token = Some("s3cret".into());
        let mut client = PlatformClient::connect(right).await.unwrap();
        assert!(
            client
                .user_turn("Hi")
                .unwrap()
                .finish()
                .await
                .unwrap()
                .ended
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_setup_is_a_rejected_handshake() {
    bounded(async {
        let server = CrewServer::new(|_: SessionSetup| async {
            Err::<Crew, _>(std::io::Error::other("no crew today"))
        });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let url = format!("ws://{}/ws", listener.local_addr().unwrap());
        let task = tokio::spawn(server.serve(listener));
        let error = PlatformClient::connect(config(&url)).await.unwrap_err();
        assert!(
            matches!(&error, PlatformError::Rejected { message } if message.contains("no crew today")),
            "{error}"
        );
        task.abort();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wait_is_bounded_even_when_the_server_never_answers() {
    bounded(async {
        // Accepts TCP but never completes the WebSocket upgrade.
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let url = format!("ws://{}/ws", listener.local_addr().unwrap());
        let mut config = config(&url);
        config.timeouts.connect = Duration::from_millis(300);
        let error = PlatformClient::connect(config).await.unwrap_err();
        assert!(matches!(error, PlatformError::Timeout { .. }), "{error}");
        drop(listener);

        let error = PlatformClient::connect(PlatformConfig::new("http://127.0.0.1:1/ws"))
            .await
            .unwrap_err();
        assert!(matches!(error, PlatformError::InvalidUrl { .. }), "{error}");
    })
    .await;
}
