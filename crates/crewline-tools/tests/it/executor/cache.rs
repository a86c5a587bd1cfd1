//! Cache.

use super::*;

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
