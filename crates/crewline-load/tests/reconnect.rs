//! The load generator reconnects a dropped call as a platform does: through the same URL, with
//! the same call id and the conversation so far, sending the turn in flight again; it counts
//! the turn as completed, and as one in flight at a drop. Without `reconnect`, the call ends
//! at the drop and the turn is lost.

// Test helpers set up what the tests drive: a failed step should panic and fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use crewline::protocol::{self, Event, EventBody};
use crewline_load::{LoadConfig, Reconnect, run};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// What the fake crew saw of one `system.llm.request`.
#[derive(Debug, Clone)]
struct Seen {
    connection: usize,
    call_id: Option<String>,
    messages: usize,
    last_user: String,
}

/// What the first connection does at its second request.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Gone mid-turn: no answer, no close frame (a killed replica).
    Cut,
    /// Never answers, the socket open (a frozen replica).
    Silent,
}

/// A crew that answers every turn, except that its first connection fails at its second
/// request as `fault` says.
async fn flaky_crew(fault: Fault) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let url = format!("ws://{}/ws", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        for connection in 0.. {
            let (stream, _) = listener.accept().await.unwrap();
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
                let mut call_id = None;
                let mut requests = 0;
                while let Some(Ok(message)) = socket.next().await {
                    let bytes = match message {
                        Message::Binary(bytes) => bytes.to_vec(),
                        Message::Text(text) => text.as_bytes().to_vec(),
                        _ => continue,
                    };
                    let Ok(event) = protocol::decode(&bytes) else {
                        continue;
                    };
                    let replies = match event.body {
                        EventBody::SystemInit(init) => {
                            call_id = init.session_context.caller.and_then(|c| c.call_id);
                            vec![EventBody::AgentReady]
                        }
                        EventBody::LlmRequest(request) => {
                            requests += 1;
                            let messages: Vec<serde_json::Value> = request
                                .messages
                                .map(|m| {
                                    serde_json::from_value(serde_json::to_value(m).unwrap())
                                        .unwrap()
                                })
                                .unwrap_or_default();
                            let last_user = messages
                                .iter()
                                .rev()
                                .find(|m| m["role"] == "user")
                                .map(|m| m["content"].as_str().unwrap().to_owned())
                                .unwrap_or_default();
                            log.lock().unwrap().push(Seen {
                                connection,
                                call_id: call_id.clone(),
                                messages: messages.len(),
                                last_user,
                            });
                            if connection == 0 && requests == 2 {
                                match fault {
                                    Fault::Cut => return,
                                    Fault::Silent => {
                                        std::future::pending::<()>().await;
                                    }
                                }
                            }
                            vec![
                                EventBody::ResponseStart { request_id: None },
                                EventBody::ResponseChunk {
                                    text: "An answer.".to_owned(),
                                },
                                EventBody::ResponseEnd,
                            ]
                        }
                        _ => Vec::new(),
                    };
                    for body in replies {
                        let frame = protocol::encode(&Event::now(body));
                        socket.send(Message::Binary(frame.into())).await.unwrap();
                    }
                }
            });
        }
    });
    (url, seen)
}

fn config(url: &str) -> LoadConfig {
    let mut config = LoadConfig::new(url);
    config.turns = 3;
    config.turn_timeout = Duration::from_secs(30);
    config.call_id_prefix = Some("call".to_owned());
    config
}

fn reconnecting(url: &str) -> LoadConfig {
    let mut config = config(url);
    config.reconnect = Some(Reconnect {
        retries: 3,
        backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
    });
    config
}

#[tokio::test]
async fn a_dropped_call_reconnects_with_its_call_id_and_resends_the_turn_in_flight() {
    let (url, seen) = flaky_crew(Fault::Cut).await;
    let config = reconnecting(&url);
    let report = tokio::time::timeout(Duration::from_secs(60), run(config))
        .await
        .expect("the run ends")
        .unwrap();

    assert_eq!(report.turns_completed, 3, "{:?}", report.error_samples);
    assert_eq!(report.turns_lost, 0);
    assert_eq!(report.turns_started, 3);
    assert_eq!(report.drops, 1);
    assert_eq!(report.reconnects, 1);
    assert_eq!(report.turns_in_flight_at_drop, 1);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    // The second connection is the same call, and carries the conversation up to the turn
    // that was in flight: user, assistant, user.
    let resent = &seen[2];
    assert_eq!(resent.connection, 1);
    assert_eq!(resent.call_id.as_deref(), Some("call-0"));
    assert_eq!(seen[0].call_id.as_deref(), Some("call-0"));
    assert_eq!(resent.messages, 3);
    assert_eq!(resent.last_user, seen[1].last_user);
}

#[tokio::test]
async fn without_reconnect_a_dropped_call_loses_its_turn() {
    let (url, _seen) = flaky_crew(Fault::Cut).await;
    let report = tokio::time::timeout(Duration::from_secs(60), run(config(&url)))
        .await
        .expect("the run ends")
        .unwrap();
    assert_eq!(report.turns_completed, 1);
    assert_eq!(report.turns_lost, 1);
    assert_eq!(report.turns_not_run, 1);
    assert_eq!(report.reconnects, 0);
}

#[tokio::test]
async fn a_silent_replica_past_the_turn_timeout_is_left_for_another_connection() {
    let (url, seen) = flaky_crew(Fault::Silent).await;
    let mut config = reconnecting(&url);
    config.turn_timeout = Duration::from_millis(300);
    let report = tokio::time::timeout(Duration::from_secs(60), run(config))
        .await
        .expect("the run ends")
        .unwrap();
    assert_eq!(report.turns_completed, 3, "{:?}", report.error_samples);
    assert_eq!(report.turns_timed_out, 0);
    assert_eq!(report.turns_in_flight_at_drop, 1);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[2].connection, 1);
    assert_eq!(seen[2].call_id.as_deref(), Some("call-0"));
}
