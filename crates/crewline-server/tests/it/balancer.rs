//! Draining through a real load balancer: HAProxy health-checks `/ready` on two replicas; when
//! one starts draining, the balancer stops sending it calls at once (with a retry for a call
//! that lands in the instant before it notices), while the call it holds goes on to the end.
//!
//! Skipped with a note where `haproxy` is not installed, unless `CREWLINE_REQUIRE_HAPROXY=1`.

use crate::common;

use common::*;
use crewline_server::CrewServer;
use crewline_testkit::haproxy::Balancer;

/// The backend settings of `deploy/test/haproxy.cfg.in` that a drain depends on.
const BACKEND: &str = "  balance roundrobin
  option httpchk GET /ready
  http-check expect status 200
  retries 3
  option redispatch 1
  retry-on 503 conn-failure empty-response";

#[tokio::test]
async fn a_draining_replica_gets_no_new_calls_and_finishes_the_one_it_holds() {
    if !Balancer::available() {
        // Past the test harness's capture, so that every run shows what it skipped.
        {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: haproxy is not installed; the drain-through-a-balancer test is skipped"
            );
        }
        return;
    }
    let mut replicas = [
        TestServer::ready(CrewServer::new(echo_setup)).await,
        TestServer::ready(CrewServer::new(echo_setup)).await,
    ];
    let addrs = [replicas[0].addr, replicas[1].addr];
    let lb = Balancer::start(&addrs, BACKEND, "check inter 100ms fall 1 rise 1")
        .await
        .expect("haproxy starts");
    let url = format!("ws://{}/ws", lb.addr());
    let open = |url: String| async move {
        let mut client = Client::connect(&url).await;
        client.send(&init_frame("Ada")).await;
        assert_eq!(client.recv().await["type"], "agent.ready");
        client
    };

    // A live call through the balancer; find the replica that holds it.
    let mut live = open(url.clone()).await;
    let (_, text) = live.turn("hello").await;
    assert_eq!(text, expected_answer("Ada", "hello"));
    let holder = usize::from(replicas[1].handle.active_sessions() == 1);
    let other = 1 - holder;
    assert_eq!(replicas[holder].handle.active_sessions(), 1);

    // It starts draining: /ready is 503 at once.
    replicas[holder].signal_shutdown();
    eventually("the holder's /ready to turn 503", || async {
        http_get(addrs[holder], "/ready").await.status == 503
    })
    .await;

    // New calls, at once and for a while: every one is served, all by the other replica.
    let before = replicas[holder].handle.metrics().sessions_total();
    for _ in 0..10 {
        let mut call = open(url.clone()).await;
        let (_, text) = call.turn("hi").await;
        assert_eq!(text, expected_answer("Ada", "hi"));
        call.close().await;
    }
    assert_eq!(
        replicas[holder].handle.metrics().sessions_total(),
        before,
        "the draining replica took no new call"
    );
    assert!(replicas[other].handle.metrics().sessions_total() >= 10);

    // The call it holds goes on through the drain, then ends; the replica stops cleanly.
    let (_, text) = live.turn("still there?").await;
    assert_eq!(text, expected_answer("Ada", "still there?"));
    live.close().await;
    replicas[holder]
        .join()
        .await
        .expect("the drained replica stops cleanly");
}
