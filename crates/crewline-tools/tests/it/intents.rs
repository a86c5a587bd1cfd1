//! The durable ledger: a tool with effects has its intent recorded before it starts, so a crash
//! mid-tool (SIGKILL) leaves an intent no outcome names, which `JsonlLedger::pending` lists.

#![allow(clippy::unwrap_used)]

use std::{
    future::Future,
    io::Write,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use crewline_core::{ToolCall, ToolErrorKind};
use crewline_tools::{
    CallContext, Executor, SessionScope, Tool, ToolError, ToolPolicy, ToolRegistry,
    executor::ledger::{
        INTENT_TIMEOUT, JsonlLedger, LedgerEntry, LedgerError, LedgerIntent, LedgerRecord,
        LedgerSink, MemoryLedger, OUTCOME_TIMEOUT,
    },
};
use futures::future::BoxFuture;
use serde_json::{Value, json};

type Body = Arc<dyn Fn(Value) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync>;

struct TestTool {
    name: &'static str,
    policy: ToolPolicy,
    body: Body,
}

#[async_trait]
impl Tool for TestTool {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "A test tool."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"cents": {"type": "integer"}}})
    }
    fn policy(&self) -> ToolPolicy {
        self.policy
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        (self.body)(arguments).await
    }
}

fn tool<F, Fut>(name: &'static str, cancellable: bool, body: F) -> TestTool
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    TestTool {
        name,
        policy: ToolPolicy::new().cancellable(cancellable),
        body: Arc::new(move |arguments| Box::pin(body(arguments))),
    }
}

/// A tool that counts its runs and returns its arguments.
fn counted(name: &'static str, cancellable: bool) -> (TestTool, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&runs);
    let t = tool(name, cancellable, move |arguments| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move { Ok(arguments) }
    });
    (t, runs)
}

fn registry(
    ledger: Arc<dyn LedgerSink>,
    tools: impl IntoIterator<Item = TestTool>,
) -> ToolRegistry {
    let executor = Executor::builder().ledger(ledger).build();
    let mut registry = ToolRegistry::new().with_executor(Arc::new(executor));
    for t in tools {
        registry.register(t).unwrap();
    }
    registry
}

fn context(call: &str) -> CallContext {
    CallContext::default().with_scope(SessionScope::for_call(call))
}

fn temp_path(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "crewline-intents-{name}-{}-{nanos}.jsonl",
        std::process::id()
    ))
}

/// Set in the child process of the crash test: the ledger's path.
const CHILD_LEDGER: &str = "CREWLINE_TEST_INTENT_CHILD_LEDGER";

/// The child's side of the crash test: one transfer completes, a lookup (cancellable) runs,
/// then a second transfer starts and never ends; the parent kills the process meanwhile.
fn crash_child(ledger_path: &Path) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ledger = Arc::new(JsonlLedger::open(ledger_path).unwrap());
        let marker = ledger_path.with_extension("started");
        let transfer = tool("transfer_money", false, move |arguments: Value| {
            let marker = marker.clone();
            async move {
                if arguments["cents"] == 2 {
                    // The parent kills the process once this file exists.
                    std::fs::write(&marker, b"started").unwrap();
                    std::future::pending::<()>().await;
                }
                Ok(json!({"done": arguments["cents"]}))
            }
        });
        let (lookup, _) = counted("get_balance", true);
        let tools = registry(ledger.clone(), [transfer, lookup]);
        let first = ToolCall::new("tc_1", "transfer_money", r#"{"cents": 1}"#);
        let lookup = ToolCall::new("tc_2", "get_balance", "{}");
        let second = ToolCall::new("tc_3", "transfer_money", r#"{"cents": 2}"#);
        for call in [first, lookup] {
            tools.execute_one(&call, &context("call-a")).await;
        }
        tools.execute_one(&second, &context("call-b")).await;
    });
}

#[test]
fn a_process_killed_mid_tool_leaves_exactly_that_call_pending() {
    if let Ok(path) = std::env::var(CHILD_LEDGER) {
        crash_child(Path::new(&path));
        return;
    }
    let path = temp_path("crash");
    let marker = path.with_extension("started");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "intents::a_process_killed_mid_tool_leaves_exactly_that_call_pending",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_LEDGER, &path)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "the child never started the tool"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child exited before the tool started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SIGKILL: no destructor, no flush, no polite path.
    child.kill().unwrap();
    child.wait().unwrap();

    let pending = JsonlLedger::pending(&path).unwrap();
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
    assert_eq!(seen, [("call:call-b", "tc_3", "transfer_money")]);
    assert_eq!(pending[0].arguments, json!({"cents": 2}));

    // The finished transfer's outcome names its intent; the lookup has no intent at all.
    let entries = JsonlLedger::read_entries(&path).unwrap();
    let intents: Vec<&LedgerIntent> = entries
        .iter()
        .filter_map(|entry| match entry {
            LedgerEntry::Intent(intent) => Some(intent),
            LedgerEntry::Outcome(_) => None,
        })
        .collect();
    assert_eq!(intents.len(), 2, "{entries:?}");
    let records = JsonlLedger::read(&path).unwrap();
    let outcomes: Vec<_> = records
        .iter()
        .map(|record| (record.call_id.as_str(), record.intent_id.as_deref()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("tc_1", Some(intents[0].intent_id.as_str())),
            ("tc_2", None)
        ]
    );
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn pending_skips_a_torn_last_line_and_reads_the_rotated_files() {
    let path = temp_path("torn");
    let intent = |id: &str| LedgerIntent {
        intent_id: id.to_owned(),
        idempotency_key: Some(format!("key-{id}")),
        scope: "call:c".to_owned(),
        call_id: format!("tc_{id}"),
        tool: "transfer_money".to_owned(),
        arguments: json!({"cents": 5}),
        timestamp_ms: 1,
    };
    let line = |entry: LedgerEntry| {
        let mut line = entry.to_json().unwrap();
        line.push(b'\n');
        line
    };
    let settled = LedgerRecord {
        intent_id: Some("int_a".to_owned()),
        ..serde_json::from_value(json!({
            "call_id": "tc_int_a", "tool": "transfer_money", "arguments": {"cents": 5},
            "outcome": "ok", "error_kind": null, "message": null, "detail": null,
            "latency_us": 1, "approval": null, "cache_hit": false, "timestamp_ms": 2
        }))
        .unwrap()
    };
    // An older file (rotated) holds an intent whose outcome is in the current one.
    let mut rotated = line(LedgerEntry::Intent(intent("int_a")));
    rotated.extend(line(LedgerEntry::Intent(intent("int_b"))));
    std::fs::write(format!("{}.1", path.display()), rotated).unwrap();
    let mut current = line(LedgerEntry::Outcome(settled));
    current.extend(line(LedgerEntry::Intent(intent("int_c"))));
    // A crash mid-write: half an outcome, no newline.
    current.extend(br#"{"call_id":"tc_int_c","tool":"transfer_mo"#);
    std::fs::write(&path, current).unwrap();

    let ids: Vec<_> = JsonlLedger::pending(&path)
        .unwrap()
        .into_iter()
        .map(|intent| intent.intent_id)
        .collect();
    assert_eq!(ids, ["int_b", "int_c"]);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(format!("{}.1", path.display()));
}

#[test]
fn pending_of_a_missing_file_is_an_error_naming_it() {
    let path = temp_path("missing");
    let error = JsonlLedger::pending(&path).expect_err("no such file");
    assert!(
        error.to_string().contains(&*path.to_string_lossy()),
        "{error}"
    );
}

#[tokio::test]
async fn only_tools_with_effects_record_an_intent_and_their_outcome_settles_it() {
    let ledger = Arc::new(MemoryLedger::new());
    let (transfer, _) = counted("transfer_money", false);
    let (lookup, _) = counted("get_balance", true);
    let tools = registry(ledger.clone(), [transfer, lookup]);
    let ctx = context("c1");
    for call in [
        ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
        ToolCall::new("tc_2", "get_balance", "{}"),
    ] {
        assert!(!tools.execute_one(&call, &ctx).await.result.is_error());
    }
    let intents = ledger.intents();
    assert_eq!(intents.len(), 1, "{intents:?}");
    assert_eq!(
        (
            intents[0].tool.as_str(),
            intents[0].call_id.as_str(),
            intents[0].scope.as_str()
        ),
        ("transfer_money", "tc_1", "call:c1")
    );
    assert_eq!(intents[0].arguments, json!({"cents": 7}));
    let records = ledger.records();
    assert_eq!(
        records[0].intent_id.as_deref(),
        Some(intents[0].intent_id.as_str())
    );
    assert_eq!(records[1].intent_id, None);
    assert!(ledger.pending().is_empty());
}

/// A sink whose intents fail (a disk or a store that is down), or never answer.
struct FailingIntents {
    require: bool,
    hang: bool,
    records: MemoryLedger,
}

impl LedgerSink for FailingIntents {
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError> {
        self.records.record(record)
    }
    fn intent(&self, _: &LedgerIntent) -> BoxFuture<'static, Result<(), LedgerError>> {
        if self.hang {
            return Box::pin(std::future::pending());
        }
        Box::pin(std::future::ready(Err(LedgerError::IntentNotStored {
            reason: "the store is down".into(),
        })))
    }
    fn require_intent(&self) -> bool {
        self.require
    }
}

#[tokio::test]
async fn a_tool_with_effects_whose_intent_cannot_be_stored_does_not_run() {
    let ledger = Arc::new(FailingIntents {
        require: true,
        hang: false,
        records: MemoryLedger::new(),
    });
    let (transfer, runs) = counted("transfer_money", false);
    let (lookup, lookups) = counted("get_balance", true);
    let tools = registry(ledger.clone(), [transfer, lookup]);
    let ctx = context("c1");
    let refused = tools
        .execute_one(
            &ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
            &ctx,
        )
        .await
        .result;
    assert_eq!(refused.error_kind(), Some(ToolErrorKind::ToolError));
    assert!(
        refused.content().contains("was not run"),
        "{}",
        refused.content()
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the transfer ran unrecorded"
    );
    // Tools without effects need no intent and run as before.
    let looked = tools
        .execute_one(&ToolCall::new("tc_2", "get_balance", "{}"), &ctx)
        .await;
    assert!(!looked.result.is_error());
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    let detail = ledger.records.records()[0]
        .detail
        .clone()
        .unwrap_or_default();
    assert!(detail.contains("the store is down"), "{detail}");
}

#[tokio::test]
async fn without_require_intent_the_tool_runs_when_its_intent_is_lost() {
    let ledger = Arc::new(FailingIntents {
        require: false,
        hang: false,
        records: MemoryLedger::new(),
    });
    let (transfer, runs) = counted("transfer_money", false);
    let tools = registry(ledger, [transfer]);
    let done = tools
        .execute_one(
            &ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
            &context("c1"),
        )
        .await;
    assert!(!done.result.is_error());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn an_intent_that_never_answers_refuses_the_tool_after_the_intent_timeout() {
    let ledger = Arc::new(FailingIntents {
        require: true,
        hang: true,
        records: MemoryLedger::new(),
    });
    let (transfer, runs) = counted("transfer_money", false);
    let tools = registry(ledger, [transfer]);
    let started = tokio::time::Instant::now();
    let refused = tools
        .execute_one(
            &ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
            &context("c1"),
        )
        .await;
    assert!(refused.result.is_error());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(started.elapsed(), INTENT_TIMEOUT);
}

/// A sink written before intents existed (only `record`): tools with effects run as before.
struct RecordsOnly(MemoryLedger);

impl LedgerSink for RecordsOnly {
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError> {
        self.0.record(record)
    }
}

#[tokio::test]
async fn a_sink_without_intents_runs_tools_with_effects_as_before() {
    let ledger = Arc::new(RecordsOnly(MemoryLedger::new()));
    let (transfer, runs) = counted("transfer_money", false);
    let tools = registry(ledger.clone(), [transfer]);
    let done = tools
        .execute_one(
            &ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
            &context("c1"),
        )
        .await;
    assert!(!done.result.is_error());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(ledger.0.records()[0].intent_id, None);
}

/// The cost of an intent to the JSON Lines ledger, synced and not: run with
/// `cargo test -p crewline-tools --test it -- --ignored --nocapture intents::intent_cost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn intent_cost() {
    for sync in [false, true] {
        let path = temp_path("cost");
        let ledger = JsonlLedger::options()
            .sync_intents(sync)
            .open(&path)
            .unwrap();
        let mut took: Vec<Duration> = Vec::new();
        for n in 0..500 {
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
            ledger.intent(&intent).await.unwrap();
            took.push(started.elapsed());
        }
        took.sort();
        let _ = std::io::stderr().write_all(
            format!(
                "sync_intents={sync}: p50 {:?} p99 {:?} max {:?}\n",
                took[took.len() / 2],
                took[took.len() * 99 / 100],
                took[took.len() - 1]
            )
            .as_bytes(),
        );
        drop(ledger);
        let _ = std::fs::remove_file(&path);
    }
}

#[tokio::test(start_paused = true)]
async fn a_tool_running_on_after_its_caller_stopped_waiting_stays_pending_until_it_ends() {
    let ledger = Arc::new(MemoryLedger::new());
    let mut slow = tool("transfer_money", false, |arguments| async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(arguments)
    });
    slow.policy = slow.policy.timeout(Duration::from_secs(1));
    let tools = registry(ledger.clone(), [slow]);
    let call_context = context("c1");
    let waited = tools
        .execute_one(
            &ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
            &call_context,
        )
        .await;
    assert_eq!(
        waited.result.error_kind(),
        Some(ToolErrorKind::StillRunning)
    );
    assert_eq!(ledger.pending().len(), 1, "running: its intent is pending");
    tokio::time::sleep(Duration::from_secs(10)).await;
    call_context.scope().detached_tasks().wait().await;
    let records = ledger.records();
    let ran_on = records
        .iter()
        .find(|record| record.ran_on)
        .expect("the real outcome");
    assert_eq!(
        ran_on.intent_id.as_deref(),
        Some(ledger.intents()[0].intent_id.as_str())
    );
    assert!(ledger.pending().is_empty(), "{records:?}");
}

#[test]
fn a_tool_with_effects_cut_off_by_a_shutdown_is_an_unknown_outcome_left_pending() {
    let ledger = Arc::new(MemoryLedger::new());
    let mut stuck = tool("transfer_money", false, |_| std::future::pending());
    stuck.policy = stuck.policy.timeout(Duration::from_millis(50));
    let tools = registry(ledger.clone(), [stuck]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let waited = runtime.block_on(tools.execute_one(
        &ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
        &context("c1"),
    ));
    assert_eq!(
        waited.result.error_kind(),
        Some(ToolErrorKind::StillRunning)
    );
    // A shutdown that does not wait: the runtime drops the tool's task half-way.
    drop(runtime);
    let records = ledger.records();
    let cut = records.last().expect("the task's own record");
    assert_eq!(
        cut.error_kind,
        Some(ToolErrorKind::OutcomeUnknown),
        "it may have done part of its work: {records:?}"
    );
    assert_eq!(
        ledger.pending().len(),
        1,
        "an operator must reconcile it: {records:?}"
    );
}

#[tokio::test]
async fn the_intent_carries_the_idempotency_key_the_tool_hands_on() {
    let ledger = Arc::new(MemoryLedger::new());
    let seen = Arc::new(std::sync::Mutex::new(None));
    let keep = Arc::clone(&seen);
    let transfer = tool("transfer_money", false, move |arguments| {
        *keep.lock().unwrap() =
            crewline_tools::IdempotencyKey::current().map(|key| key.as_str().to_owned());
        async move { Ok(arguments) }
    });
    let tools = registry(ledger.clone(), [transfer]);
    let run = tools
        .execute_one(
            &ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
            &context("c1"),
        )
        .await;
    assert!(!run.result.is_error());
    let key = seen.lock().unwrap().clone().expect("the tool had a key");
    assert_eq!(
        ledger.intents()[0].idempotency_key.as_deref(),
        Some(key.as_str()),
        "an operator reconciles with the payment API by the key the tool handed on"
    );
}

/// A sink whose first intent fails and whose later ones are stored.
struct FirstIntentFails {
    failed: std::sync::atomic::AtomicBool,
    records: MemoryLedger,
}

impl LedgerSink for FirstIntentFails {
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError> {
        self.records.record(record)
    }
    fn intent(&self, intent: &LedgerIntent) -> BoxFuture<'static, Result<(), LedgerError>> {
        if !self.failed.swap(true, Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(LedgerError::IntentNotStored {
                reason: "the store is down".into(),
            })));
        }
        self.records.intent(intent)
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_refused_for_its_intent_can_be_retried_and_runs_once() {
    let ledger = Arc::new(FirstIntentFails {
        failed: std::sync::atomic::AtomicBool::new(false),
        records: MemoryLedger::new(),
    });
    let (transfer, runs) = counted("transfer_money", false);
    let tools = registry(ledger, [transfer]);
    let call = ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#);
    let refused = tools.execute_one(&call, &context("c1")).await;
    assert!(refused.result.is_error());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Past any claim's lease: a claim left held would read as an unknown outcome now.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let retried = tools.execute_one(&call, &context("c1")).await;
    assert!(!retried.result.is_error(), "{:?}", retried.result);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "it never ran before, so it runs now"
    );
}

/// A sink whose queued records (`record`) never reach its store, as when the process is
/// killed before its writer runs; what `settle` stores is kept at once, unless `settle_fails`
/// or `settle_hangs`.
#[derive(Default)]
struct KilledBeforeTheQueue {
    kept: MemoryLedger,
    queued: MemoryLedger,
    settle_fails: bool,
    settle_hangs: bool,
}

impl LedgerSink for KilledBeforeTheQueue {
    fn record(&self, record: &LedgerRecord) -> Result<(), LedgerError> {
        self.queued.record(record)
    }
    fn intent(&self, intent: &LedgerIntent) -> BoxFuture<'static, Result<(), LedgerError>> {
        self.kept.intent(intent)
    }
    fn settle(&self, record: &LedgerRecord) -> BoxFuture<'static, Result<(), LedgerError>> {
        if self.settle_hangs {
            return Box::pin(std::future::pending());
        }
        if self.settle_fails {
            return Box::pin(std::future::ready(Err(LedgerError::OutcomeNotStored {
                reason: "the store is down".into(),
            })));
        }
        self.kept.settle(record)
    }
}

#[tokio::test]
async fn a_tool_with_effects_has_its_outcome_stored_before_its_result_returns() {
    let ledger = Arc::new(KilledBeforeTheQueue::default());
    let (transfer, _) = counted("transfer_money", false);
    let (lookup, _) = counted("get_balance", true);
    let tools = registry(ledger.clone(), [transfer, lookup]);
    let ctx = context("c1");
    let transferred = tools
        .execute_one(
            &ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
            &ctx,
        )
        .await;
    assert!(!transferred.result.is_error());
    // The process dies now: nothing queued is written. The call is not pending.
    assert!(
        ledger.kept.pending().is_empty(),
        "a finished transfer shows as pending: {:?}",
        ledger.kept.pending()
    );
    assert_eq!(ledger.kept.records().len(), 1);
    // A call without effects does not wait for the ledger: its record is queued.
    tools
        .execute_one(&ToolCall::new("tc_2", "get_balance", "{}"), &ctx)
        .await;
    assert_eq!(ledger.kept.records().len(), 1);
    assert_eq!(ledger.queued.records().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_outcome_that_cannot_be_stored_at_once_is_queued_and_the_result_still_returns() {
    for ledger in [
        KilledBeforeTheQueue {
            settle_fails: true,
            ..KilledBeforeTheQueue::default()
        },
        KilledBeforeTheQueue {
            settle_hangs: true,
            ..KilledBeforeTheQueue::default()
        },
    ] {
        let ledger = Arc::new(ledger);
        let (transfer, runs) = counted("transfer_money", false);
        let tools = registry(ledger.clone(), [transfer]);
        let started = tokio::time::Instant::now();
        let transferred = tools
            .execute_one(
                &ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
                &context("c1"),
            )
            .await;
        assert!(!transferred.result.is_error());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(
            started.elapsed() <= OUTCOME_TIMEOUT,
            "{:?}",
            started.elapsed()
        );
        let queued = ledger.queued.records();
        assert_eq!(queued.len(), 1, "the outcome went to the queue instead");
        assert!(queued[0].intent_id.is_some());
    }
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_ends_after_its_caller_stopped_waiting_stores_its_outcome_on_its_task() {
    let ledger = Arc::new(KilledBeforeTheQueue::default());
    let mut slow = tool("transfer_money", false, |arguments| async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(arguments)
    });
    slow.policy = slow.policy.timeout(Duration::from_secs(1));
    let tools = registry(ledger.clone(), [slow]);
    let call_context = context("c1");
    let waited = tools
        .execute_one(
            &ToolCall::new("tc_1", "transfer_money", r#"{"cents": 7}"#),
            &call_context,
        )
        .await;
    assert_eq!(
        waited.result.error_kind(),
        Some(ToolErrorKind::StillRunning)
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The tool's task (which a shutdown waits for) stored the real outcome itself.
    call_context.scope().detached_tasks().wait().await;
    assert!(
        ledger.kept.pending().is_empty(),
        "{:?}",
        ledger.kept.records()
    );
    assert!(ledger.kept.records().iter().any(|record| record.ran_on));
}

#[test]
fn a_ledger_failure_says_its_own_layer_and_keeps_the_cause() {
    let reset = std::io::Error::other("connection reset");
    let error = LedgerError::IntentNotStored {
        reason: crewline_core::ErrorDetail::caused_by(
            "Redis at 127.0.0.1:6379 is unreachable: connection reset",
            reset,
        ),
    };
    assert_eq!(error.to_string(), "the ledger could not store the intent");
    let cause = std::error::Error::source(&error).expect("the cause is kept");
    assert!(
        cause
            .source()
            .is_some_and(|io| io.downcast_ref::<std::io::Error>().is_some()),
        "{cause:?}"
    );
    assert_eq!(
        crewline_core::error_chain(&error),
        "the ledger could not store the intent: Redis at 127.0.0.1:6379 is unreachable: \
         connection reset"
    );
}
