//! Deferred approvals shared through Redis: two replicas (two `RedisApproval`s on one server),
//! a `confirm` tool run by an executor on replica A, an operator deciding on replica B.

use crate::common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use common::RedisServer;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_redis::{RedisApproval, RedisConfig, RedisStore};
use crewline_remote::StoreLimits;
use crewline_tools::{
    CallContext, ExecuteOptions, Executor, Tool, ToolError, ToolPolicy, ToolRegistry,
    executor::approval::{ApprovalDecision, ApprovalError, ApprovalRequest},
};
use serde_json::{Value, json};

/// A refund that needs an operator's confirmation; counts the refunds it made.
struct Refund(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Refund {
    fn name(&self) -> &str {
        "refund"
    }
    fn description(&self) -> &str {
        "Refunds the caller."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"cents": {"type": "integer"}},
            "required": ["cents"]
        })
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().confirm(true)
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"refunded": arguments["cents"]}))
    }
}

/// Two replicas' approvers on one server and prefix (with the same settings); A's shares its
/// connection with a task store, as a crew server with both would.
async fn replicas(
    server: &RedisServer,
    prefix: &str,
    settings: impl Fn(RedisApproval) -> RedisApproval,
) -> (RedisApproval, RedisApproval) {
    let open = || async {
        RedisConfig::new(server.url())
            .prefix(prefix)
            .open()
            .await
            .expect("connected to the test's redis-server")
    };
    let store = RedisStore::with_connection(open().await, StoreLimits::default());
    let a = settings(RedisApproval::new(store.connection().clone()));
    (a, settings(RedisApproval::new(open().await)))
}

/// The crew on replica A: the refund tool behind `approvals`, and how many refunds it made.
fn crew(approvals: &RedisApproval) -> (ToolRegistry, Arc<AtomicUsize>) {
    let refunds = Arc::new(AtomicUsize::new(0));
    let executor = Executor::builder()
        .approval(Arc::new(approvals.clone()))
        .build();
    let mut tools = ToolRegistry::new().with_executor(executor);
    tools
        .register(Refund(Arc::clone(&refunds)))
        .expect("register");
    (tools, refunds)
}

fn refund(id: &str, cents: i64) -> ToolCall {
    ToolCall::new(id, "refund", json!({"cents": cents}).to_string())
}

/// `call`'s result in the session `context`.
async fn run(tools: &ToolRegistry, call: ToolCall, context: &CallContext) -> ToolResult {
    let runs = tools
        .execute(&[call], ExecuteOptions::new().in_run(context.clone()))
        .await;
    runs.into_iter().next().expect("one run").result
}

/// `step`'s result, failing the test when it takes longer than `limit`.
async fn within<T>(limit: Duration, what: &str, step: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, step)
        .await
        .unwrap_or_else(|_| panic!("{what} took more than {limit:?}"))
}

/// The first call parked, as replica `b` lists it once it is there.
async fn parked_on(b: &RedisApproval) -> ApprovalRequest {
    loop {
        let pending = b.pending().await.expect("the parked calls");
        if let Some(first) = pending.into_iter().next() {
            return first;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `call` on A while an operator on B decides `decision` on it; the call's result and
/// the request B saw.
async fn decided_on_b(
    tools: &ToolRegistry,
    b: &RedisApproval,
    call: ToolCall,
    context: &CallContext,
    decision: ApprovalDecision,
) -> (ToolResult, ApprovalRequest) {
    let operator = async {
        let parked = parked_on(b).await;
        b.decide(&parked.id, decision).await.expect("decided on B");
        parked
    };
    // The wait is far longer than the test allows: the call can only finish in time by being
    // woken with B's decision.
    within(
        Duration::from_secs(20),
        "a call decided on the other replica",
        async { tokio::join!(run(tools, call, context), operator) },
    )
    .await
}

fn error_message(result: &ToolResult) -> String {
    let content: Value = serde_json::from_str(&result.content()).expect("error JSON");
    content["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_call_on_one_replica_runs_with_the_decision_given_on_the_other() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let long_wait = |approvals: RedisApproval| approvals.wait_timeout(Duration::from_secs(120));
    let (a, b) = replicas(&server, "wake:", long_wait).await;
    let (tools, refunds) = crew(&a);
    let session = tools.context();

    let (approved, parked) = decided_on_b(
        &tools,
        &b,
        refund("call_1", 1200),
        &session,
        ApprovalDecision::Approve,
    )
    .await;
    assert_eq!(approved.content(), r#"{"refunded":1200}"#);
    assert_eq!(
        (
            parked.tool.as_str(),
            &parked.arguments,
            parked.call_id.as_str()
        ),
        ("refund", &json!({"cents": 1200}), "call_1"),
        "B lists the call as A parked it"
    );
    assert_eq!(parked.scope, *session.scope(), "with the caller's session");

    let (denied, _) = decided_on_b(
        &tools,
        &b,
        refund("call_2", 90_000),
        &session,
        ApprovalDecision::Deny {
            reason: "refunds over 500 euros need a manager".to_owned(),
        },
    )
    .await;
    assert_eq!(denied.error_kind(), Some(ToolErrorKind::ApprovalDenied));
    assert!(
        error_message(&denied).contains("refunds over 500 euros need a manager"),
        "{}",
        denied.content()
    );

    let (edited, _) = decided_on_b(
        &tools,
        &b,
        refund("call_3", 90_000),
        &session,
        ApprovalDecision::ApproveWithEdits {
            arguments: json!({"cents": 50_000}),
        },
    )
    .await;
    assert_eq!(edited.content(), r#"{"refunded":50000}"#);

    let (invalid, _) = decided_on_b(
        &tools,
        &b,
        refund("call_4", 90_000),
        &session,
        ApprovalDecision::ApproveWithEdits {
            arguments: json!({"cents": "all of it"}),
        },
    )
    .await;
    assert_eq!(invalid.error_kind(), Some(ToolErrorKind::ToolArgsInvalid));

    assert_eq!(refunds.load(Ordering::SeqCst), 2, "approved and edited ran");
    assert!(b.pending().await.expect("pending").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_given_on_the_other_replica_while_nobody_waits_is_collected_by_the_retry() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = replicas(&server, "retry:", |approvals| approvals.wait(false)).await;
    let (tools, refunds) = crew(&a);
    let session = tools.context();

    let first = run(&tools, refund("call_0", 1200), &session).await;
    assert_eq!(first.error_kind(), Some(ToolErrorKind::ApprovalPending));
    // The model asks again before anyone decided: still one parked call, under the same id.
    let again = run(&tools, refund("call_0", 1200), &session).await;
    assert_eq!(again.error_kind(), Some(ToolErrorKind::ApprovalPending));
    let pending = b.pending().await.expect("pending on B");
    assert_eq!(pending.len(), 1, "{pending:?}");
    let parked = &pending[0];
    b.decide(&parked.id, ApprovalDecision::Approve)
        .await
        .expect("decided on B");
    assert!(b.pending().await.expect("pending").is_empty());
    assert_eq!(
        refunds.load(Ordering::SeqCst),
        0,
        "nothing ran before the retry"
    );

    // Another call (other arguments, or another session) is not approved by it.
    let other = run(&tools, refund("call_0", 99_999), &session).await;
    assert_eq!(other.error_kind(), Some(ToolErrorKind::ApprovalPending));
    let stranger = run(&tools, refund("call_0", 1200), &tools.context()).await;
    assert_eq!(stranger.error_kind(), Some(ToolErrorKind::ApprovalPending));
    assert_eq!(refunds.load(Ordering::SeqCst), 0);

    // The same call's retry (whatever its call id) runs, once.
    let retry = run(&tools, refund("call_7", 1200), &session).await;
    assert_eq!(retry.content(), r#"{"refunded":1200}"#);
    let once_more = run(&tools, refund("call_8", 1200), &session).await;
    assert_eq!(
        once_more.error_kind(),
        Some(ToolErrorKind::ApprovalPending),
        "a decision is used once"
    );
    assert_eq!(refunds.load(Ordering::SeqCst), 1);
    assert_eq!(
        b.decide(&parked.id, ApprovalDecision::Approve).await,
        Err(ApprovalError::UnknownCall(parked.id.clone())),
        "an id already decided"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_for_a_caller_cut_off_mid_wait_is_kept_for_its_retry() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let long_wait = |approvals: RedisApproval| approvals.wait_timeout(Duration::from_secs(120));
    let (a, b) = replicas(&server, "barge:", long_wait).await;
    let (tools, refunds) = crew(&a);
    let tools = Arc::new(tools);
    let session = tools.context();

    // The caller barges in while the call waits: the turn, and its wait, are dropped.
    let waiting = tokio::spawn({
        let (tools, session) = (Arc::clone(&tools), session.clone());
        async move { run(&tools, refund("call_1", 1200), &session).await }
    });
    let parked = within(Duration::from_secs(10), "the call parked", parked_on(&b)).await;
    waiting.abort();
    assert!(waiting.await.is_err_and(|error| error.is_cancelled()));
    b.decide(&parked.id, ApprovalDecision::Approve)
        .await
        .expect("decided on B");
    assert_eq!(refunds.load(Ordering::SeqCst), 0);

    // The next turn asks again without waiting. The dropped wait lets go of the call in the
    // background, so an ask that comes before that finds it still held and parks the call
    // again; the decision is collected by the next ask.
    let retry = within(Duration::from_secs(10), "the retry collecting it", async {
        loop {
            let result = run(
                &tools,
                refund("call_2", 1200),
                &session.clone().without_waiting(),
            )
            .await;
            if result.error_kind() != Some(ToolErrorKind::ApprovalPending) {
                return result;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(retry.content(), r#"{"refunded":1200}"#);
    assert_eq!(refunds.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deciding_an_unknown_call_is_unknown_call() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (_, b) = replicas(&server, "unknown:", |approvals| approvals).await;
    assert_eq!(
        b.decide("apr_nobody", ApprovalDecision::Approve).await,
        Err(ApprovalError::UnknownCall("apr_nobody".to_owned()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_parked_counts_every_replica_and_a_decision_makes_room() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let settings = |approvals: RedisApproval| approvals.wait(false).max_parked(1);
    let (a, b) = replicas(&server, "full:", settings).await;
    let ((on_a, _), (on_b, _)) = (crew(&a), crew(&b));

    let parked = run(&on_a, refund("c", 1), &on_a.context()).await;
    assert_eq!(parked.error_kind(), Some(ToolErrorKind::ApprovalPending));
    let refused = run(&on_b, refund("c", 2), &on_b.context()).await;
    assert_eq!(refused.error_kind(), Some(ToolErrorKind::ApprovalDenied));
    assert!(
        error_message(&refused).contains("too many calls are waiting for approval"),
        "{}",
        refused.content()
    );

    let first = parked_on(&b).await;
    b.decide(&first.id, ApprovalDecision::Approve)
        .await
        .expect("decided");
    let room = run(&on_b, refund("c", 2), &on_b.context()).await;
    assert_eq!(room.error_kind(), Some(ToolErrorKind::ApprovalPending));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_calls_and_uncollected_decisions_expire_with_every_key() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let ttl = Duration::from_millis(1000);
    let settings = |approvals: RedisApproval| approvals.wait(false).ttl(ttl);
    let (a, b) = replicas(&server, "ttl:", settings).await;
    let (tools, refunds) = crew(&a);
    let session = tools.context();

    // One call left parked, one decided and never collected.
    let forgotten = run(&tools, refund("c1", 1), &session).await;
    assert_eq!(forgotten.error_kind(), Some(ToolErrorKind::ApprovalPending));
    let decided = run(&tools, refund("c2", 2), &session).await;
    assert_eq!(decided.error_kind(), Some(ToolErrorKind::ApprovalPending));
    let pending = b.pending().await.expect("pending");
    assert_eq!(pending.len(), 2);
    let (forgotten, decided) = match pending[0].arguments == json!({"cents": 1}) {
        true => (&pending[0], &pending[1]),
        false => (&pending[1], &pending[0]),
    };
    b.decide(&decided.id, ApprovalDecision::Approve)
        .await
        .expect("decided");

    let keys = server.keys_with_ttl("ttl:*").await;
    assert!(keys.len() >= 3, "the calls and their indexes: {keys:?}");
    for (key, left) in &keys {
        assert!((1..=1000).contains(left), "{key} expires, not {left} ms");
    }

    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    assert!(b.pending().await.expect("pending").is_empty());
    assert_eq!(
        b.decide(&forgotten.id, ApprovalDecision::Approve).await,
        Err(ApprovalError::UnknownCall(forgotten.id.clone())),
        "an expired call"
    );
    let late = run(&tools, refund("c3", 2), &session).await;
    assert_eq!(
        late.error_kind(),
        Some(ToolErrorKind::ApprovalPending),
        "an expired decision approves nothing"
    );
    assert_eq!(refunds.load(Ordering::SeqCst), 0);

    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    let left = server.keys_with_ttl("ttl:*").await;
    assert!(left.is_empty(), "{left:?} outlived the calls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_no_confirm_call_runs_and_approvals_work_again_once_it_is_back() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let long_wait = |approvals: RedisApproval| approvals.wait_timeout(Duration::from_secs(120));
    let (a, b) = replicas(&server, "outage:", long_wait).await;
    let (tools, refunds) = crew(&a);
    let session = tools.context();

    server.stop();
    let refused = within(
        Duration::from_secs(15),
        "a confirm call while Redis is down",
        run(&tools, refund("c1", 1200), &session),
    )
    .await;
    assert_eq!(refused.error_kind(), Some(ToolErrorKind::ApprovalDenied));
    assert!(
        error_message(&refused).contains("approvals are unavailable right now"),
        "{}",
        refused.content()
    );
    let listing = within(Duration::from_secs(15), "a listing", b.pending()).await;
    let Err(ApprovalError::Unavailable(message)) = listing else {
        panic!("not unavailable: {listing:?}");
    };
    let expected = format!(
        "the approval store (Redis at {}) is unreachable: ",
        server.url()
    );
    assert!(message.starts_with(&expected), "{message}");
    // The error says its own layer; the store's words and the Redis error are its causes.
    let unavailable = ApprovalError::Unavailable(message.clone());
    assert_eq!(unavailable.to_string(), "approvals are unavailable");
    let redis = std::error::Error::source(&message)
        .and_then(std::error::Error::source)
        .and_then(|cause| cause.downcast_ref::<redis::RedisError>());
    assert!(redis.is_some(), "{message:?}");
    let deciding = within(
        Duration::from_secs(15),
        "a decision",
        b.decide("apr_x", ApprovalDecision::Approve),
    )
    .await;
    assert!(
        matches!(deciding, Err(ApprovalError::Unavailable(_))),
        "{deciding:?}"
    );
    assert_eq!(refunds.load(Ordering::SeqCst), 0);

    assert!(server.restart(), "redis-server is back on the same port");
    let (approved, _) = decided_on_b(
        &tools,
        &b,
        refund("c2", 1200),
        &session,
        ApprovalDecision::Approve,
    )
    .await;
    assert_eq!(approved.content(), r#"{"refunded":1200}"#);
    assert_eq!(refunds.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_too_large_to_park_is_denied_without_reaching_redis_and_others_still_park() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let settings = |approvals: RedisApproval| approvals.wait(false);
    let (a, b) = replicas(&server, "large:", settings).await;
    let (tools, refunds) = crew(&a);
    let session = tools.context();

    // A refund whose arguments carry 1 MiB (what a prompt-injected model can ask for).
    let note = "x".repeat(1 << 20);
    let huge = ToolCall::new(
        "c1",
        "refund",
        json!({"cents": 1, "note": note}).to_string(),
    );
    let refused = run(&tools, huge, &session).await;

    assert_eq!(refused.error_kind(), Some(ToolErrorKind::ApprovalDenied));
    assert!(
        error_message(&refused).contains("too large to be held for approval"),
        "{}",
        error_message(&refused)
    );
    assert!(
        b.pending().await.expect("pending").is_empty(),
        "nothing was parked"
    );
    // The call goes on: a refund of ordinary size is parked as before, and none ran.
    let parked = run(&tools, refund("c2", 2), &session).await;
    assert_eq!(parked.error_kind(), Some(ToolErrorKind::ApprovalPending));
    assert_eq!(b.pending().await.expect("pending").len(), 1);
    assert_eq!(refunds.load(Ordering::SeqCst), 0);
}
