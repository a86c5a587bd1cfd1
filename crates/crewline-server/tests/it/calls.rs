//! Calls end to end: turns, bad frames, text frames, the live-call count, disconnects,
//! graceful drain, and many concurrent calls.

use crate::common;

use std::time::Duration;

use common::*;
use crewline::SessionSetup;
use crewline_server::{CrewServer, FrameDrop};
use crewline_testkit::platform::raw::RawFrame;
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../../tests/fixtures/reference/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("fixture JSON")
}

/// Setup code whose model pauses `delay` before each word.
fn slow_setup(
    delay: Duration,
) -> impl Fn(SessionSetup) -> std::future::Ready<Result<crewline::Crew, std::convert::Infallible>>
+ Send
+ Sync
+ 'static {
    move |setup| std::future::ready(Ok(echo_crew(&setup, delay)))
}

#[tokio::test]
async fn a_text_turn_streams_in_the_reference_order() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let mut client = Client::connect(&server.ws_url()).await;
    client.send(&init_frame("Ada")).await;
    client
        .send(&json!({"type": "system.user.joined", "timestamp": "2030-01-02T03:04:01.001111"}))
        .await;
    let opening = client.recv_until("system.user.joined").await;
    assert_eq!(types(&opening), ["agent.ready", "system.user.joined"]);
    assert_eq!(opening[1]["timestamp"], "2030-01-02T03:04:01.001111");

    let (frames, text) = client.turn("Hi there").await;
    let kinds = types(&frames);
    assert_eq!(kinds[0], "agent.transcript.update", "{kinds:?}");
    assert_eq!(kinds[1], "agent.llm.response.start", "{kinds:?}");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("agent.llm.response.end")
    );
    let chunks = &kinds[2..kinds.len() - 1];
    assert!(chunks.len() > 1, "{kinds:?}");
    assert!(
        chunks.iter().all(|k| k == "agent.llm.response.chunk"),
        "{kinds:?}"
    );
    assert_eq!(text, expected_answer("Ada", "Hi there"));
    // The echo of the request follows its end, as in the reference.
    assert_eq!(client.recv().await["type"], "system.llm.request");

    // The keys go out in the reference's order.
    let raw = {
        client.send(&llm_request("again")).await;
        loop {
            let RawFrame::Binary(bytes) = client.next_frame().await else {
                continue;
            };
            let text = String::from_utf8(bytes).expect("utf-8");
            if text.contains("agent.llm.response.chunk") {
                break text;
            }
        }
    };
    let position = |key: &str| raw.find(&format!("\"{key}\"")).expect(key);
    assert!(raw.starts_with(r#"{"type""#), "{raw}");
    assert!(position("type") < position("timestamp"), "{raw}");
    assert!(position("timestamp") < position("text"), "{raw}");
    client.close().await;
}

#[tokio::test]
async fn bad_frames_of_every_kind_are_dropped_and_the_call_goes_on() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let mut client = server.call("Ada").await;
    // Each is logged, counted by kind and dropped; none gets an answer.
    client.send_text("this is not json {").await;
    client.send_bytes(vec![0xff, 0xfe, 0x00]).await;
    client.send(&json!([1, 2, 3])).await;
    client.send(&json!({"foo": "bar"})).await;
    client.send(&json!({"type": "system.foo", "bar": 1})).await;
    client
        .send(&json!({"type": "system.llm.request", "messages": 5}))
        .await;
    client
        .send_text(&format!("{}{}", "[".repeat(500), "]".repeat(500)))
        .await;
    // Unknown extra fields are fine.
    client
        .send(&json!({"type": "system.user.stopped_speaking", "pause_ms": 250, "x": {"y": 1}}))
        .await;
    assert_eq!(client.recv().await["type"], "system.user.stopped_speaking");

    let (_, text) = client.turn("Hi there").await;
    assert_eq!(text, expected_answer("Ada", "Hi there"));
    let metrics = server.handle.metrics();
    for (reason, count) in [
        (FrameDrop::NotJson, 1),
        (FrameDrop::NotUtf8, 1),
        (FrameDrop::NotAnObject, 1),
        (FrameDrop::MissingType, 1),
        (FrameDrop::UnknownType, 1),
        (FrameDrop::InvalidFields, 1),
        (FrameDrop::TooDeep, 1),
        (FrameDrop::TooBig, 0),
    ] {
        assert_eq!(metrics.dropped_frames(reason), count, "{reason:?}");
    }
    client.close().await;
}

#[tokio::test]
async fn the_reference_bad_frames_script_is_answered_to_the_end() {
    // The reference ends the session at the first (text) frame; crewline answers the turn.
    let recorded = fixture("bad_frames");
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let mut client = Client::connect(&server.ws_url()).await;
    for step in recorded["inbound"].as_array().expect("steps") {
        match step["op"].as_str() {
            Some("send") if step["as"] == "text" => {
                client.send_text(&step["frame"].to_string()).await;
            }
            Some("send") => client.send(&step["frame"]).await,
            Some("send_raw") => {
                client
                    .send_bytes(step["data"].as_str().expect("data").as_bytes().to_vec())
                    .await;
            }
            _ => {}
        }
    }
    let frames = client.recv_until("agent.llm.response.end").await;
    assert_eq!(frames[0]["type"], "agent.ready");
    assert_eq!(spoken(&frames), expected_answer("Ada", "Hi there"));
    client.close().await;
}

#[tokio::test]
async fn text_frames_are_accepted_and_answered_in_binary() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let mut client = Client::connect(&server.ws_url()).await;
    client.send_text(&init_frame("Bo").to_string()).await;
    assert_eq!(client.recv().await["type"], "agent.ready");
    client
        .send_text(
            &json!({"type": "agent.transcript.update", "role": "user", "content": "yo"})
                .to_string(),
        )
        .await;
    client.send_text(&llm_request("yo").to_string()).await;
    // `recv` asserts every frame is binary.
    let frames = client.recv_until("agent.llm.response.end").await;
    assert_eq!(spoken(&frames), expected_answer("Bo", "yo"));
    // Pings are answered.
    client
        .socket
        .send_ping(b"are you there".to_vec())
        .await
        .expect("ping");
    let pong = loop {
        if let RawFrame::Pong(data) = client.next_frame().await {
            break data;
        }
    };
    assert_eq!(&pong[..], b"are you there");
    client.close().await;
}

#[tokio::test]
async fn active_sessions_counts_live_calls() {
    let server = TestServer::ready(CrewServer::new(echo_setup)).await;
    let first = server.call("Ada").await;
    let second = server.call("Bo").await;
    assert_eq!(
        server.get("/health").await.body,
        r#"{"status":"ok","active_sessions":2}"#
    );
    assert_eq!(
        server.get("/").await.body,
        r#"{"status":"running","ready":true,"active_sessions":2}"#
    );
    assert_eq!(
        server.get("/ready").await.body,
        r#"{"status":"ready","active_sessions":2}"#
    );
    first.close().await;
    server.wait_for_active(1).await;
    // A dropped TCP connection (no close frame) ends the call too.
    drop(second);
    server.wait_for_active(0).await;
    assert_eq!(
        server.get("/health").await.body,
        r#"{"status":"ok","active_sessions":0}"#
    );
    assert_eq!(server.handle.metrics().sessions_total(), 2);
}

#[tokio::test]
async fn a_disconnect_mid_generation_stops_the_session_at_once() {
    // A model this slow would take over a minute to finish its answer.
    let server = TestServer::ready(CrewServer::new(slow_setup(Duration::from_secs(10)))).await;
    let mut client = server.call("Ada").await;
    client.send(&llm_request("tell me a long story")).await;
    let start = client.recv().await;
    assert_eq!(start["type"], "agent.llm.response.start");
    drop(client);
    // The call ends without waiting for the model.
    server.wait_for_active(0).await;
    // And the next call works normally.
    let mut client = server.call("Bo").await;
    client.send(&llm_request("hi")).await;
    let frames = client.recv_until("agent.llm.response.start").await;
    assert_eq!(types(&frames), ["agent.llm.response.start"]);
    client.close().await;
}

#[tokio::test]
async fn disconnects_at_every_point_of_a_turn_leave_no_task_behind() {
    let server = TestServer::ready(CrewServer::new(slow_setup(Duration::from_millis(50)))).await;
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let baseline = alive();

    // Hang up before init, after init, mid-stream, and after a finished turn.
    let before_init = Client::connect(&server.ws_url()).await;
    drop(before_init);
    let after_init = server.call("Ada").await;
    drop(after_init);
    let mut mid_stream = server.call("Bo").await;
    mid_stream.send(&llm_request("a long story please")).await;
    mid_stream.recv_until("agent.llm.response.chunk").await;
    drop(mid_stream);
    let mut after_turn = server.call("Cy").await;
    after_turn.turn("hi").await;
    drop(after_turn);

    server.wait_for_active(0).await;
    eventually(&format!("alive tasks back to {baseline}"), || async {
        alive() <= baseline
    })
    .await;
}

#[tokio::test]
async fn drain_lets_a_live_turn_finish_refuses_new_calls_then_closes_with_1001() {
    let mut server = TestServer::ready(
        CrewServer::new(slow_setup(Duration::from_millis(100)))
            .drain_timeout(Duration::from_secs(3)),
    )
    .await;
    let mut client = server.call("Ada").await;
    client.send(&llm_request("one two three")).await;
    assert_eq!(client.recv().await["type"], "agent.llm.response.start");

    server.signal_shutdown();
    let addr = server.addr;
    eventually("/ready to report draining", || async move {
        let response = http_get(addr, "/ready").await;
        response.status == 503 && response.body.contains("draining")
    })
    .await;
    assert!(server.handle.is_draining());
    assert_eq!(
        server.get("/health").await.body,
        r#"{"status":"ok","active_sessions":1}"#
    );
    let error = refusal(&server.ws_url()).await;
    assert!(refused_with(&error, 503), "{error:?}");

    // The live call finishes its turn.
    let frames = client.recv_until("agent.llm.response.end").await;
    assert_eq!(spoken(&frames), expected_answer("Ada", "one two three"));
    // At the deadline it is closed cleanly.
    let (_, close) = client.recv_until_close().await;
    let close = close.expect("a close frame");
    assert_eq!(close.code, 1001);
    assert_eq!(close.reason.as_str(), "server shutting down");
    server.join().await.expect("clean shutdown");
    assert_eq!(server.handle.active_sessions(), 0);
}

#[tokio::test]
async fn drain_ends_as_soon_as_the_last_call_does() {
    let mut server =
        TestServer::ready(CrewServer::new(echo_setup).drain_timeout(Duration::from_secs(600)))
            .await;
    let client = server.call("Ada").await;
    server.signal_shutdown();
    let addr = server.addr;
    eventually("draining", || async move {
        http_get(addr, "/ready").await.status == 503
    })
    .await;
    client.close().await;
    server.join().await.expect("clean shutdown");
}

/// Opens `calls` calls at once (`caller-0`, `caller-1`, ...), each checking its own answers
/// to `turns` turns; returns them still connected, in order.
async fn concurrent_calls(server: &TestServer, calls: usize, turns: usize) -> Vec<Client> {
    let tasks: Vec<_> = (0..calls)
        .map(|i| {
            let url = server.ws_url();
            tokio::spawn(async move {
                let name = format!("caller-{i}");
                let mut client = Client::connect(&url).await;
                client.send(&init_frame(&name)).await;
                assert_eq!(client.recv().await["type"], "agent.ready");
                for turn in 0..turns {
                    let words = format!("message {i}.{turn}");
                    let (frames, text) = client.turn(&words).await;
                    assert_eq!(text, expected_answer(&name, &words), "{frames:?}");
                    // The echo of the request ends each turn's stream.
                    assert_eq!(client.recv().await["type"], "system.llm.request");
                }
                client
            })
        })
        .collect();
    let mut clients = Vec::new();
    for task in tasks {
        clients.push(task.await.expect("call task"));
    }
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_calls_each_get_their_own_answers() {
    let server = TestServer::ready(CrewServer::new(slow_setup(Duration::from_millis(5)))).await;
    let clients = concurrent_calls(&server, 50, 3).await;
    assert_eq!(server.handle.active_sessions(), 50);
    for client in clients {
        client.close().await;
    }
    server.wait_for_active(0).await;
    assert_eq!(server.handle.metrics().sessions_total(), 50);
    assert_eq!(
        server
            .handle
            .metrics()
            .turns(crewline::session::TurnOutcome::Completed),
        150
    );
}

#[tokio::test]
async fn worker_runtimes_answer_calls_on_their_own_threads_and_drain() {
    let threads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = threads.clone();
    let setup = move |setup: SessionSetup| {
        let name = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_owned();
        seen.lock().expect("lock").push(name);
        std::future::ready(Ok::<_, std::convert::Infallible>(echo_crew(
            &setup,
            Duration::from_millis(20),
        )))
    };
    let mut server = TestServer::ready(
        CrewServer::new(setup)
            .worker_runtimes(2)
            .drain_timeout(Duration::from_secs(3)),
    )
    .await;

    let mut clients = concurrent_calls(&server, 8, 1).await;
    assert_eq!(server.handle.active_sessions(), 8);
    {
        let threads = threads.lock().expect("lock");
        // The dry run's setup runs on the caller's runtime; every call's on a worker.
        assert_eq!(threads.len(), 9, "{threads:?}");
        let on_workers = threads
            .iter()
            .filter(|name| name.starts_with("crewline-worker-"))
            .count();
        assert_eq!(on_workers, 8, "{threads:?}");
    }

    // A drain still lets a live turn finish, then closes the call with 1001.
    let mut live = clients.pop().expect("a client");
    for client in clients {
        client.close().await;
    }
    live.send(&llm_request("one two three")).await;
    assert_eq!(live.recv().await["type"], "agent.llm.response.start");
    server.signal_shutdown();
    let frames = live.recv_until("agent.llm.response.end").await;
    assert_eq!(
        spoken(&frames),
        expected_answer("caller-7", "one two three")
    );
    let (_, close) = live.recv_until_close().await;
    assert_eq!(close.expect("a close frame").code, 1001);
    server.join().await.expect("clean shutdown");
    assert_eq!(server.handle.active_sessions(), 0);
}
