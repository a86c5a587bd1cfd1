//! What a crew (or anything at the URL the platform client is pointed at, as `crewline chat`
//! is) can make the client hold: one message of at most `MAX_MESSAGE_BYTES`, at most
//! `INBOUND_BYTES` of frames the caller has not taken yet, `MAX_TURN_BYTES` in one turn's
//! summary and `INBOUND_BYTES` of frames kept between turns.

use std::time::Duration;

use crewline::protocol::{self, Event, EventBody};
use crewline_testkit::platform::{
    CrewFrame, INBOUND_BYTES, MAX_MESSAGE_BYTES, MAX_TURN_BYTES, PlatformClient, PlatformConfig,
    PlatformError, Timeouts,
};
use futures::{SinkExt, StreamExt};
use tokio::{net::TcpListener, sync::mpsc};
use tokio_tungstenite::tungstenite::Message;

/// A crew on 127.0.0.1:0 that answers the handshake with `agent.ready`, then sends each
/// message `messages` yields; every message it has finished sending is counted on `sent`.
async fn crew(messages: Vec<Vec<u8>>, sent: mpsc::UnboundedSender<usize>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let mut socket = tokio_tungstenite::accept_async(tcp).await.expect("upgrade");
        let _init = socket.next().await;
        let ready = protocol::encode(&Event::now(EventBody::AgentReady));
        socket
            .send(Message::Binary(ready.into()))
            .await
            .expect("ready");
        for (i, message) in messages.into_iter().enumerate() {
            if socket.send(Message::Binary(message.into())).await.is_err() {
                return;
            }
            let _ = sent.send(i + 1);
        }
        // Stays open: the client decides when the call ends.
        tokio::time::sleep(Duration::from_secs(3600)).await;
    });
    format!("ws://{addr}/ws")
}

fn config(url: String) -> PlatformConfig {
    let mut config = PlatformConfig::new(url);
    config.send_user_joined = false;
    config.timeouts = Timeouts {
        ready: Duration::from_secs(10),
        ..Timeouts::default()
    };
    config
}

/// An `agent.speak` frame of about `bytes` bytes.
fn speak(bytes: usize) -> Vec<u8> {
    protocol::encode(&Event::now(EventBody::Speak {
        text: "a".repeat(bytes),
    }))
}

#[tokio::test]
async fn a_message_over_the_limit_ends_the_connection_instead_of_being_held() {
    let (sent, _) = mpsc::unbounded_channel();
    // Sent before `agent.ready` would be, as the first thing after the handshake's answer.
    let url = crew(vec![speak(MAX_MESSAGE_BYTES + 1)], sent).await;
    let mut client = PlatformClient::connect(config(url))
        .await
        .expect("the handshake");

    // Not `expect_err`: a frame taken whole would print 16 MiB.
    let Err(error) = client.recv_idle(Duration::from_secs(10)).await else {
        panic!("an oversized message was taken whole");
    };

    match error {
        PlatformError::Closed { code: None, reason } => {
            assert!(reason.contains("Message too long"), "{reason}");
        }
        other => panic!("expected the connection closed for the size, got {other}"),
    }
}

#[tokio::test]
async fn frames_nobody_takes_hold_at_most_the_inbound_budget_and_none_is_lost() {
    // 200 frames of 1 MiB (three times the budget) sent while the caller takes none.
    let count = 200;
    let (sent, mut progress) = mpsc::unbounded_channel();
    let url = crew((0..count).map(|_| speak(1 << 20)).collect(), sent).await;
    let mut client = PlatformClient::connect(config(url))
        .await
        .expect("the handshake");

    // The crew gets as far as the budget (plus what the sockets' buffers take) and no
    // further while the caller is busy elsewhere.
    let mut furthest = 0;
    while let Ok(Some(n)) = tokio::time::timeout(Duration::from_secs(2), progress.recv()).await {
        furthest = n;
    }
    let budget_frames = INBOUND_BYTES >> 20;
    assert!(
        furthest < count,
        "the crew sent all {count} frames with nobody reading"
    );
    assert!(
        furthest >= budget_frames - 1,
        "the budget is used: only {furthest} frames got through"
    );

    // Once the caller takes them, every frame arrives, in order and whole.
    for _ in 0..count {
        let frame = client
            .recv_idle(Duration::from_secs(10))
            .await
            .expect("a frame")
            .expect("not idle");
        assert!(
            matches!(&frame.frame, CrewFrame::Speak { text } if text.len() == 1 << 20),
            "{:?}",
            frame.frame.wire_type()
        );
    }
}

fn event(body: EventBody) -> Vec<u8> {
    protocol::encode(&Event::now(body))
}

/// A chunk of about `bytes` bytes.
fn chunk(bytes: usize) -> Vec<u8> {
    event(EventBody::ResponseChunk {
        text: "a".repeat(bytes),
    })
}

#[tokio::test]
async fn a_crew_that_streams_without_end_fails_the_turn_at_its_byte_cap() {
    // A start, then 8 MiB more than a turn may gather, in 1 MiB chunks, and never an end.
    let mut messages = vec![event(EventBody::ResponseStart { request_id: None })];
    messages.extend((0..(MAX_TURN_BYTES >> 20) + 8).map(|_| chunk(1 << 20)));
    let (sent, _) = mpsc::unbounded_channel();
    let url = crew(messages, sent).await;
    let mut config = config(url);
    // Without the cap the turn would wait for its end until this, holding every chunk.
    config.timeouts.frame = Duration::from_secs(30);
    let mut client = PlatformClient::connect(config)
        .await
        .expect("the handshake");

    let Err(error) = client.user_turn("hello").expect("sent").finish().await else {
        panic!("an endless turn was taken whole");
    };

    assert!(
        matches!(error, PlatformError::TurnTooLarge { limit } if limit == MAX_TURN_BYTES),
        "expected the turn abandoned at its cap, got {error}"
    );
}

#[tokio::test]
async fn frames_between_turns_that_nobody_asks_for_are_kept_up_to_the_inbound_budget() {
    // A whole turn, then 80 agent.speak frames of 1 MiB while the caller listens for leaks
    // after its interrupt and then only takes turns (never `recv_idle`).
    let count = 80;
    let mut messages = vec![
        event(EventBody::ResponseStart { request_id: None }),
        chunk(8),
        event(EventBody::ResponseEnd),
    ];
    messages.extend((0..count).map(|_| speak(1 << 20)));
    let (sent, mut progress) = mpsc::unbounded_channel();
    let url = crew(messages, sent).await;
    let mut config = config(url);
    // The frames past the budget must arrive while the client listens for leaks after the
    // interrupt: 80 MiB through a debug build on a loaded 2-core machine took over 5 s.
    config.timeouts.leak_window = Duration::from_secs(20);
    let mut client = PlatformClient::connect(config)
        .await
        .expect("the handshake");

    let summary = client
        .user_turn("hello")
        .expect("sent")
        .interrupt()
        .await
        .expect("the turn");
    assert!(summary.ended);
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(2), progress.recv()).await {}

    let dropped = client.stats().dropped_out_of_turn;
    let mut kept = 0;
    let mut kept_bytes = 0;
    while let Some(frame) = client
        .recv_idle(Duration::from_millis(500))
        .await
        .expect("a frame")
    {
        kept += 1;
        kept_bytes += frame.bytes;
    }
    assert!(dropped > 0, "all {count} frames were kept between turns");
    assert_eq!(kept + dropped, count, "every frame is kept or counted");
    assert!(
        kept_bytes <= INBOUND_BYTES + MAX_MESSAGE_BYTES,
        "{kept_bytes} bytes kept between turns"
    );
}
