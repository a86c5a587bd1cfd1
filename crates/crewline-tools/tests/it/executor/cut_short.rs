//! Calls cut short: every call that started has a record.

use super::*;

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
    let tracker = context.scope().detached_tasks();
    assert!(!tracker.is_empty(), "the running payment is not tracked");
    release.notify_one();
    within(tracker.wait()).await;
}

/// A tool whose effect happens elsewhere: once it sent its request, being cut short means
/// it may have run ([`CutShort`](crewline_tools::CutShort)); it then waits forever.
fn sent_elsewhere() -> (TestTool, Arc<Notify>) {
    let sent = Arc::new(Notify::new());
    let signal = Arc::clone(&sent);
    let t = tool("send", ToolPolicy::new(), move |_| {
        let signal = Arc::clone(&signal);
        async move {
            if let Some(cut) = crewline_tools::CutShort::current() {
                cut.reads(Err(ToolError::outcome_unknown("it may have run")));
            }
            signal.notify_one();
            std::future::pending::<()>().await;
            Ok(Value::Null)
        }
    });
    (t, sent)
}

#[tokio::test]
async fn a_call_whose_tool_says_it_may_have_run_is_unknown_when_cut_short_not_cancelled() {
    let (send, sent) = sent_elsewhere();
    let ledger = Arc::new(MemoryLedger::new());
    let registry = registry(Executor::builder().ledger(ledger.clone()).build(), [send]);

    // A barge-in drops the call: the model and the ledger read the unknown outcome.
    let context = registry.context();
    let the_call = call("c1", "send", "{}");
    tokio::select! {
        _ = run_one(&registry, &the_call, &context) => panic!("the call finished"),
        () = sent.notified() => {}
    }
    let told = registry.interrupted(&the_call, &context);
    assert_eq!(kind(&told), Some(ToolErrorKind::OutcomeUnknown));
    assert_eq!(message(&told), "it may have run");
    let records = ledger.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::OutcomeUnknown));

    // The call's token fires: the same.
    let token = tokio_util::sync::CancellationToken::new();
    let context = registry.context().with_call_token(token.clone());
    let the_call = call("c2", "send", "{}");
    let cancelling = async {
        sent.notified().await;
        token.cancel();
    };
    let (result, ()) =
        within(async { tokio::join!(run_one(&registry, &the_call, &context), cancelling) }).await;
    assert_eq!(kind(&result), Some(ToolErrorKind::OutcomeUnknown));

    // A tool that says nothing is cancelled, as before.
    let (slow, _, started) = hanging("slow", ToolPolicy::new());
    let registry = registry_with(slow);
    let context = registry.context();
    let the_call = call("c3", "slow", "{}");
    tokio::select! {
        _ = run_one(&registry, &the_call, &context) => panic!("the call finished"),
        () = started.notified() => {}
    }
    let told = registry.interrupted(&the_call, &context);
    assert_eq!(kind(&told), Some(ToolErrorKind::Cancelled));
}

fn registry_with(t: TestTool) -> ToolRegistry {
    registry(Executor::builder().build(), [t])
}
