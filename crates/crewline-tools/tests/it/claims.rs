//! A tool with effects runs once, whatever fails: run-once follows the call (its scope), not
//! the socket or the registry; a call whose owner died reads `OutcomeUnknown` and is never run
//! again, unless its tool dedupes by the idempotency key, which reaches the tool.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_tools::{
    CallContext, Executor, IdempotencyKey, SessionScope, Tool, ToolError, ToolPolicy, ToolRegistry,
    executor::claims::{
        Claim, ClaimError, ClaimKey, ClaimOutcome, ClaimRequest, ClaimStore, ClaimTerms,
        ClaimToken, MemoryClaims,
    },
};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Generous: only reached when a test is about to fail (a deadlock).
const DEADLOCK: Duration = Duration::from_secs(600);

/// A transfer that counts its runs, keeps the idempotency key each run saw, and takes
/// `delay` (forever when `None`).
struct Transfer {
    policy: ToolPolicy,
    delay: Option<Duration>,
    runs: Arc<AtomicUsize>,
    keys: Arc<Mutex<Vec<Option<IdempotencyKey>>>>,
    fail: bool,
}

#[derive(Clone, Default)]
struct Seen {
    runs: Arc<AtomicUsize>,
    keys: Arc<Mutex<Vec<Option<IdempotencyKey>>>>,
}

impl Seen {
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
    fn keys(&self) -> Vec<Option<IdempotencyKey>> {
        self.keys.lock().unwrap().clone()
    }
    fn tool(&self, policy: ToolPolicy, delay: Option<Duration>) -> Transfer {
        Transfer {
            policy,
            delay,
            runs: Arc::clone(&self.runs),
            keys: Arc::clone(&self.keys),
            fail: false,
        }
    }
}

#[async_trait]
impl Tool for Transfer {
    fn name(&self) -> &str {
        "transfer"
    }
    fn description(&self) -> &str {
        "Moves money."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"n": {"type": "integer"}}})
    }
    fn policy(&self) -> ToolPolicy {
        self.policy
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        self.keys.lock().unwrap().push(IdempotencyKey::current());
        match self.delay {
            Some(delay) => tokio::time::sleep(delay).await,
            None => std::future::pending().await,
        }
        if self.fail {
            return Err(ToolError::new("the bank said no"));
        }
        Ok(json!({"run": run, "n": arguments["n"]}))
    }
}

fn payment() -> ToolPolicy {
    ToolPolicy::new()
        .cancellable(false)
        .timeout(Duration::from_secs(30))
}

fn registry(executor: &Arc<Executor>, tool: Transfer) -> ToolRegistry {
    let mut registry = ToolRegistry::new().with_executor(Arc::clone(executor));
    registry.register(tool).unwrap();
    registry
}

/// The context of a turn of the platform's call `call_id` (what a server builds on each
/// connection of that call).
fn turn(registry: &ToolRegistry, call_id: &str) -> CallContext {
    registry
        .context()
        .with_scope(SessionScope::for_call(call_id))
}

async fn run(registry: &ToolRegistry, context: &CallContext, arguments: Value) -> ToolResult {
    let call = ToolCall::new("call_0", "transfer", arguments.to_string());
    tokio::time::timeout(DEADLOCK, registry.execute_one(&call, context))
        .await
        .expect("deadlocked")
        .result
}

fn content(result: &ToolResult) -> Value {
    serde_json::from_str(&result.content()).unwrap()
}

/// A replica that dies right after it claimed: nothing it would write later (renewals, the
/// outcome) reaches the shared store, and it never releases the claim.
struct DeadAfterClaim(Arc<MemoryClaims>);

#[async_trait]
impl ClaimStore for DeadAfterClaim {
    async fn claim(
        &self,
        key: &ClaimKey,
        request: ClaimRequest,
        terms: ClaimTerms,
    ) -> Result<Claim, ClaimError> {
        self.0.claim(key, request, terms).await
    }
    async fn wait(
        &self,
        key: &ClaimKey,
        until: Instant,
        terms: ClaimTerms,
    ) -> Result<Claim, ClaimError> {
        self.0.wait(key, until, terms).await
    }
    async fn renew(&self, _: &ClaimKey, _: &ClaimToken, _: ClaimTerms) -> Result<bool, ClaimError> {
        std::future::pending().await
    }
    async fn settle(
        &self,
        _: &ClaimKey,
        _: &ClaimToken,
        _: &ClaimOutcome,
        _: bool,
        _: ClaimTerms,
    ) -> Result<bool, ClaimError> {
        std::future::pending().await
    }
}

/// Replica A (dead once it claimed) and replica B, sharing one store.
fn two_replicas() -> (Arc<Executor>, Arc<Executor>) {
    let shared = Arc::new(MemoryClaims::new());
    let a = Executor::builder()
        .claims(Arc::new(DeadAfterClaim(Arc::clone(&shared))))
        .build();
    let b = Executor::builder().claims(shared).build();
    (Arc::new(a), Arc::new(b))
}

#[tokio::test(start_paused = true)]
async fn a_reconnect_of_the_same_call_joins_the_running_transfer_whatever_its_registry() {
    // One replica; each connection of the call builds its own registry (a registry's id is
    // process-local), as a server that resumes a call may.
    let executor = Arc::new(Executor::builder().build());
    let seen = Seen::default();
    let first_socket = registry(
        &executor,
        seen.tool(
            payment().timeout(Duration::from_secs(1)),
            Some(Duration::from_secs(3)),
        ),
    );
    let first = run(&first_socket, &turn(&first_socket, "c1"), json!({"n": 50})).await;
    assert_eq!(first.error_kind(), Some(ToolErrorKind::StillRunning));

    // The socket dropped; the platform reconnects with the same call id and asks again.
    let second_socket = registry(
        &executor,
        seen.tool(payment(), Some(Duration::from_secs(3))),
    );
    let retry = run(
        &second_socket,
        &turn(&second_socket, "c1"),
        json!({"n": 50}),
    )
    .await;
    assert_eq!(content(&retry), json!({"run": 1, "n": 50}));
    assert_eq!(seen.runs(), 1, "the money moved once");

    // Another call of the same amount is another call: it runs.
    let other = run(
        &second_socket,
        &turn(&second_socket, "c2"),
        json!({"n": 50}),
    )
    .await;
    assert_eq!(content(&other), json!({"run": 2, "n": 50}));
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_replica_died_reads_outcome_unknown_and_never_runs_again() {
    let (a, b) = two_replicas();
    let seen = Seen::default();
    let on_a = registry(&a, seen.tool(payment(), None));
    let on_b = registry(&b, seen.tool(payment(), Some(Duration::ZERO)));

    // A claims and starts the transfer, then dies (its call never ends, it renews nothing).
    let dead = tokio::spawn({
        let context = turn(&on_a, "c1");
        async move { run(&on_a, &context, json!({"n": 50})).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(seen.runs(), 1);

    // The platform retries the call on B: it joins the running call until the lease lapses.
    let retry = run(&on_b, &turn(&on_b, "c1"), json!({"n": 50})).await;
    assert_eq!(retry.error_kind(), Some(ToolErrorKind::OutcomeUnknown));
    assert!(
        retry.content().contains("do not retry"),
        "{}",
        retry.content()
    );
    // The model retries anyway: still unknown, still not run.
    let again = run(&on_b, &turn(&on_b, "c1"), json!({"n": 50})).await;
    assert_eq!(again.error_kind(), Some(ToolErrorKind::OutcomeUnknown));
    assert_eq!(seen.runs(), 1, "never re-run automatically");
    dead.abort();
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_dedupes_by_key_retries_an_unknown_outcome_under_the_same_key() {
    let (a, b) = two_replicas();
    let seen = Seen::default();
    let policy = payment().dedupes_by_key(true);
    let on_a = registry(&a, seen.tool(policy, None));
    let on_b = registry(&b, seen.tool(policy, Some(Duration::ZERO)));
    let dead = tokio::spawn({
        let context = turn(&on_a, "c1");
        async move { run(&on_a, &context, json!({"n": 50})).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    let unknown = run(&on_b, &turn(&on_b, "c1"), json!({"n": 50})).await;
    assert_eq!(unknown.error_kind(), Some(ToolErrorKind::OutcomeUnknown));
    assert!(unknown.content().contains("safe"), "{}", unknown.content());
    let retry = run(&on_b, &turn(&on_b, "c1"), json!({"n": 50})).await;
    assert_eq!(content(&retry), json!({"run": 2, "n": 50}));

    let keys = seen.keys();
    assert_eq!(keys.len(), 2);
    assert!(keys[0].is_some());
    assert_eq!(keys[0], keys[1], "the retry carries the first run's key");
    dead.abort();
}

#[tokio::test(start_paused = true)]
async fn every_call_hands_its_tool_an_idempotency_key() {
    let executor = Arc::new(Executor::builder().build());
    let seen = Seen::default();
    let payments = registry(&executor, seen.tool(payment(), Some(Duration::ZERO)));
    run(&payments, &turn(&payments, "c1"), json!({"n": 1})).await;
    run(&payments, &turn(&payments, "c1"), json!({"n": 2})).await;
    let lookups = registry(
        &executor,
        seen.tool(ToolPolicy::new(), Some(Duration::ZERO)),
    );
    run(&lookups, &turn(&lookups, "c1"), json!({"n": 1})).await;
    let keys: Vec<IdempotencyKey> = seen.keys().into_iter().map(Option::unwrap).collect();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|key| key.as_str().starts_with("idk_")));
    assert_ne!(keys[0], keys[1], "two calls, two keys");
    assert_ne!(keys[1], keys[2]);
    assert!(IdempotencyKey::current().is_none(), "none outside a call");
}

#[tokio::test(start_paused = true)]
async fn a_received_failure_is_a_new_request_but_a_received_success_is_not_repeated() {
    let executor = Arc::new(Executor::builder().build());
    let seen = Seen::default();
    let mut failing = seen.tool(payment(), Some(Duration::ZERO));
    failing.fail = true;
    let failing = registry(&executor, failing);
    let context = turn(&failing, "c1");
    run(&failing, &context, json!({"n": 50})).await;
    let again = run(&failing, &context, json!({"n": 50})).await;
    assert_eq!(again.error_kind(), Some(ToolErrorKind::ToolError));
    assert_eq!(seen.runs(), 2, "a failed transfer may be asked for again");
}
