//! Deferred approvals of one platform call (`SessionScope::for_call`) across a reconnect to
//! another replica: a decision given before the reconnect is collected by the same call, even
//! when the replica it was parked on died mid-wait; it never applies to another call, tool or
//! arguments.

use crate::common;

use std::time::Duration;

use common::RedisServer;
use crewline_redis::{RedisApproval, RedisConfig};
use crewline_tools::{
    SessionScope,
    executor::approval::{ApprovalDecision, ApprovalOutcome, ApprovalPort, ApprovalRequest},
};
use serde_json::json;

/// An approver on its own connection: a replica.
async fn replica(server: &RedisServer) -> RedisApproval {
    let connection = RedisConfig::new(server.url())
        .prefix("calls:")
        .open()
        .await
        .expect("connected");
    RedisApproval::new(connection)
}

/// A request of the platform call `call` for `tool` with arguments hashed `hash`.
fn of_call(id: &str, call: &str, tool: &str, hash: &str) -> ApprovalRequest {
    ApprovalRequest {
        id: id.to_owned(),
        scope: SessionScope::for_call(call),
        call_id: "call_0".to_owned(),
        tool: tool.to_owned(),
        arguments: json!({"cents": 5000}),
        arguments_hash: hash.to_owned(),
        can_wait: true,
    }
}

/// Replica A parks `request` with a caller waiting, then dies mid-wait: the waiting future is
/// leaked, so nothing lets go of the call (as SIGKILL leaves it).
async fn parked_by_a_replica_that_dies(server: &RedisServer, request: &ApprovalRequest) {
    let a = replica(server).await.wait_timeout(Duration::from_secs(60));
    let mut waiting = Box::pin(async move { a.request(request).await });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut waiting)
            .await
            .is_err(),
        "the caller on A waits"
    );
    std::mem::forget(waiting);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_on_another_replica_collects_the_decision_and_no_other_call_does() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = replica(&server).await.wait(false);
    let operator = replica(&server).await;
    assert_eq!(
        a.request(&of_call("a1", "call-1", "transfer", "h")).await,
        ApprovalOutcome::Pending
    );
    operator
        .decide("a1", ApprovalDecision::Approve)
        .await
        .expect("decided");
    // The call reconnects to replica C: a new approver on a new connection.
    let c = replica(&server).await.wait(false);
    for (id, call, tool, hash) in [
        ("b1", "call-2", "transfer", "h"),
        ("b2", "call-1", "refund", "h"),
        ("b3", "call-1", "transfer", "other-arguments"),
    ] {
        assert_eq!(
            c.request(&of_call(id, call, tool, hash)).await,
            ApprovalOutcome::Pending,
            "{id} is not approved by call-1's decision"
        );
    }
    assert_eq!(
        c.request(&of_call("a2", "call-1", "transfer", "h")).await,
        ApprovalOutcome::Decided(ApprovalDecision::Approve)
    );
    assert_eq!(
        c.request(&of_call("a3", "call-1", "transfer", "h")).await,
        ApprovalOutcome::Pending,
        "a decision is used once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_given_while_a_dead_replica_waited_is_collected_by_the_reconnected_call() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    parked_by_a_replica_that_dies(&server, &of_call("a1", "call-1", "transfer", "h")).await;
    let operator = replica(&server).await;
    operator
        .decide("a1", ApprovalDecision::Approve)
        .await
        .expect("decided");
    let c = replica(&server).await.wait(false);
    assert_eq!(
        c.request(&of_call("a2", "call-1", "transfer", "h")).await,
        ApprovalOutcome::Decided(ApprovalDecision::Approve),
        "collected at once, not after the dead caller's wait would have run out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnected_call_waits_on_the_question_its_dead_replica_asked() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    parked_by_a_replica_that_dies(&server, &of_call("a1", "call-1", "transfer", "h")).await;
    let c = replica(&server).await.wait_timeout(Duration::from_secs(10));
    let waiting = tokio::spawn({
        let c = c.clone();
        async move { c.request(&of_call("a2", "call-1", "transfer", "h")).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let operator = replica(&server).await;
    let pending = operator.pending().await.expect("pending");
    assert_eq!(
        pending.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["a1"],
        "one question for one call"
    );
    operator
        .decide("a1", ApprovalDecision::Approve)
        .await
        .expect("decided");
    let outcome = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken by the decision")
        .expect("the caller on C");
    assert_eq!(outcome, ApprovalOutcome::Decided(ApprovalDecision::Approve));
}
