//! Running calls.

use super::*;

#[tokio::test]
async fn parallel_results_are_in_call_order_even_when_they_finish_out_of_order() {
    // `wait` can only finish after `open` ran, so completion order is 1, 2, 0.
    let gate = Arc::new(Notify::new());
    let (g1, g2) = (Arc::clone(&gate), Arc::clone(&gate));
    let registry = registry_of([
        tool("wait", no_args(), move |_| {
            let gate = Arc::clone(&g1);
            async move {
                gate.notified().await;
                Ok(json!("waited"))
            }
        }),
        tool("open", no_args(), move |_| {
            let gate = Arc::clone(&g2);
            async move {
                gate.notify_one();
                Ok(json!("opened"))
            }
        }),
        echo("echo"),
    ]);
    let calls = [
        call("c0", "wait", "{}"),
        call("c1", "echo", r#"{"n":1}"#),
        call("c2", "open", "{}"),
    ];
    let results = within(results(&registry, &calls, true)).await;
    assert_eq!(ids(&results), ["c0", "c1", "c2"]);
    let contents: Vec<String> = results.iter().map(ToolResult::content).collect();
    assert_eq!(contents, ["waited", r#"{"n":1}"#, "opened"]);
}

#[tokio::test]
async fn sequential_results_are_in_call_order() {
    let registry = registry_of([echo("echo")]);
    let calls: Vec<ToolCall> = (0..5)
        .map(|i| call(&format!("c{i}"), "echo", &format!(r#"{{"i":{i}}}"#)))
        .collect();
    let results = within(results(&registry, &calls, false)).await;
    assert_eq!(ids(&results), ["c0", "c1", "c2", "c3", "c4"]);
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result.content(), format!(r#"{{"i":{i}}}"#));
    }
}

#[tokio::test]
async fn parallel_calls_really_overlap() {
    // Both calls must be inside the tool at once to pass the barrier; one at a time deadlocks.
    let barrier = Arc::new(Barrier::new(2));
    let registry = registry_of([tool("meet", no_args(), move |_| {
        let barrier = Arc::clone(&barrier);
        async move {
            barrier.wait().await;
            Ok(json!("met"))
        }
    })]);
    let calls = [call("a", "meet", "{}"), call("b", "meet", "{}")];
    let results = within(results(&registry, &calls, true)).await;
    assert!(
        results
            .iter()
            .all(|r| !r.is_error() && r.content() == "met")
    );
}

/// A tool that logs its start and end, yielding in between so that overlapping calls would
/// interleave, and counts how many run at once.
fn logging_tool(
    log: Arc<Mutex<Vec<String>>>,
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
) -> TestTool {
    tool("log", json!({"type": "object"}), move |arguments| {
        let (log, running, peak) = (Arc::clone(&log), Arc::clone(&running), Arc::clone(&peak));
        async move {
            let i = arguments["i"].as_u64().unwrap();
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            log.lock().unwrap().push(format!("start {i}"));
            for _ in 0..5 {
                tokio::task::yield_now().await;
            }
            log.lock().unwrap().push(format!("end {i}"));
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(Value::Null)
        }
    })
}

#[tokio::test]
async fn sequential_calls_run_one_at_a_time_in_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let peak = Arc::new(AtomicUsize::new(0));
    let registry = registry_of([logging_tool(
        Arc::clone(&log),
        Arc::new(AtomicUsize::new(0)),
        Arc::clone(&peak),
    )]);
    let calls: Vec<ToolCall> = (0..4)
        .map(|i| call(&format!("c{i}"), "log", &format!(r#"{{"i":{i}}}"#)))
        .collect();
    within(results(&registry, &calls, false)).await;
    assert_eq!(peak.load(Ordering::SeqCst), 1);
    let expected: Vec<String> = (0..4)
        .flat_map(|i| [format!("start {i}"), format!("end {i}")])
        .collect();
    assert_eq!(*log.lock().unwrap(), expected);
}

/// Runs `calls` holding tools on `registry`, checks that `limit` of them get to run at once,
/// then lets them all finish; returns the peak number running at once.
async fn peak_concurrency(limit: usize, calls: usize) -> usize {
    let release = Arc::new(Semaphore::new(0));
    let (running_tx, mut running_rx) = watch::channel(0usize);
    let running_tx = Arc::new(running_tx);
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (Arc::clone(&release), Arc::clone(&peak));
    let registry = registry_of([tool("hold", no_args(), move |_| {
        let (release, running, peak) = (Arc::clone(&r), Arc::clone(&running_tx), Arc::clone(&p));
        async move {
            running.send_modify(|n| *n += 1);
            peak.fetch_max(*running.borrow(), Ordering::SeqCst);
            release.acquire().await.unwrap().forget();
            running.send_modify(|n| *n -= 1);
            Ok(Value::Null)
        }
    })])
    .with_max_concurrency(limit);
    let calls: Vec<ToolCall> = (0..calls)
        .map(|i| call(&format!("c{i}"), "hold", "{}"))
        .collect();
    let expected_peak = limit.clamp(1, calls.len());
    let controller = async {
        running_rx.wait_for(|n| *n >= expected_peak).await.unwrap();
        release.add_permits(calls.len());
    };
    let (results, ()) =
        within(async { tokio::join!(results(&registry, &calls, true), controller) }).await;
    assert!(results.iter().all(|r| !r.is_error()));
    peak.load(Ordering::SeqCst)
}

#[tokio::test]
async fn max_concurrency_bounds_parallel_calls() {
    assert_eq!(peak_concurrency(2, 6).await, 2);
    assert_eq!(peak_concurrency(3, 3).await, 3);
}

#[tokio::test]
async fn a_max_concurrency_of_zero_runs_one_at_a_time() {
    assert_eq!(
        ToolRegistry::new()
            .with_max_concurrency(0)
            .max_concurrency(),
        1
    );
    assert_eq!(peak_concurrency(0, 3).await, 1);
    assert_eq!(
        ToolRegistry::new().max_concurrency(),
        DEFAULT_MAX_CONCURRENCY
    );
}

#[tokio::test]
async fn execute_each_yields_each_call_as_it_finishes() {
    let (slow_tx, slow_rx) = oneshot::channel::<()>();
    let (fast_tx, fast_rx) = oneshot::channel::<()>();
    let slow_rx = Arc::new(Mutex::new(Some(slow_rx)));
    let fast_rx = Arc::new(Mutex::new(Some(fast_rx)));
    let waiting = |name: &str, rx: Arc<Mutex<Option<oneshot::Receiver<()>>>>| {
        tool(name, no_args(), move |_| {
            let rx = rx.lock().unwrap().take();
            async move {
                rx.unwrap().await.unwrap();
                Ok(json!("done"))
            }
        })
    };
    let registry = registry_of([waiting("slow", slow_rx), waiting("fast", fast_rx)]);
    let calls = [call("s", "slow", "{}"), call("f", "fast", "{}")];
    let mut finished = registry.execute_each(&calls, ExecuteOptions::new());

    fast_tx.send(()).unwrap();
    let (index, run) = within(finished.next()).await.unwrap();
    assert_eq!((index, run.result.tool_call_id.as_str()), (1, "f"));

    slow_tx.send(()).unwrap();
    let (index, run) = within(finished.next()).await.unwrap();
    assert_eq!((index, run.result.tool_call_id.as_str()), (0, "s"));
    assert!(within(finished.next()).await.is_none());
}

/// Sets its flag when dropped, i.e. when the tool's future is dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn dropping_the_execution_cancels_running_tools() {
    let dropped = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Notify::new());
    let (d, s) = (Arc::clone(&dropped), Arc::clone(&started));
    let registry = registry_of([tool("forever", no_args(), move |_| {
        let (guard, started) = (DropFlag(Arc::clone(&d)), Arc::clone(&s));
        async move {
            let _guard = guard;
            started.notify_one();
            std::future::pending::<()>().await;
            Ok(Value::Null)
        }
    })]);
    let calls = [call("a", "forever", "{}"), call("b", "forever", "{}")];
    // Boxed so that `drop` below really drops the future (a pinned reference would not).
    let mut execution = Box::pin(results(&registry, &calls, true));
    within(async {
        tokio::select! {
            _ = &mut execution => panic!("a tool that never ends finished"),
            () = started.notified() => {}
        }
    })
    .await;
    assert!(!dropped.load(Ordering::SeqCst), "still running");
    drop(execution);
    assert!(dropped.load(Ordering::SeqCst), "the tool was not cancelled");
}

#[tokio::test]
async fn execute_reports_latency_in_call_order() {
    let registry = registry_of([echo("echo")]);
    let calls = [call("a", "echo", "{}"), call("b", "nope", "{}")];
    let runs = within(registry.execute(&calls, ExecuteOptions::new())).await;
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].result.tool_call_id, "a");
    assert_eq!(
        runs[1].result.error_kind(),
        Some(ToolErrorKind::UnknownTool)
    );
    assert!(runs.iter().all(|r| r.latency < DEADLOCK));
}

#[tokio::test]
async fn an_empty_batch_gives_no_results() {
    let registry = registry_of([echo("echo")]);
    assert!(results(&registry, &[], true).await.is_empty());
}
