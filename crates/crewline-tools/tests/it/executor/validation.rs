//! Validation and ids.

use super::*;

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
