//! Hooks and guardrails.

use super::*;

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
