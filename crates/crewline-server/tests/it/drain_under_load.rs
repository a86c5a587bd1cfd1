//! Graceful drain under load: the shutdown signal (what SIGTERM sends) arrives while 1,000
//! calls are each in the middle of a turn. New calls are refused with 503, and every turn that
//! had started streams the rest of its answer and its `end`: no turn is lost.

use crate::common;

use std::{sync::Arc, time::Duration};

use common::*;
use crewline::{
    Crew, SessionSetup, TurnEvent,
    crew::{OutputAgent, OutputNode},
    session::TurnOutcome,
    turn::TurnStream,
    types::Context,
};
use crewline_server::{CrewServer, HandshakeFailure};
use futures::{StreamExt, stream};
use tokio::sync::{Semaphore, watch};

/// Live calls when the signal arrives (`CREWLINE_DRAIN_CALLS` overrides).
const CALLS: usize = 1000;
/// What every turn says before the gate, and after it.
const FIRST: &str = "first half, ";
const REST: [&str; 3] = ["second ", "half ", "done."];

/// An agent whose every turn says [`FIRST`], then waits for the gate, then says [`REST`].
struct GatedAgent {
    context: Context,
    gate: watch::Receiver<bool>,
}

impl OutputAgent for GatedAgent {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }

    fn generate_response(&mut self) -> TurnStream<'_> {
        let mut gate = self.gate.clone();
        let first = stream::iter([Ok(TurnEvent::Text(FIRST.to_owned()))]);
        let rest = stream::once(async move {
            // A closed gate (the test is over) releases the turn too.
            let _ = gate.wait_for(|open| *open).await;
            stream::iter(REST.map(|piece| Ok(TurnEvent::Text(piece.to_owned()))))
        })
        .flatten();
        Box::pin(first.chain(rest))
    }
}

fn calls() -> usize {
    std::env::var("CREWLINE_DRAIN_CALLS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(CALLS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_1000_calls_mid_turn_loses_no_turn_and_refuses_new_calls() {
    let calls = calls();
    let (open_gate, gate) = watch::channel(false);
    let mut server = TestServer::ready(
        CrewServer::new(move |_setup: SessionSetup| {
            let mut crew = Crew::new();
            crew.add_node(OutputNode::new(
                "agent",
                GatedAgent {
                    context: Context::with_system("You answer in two halves."),
                    gate: gate.clone(),
                },
            ));
            async move { Ok::<_, std::convert::Infallible>(crew) }
        })
        .drain_timeout(Duration::from_secs(120)),
    )
    .await;

    // Open every call and start its turn; keep at most 100 handshakes in flight.
    let url = server.ws_url();
    let connecting = Arc::new(Semaphore::new(100));
    let opened: Vec<_> = (0..calls)
        .map(|i| {
            let url = url.clone();
            let connecting = Arc::clone(&connecting);
            tokio::spawn(async move {
                let permit = connecting.acquire_owned().await.expect("semaphore");
                let mut client = Client::connect(&url).await;
                client.send(&init_frame(&format!("caller-{i}"))).await;
                assert_eq!(client.recv().await["type"], "agent.ready");
                drop(permit);
                client.send(&llm_request(&format!("question {i}"))).await;
                let started = client.recv_until("agent.llm.response.chunk").await;
                assert_eq!(
                    types(&started),
                    ["agent.llm.response.start", "agent.llm.response.chunk"]
                );
                assert_eq!(started[1]["text"], FIRST);
                client
            })
        })
        .collect();
    let mut clients = Vec::with_capacity(calls);
    for call in opened {
        clients.push(call.await.expect("a call failed to start its turn"));
    }
    assert_eq!(server.handle.active_sessions(), calls);

    // SIGTERM: the same signal `run` listens for.
    server.signal_shutdown();
    let addr = server.addr;
    eventually("the drain to begin", || async move {
        http_get(addr, "/ready").await.status == 503
    })
    .await;
    for _ in 0..3 {
        let refused = refusal(&server.ws_url()).await;
        assert!(refused_with(&refused, 503), "{refused:?}");
    }

    // Let every turn finish: each gets the rest of its answer and its end.
    open_gate.send_replace(true);
    let finishing: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            tokio::spawn(async move {
                let rest = client.recv_until("agent.llm.response.end").await;
                let mut expected = vec!["agent.llm.response.chunk"; REST.len()];
                expected.push("agent.llm.response.end");
                assert_eq!(types(&rest), expected);
                assert_eq!(spoken(&rest), REST.concat());
                client.close().await;
            })
        })
        .collect();
    let mut finished = 0;
    for call in finishing {
        call.await.expect("a started turn was lost");
        finished += 1;
    }
    assert_eq!(finished, calls);

    // The drain ends as the last call hangs up, well before its timeout.
    server.join().await.expect("a clean shutdown");
    let metrics = server.handle.metrics();
    assert_eq!(server.handle.active_sessions(), 0);
    assert_eq!(metrics.sessions_total(), calls as u64);
    assert_eq!(metrics.turns(TurnOutcome::Completed), calls as u64);
    assert_eq!(metrics.turns(TurnOutcome::Failed), 0);
    assert_eq!(metrics.turns(TurnOutcome::Interrupted), 0);
    assert_eq!(metrics.handshake_failures(HandshakeFailure::Draining), 3);
}
