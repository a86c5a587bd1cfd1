//! Approval.

use super::*;

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

#[tokio::test]
async fn a_call_too_large_to_park_is_denied_saying_why_and_others_still_park() {
    let (pay, count) = counting_echo("pay", confirm());
    let approver = DeferredApproval::new();
    let registry = registry(
        Executor::builder()
            .approval(Arc::new(approver.clone()))
            .build(),
        [pay],
    );
    let context = registry.context().without_waiting();
    // A payment whose arguments carry 1 MiB (what a prompt-injected model can ask for).
    let huge = json!({"n": 1, "s": "x".repeat(1 << 20)}).to_string();

    let refused = run_one(&registry, &call("c1", "pay", &huge), &context).await;

    assert_eq!(kind(&refused), Some(ToolErrorKind::ApprovalDenied));
    assert!(
        message(&refused).contains("too large to be held for approval"),
        "{}",
        message(&refused)
    );
    assert!(approver.pending().is_empty(), "nothing was parked");
    // The session goes on: a payment of ordinary size is parked as before, and none ran.
    let parked = run_one(&registry, &call("c2", "pay", r#"{"n": 2}"#), &context).await;
    assert_eq!(kind(&parked), Some(ToolErrorKind::ApprovalPending));
    assert_eq!(approver.pending().len(), 1);
    assert_eq!(count.load(Ordering::SeqCst), 0);
}
