//! What the executor keeps between calls is kept per session: cached results, approvals, and
//! non-cancellable calls still running. One caller's data is never shown to another, a
//! decision never approves other arguments, and a tool that moves money runs once.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_tools::{
    CallContext, Executor, SessionScope, Tool, ToolError, ToolPolicy, ToolRegistry,
    executor::{
        approval::{ApprovalDecision, ApprovalError, DEFAULT_APPROVAL_WAIT, DeferredApproval},
        cache::CacheConfig,
    },
};
use serde_json::{Value, json};

/// Generous: only reached when a test is about to fail (a deadlock), never on the happy path.
const DEADLOCK: Duration = Duration::from_secs(600);

/// A tool that counts its runs and answers with the run's number and its arguments, after
/// `delay`.
struct Counted {
    name: &'static str,
    policy: ToolPolicy,
    delay: Duration,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Counted {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "A counted test tool."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"n": {"type": "integer"}}})
    }
    fn policy(&self) -> ToolPolicy {
        self.policy
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(self.delay).await;
        Ok(json!({"run": run, "n": arguments["n"]}))
    }
}

fn counted(name: &'static str, policy: ToolPolicy, delay: Duration) -> (Counted, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = Counted {
        name,
        policy,
        delay,
        runs: Arc::clone(&runs),
    };
    (tool, runs)
}

fn registry_with(executor: Option<Executor>, tool: Counted) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    if let Some(executor) = executor {
        registry = registry.with_executor(Arc::new(executor));
    }
    registry.register(tool).unwrap();
    registry
}

fn in_session(registry: &ToolRegistry, scope: &SessionScope) -> CallContext {
    registry.context().with_scope(scope.clone())
}

async fn run(
    registry: &ToolRegistry,
    context: &CallContext,
    id: &str,
    arguments: Value,
) -> ToolResult {
    let call = ToolCall::new(id, registry.names()[0], arguments.to_string());
    tokio::time::timeout(DEADLOCK, registry.execute_one(&call, context))
        .await
        .expect("deadlocked")
        .result
}

fn content(result: &ToolResult) -> Value {
    serde_json::from_str(&result.content()).unwrap()
}

// --- the result cache -------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn two_sessions_never_share_a_cached_result_of_the_default_executor() {
    let (tool, runs) = counted(
        "account_summary",
        ToolPolicy::new().cache_ttl(Duration::from_secs(60)),
        Duration::ZERO,
    );
    // The process-wide default executor, as every registry gets it.
    let registry = registry_with(None, tool);
    let (alice, bob) = (SessionScope::new(), SessionScope::new());

    let first = run(
        &registry,
        &in_session(&registry, &alice),
        "call_0",
        json!({"n": 1}),
    )
    .await;
    let other = run(
        &registry,
        &in_session(&registry, &bob),
        "call_0",
        json!({"n": 1}),
    )
    .await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the second caller's call ran"
    );
    assert_eq!(content(&first)["run"], 1);
    assert_eq!(
        content(&other)["run"],
        2,
        "bob sees his own result, not alice's"
    );

    // Each session still gets its own cached result.
    let again = run(
        &registry,
        &in_session(&registry, &alice),
        "call_1",
        json!({"n": 1}),
    )
    .await;
    assert_eq!(content(&again)["run"], 1);
    let again = run(
        &registry,
        &in_session(&registry, &bob),
        "call_1",
        json!({"n": 1}),
    )
    .await;
    assert_eq!(content(&again)["run"], 2);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn contexts_that_name_no_session_share_nothing() {
    let (tool, runs) = counted(
        "lookup",
        ToolPolicy::new().cache_ttl(Duration::from_secs(60)),
        Duration::ZERO,
    );
    let registry = registry_with(None, tool);
    run(&registry, &registry.context(), "a", json!({"n": 1})).await;
    run(&registry, &registry.context(), "b", json!({"n": 1})).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_cache_shared_per_registry_is_an_explicit_opt_in_and_stays_in_its_registry() {
    let executor = Arc::new(
        Executor::builder()
            .cache(CacheConfig::default().shared_per_registry())
            .build(),
    );
    let (tool, runs) = counted(
        "exchange_rate",
        ToolPolicy::new().cache_ttl(Duration::from_secs(60)),
        Duration::ZERO,
    );
    let mut registry = ToolRegistry::new().with_executor(Arc::clone(&executor));
    registry.register(tool).unwrap();
    let (a, b) = (SessionScope::new(), SessionScope::new());
    run(&registry, &in_session(&registry, &a), "1", json!({"n": 1})).await;
    let shared = run(&registry, &in_session(&registry, &b), "2", json!({"n": 1})).await;
    assert_eq!(content(&shared)["run"], 1, "opted in: sessions share");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Another registry with a tool of the same name on the same executor never shares.
    let (twin, twin_runs) = counted(
        "exchange_rate",
        ToolPolicy::new().cache_ttl(Duration::from_secs(60)),
        Duration::ZERO,
    );
    let mut other = ToolRegistry::new().with_executor(executor);
    other.register(twin).unwrap();
    run(&other, &in_session(&other, &a), "3", json!({"n": 1})).await;
    assert_eq!(twin_runs.load(Ordering::SeqCst), 1);
}

// --- deferred approvals -----------------------------------------------------------------------

fn confirm() -> ToolPolicy {
    ToolPolicy::new().confirm(true)
}

fn approving(approver: &DeferredApproval, tool: Counted) -> ToolRegistry {
    registry_with(
        Some(
            Executor::builder()
                .approval(Arc::new(approver.clone()))
                .build(),
        ),
        tool,
    )
}

fn pending_ids(approver: &DeferredApproval, n: i64) -> Vec<String> {
    approver
        .pending()
        .into_iter()
        .filter(|r| r.arguments["n"] == n)
        .map(|r| r.id)
        .collect()
}

#[tokio::test]
async fn a_decision_for_call_0_never_approves_call_0_with_other_arguments() {
    let (pay, runs) = counted("pay", confirm(), Duration::ZERO);
    let approver = DeferredApproval::new().wait(false);
    let registry = approving(&approver, pay);
    let session = in_session(&registry, &SessionScope::new());

    // Turn 1: the server numbers calls from call_0; the caller is asked about $50.
    let asked = run(&registry, &session, "call_0", json!({"n": 50})).await;
    assert_eq!(asked.error_kind(), Some(ToolErrorKind::ApprovalPending));
    let [id] = pending_ids(&approver, 50).try_into().unwrap();
    assert_ne!(id, "call_0", "the executor mints the id");
    approver.decide(&id, ApprovalDecision::Approve).unwrap();

    // Turn 2: call_0 again, with other arguments: the yes was not for this.
    let other = run(&registry, &session, "call_0", json!({"n": 5000})).await;
    assert_eq!(other.error_kind(), Some(ToolErrorKind::ApprovalPending));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "nothing ran on someone else's yes"
    );

    // The approved call itself (whatever its id) runs, once.
    let approved = run(&registry, &session, "call_7", json!({"n": 50})).await;
    assert_eq!(content(&approved)["n"], 50);
    let again = run(&registry, &session, "call_0", json!({"n": 50})).await;
    assert_eq!(again.error_kind(), Some(ToolErrorKind::ApprovalPending));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_decision_in_one_session_never_applies_in_another() {
    let (pay, runs) = counted("pay", confirm(), Duration::ZERO);
    let approver = DeferredApproval::new().wait(false);
    let registry = approving(&approver, pay);
    let (alice, mallory) = (SessionScope::new(), SessionScope::new());
    run(
        &registry,
        &in_session(&registry, &alice),
        "call_0",
        json!({"n": 50}),
    )
    .await;
    let [id] = pending_ids(&approver, 50).try_into().unwrap();
    approver.decide(&id, ApprovalDecision::Approve).unwrap();

    let stolen = run(
        &registry,
        &in_session(&registry, &mallory),
        "call_0",
        json!({"n": 50}),
    )
    .await;
    assert_eq!(stolen.error_kind(), Some(ToolErrorKind::ApprovalPending));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_repeated_call_id_never_overwrites_a_parked_call() {
    let (pay, runs) = counted("pay", confirm(), Duration::ZERO);
    let approver = DeferredApproval::new().wait(false);
    let registry = approving(&approver, pay);
    let session = in_session(&registry, &SessionScope::new());
    run(&registry, &session, "call_0", json!({"n": 1})).await;
    run(&registry, &session, "call_0", json!({"n": 2})).await;
    // Both are parked, each under its own id.
    assert_eq!(approver.pending().len(), 2);
    let [first] = pending_ids(&approver, 1).try_into().unwrap();
    approver.decide(&first, ApprovalDecision::Approve).unwrap();
    let paid = run(&registry, &session, "call_0", json!({"n": 1})).await;
    assert_eq!(content(&paid)["n"], 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        pending_ids(&approver, 2).len(),
        1,
        "the second call still waits"
    );

    // Asking again about a parked call does not park it twice.
    run(&registry, &session, "call_0", json!({"n": 2})).await;
    assert_eq!(approver.pending().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn parked_calls_and_uncollected_decisions_expire() {
    let (pay, runs) = counted("pay", confirm(), Duration::ZERO);
    let approver = DeferredApproval::new()
        .wait(false)
        .ttl(Duration::from_secs(60));
    let registry = approving(&approver, pay);
    let session = in_session(&registry, &SessionScope::new());

    run(&registry, &session, "a", json!({"n": 1})).await;
    let [stale] = pending_ids(&approver, 1).try_into().unwrap();
    tokio::time::advance(Duration::from_secs(61)).await;
    assert!(approver.pending().is_empty());
    assert_eq!(
        approver.decide(&stale, ApprovalDecision::Approve),
        Err(ApprovalError::UnknownCall(stale.clone()))
    );

    // A decision nobody collects expires too: a late retry is asked again.
    run(&registry, &session, "b", json!({"n": 1})).await;
    let [id] = pending_ids(&approver, 1).try_into().unwrap();
    approver.decide(&id, ApprovalDecision::Approve).unwrap();
    tokio::time::advance(Duration::from_secs(61)).await;
    let late = run(&registry, &session, "c", json!({"n": 1})).await;
    assert_eq!(late.error_kind(), Some(ToolErrorKind::ApprovalPending));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_caller_waits_seconds_by_default_not_forever() {
    let (pay, runs) = counted("pay", confirm(), Duration::ZERO);
    let approver = DeferredApproval::new();
    let registry = approving(&approver, pay);
    let session = in_session(&registry, &SessionScope::new());
    let started = tokio::time::Instant::now();
    let result = run(&registry, &session, "a", json!({"n": 1})).await;
    assert_eq!(result.error_kind(), Some(ToolErrorKind::ApprovalPending));
    assert_eq!(started.elapsed(), DEFAULT_APPROVAL_WAIT);
    assert!(DEFAULT_APPROVAL_WAIT <= Duration::from_secs(30));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Still parked: a decision now is collected by the retry.
    let [id] = pending_ids(&approver, 1).try_into().unwrap();
    approver.decide(&id, ApprovalDecision::Approve).unwrap();
    let paid = run(&registry, &session, "b", json!({"n": 1})).await;
    assert!(!paid.is_error(), "{}", paid.content());
}

// --- a tool that moves money runs once ------------------------------------------------------

/// A transfer that takes 1.5 s while its caller waits at most 1 s.
fn slow_transfer() -> (Counted, Arc<AtomicUsize>) {
    counted(
        "transfer",
        ToolPolicy::new()
            .cancellable(false)
            .timeout(Duration::from_secs(1)),
        Duration::from_millis(1500),
    )
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_a_timeout_joins_the_running_transfer_and_sees_its_outcome() {
    let (transfer, runs) = slow_transfer();
    let registry = registry_with(Some(Executor::builder().build()), transfer);
    let session = in_session(&registry, &SessionScope::new());

    let first = run(&registry, &session, "call_0", json!({"n": 50})).await;
    assert_eq!(first.error_kind(), Some(ToolErrorKind::StillRunning));
    assert!(
        first.content().contains("must not be retried"),
        "{}",
        first.content()
    );

    // The model retries the same call: it joins the running transfer.
    let retry = run(&registry, &session, "call_0", json!({"n": 50})).await;
    assert!(!retry.is_error(), "{}", retry.content());
    assert_eq!(content(&retry), json!({"run": 1, "n": 50}));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the transfer ran exactly once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_the_transfer_finished_reads_its_outcome_instead_of_running_again() {
    let (transfer, runs) = slow_transfer();
    let registry = registry_with(Some(Executor::builder().build()), transfer);
    let session = in_session(&registry, &SessionScope::new());
    let first = run(&registry, &session, "call_0", json!({"n": 50})).await;
    assert_eq!(first.error_kind(), Some(ToolErrorKind::StillRunning));
    tokio::time::sleep(Duration::from_secs(30)).await;

    let retry = run(&registry, &session, "call_1", json!({"n": 50})).await;
    assert_eq!(content(&retry), json!({"run": 1, "n": 50}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The outcome was received: an identical call within the retry window (the caller
    // asking again, or a reconnect that lost the answer: the executor cannot tell) is not
    // run, and the model is told it was already done, with its outcome.
    let (quick, quick_runs) = counted(
        "transfer",
        ToolPolicy::new().cancellable(false),
        Duration::ZERO,
    );
    let registry = registry_with(
        Some(
            Executor::builder()
                .retry_window(Duration::from_secs(60))
                .build(),
        ),
        quick,
    );
    let session = in_session(&registry, &SessionScope::new());
    run(&registry, &session, "call_0", json!({"n": 50})).await;
    let again = run(&registry, &session, "call_1", json!({"n": 50})).await;
    assert!(!again.is_error(), "{}", again.content());
    let again = content(&again);
    assert_eq!(again["already_done"], json!(true), "{again}");
    assert_eq!(again["outcome"], json!({"run": 1, "n": 50}));
    assert!(
        again["note"].as_str().unwrap().contains("NOT done again"),
        "{again}"
    );
    assert_eq!(quick_runs.load(Ordering::SeqCst), 1, "the money moved once");

    // After the window, a new identical request is a new transfer.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let later = run(&registry, &session, "call_2", json!({"n": 50})).await;
    assert_eq!(content(&later), json!({"run": 2, "n": 50}));
    assert_eq!(quick_runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn an_unread_outcome_is_kept_for_the_retry_window_only() {
    let (transfer, runs) = slow_transfer();
    let registry = registry_with(
        Some(
            Executor::builder()
                .retry_window(Duration::from_secs(60))
                .build(),
        ),
        transfer,
    );
    let session = in_session(&registry, &SessionScope::new());
    run(&registry, &session, "call_0", json!({"n": 50})).await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    let much_later = run(&registry, &session, "call_0", json!({"n": 50})).await;
    assert_eq!(much_later.error_kind(), Some(ToolErrorKind::StillRunning));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_barge_in_leaves_the_transfer_running_and_the_retry_joins_it() {
    let (transfer, runs) = slow_transfer();
    let registry = registry_with(Some(Executor::builder().build()), transfer);
    let session = in_session(&registry, &SessionScope::new());
    let call = ToolCall::new("call_0", "transfer", json!({"n": 50}).to_string());

    // Barge-in: the turn (and the executor's future) is dropped while the transfer runs.
    tokio::select! {
        _ = registry.execute_one(&call, &session) => panic!("the transfer finished early"),
        () = tokio::time::sleep(Duration::from_millis(100)) => {}
    }
    // What the conversation records for the cut-short call: not `Cancelled`.
    let recorded = registry.interrupted(&call, &session);
    assert_eq!(recorded.error_kind(), Some(ToolErrorKind::StillRunning));

    // The caller speaks; the model's next turn retries within the tool's timeout.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let retry = run(&registry, &session, "call_0", json!({"n": 50})).await;
    assert_eq!(content(&retry), json!({"run": 1, "n": 50}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_barge_in_after_the_transfer_finished_records_its_real_outcome() {
    let (transfer, runs) = slow_transfer();
    let registry = registry_with(Some(Executor::builder().build()), transfer);
    let session = in_session(&registry, &SessionScope::new());
    let call = ToolCall::new("call_0", "transfer", json!({"n": 50}).to_string());
    tokio::select! {
        _ = registry.execute_one(&call, &session) => panic!("the transfer finished early"),
        () = tokio::time::sleep(Duration::from_millis(100)) => {}
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let recorded = registry.interrupted(&call, &session);
    assert_eq!(content(&recorded), json!({"run": 1, "n": 50}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn other_arguments_or_another_session_do_run() {
    let (transfer, runs) = slow_transfer();
    let registry = registry_with(Some(Executor::builder().build()), transfer);
    let alice = in_session(&registry, &SessionScope::new());
    let bob = in_session(&registry, &SessionScope::new());
    let (a, b, c) = tokio::join!(
        run(&registry, &alice, "call_0", json!({"n": 50})),
        run(&registry, &alice, "call_1", json!({"n": 60})),
        run(&registry, &bob, "call_0", json!({"n": 50})),
    );
    for result in [&a, &b, &c] {
        assert_eq!(result.error_kind(), Some(ToolErrorKind::StillRunning));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn concurrent_identical_calls_share_one_run() {
    let (transfer, runs) = counted(
        "transfer",
        ToolPolicy::new().cancellable(false),
        Duration::from_millis(500),
    );
    let registry = registry_with(Some(Executor::builder().build()), transfer);
    let session = in_session(&registry, &SessionScope::new());
    let (a, b) = tokio::join!(
        run(&registry, &session, "call_0", json!({"n": 50})),
        run(&registry, &session, "call_0", json!({"n": 50})),
    );
    assert_eq!(content(&a), content(&b));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[test]
fn an_unavailable_approver_says_its_own_layer_and_keeps_the_cause() {
    let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    let error = ApprovalError::Unavailable(crewline_core::ErrorDetail::caused_by(
        "the approval store (Redis at 127.0.0.1:6379) is unreachable: refused",
        refused,
    ));
    assert_eq!(error.to_string(), "approvals are unavailable");
    let cause = std::error::Error::source(&error).expect("the cause is kept");
    let io = cause
        .source()
        .and_then(|io| io.downcast_ref::<std::io::Error>());
    assert_eq!(
        io.map(std::io::Error::kind),
        Some(std::io::ErrorKind::ConnectionRefused)
    );
    assert_eq!(
        crewline_core::error_chain(&error),
        "approvals are unavailable: the approval store (Redis at 127.0.0.1:6379) is \
         unreachable: refused"
    );
}
