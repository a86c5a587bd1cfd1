//! Run-once claims shared through a real `redis-server`: two executors on one Redis and prefix
//! are two replicas. A retry on B of a call running on A joins it and reads A's outcome; a
//! replica killed with SIGKILL mid-call leaves an unknown outcome that B reports and never
//! runs again; a Redis that cannot be reached refuses the call before anything runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use common::RedisServer;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_redis::{RedisClaims, RedisConfig};
use crewline_tools::{
    Executor, IdempotencyKey, SessionScope, Tool, ToolError, ToolPolicy, ToolRegistry,
    executor::claims::{
        Claim, ClaimKey, ClaimOutcome, ClaimRequest, ClaimStore, ClaimTerms, ClaimToken,
    },
};
use serde_json::{Value, json};

/// Set in the child process this file re-executes: the Redis URL and prefix it claims on.
const CHILD: &str = "CREWLINE_CLAIMS_TEST_CHILD";
/// What the child prints once its transfer started (the claim is held then).
const STARTED: &str = "claims-test: the transfer started";
/// Generous: only reached when a test is about to fail.
const DEADLOCK: Duration = Duration::from_secs(60);

/// A transfer that counts its runs and takes `delay` (forever when `None`), announcing its
/// start on stdout.
struct Transfer {
    delay: Option<Duration>,
    runs: Arc<AtomicUsize>,
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
        ToolPolicy::new()
            .cancellable(false)
            .timeout(Duration::from_secs(20))
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let key = IdempotencyKey::current().map(|key| key.as_str().to_owned());
        let mut out = std::io::stdout();
        writeln!(out, "{STARTED}").unwrap();
        out.flush().unwrap();
        match self.delay {
            Some(delay) => tokio::time::sleep(delay).await,
            None => std::future::pending().await,
        }
        Ok(json!({"run": run, "n": arguments["n"], "key": key}))
    }
}

/// A replica: an executor whose claims live in Redis at `url` under `prefix`.
async fn replica(
    url: &str,
    prefix: &str,
    lease: Duration,
    delay: Option<Duration>,
) -> (ToolRegistry, Arc<AtomicUsize>) {
    let connection = RedisConfig::new(url)
        .prefix(prefix)
        .open()
        .await
        .expect("connected to the test's redis-server");
    let executor = Executor::builder()
        .claims(Arc::new(RedisClaims::new(connection)))
        .claim_lease(lease)
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    let mut registry = ToolRegistry::new().with_executor(Arc::new(executor));
    registry
        .register(Transfer {
            delay,
            runs: Arc::clone(&runs),
        })
        .unwrap();
    (registry, runs)
}

/// The call `c1` asks for a transfer of 50, on `registry`.
async fn transfer(registry: &ToolRegistry) -> ToolResult {
    let context = registry.context().with_scope(SessionScope::for_call("c1"));
    let call = ToolCall::new("call_0", "transfer", json!({"n": 50}).to_string());
    tokio::time::timeout(DEADLOCK, registry.execute_one(&call, &context))
        .await
        .expect("deadlocked")
        .result
}

fn content(result: &ToolResult) -> Value {
    serde_json::from_str(&result.content()).unwrap()
}

#[tokio::test]
async fn a_retry_on_another_replica_joins_the_running_call_and_reads_its_outcome() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // A short lease: the transfer outlives several, so only renewals keep it claimed.
    let lease = Duration::from_millis(600);
    let (a, a_runs) = replica(&server.url(), "joins:", lease, Some(Duration::from_secs(2))).await;
    let (b, b_runs) = replica(&server.url(), "joins:", lease, Some(Duration::ZERO)).await;

    let on_a = tokio::spawn(async move { transfer(&a).await });
    while a_runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The socket dropped; the platform retries the call on B while A still runs it.
    let on_b = transfer(&b).await;
    let on_a = on_a.await.unwrap();
    assert!(!on_b.is_error(), "{}", on_b.content());
    assert_eq!(content(&on_b), content(&on_a), "B read A's outcome");
    assert_eq!(content(&on_b)["run"], json!(1));
    assert!(content(&on_b)["key"].as_str().unwrap().starts_with("idk_"));
    assert_eq!(a_runs.load(Ordering::SeqCst), 1);
    assert_eq!(b_runs.load(Ordering::SeqCst), 0, "the money moved once");

    // The outcome was received: an identical call now hears it was already done.
    let again = transfer(&b).await;
    assert_eq!(
        content(&again)["already_done"],
        json!(true),
        "{}",
        again.content()
    );
    assert_eq!(b_runs.load(Ordering::SeqCst), 0);

    // Every claim key expires.
    let keys = server.keys_with_ttl("joins:claim:*").await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(keys.iter().all(|(_, ttl)| *ttl > 0), "{keys:?}");
}

/// Not a test of its own: the child process `a_replica_killed_mid_call...` runs and kills.
#[tokio::test]
async fn child_replica_holding_a_claim() {
    let Ok(target) = std::env::var(CHILD) else {
        return;
    };
    let (url, prefix) = target.split_once(' ').unwrap();
    let (registry, _) = replica(url, prefix, Duration::from_secs(1), None).await;
    // Never ends: the parent kills this process with SIGKILL mid-transfer.
    transfer(&registry).await;
}

#[tokio::test]
async fn a_replica_killed_mid_call_leaves_an_unknown_outcome_that_is_never_run_again() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "claims::child_replica_holding_a_claim",
            "--nocapture",
        ])
        .env(CHILD, format!("{} killed:", server.url()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the test binary runs again as a child");
    let stdout = child.stdout.take().unwrap();
    let started = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains(STARTED))
    });
    assert!(
        tokio::time::timeout(DEADLOCK, started)
            .await
            .unwrap()
            .unwrap(),
        "the child never started its transfer"
    );
    // A dies mid-transfer: no release, no outcome, no renewal ever again.
    child.kill().unwrap();
    child.wait().unwrap();

    let (b, b_runs) = replica(
        &server.url(),
        "killed:",
        Duration::from_secs(1),
        Some(Duration::ZERO),
    )
    .await;
    let retry = transfer(&b).await;
    assert_eq!(
        retry.error_kind(),
        Some(ToolErrorKind::OutcomeUnknown),
        "{}",
        retry.content()
    );
    assert!(
        retry.content().contains("do not retry"),
        "{}",
        retry.content()
    );
    // The model retries anyway: still unknown, never run on B.
    let again = transfer(&b).await;
    assert_eq!(again.error_kind(), Some(ToolErrorKind::OutcomeUnknown));
    assert_eq!(b_runs.load(Ordering::SeqCst), 0, "ran exactly once: on A");
}

#[tokio::test]
async fn a_claim_store_that_cannot_be_reached_refuses_the_call_before_it_runs() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let (registry, runs) = replica(
        &server.url(),
        "down:",
        Duration::from_secs(1),
        Some(Duration::ZERO),
    )
    .await;
    server.stop();
    let refused = transfer(&registry).await;
    assert_eq!(refused.error_kind(), Some(ToolErrorKind::ToolError));
    assert!(
        refused.content().contains("nothing was done"),
        "{}",
        refused.content()
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "fail closed: it did not run"
    );
}

#[tokio::test]
async fn an_outcome_that_cannot_be_written_still_reaches_its_caller() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let (registry, runs) = replica(
        &server.url(),
        "lost:",
        Duration::from_secs(1),
        Some(Duration::from_millis(800)),
    )
    .await;
    let call = tokio::spawn(async move { transfer(&registry).await });
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Redis goes away while the transfer runs: its outcome cannot be written.
    server.stop();
    let told = call.await.unwrap();
    assert!(!told.is_error(), "{}", told.content());
    assert_eq!(
        content(&told)["run"],
        json!(1),
        "the caller has the real outcome"
    );
}

#[tokio::test]
async fn an_owner_alive_after_its_lease_lapsed_still_writes_its_outcome() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let connection = RedisConfig::new(server.url())
        .prefix("lapse:")
        .open()
        .await
        .unwrap();
    let store = RedisClaims::new(connection);
    let terms = ClaimTerms {
        lease: Duration::from_millis(100),
        window: Duration::from_secs(60),
    };
    let key = ClaimKey::new(&SessionScope::for_call("c1"), "transfer", &json!({}));
    let token = ClaimToken::fresh();
    let request = ClaimRequest::Claim {
        token: token.clone(),
        idempotency_key: IdempotencyKey::fresh(),
        retake_unknown: false,
    };
    let won = store.claim(&key, request, terms).await.unwrap();
    assert!(matches!(won, Claim::Won { .. }), "{won:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = store.claim(&key, ClaimRequest::Join, terms).await.unwrap();
    assert!(matches!(seen, Claim::Unknown { .. }), "{seen:?}");
    assert!(!store.renew(&key, &token, terms).await.unwrap());

    let outcome = ClaimOutcome::Ok(json!({"sent": 50}));
    assert!(
        store
            .settle(&key, &token, &outcome, false, terms)
            .await
            .unwrap()
    );
    let read = store.claim(&key, ClaimRequest::Join, terms).await.unwrap();
    assert!(
        matches!(&read, Claim::Outcome { outcome: ClaimOutcome::Ok(value), .. } if value == &json!({"sent": 50})),
        "{read:?}"
    );
    let again = store.claim(&key, ClaimRequest::Join, terms).await.unwrap();
    assert!(matches!(again, Claim::Done { .. }), "received: {again:?}");
    assert!(
        !store
            .settle(&key, &ClaimToken::fresh(), &outcome, false, terms)
            .await
            .unwrap()
    );
}
