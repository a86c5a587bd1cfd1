//! The tool ledger in a Redis stream: a replica killed mid-tool (SIGKILL) leaves its intent
//! pending for any other to list; a Redis that is down refuses tools with effects instead of
//! running them unrecorded; the stream stays bounded.

use crate::common;

use std::{
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use common::RedisServer;
use crewline_core::ToolCall;
use crewline_redis::{RedisConfig, RedisLedger, RedisLedgerOptions};
use crewline_tools::{
    CallContext, Executor, SessionScope, Tool, ToolError, ToolPolicy, ToolRegistry,
    executor::ledger::{LedgerEntry, LedgerIntent, LedgerSink},
};
use serde_json::{Value, json};

/// A non-cancellable transfer that counts its runs; `cents: 2` never ends (and says it
/// started by writing `marker`, when there is one).
struct Transfer {
    runs: Arc<AtomicUsize>,
    marker: Option<std::path::PathBuf>,
}

#[async_trait]
impl Tool for Transfer {
    fn name(&self) -> &str {
        "transfer_money"
    }
    fn description(&self) -> &str {
        "Moves money."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"cents": {"type": "integer"}}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().cancellable(false)
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if arguments["cents"] == 2 {
            if let Some(marker) = &self.marker {
                std::fs::write(marker, b"started").expect("the marker is written");
            }
            std::future::pending::<()>().await;
        }
        Ok(json!({"sent": arguments["cents"]}))
    }
}

async fn ledger(server: &RedisServer, prefix: &str, options: RedisLedgerOptions) -> RedisLedger {
    let connection = RedisConfig::new(server.url())
        .prefix(prefix)
        .open()
        .await
        .expect("connected");
    RedisLedger::with_options(connection, options)
}

fn tools(
    ledger: RedisLedger,
    marker: Option<std::path::PathBuf>,
) -> (ToolRegistry, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let executor = Executor::builder().ledger(Arc::new(ledger)).build();
    let mut registry = ToolRegistry::new().with_executor(Arc::new(executor));
    registry
        .register(Transfer {
            runs: Arc::clone(&runs),
            marker,
        })
        .expect("registered");
    (registry, runs)
}

fn transfer(id: &str, cents: u64) -> ToolCall {
    ToolCall::new(id, "transfer_money", format!(r#"{{"cents": {cents}}}"#))
}

fn context(call: &str) -> CallContext {
    CallContext::default().with_scope(SessionScope::for_call(call))
}

/// Waits until `ledger` holds `count` outcome records (they are written by a task).
async fn outcomes(ledger: &RedisLedger, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let entries = ledger.entries(1000).await.expect("the stream reads");
        let seen = entries
            .iter()
            .filter(|entry| matches!(entry, LedgerEntry::Outcome(_)))
            .count();
        if seen >= count {
            return;
        }
        assert!(Instant::now() < deadline, "{seen} outcomes of {count}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Set in the child process of the crash test: `url prefix marker`.
const CHILD: &str = "CREWLINE_TEST_REDIS_LEDGER_CHILD";

async fn crash_child(setting: &str) {
    let mut parts = setting.split(' ');
    let (Some(url), Some(prefix), Some(marker)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("bad {CHILD}: {setting}");
    };
    let connection = RedisConfig::new(url)
        .prefix(prefix)
        .open()
        .await
        .expect("connected");
    let ledger = RedisLedger::new(connection);
    let (tools, _) = tools(ledger.clone(), Some(marker.into()));
    tools
        .execute_one(&transfer("tc_1", 1), &context("call-a"))
        .await;
    // The first transfer's outcome is in Redis before the second starts.
    outcomes(&ledger, 1).await;
    tools
        .execute_one(&transfer("tc_2", 2), &context("call-b"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_tool_leaves_its_intent_pending_for_any_replica() {
    if let Ok(setting) = std::env::var(CHILD) {
        crash_child(&setting).await;
        return;
    }
    let Some(server) = RedisServer::start() else {
        return;
    };
    let marker = std::env::temp_dir().join(format!(
        "crewline-redis-ledger-{}-{}.started",
        std::process::id(),
        server.url().rsplit(':').next().unwrap_or_default()
    ));
    let _ = std::fs::remove_file(&marker);
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "ledger::a_replica_killed_mid_tool_leaves_its_intent_pending_for_any_replica",
            "--nocapture",
        ])
        .env(
            CHILD,
            format!("{} crash: {}", server.url(), marker.display()),
        )
        .stdout(Stdio::null())
        .spawn()
        .expect("the child starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "the child never started the tool"
        );
        assert!(
            child.try_wait().expect("the child").is_none(),
            "the child exited before the tool started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("the child is reaped");
    let _ = std::fs::remove_file(&marker);

    // Another replica reads the same stream.
    let other = ledger(&server, "crash:", RedisLedgerOptions::default()).await;
    let pending = other.pending().await.expect("the stream reads");
    let seen: Vec<_> = pending
        .iter()
        .map(|intent| {
            (
                intent.scope.as_str(),
                intent.call_id.as_str(),
                intent.tool.as_str(),
            )
        })
        .collect();
    assert_eq!(seen, [("call:call-b", "tc_2", "transfer_money")]);
    assert_eq!(pending[0].arguments, json!({"cents": 2}));
    // The first transfer's intent and outcome are both there, and settle each other.
    assert_eq!(other.entries(100).await.expect("entries").len(), 3);
}

/// Set in the child of the kill-after-the-result test: `url prefix`.
const RESULT_CHILD: &str = "CREWLINE_TEST_REDIS_LEDGER_RESULT_CHILD";
/// What that child prints once its transfer's result is back.
const RESULT_LINE: &str = "ledger-test: the transfer's result is back";

/// The child of the kill-after-the-result test: one transfer with effects on a one-thread
/// runtime. Once its result is back it says so, and its only thread never runs anything
/// again until the SIGKILL: whatever was left for later (a queued record) is lost, as in a
/// kill at that very instant.
fn result_child(setting: &str) {
    let Some((url, prefix)) = setting.split_once(' ') else {
        panic!("bad {RESULT_CHILD}: {setting}");
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let connection = RedisConfig::new(url)
            .prefix(prefix)
            .open()
            .await
            .expect("connected");
        let (tools, runs) = tools(RedisLedger::new(connection), None);
        let run = tools
            .execute_one(&transfer("tc_1", 1), &context("call-a"))
            .await;
        assert!(!run.result.is_error(), "{}", run.result.content());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let mut out = std::io::stdout();
        writeln!(out, "{RESULT_LINE}").expect("stdout");
        out.flush().expect("stdout");
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    });
}

#[test]
fn a_replica_killed_right_after_a_transfers_result_leaves_nothing_pending() {
    if let Ok(setting) = std::env::var(RESULT_CHILD) {
        result_child(&setting);
        return;
    }
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "ledger::a_replica_killed_right_after_a_transfers_result_leaves_nothing_pending",
            "--nocapture",
        ])
        .env(RESULT_CHILD, format!("{} result:", server.url()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the child starts");
    let stdout = child.stdout.take().expect("its stdout");
    let heard = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains(RESULT_LINE));
    // SIGKILL at once: no polite path, nothing flushed.
    child.kill().expect("SIGKILL");
    child.wait().expect("the child is reaped");
    assert!(heard, "the child never got the transfer's result");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let other = ledger(&server, "result:", RedisLedgerOptions::default()).await;
        let pending = other.pending().await.expect("the stream reads");
        assert!(
            pending.is_empty(),
            "a transfer whose result was back shows as pending: {pending:?}"
        );
        let entries = other.entries(100).await.expect("entries");
        assert_eq!(entries.len(), 2, "its intent and its outcome: {entries:?}");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_a_tool_with_effects_is_refused_not_run_unrecorded() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let options = RedisLedgerOptions::default().write_timeout(Duration::from_millis(500));
    let ledger = ledger(&server, "down:", options).await;
    let (tools, runs) = tools(ledger.clone(), None);

    server.stop();
    let started = Instant::now();
    let refused = tools
        .execute_one(&transfer("tc_1", 1), &context("c"))
        .await
        .result;
    assert!(refused.is_error(), "{}", refused.content());
    assert!(
        refused.content().contains("was not run"),
        "{}",
        refused.content()
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "ran without its intent");
    assert!(ledger.write_errors() >= 1);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the call waited {:?} on a Redis that is down",
        started.elapsed()
    );

    assert!(server.restart(), "redis-server restarts");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let done = tools
            .execute_one(&transfer("tc_2", 1), &context("c"))
            .await
            .result;
        if !done.is_error() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", done.content());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    outcomes(&ledger, 1).await;
    assert!(ledger.pending().await.expect("the stream reads").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_is_trimmed_and_large_arguments_are_cut() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let options = RedisLedgerOptions::default()
        .max_len(100)
        .max_argument_bytes(256);
    let ledger = ledger(&server, "trim:", options).await;
    for n in 0..1000 {
        let intent = LedgerIntent {
            intent_id: format!("int_{n}"),
            idempotency_key: Some(format!("key_{n}")),
            scope: "call:c".to_owned(),
            call_id: format!("tc_{n}"),
            tool: "transfer_money".to_owned(),
            arguments: json!({"memo": "x".repeat(if n == 999 { 10_000 } else { 10 })}),
            timestamp_ms: 1,
        };
        ledger.intent(&intent).await.expect("written");
    }
    let client = redis::Client::open(server.url()).expect("url");
    let mut redis = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let length: usize = redis::cmd("XLEN")
        .arg(ledger.key())
        .query_async(&mut redis)
        .await
        .expect("XLEN");
    // `MAXLEN ~` trims whole nodes of 100 entries: at most 100 more than asked.
    assert!(length <= 200, "the stream holds {length} entries");
    let pending = ledger.pending().await.expect("the stream reads");
    assert_eq!(pending.len(), length);
    let last = pending.last().expect("the newest intent");
    assert_eq!(last.idempotency_key.as_deref(), Some("key_999"));
    let Value::String(excerpt) = &last.arguments else {
        panic!("arguments kept whole: {}", last.arguments);
    };
    assert!(excerpt.len() < 2000, "{} bytes kept", excerpt.len());
    assert!(excerpt.contains("over the ledger's 256"), "{excerpt}");
}

/// The cost of an intent to the Redis stream (one `XADD` round trip on loopback): run with
/// `cargo test -p crewline-redis --test it -- --ignored --nocapture ledger::intent_cost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn intent_cost() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let ledger = ledger(&server, "cost:", RedisLedgerOptions::default()).await;
    let mut took = Vec::new();
    for n in 0..2000 {
        let intent = LedgerIntent {
            intent_id: format!("int_{n}"),
            idempotency_key: None,
            scope: "call:c".to_owned(),
            call_id: format!("tc_{n}"),
            tool: "transfer_money".to_owned(),
            arguments: json!({"to": "alice", "cents": n}),
            timestamp_ms: 1,
        };
        let started = Instant::now();
        ledger.intent(&intent).await.expect("written");
        took.push(started.elapsed());
    }
    took.sort();
    eprintln!(
        "redis intent: p50 {:?} p99 {:?} max {:?}",
        took[took.len() / 2],
        took[took.len() * 99 / 100],
        took[took.len() - 1]
    );
}

/// The cost of storing a transfer's outcome before its result returns (one `XADD` round trip
/// on loopback), and what a whole transfer call takes with it: run with
/// `cargo test -p crewline-redis --test it -- --ignored --nocapture ledger::outcome_cost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn outcome_cost() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let ledger = ledger(&server, "cost:", RedisLedgerOptions::default()).await;
    let percentiles = |mut took: Vec<Duration>| {
        took.sort();
        (took[took.len() / 2], took[took.len() * 99 / 100])
    };
    let (tools, _) = tools(ledger.clone(), None);
    let mut settle = Vec::new();
    let mut queued = Vec::new();
    let mut calls = Vec::new();
    for n in 0..2000_u64 {
        let run = tools
            .execute_one(&transfer(&format!("tc_{n}"), 1), &context(&format!("c{n}")))
            .await;
        calls.push(run.latency);
        let entries = ledger.entries(1).await.expect("entries");
        let Some(LedgerEntry::Outcome(record)) = entries.last() else {
            panic!("the outcome is the newest entry");
        };
        let started = Instant::now();
        ledger.settle(record).await.expect("written");
        settle.push(started.elapsed());
        let started = Instant::now();
        ledger.record(record).expect("queued");
        queued.push(started.elapsed());
    }
    let (settle, queued, calls) = (percentiles(settle), percentiles(queued), percentiles(calls));
    eprintln!(
        "redis outcome: awaited (settle) p50 {:?} p99 {:?}; queued (record) p50 {:?} p99 {:?}; \
         a whole transfer call (intent + tool + outcome) p50 {:?} p99 {:?}",
        settle.0, settle.1, queued.0, queued.1, calls.0, calls.1
    );
}
