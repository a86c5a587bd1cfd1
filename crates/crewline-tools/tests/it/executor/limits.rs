//! Run limits.

use super::*;

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
