//! The executor: every stage of the pipeline and every error kind.

#![allow(clippy::unwrap_used)]

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_tools::{
    CallArguments, CallContext, ExecuteOptions, Executor, Tool, ToolCallError, ToolError,
    ToolPolicy, ToolRegistry,
    executor::{
        approval::{
            ApprovalDecision, ApprovalRecord, ApprovalRequest, CallbackApproval, DeferredApproval,
        },
        guardrails::{Guardrail, Verdict},
        hooks::{FnAfterHook, FnBeforeHook, HookAction},
        ledger::{JsonlLedger, LedgerSink, MemoryLedger, Outcome},
        limits::{Run, RunLimits},
    },
    run_sync,
};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The results of `calls` run by `registry`, in call order (`parallel`: concurrently).
async fn results(registry: &ToolRegistry, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
    registry
        .execute(calls, ExecuteOptions::new().parallel(parallel))
        .await
        .into_iter()
        .map(|run| run.result)
        .collect()
}

/// Generous: only reached when a test is about to fail (a deadlock), never on the happy path.
const DEADLOCK: Duration = Duration::from_secs(20);

type Body = Arc<dyn Fn(Value) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync>;

struct TestTool {
    name: String,
    parameters: Value,
    policy: ToolPolicy,
    body: Body,
}

#[async_trait]
impl Tool for TestTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "A test tool."
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    fn policy(&self) -> ToolPolicy {
        self.policy
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        (self.body)(arguments).await
    }
}

fn tool<F, Fut>(name: &str, policy: ToolPolicy, body: F) -> TestTool
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    TestTool {
        name: name.to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}
        }),
        policy,
        body: Arc::new(move |arguments| Box::pin(body(arguments))),
    }
}

/// Returns its arguments, counting its calls.
fn counting_echo(name: &str, policy: ToolPolicy) -> (TestTool, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let t = tool(name, policy, move |arguments| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move { Ok(arguments) }
    });
    (t, count)
}

fn registry(executor: Executor, tools: impl IntoIterator<Item = TestTool>) -> ToolRegistry {
    let mut registry = ToolRegistry::new().with_executor(Arc::new(executor));
    for t in tools {
        registry.register(t).unwrap();
    }
    registry
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLOCK, future)
        .await
        .expect("deadlocked")
}

async fn run_one(registry: &ToolRegistry, call: &ToolCall, context: &CallContext) -> ToolResult {
    registry.execute_one(call, context).await.result
}

fn kind(result: &ToolResult) -> Option<ToolErrorKind> {
    result.error_kind()
}

fn message(result: &ToolResult) -> String {
    let content: Value = serde_json::from_str(&result.content()).unwrap();
    content["error"]["message"].as_str().unwrap().to_owned()
}

/// Sets a flag when dropped: proves a tool's future was dropped, not left running.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A tool that signals it started, then never finishes; its drop flag shows it was stopped.
fn hanging(name: &str, policy: ToolPolicy) -> (TestTool, Arc<AtomicBool>, Arc<Notify>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Notify::new());
    let (flag, signal) = (Arc::clone(&dropped), Arc::clone(&started));
    let t = tool(name, policy, move |_| {
        let guard = DropFlag(Arc::clone(&flag));
        let signal = Arc::clone(&signal);
        async move {
            let _guard = guard;
            signal.notify_one();
            std::future::pending::<()>().await;
            Ok(Value::Null)
        }
    });
    (t, dropped, started)
}

// --- validation and ids ---------------------------------------------------------------------

#[tokio::test]
async fn invalid_arguments_name_the_json_path_and_the_tool_is_not_called() {
    let (echo, count) = counting_echo("echo", ToolPolicy::new());
    let registry = registry(Executor::builder().build(), [echo]);
    let context = registry.context();
    let result = run_one(&registry, &call("c1", "echo", r#"{"n": "x"}"#), &context).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::ToolArgsInvalid));
    assert!(message(&result).contains("`/n`"), "{}", message(&result));
    let unknown = run_one(&registry, &call("c2", "nope", "{}"), &context).await;
    assert_eq!(kind(&unknown), Some(ToolErrorKind::UnknownTool));
    assert_eq!(count.load(Ordering::SeqCst), 0);
}

// The tool loop reads each call's text once and hands the executor that parse: the executor
// validates what it is given and never parses the text again (a call past the list is read
// from its text).
#[tokio::test]
async fn the_executor_validates_the_arguments_its_caller_read_without_parsing_the_text_again() {
    let (echo, count) = counting_echo("echo", ToolPolicy::new());
    let registry = registry(Executor::builder().build(), [echo]);
    let calls = [
        call("c1", "echo", r#"{"n": 1}"#),
        call("c2", "echo", r#"{"n": 1}"#),
        call("c3", "echo", r#"{"n": 3}"#),
    ];
    let read = vec![
        CallArguments::parse(r#"{"n": 2}"#),
        CallArguments::parse("{broken"),
    ];
    let runs = registry
        .execute(&calls, ExecuteOptions::new().read_arguments(read))
        .await;
    assert_eq!(runs[0].result.outcome.as_ref().ok(), Some(&json!({"n": 2})));
    assert_eq!(kind(&runs[1].result), Some(ToolErrorKind::ToolArgsInvalid));
    assert!(
        message(&runs[1].result).contains("not valid JSON"),
        "{}",
        message(&runs[1].result)
    );
    assert_eq!(runs[2].result.outcome.as_ref().ok(), Some(&json!({"n": 3})));
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_call_without_an_id_gets_a_fresh_one() {
    let (echo, _) = counting_echo("echo", ToolPolicy::new());
    let registry = registry(Executor::builder().build(), [echo]);
    let results = results(
        &registry,
        &[call("", "echo", "{}"), call("", "echo", "{}")],
        true,
    )
    .await;
    let ids: Vec<_> = results.iter().map(|r| r.tool_call_id.as_str()).collect();
    assert!(ids.iter().all(|id| id.starts_with("call_")), "{ids:?}");
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test]
async fn a_panic_is_a_generic_tool_error_with_the_payload_in_the_ledger() {
    let ledger = Arc::new(MemoryLedger::new());
    let boom = tool("boom", ToolPolicy::new(), |_| async {
        panic!("secret internals");
    });
    let registry = registry(Executor::builder().ledger(ledger.clone()).build(), [boom]);
    let result = run_one(&registry, &call("c", "boom", "{}"), &registry.context()).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::ToolError));
    assert!(!result.content().contains("secret"), "{}", result.content());
    let record = &ledger.records()[0];
    assert_eq!(record.error_kind, Some(ToolErrorKind::ToolError));
    assert!(
        record
            .detail
            .as_deref()
            .unwrap()
            .contains("secret internals")
    );
}

#[tokio::test]
async fn a_tool_error_detail_reaches_the_ledger_but_not_the_model() {
    let ledger = Arc::new(MemoryLedger::new());
    let failing = tool("down", ToolPolicy::new(), |_| async {
        Err(ToolError::new("weather is down, try later")
            .with_detail(std::io::Error::other("upstream 503")))
    });
    let registry = registry(
        Executor::builder().ledger(ledger.clone()).build(),
        [failing],
    );
    let result = run_one(&registry, &call("c", "down", "{}"), &registry.context()).await;
    assert_eq!(message(&result), "weather is down, try later");
    assert!(!result.content().contains("503"));
    let record = &ledger.records()[0];
    assert_eq!(record.outcome, Outcome::Error);
    assert_eq!(record.detail.as_deref(), Some("upstream 503"));
}

// --- hooks and guardrails -------------------------------------------------------------------

#[tokio::test]
async fn before_hooks_rewrite_arguments_and_short_circuit() {
    let (echo, count) = counting_echo("echo", ToolPolicy::new());
    let executor = Executor::builder()
        .before_hook(FnBeforeHook(|_: &ToolCall, arguments: &mut Value| {
            arguments["s"] = json!("rewritten");
            HookAction::Continue
        }))
        .before_hook(FnBeforeHook(|_: &ToolCall, arguments: &mut Value| {
            if arguments.get("n") == Some(&json!(0)) {
                HookAction::Respond(json!("answered by the hook"))
            } else {
                HookAction::Continue
            }
        }))
        .build();
    let registry = registry(executor, [echo]);
    let context = registry.context();
    let rewritten = run_one(
        &registry,
        &call("a", "echo", r#"{"n": 1, "s": "x"}"#),
        &context,
    )
    .await;
    assert_eq!(rewritten.content(), r#"{"n":1,"s":"rewritten"}"#);
    let answered = run_one(&registry, &call("b", "echo", r#"{"n": 0}"#), &context).await;
    assert_eq!(answered.content(), "answered by the hook");
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn after_hooks_see_and_rewrite_the_outcome() {
    let (echo, _) = counting_echo("echo", ToolPolicy::new());
    let executor = Executor::builder()
        .after_hook(FnAfterHook(
            |_: &ToolCall, outcome: &mut Result<Value, ToolCallError>| {
                if let Ok(value) = outcome {
                    *value = json!({"wrapped": value.clone()});
                }
            },
        ))
        .build();
    let registry = registry(executor, [echo]);
    let result = run_one(
        &registry,
        &call("a", "echo", r#"{"n": 2}"#),
        &registry.context(),
    )
    .await;
    assert_eq!(result.content(), r#"{"wrapped":{"n":2}}"#);
}

struct Rails;

#[async_trait]
impl Guardrail for Rails {
    fn name(&self) -> &str {
        "rails"
    }
    async fn check_input(&self, _call: &ToolCall, arguments: &Value) -> Verdict {
        if arguments.get("s") == Some(&json!("drop table")) {
            Verdict::block("that request is not allowed")
        } else {
            Verdict::Allow
        }
    }
    async fn check_output(&self, _call: &ToolCall, output: &Value) -> Verdict {
        if output.to_string().contains("password") {
            Verdict::block("the result contained a credential")
        } else {
            Verdict::Allow
        }
    }
}

#[tokio::test]
async fn guardrails_block_input_before_the_tool_and_output_after_it() {
    let (echo, count) = counting_echo("echo", ToolPolicy::new());
    let ledger = Arc::new(MemoryLedger::new());
    let executor = Executor::builder()
        .guardrail(Rails)
        .ledger(ledger.clone())
        .build();
    let registry = registry(executor, [echo]);
    let context = registry.context();
    let input = run_one(
        &registry,
        &call("a", "echo", r#"{"s": "drop table"}"#),
        &context,
    )
    .await;
    assert_eq!(kind(&input), Some(ToolErrorKind::GuardrailBlocked));
    assert!(message(&input).contains("not allowed"));
    assert_eq!(count.load(Ordering::SeqCst), 0);

    let output = run_one(
        &registry,
        &call("b", "echo", r#"{"s": "password"}"#),
        &context,
    )
    .await;
    assert_eq!(kind(&output), Some(ToolErrorKind::GuardrailBlocked));
    assert!(
        !output.content().contains("password\""),
        "{}",
        output.content()
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
    let records = ledger.records();
    assert!(records[1].detail.as_deref().unwrap().contains("rails"));
}

// --- approval -------------------------------------------------------------------------------

fn confirm() -> ToolPolicy {
    ToolPolicy::new().confirm(true)
}

#[tokio::test]
async fn confirm_tools_without_an_approver_are_denied() {
    let (pay, count) = counting_echo("pay", confirm());
    let registry = registry(Executor::builder().build(), [pay]);
    let result = run_one(&registry, &call("a", "pay", "{}"), &registry.context()).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::ApprovalDenied));
    assert_eq!(count.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_callback_approves_denies_or_edits_and_edits_are_validated_again() {
    let (pay, count) = counting_echo("pay", confirm());
    let ledger = Arc::new(MemoryLedger::new());
    let approver = CallbackApproval::new(|request: &ApprovalRequest| {
        match request.arguments.get("n").and_then(Value::as_i64) {
            Some(1) => ApprovalDecision::Approve,
            Some(2) => ApprovalDecision::ApproveWithEdits {
                arguments: json!({"n": 20}),
            },
            Some(3) => ApprovalDecision::ApproveWithEdits {
                arguments: json!({"n": "not a number"}),
            },
            _ => ApprovalDecision::Deny {
                reason: "the amount is too high".to_owned(),
            },
        }
    });
    let executor = Executor::builder()
        .approval(Arc::new(approver))
        .ledger(ledger.clone())
        .build();
    let registry = registry(executor, [pay]);
    let calls = [
        call("1", "pay", r#"{"n": 1}"#),
        call("2", "pay", r#"{"n": 2}"#),
        call("3", "pay", r#"{"n": 3}"#),
        call("4", "pay", r#"{"n": 4}"#),
    ];
    let results = results(&registry, &calls, false).await;
    assert_eq!(results[0].content(), r#"{"n":1}"#);
    assert_eq!(results[1].content(), r#"{"n":20}"#);
    assert_eq!(kind(&results[2]), Some(ToolErrorKind::ToolArgsInvalid));
    assert_eq!(kind(&results[3]), Some(ToolErrorKind::ApprovalDenied));
    assert!(message(&results[3]).contains("too high"));
    assert_eq!(count.load(Ordering::SeqCst), 2);
    let approvals: Vec<_> = ledger.records().iter().map(|r| r.approval).collect();
    assert_eq!(
        approvals,
        [
            Some(ApprovalRecord::Approved),
            Some(ApprovalRecord::ApprovedWithEdits),
            Some(ApprovalRecord::ApprovedWithEdits),
            Some(ApprovalRecord::Denied),
        ]
    );
    assert_eq!(ledger.records()[1].arguments, json!({"n": 20}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_approval_is_answered_later_from_another_task() {
    let (pay, count) = counting_echo("pay", confirm());
    let approver = DeferredApproval::new();
    let registry = Arc::new(registry(
        Executor::builder()
            .approval(Arc::new(approver.clone()))
            .build(),
        [pay],
    ));
    let waiting = {
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let context = registry.context();
            run_one(&registry, &call("c1", "pay", r#"{"n": 5}"#), &context).await
        })
    };
    // The operator's side: wait until the call is parked, then decide from another task.
    let operator = tokio::spawn(async move {
        while approver.pending().is_empty() {
            tokio::task::yield_now().await;
        }
        let parked = approver.pending().remove(0);
        assert_eq!(parked.arguments, json!({"n": 5}));
        assert_eq!(
            parked.call_id, "c1",
            "the model's id is shown, not used as the key"
        );
        approver
            .decide(
                &parked.id,
                ApprovalDecision::ApproveWithEdits {
                    arguments: json!({"n": 4}),
                },
            )
            .unwrap();
    });
    let result = within(waiting).await.unwrap();
    within(operator).await.unwrap();
    assert_eq!(result.content(), r#"{"n":4}"#);
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_caller_that_cannot_wait_gets_pending_and_collects_the_decision_later() {
    let (pay, count) = counting_echo("pay", confirm());
    let approver = DeferredApproval::new();
    let registry = registry(
        Executor::builder()
            .approval(Arc::new(approver.clone()))
            .build(),
        [pay],
    );
    let context = registry.context().without_waiting();
    let the_call = call("c7", "pay", r#"{"n": 1}"#);
    let first = run_one(&registry, &the_call, &context).await;
    assert_eq!(kind(&first), Some(ToolErrorKind::ApprovalPending));
    assert_eq!(count.load(Ordering::SeqCst), 0);

    let parked = approver.pending().remove(0);
    approver
        .decide(&parked.id, ApprovalDecision::Approve)
        .unwrap();
    let again = run_one(&registry, &the_call, &context).await;
    assert!(!again.is_error(), "{}", again.content());
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_deferred_wait_timeout_answers_pending() {
    let (pay, _) = counting_echo("pay", confirm());
    let approver = DeferredApproval::new().wait_timeout(Duration::from_secs(60));
    let registry = registry(
        Executor::builder()
            .approval(Arc::new(approver.clone()))
            .build(),
        [pay],
    );
    let result = run_one(&registry, &call("c", "pay", "{}"), &registry.context()).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::ApprovalPending));
    assert_eq!(approver.pending().len(), 1);
}

// --- timeouts and cancellation --------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_timeout_really_stops_a_slow_tool() {
    let (slow, dropped, _) = hanging("slow", ToolPolicy::new().timeout(Duration::from_secs(2)));
    let registry = registry(Executor::builder().build(), [slow]);
    let started = tokio::time::Instant::now();
    let result = run_one(&registry, &call("c", "slow", "{}"), &registry.context()).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::Timeout));
    assert!(message(&result).contains("2s"), "{}", message(&result));
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert!(
        dropped.load(Ordering::SeqCst),
        "the tool's future was not dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn tools_without_a_timeout_get_the_executor_default() {
    let (slow, dropped, _) = hanging("slow", ToolPolicy::new());
    let executor = Executor::builder()
        .default_timeout(Duration::from_millis(500))
        .build();
    let registry = registry(executor, [slow]);
    let result = run_one(&registry, &call("c", "slow", "{}"), &registry.context()).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::Timeout));
    assert!(dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn cancelling_the_run_stops_a_cancellable_call_mid_way() {
    let (slow, dropped, started) = hanging("slow", ToolPolicy::new());
    let registry = registry(Executor::builder().build(), [slow]);
    let context = registry.context();
    let run = context.run().clone();
    let canceller = async {
        started.notified().await;
        run.cancel();
    };
    let the_call = call("c", "slow", "{}");
    let (result, ()) =
        within(async { tokio::join!(run_one(&registry, &the_call, &context), canceller) }).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::Cancelled));
    assert!(dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn cancelling_the_run_does_not_stop_a_non_cancellable_call() {
    let release = Arc::new(Notify::new());
    let started = Arc::new(Notify::new());
    let (gate, signal) = (Arc::clone(&release), Arc::clone(&started));
    let payment = tool("pay", ToolPolicy::new().cancellable(false), move |_| {
        let (gate, signal) = (Arc::clone(&gate), Arc::clone(&signal));
        async move {
            signal.notify_one();
            gate.notified().await;
            Ok(json!("paid"))
        }
    });
    let registry = registry(Executor::builder().build(), [payment]);
    let context = registry.context();
    let run = context.run().clone();
    let driver = async {
        started.notified().await;
        run.cancel();
        release.notify_one();
    };
    let the_call = call("c", "pay", "{}");
    let (result, ()) =
        within(async { tokio::join!(run_one(&registry, &the_call, &context), driver) }).await;
    assert_eq!(result.content(), "paid");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_stops_the_wait_for_a_non_cancellable_call_but_not_the_call() {
    let release = Arc::new(Notify::new());
    let finished = Arc::new(Notify::new());
    let (gate, done) = (Arc::clone(&release), Arc::clone(&finished));
    let booking = tool(
        "book",
        ToolPolicy::new()
            .cancellable(false)
            .timeout(Duration::from_secs(1)),
        move |_| {
            let (gate, done) = (Arc::clone(&gate), Arc::clone(&done));
            async move {
                gate.notified().await;
                done.notify_one();
                Ok(json!("booked"))
            }
        },
    );
    let registry = registry(Executor::builder().build(), [booking]);
    let result = run_one(&registry, &call("c", "book", "{}"), &registry.context()).await;
    // The model is told the booking runs on (not `Timeout`, which invites a retry).
    assert_eq!(kind(&result), Some(ToolErrorKind::StillRunning));
    // The booking task is still alive and finishes once released.
    release.notify_one();
    within(finished.notified()).await;
}

#[tokio::test]
async fn a_cancelled_run_runs_no_further_cancellable_calls() {
    let (echo, count) = counting_echo("echo", ToolPolicy::new());
    let registry = registry(Executor::builder().build(), [echo]);
    let context = registry.context();
    context.run().cancel();
    let result = run_one(&registry, &call("c", "echo", "{}"), &context).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::Cancelled));
    assert_eq!(count.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_call_token_stops_its_call_and_records_it_as_cancelled() {
    let (slow, dropped, started) = hanging("slow", ToolPolicy::new());
    let (echo, count) = counting_echo("echo", ToolPolicy::new());
    let ledger = Arc::new(MemoryLedger::new());
    let executor = Executor::builder().ledger(ledger.clone()).build();
    let registry = registry(executor, [slow, echo]);
    let context = registry.context();
    let token = tokio_util::sync::CancellationToken::new();
    let for_call = context.clone().with_call_token(token.clone());
    let canceller = async {
        started.notified().await;
        token.cancel();
    };
    let the_call = call("c1", "slow", "{}");
    let (result, ()) =
        within(async { tokio::join!(run_one(&registry, &the_call, &for_call), canceller) }).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::Cancelled));
    assert!(
        dropped.load(Ordering::SeqCst),
        "the tool's future was not dropped"
    );
    let records = ledger.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, Outcome::Error);
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::Cancelled));
    assert!(
        records[0]
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("call's"),
        "{:?}",
        records[0].detail
    );
    // Only that call was cancelled: the run goes on.
    assert!(!context.run().token().is_cancelled());
    let next = run_one(&registry, &call("c2", "echo", r#"{"n":1}"#), &context).await;
    assert!(!next.is_error(), "{}", next.content());
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_call_token_does_not_stop_a_non_cancellable_call() {
    let release = Arc::new(Notify::new());
    let started = Arc::new(Notify::new());
    let (gate, signal) = (Arc::clone(&release), Arc::clone(&started));
    let payment = tool("pay", ToolPolicy::new().cancellable(false), move |_| {
        let (gate, signal) = (Arc::clone(&gate), Arc::clone(&signal));
        async move {
            signal.notify_one();
            gate.notified().await;
            Ok(json!("paid"))
        }
    });
    let registry = registry(Executor::builder().build(), [payment]);
    let token = tokio_util::sync::CancellationToken::new();
    let context = registry.context().with_call_token(token.clone());
    let driver = async {
        started.notified().await;
        token.cancel();
        release.notify_one();
    };
    let the_call = call("c", "pay", "{}");
    let (result, ()) =
        within(async { tokio::join!(run_one(&registry, &the_call, &context), driver) }).await;
    assert_eq!(result.content(), "paid");
}

#[tokio::test]
async fn the_run_token_still_stops_a_call_that_has_its_own_token() {
    let (slow, dropped, started) = hanging("slow", ToolPolicy::new());
    let registry = registry(Executor::builder().build(), [slow]);
    let context = registry
        .executor()
        .context()
        .with_call_token(tokio_util::sync::CancellationToken::new());
    let run = context.run().clone();
    let canceller = async {
        started.notified().await;
        run.cancel();
    };
    let the_call = call("c", "slow", "{}");
    let (result, ()) =
        within(async { tokio::join!(run_one(&registry, &the_call, &context), canceller) }).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::Cancelled));
    assert!(dropped.load(Ordering::SeqCst));
}

// --- run limits -----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_limits_hold_exactly_across_parallel_calls() {
    let (echo, count) = counting_echo("echo", ToolPolicy::new());
    let (other, other_count) = counting_echo("other", ToolPolicy::new());
    let limits = RunLimits {
        max_calls: Some(5),
        max_calls_per_tool: Some(3),
        max_tool_time: None,
    };
    let registry = registry(
        Executor::builder().run_limits(limits).build(),
        [echo, other],
    )
    .with_max_concurrency(32);
    let calls: Vec<_> = (0..20)
        .map(|i| {
            call(
                &i.to_string(),
                if i % 2 == 0 { "echo" } else { "other" },
                "{}",
            )
        })
        .collect();
    let context = CallContext::new(Run::new(limits));
    let options = ExecuteOptions::new().in_run(context.clone());
    let runs = within(registry.execute(&calls, options)).await;
    let over = runs
        .iter()
        .filter(|r| kind(&r.result) == Some(ToolErrorKind::RunLimitExceeded))
        .count();
    assert_eq!(over, 15);
    assert_eq!(
        count.load(Ordering::SeqCst) + other_count.load(Ordering::SeqCst),
        5
    );
    assert!(count.load(Ordering::SeqCst) <= 3 && other_count.load(Ordering::SeqCst) <= 3);
    assert_eq!(context.run().calls(), 5);

    // Each `execute` is a run of its own, with the executor's limits.
    let fresh = results(&registry, &calls[..2], true).await;
    assert!(fresh.iter().all(|r| !r.is_error()));
}

#[tokio::test(start_paused = true)]
async fn the_runs_tool_time_is_a_budget() {
    let sleeper = tool("sleep", ToolPolicy::new(), |_| async {
        tokio::time::sleep(Duration::from_secs(6)).await;
        Ok(json!("done"))
    });
    let limits = RunLimits {
        max_tool_time: Some(Duration::from_secs(10)),
        ..RunLimits::default()
    };
    let registry = registry(Executor::builder().run_limits(limits).build(), [sleeper]);
    let calls: Vec<_> = (0..3)
        .map(|i| call(&i.to_string(), "sleep", "{}"))
        .collect();
    let results = results(&registry, &calls, false).await;
    assert!(!results[0].is_error());
    // The second call is stopped when the budget runs out (4 s in), the third never starts.
    assert_eq!(kind(&results[1]), Some(ToolErrorKind::RunLimitExceeded));
    assert_eq!(kind(&results[2]), Some(ToolErrorKind::RunLimitExceeded));
}

// --- cache ----------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn cached_results_are_reused_until_they_expire() {
    let (echo, count) = counting_echo("echo", ToolPolicy::new().cache_ttl(Duration::from_secs(60)));
    let ledger = Arc::new(MemoryLedger::new());
    let registry = registry(Executor::builder().ledger(ledger.clone()).build(), [echo]);
    let context = registry.context();
    let first = run_one(
        &registry,
        &call("1", "echo", r#"{"n": 1, "s": "a"}"#),
        &context,
    )
    .await;
    // Same arguments in another key order: a hit.
    let second = run_one(
        &registry,
        &call("2", "echo", r#"{"s": "a", "n": 1}"#),
        &context,
    )
    .await;
    assert_eq!(first.content(), second.content());
    assert_eq!(count.load(Ordering::SeqCst), 1);
    // Other arguments: a miss.
    run_one(&registry, &call("3", "echo", r#"{"n": 2}"#), &context).await;
    assert_eq!(count.load(Ordering::SeqCst), 2);

    tokio::time::advance(Duration::from_secs(61)).await;
    run_one(
        &registry,
        &call("4", "echo", r#"{"n": 1, "s": "a"}"#),
        &context,
    )
    .await;
    assert_eq!(count.load(Ordering::SeqCst), 3);
    let hits: Vec<_> = ledger.records().iter().map(|r| r.cache_hit).collect();
    assert_eq!(hits, [false, true, false, false]);
}

#[tokio::test]
async fn failures_are_not_cached_and_uncached_tools_always_run() {
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let flaky = tool(
        "flaky",
        ToolPolicy::new().cache_ttl(Duration::from_secs(60)),
        move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            async { Err(ToolError::new("not now")) }
        },
    );
    let (plain, plain_count) = counting_echo("plain", ToolPolicy::new());
    let registry = registry(Executor::builder().build(), [flaky, plain]);
    let calls = [
        call("1", "flaky", "{}"),
        call("2", "flaky", "{}"),
        call("3", "plain", "{}"),
        call("4", "plain", "{}"),
    ];
    results(&registry, &calls, false).await;
    assert_eq!(count.load(Ordering::SeqCst), 2);
    assert_eq!(plain_count.load(Ordering::SeqCst), 2);
}

// --- ledger ---------------------------------------------------------------------------------

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "crewline-{name}-{}-{}.jsonl",
        std::process::id(),
        uuid_like()
    ))
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[tokio::test]
async fn the_jsonl_ledger_survives_a_torn_last_line() {
    let path = temp_path("ledger");
    let (echo, _) = counting_echo("echo", ToolPolicy::new());
    {
        let ledger = Arc::new(JsonlLedger::open(&path).unwrap());
        let registry = registry(Executor::builder().ledger(ledger).build(), [echo]);
        registry
            .execute(
                &[call("a", "echo", r#"{"n": 1}"#), call("b", "nope", "{}")],
                ExecuteOptions::new().sequential(),
            )
            .await;
    }
    // A crash mid-write: half a record, no newline.
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(br#"{"call_id":"torn","tool":"ec"#).unwrap();
    }
    let records = JsonlLedger::read(&path).unwrap();
    let ids: Vec<_> = records.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(records[0].arguments, json!({"n": 1}));
    assert_eq!(records[1].error_kind, Some(ToolErrorKind::UnknownTool));

    // Reopened after the crash, new records start on a line of their own.
    let reopened = JsonlLedger::open(&path).unwrap();
    let mut record = records[0].clone();
    record.call_id = "c".to_owned();
    reopened.record(&record).unwrap();
    // The writer thread writes it; wait for that before reading.
    reopened.flush();
    let ids: Vec<_> = JsonlLedger::read(&path)
        .unwrap()
        .into_iter()
        .map(|r| r.call_id)
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn the_ledger_has_one_record_per_call_with_its_kind_and_latency() {
    let ledger = Arc::new(MemoryLedger::new());
    let (echo, _) = counting_echo("echo", ToolPolicy::new());
    let registry = registry(Executor::builder().ledger(ledger.clone()).build(), [echo]);
    registry
        .execute(
            &[
                call("1", "echo", "{}"),
                call("2", "echo", "[1]"),
                call("3", "x", "{}"),
            ],
            ExecuteOptions::new(),
        )
        .await;
    let mut records = ledger.records();
    records.sort_by(|a, b| a.call_id.cmp(&b.call_id));
    let kinds: Vec<_> = records.iter().map(|r| r.error_kind).collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(ToolErrorKind::ToolArgsInvalid),
            Some(ToolErrorKind::UnknownTool)
        ]
    );
    assert!(records.iter().all(|r| r.timestamp_ms > 0));
    assert_eq!(records[1].arguments, json!("[1]"));
}

// --- defaults and sync ----------------------------------------------------------------------

// There is no process-wide default executor: each new registry has one of its own, shared
// by its clones, subsets and exports only.
#[test]
fn each_new_registry_has_an_executor_of_its_own() {
    let (first, second) = (ToolRegistry::new(), ToolRegistry::new());
    assert!(!Arc::ptr_eq(first.executor(), second.executor()));
    assert!(Arc::ptr_eq(first.executor(), first.clone().executor()));
    let subset = first.subset(&[]).unwrap();
    assert!(Arc::ptr_eq(first.executor(), subset.executor()));
    let shared = Arc::new(Executor::default());
    let given = ToolRegistry::new().with_executor(Arc::clone(&shared));
    assert!(Arc::ptr_eq(given.executor(), &shared));
}

#[test]
fn run_sync_runs_a_call_from_plain_synchronous_code() {
    let (echo, _) = counting_echo("echo", ToolPolicy::new());
    let registry = registry(Executor::builder().build(), [echo]);
    let context = registry.context();
    let run = run_sync(registry.execute_one(&call("1", "echo", r#"{"n": 3}"#), &context)).unwrap();
    assert_eq!(run.result.content(), r#"{"n":3}"#);
}

#[tokio::test(flavor = "current_thread")]
async fn run_sync_inside_a_runtime_runs_a_call_on_its_own_thread_without_deadlock() {
    let sleeper = tool("sleep", ToolPolicy::new(), |_| async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(json!("slept"))
    });
    let registry = registry(Executor::builder().build(), [sleeper]);
    let context = registry.context();
    let run = run_sync(registry.execute_one(&call("1", "sleep", "{}"), &context)).unwrap();
    assert_eq!(run.result.content(), "slept");
}

// `ToolPolicy::cancellable` is the one way to say a tool is not cancellable.
#[test]
fn a_policy_says_whether_a_tool_is_cancellable() {
    struct Booking;
    #[async_trait]
    impl Tool for Booking {
        fn name(&self) -> &str {
            "book"
        }
        fn description(&self) -> &str {
            "Books."
        }
        fn parameters(&self) -> Value {
            json!({"type": "object"})
        }
        fn policy(&self) -> ToolPolicy {
            ToolPolicy::new().cancellable(false)
        }
        async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
            Ok(Value::Null)
        }
    }
    assert!(ToolPolicy::default().cancellable);
    let policy = Booking.policy();
    assert!(!policy.cancellable);
    assert_eq!(policy, ToolPolicy::new().cancellable(false));
}

// --- calls cut short: every call that started has a record ---------------------------------

/// Waits (bounded) until `ledger` holds `n` records.
async fn records_eventually(
    ledger: &MemoryLedger,
    n: usize,
) -> Vec<crewline_tools::executor::ledger::LedgerRecord> {
    within(async {
        loop {
            let records = ledger.records();
            if records.len() >= n {
                return records;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

#[tokio::test]
async fn a_barge_in_that_drops_the_whole_call_still_records_it_as_cancelled() {
    let (slow, dropped, started) = hanging("slow", ToolPolicy::new());
    let ledger = Arc::new(MemoryLedger::new());
    let registry = registry(Executor::builder().ledger(ledger.clone()).build(), [slow]);
    let context = registry.context();
    let the_call = call("c1", "slow", r#"{"n": 7}"#);
    // The turn's future is dropped as a barge-in drops it: no token fires.
    tokio::select! {
        _ = run_one(&registry, &the_call, &context) => panic!("the hanging tool finished"),
        () = started.notified() => {}
    }
    assert!(dropped.load(Ordering::SeqCst));
    let records = ledger.records();
    assert_eq!(records.len(), 1, "the dropped call has no ledger record");
    assert_eq!(records[0].call_id, "c1");
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::Cancelled));
    assert_eq!(records[0].arguments, json!({"n": 7}));
    assert!(!records[0].ran_on);
}

/// A non-cancellable tool that finishes with "paid" once released.
fn gated_payment(policy: ToolPolicy) -> (TestTool, Arc<Notify>, Arc<Notify>) {
    let release = Arc::new(Notify::new());
    let started = Arc::new(Notify::new());
    let (gate, signal) = (Arc::clone(&release), Arc::clone(&started));
    let payment = tool("pay", policy.cancellable(false), move |_| {
        let (gate, signal) = (Arc::clone(&gate), Arc::clone(&signal));
        async move {
            signal.notify_one();
            gate.notified().await;
            Ok(json!("paid"))
        }
    });
    (payment, release, started)
}

#[tokio::test]
async fn a_non_cancellable_call_dropped_by_a_barge_in_records_its_real_outcome_when_it_ends() {
    let (payment, release, started) = gated_payment(ToolPolicy::new());
    let ledger = Arc::new(MemoryLedger::new());
    let registry = registry(
        Executor::builder().ledger(ledger.clone()).build(),
        [payment],
    );
    let context = registry.context();
    let the_call = call("p1", "pay", r#"{"n": 100}"#);
    tokio::select! {
        _ = run_one(&registry, &the_call, &context) => panic!("the payment finished early"),
        () = started.notified() => {}
    }
    // The payment runs on after the barge-in; nothing is recorded until it ends.
    assert!(ledger.records().is_empty(), "{:?}", ledger.records());
    release.notify_one();
    let records = records_eventually(&ledger, 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].call_id, "p1");
    assert_eq!(records[0].outcome, Outcome::Ok, "{:?}", records[0]);
    assert_eq!(records[0].arguments, json!({"n": 100}));
    assert!(records[0].ran_on);
}

#[tokio::test(start_paused = true)]
async fn a_non_cancellable_call_past_its_timeout_records_what_the_model_was_told_and_then_the_real_outcome()
 {
    let (payment, release, _started) =
        gated_payment(ToolPolicy::new().timeout(Duration::from_secs(1)));
    let ledger = Arc::new(MemoryLedger::new());
    let registry = registry(
        Executor::builder().ledger(ledger.clone()).build(),
        [payment],
    );
    let result = run_one(&registry, &call("p1", "pay", "{}"), &registry.context()).await;
    // The model is told the payment still runs (never a plain Timeout it might retry on).
    assert_eq!(kind(&result), Some(ToolErrorKind::StillRunning));
    release.notify_one();
    let records = records_eventually(&ledger, 2).await;
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::StillRunning));
    assert!(!records[0].ran_on);
    assert_eq!(records[1].outcome, Outcome::Ok);
    assert!(records[1].ran_on, "the real outcome is marked as ran on");
}

#[tokio::test]
async fn detached_tools_are_tracked_until_they_end() {
    let (payment, release, started) = gated_payment(ToolPolicy::new());
    let registry = registry(Executor::builder().build(), [payment]);
    let context = registry.context();
    let the_call = call("p1", "pay", "{}");
    tokio::select! {
        _ = run_one(&registry, &the_call, &context) => panic!("finished early"),
        () = started.notified() => {}
    }
    let tracker = crewline_tools::executor::detached_tasks();
    assert!(!tracker.is_empty(), "the running payment is not tracked");
    release.notify_one();
    within(tracker.wait()).await;
}
