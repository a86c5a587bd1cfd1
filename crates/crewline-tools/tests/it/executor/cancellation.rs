//! Timeouts and cancellation.

use super::*;

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
