//! End-call and transfer expectations against the call_control example's support crew.

use crate::common;

use common::{check, run, support_crew};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_once_to_the_desk_and_no_end_call_pass() {
    let url = support_crew().await;
    let scenario = r#"
        name = "asking for a person"
        runs = 2
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "Can I talk to a person, please?"
        expect.transfer_to = "+15550100"
        expect.end_call = false
        expect.tools = [{ name = "transfer_to_human", once = true, args.reason = { regex = "person" } }]

        [expect]
        transfer = true
        handoff = true
    "#;
    let report = run(scenario, &url).await;

    assert!(report.passed, "{:#?}", report.checks);
    assert!(
        check(
            &report,
            "turn 1: the crew transfers the call once to +15550100"
        )
        .passed
    );
    assert!(check(&report, "call: the crew hands the call off").passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_call_where_a_transfer_was_expected_fails_naming_both() {
    let url = support_crew().await;
    let scenario = r#"
        name = "goodbye is not a transfer"
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "Thanks, bye!"
        expect.transfer = true
        expect.handoff = false
    "#;
    let report = run(scenario, &url).await;

    assert!(!report.passed);
    assert_eq!(
        check(&report, "turn 1: the crew transfers the call once").failures[0].message,
        "expected exactly one agent.transfer_call; came 0"
    );
    assert_eq!(
        check(&report, "turn 1: the call stays with the crew").failures[0].message,
        "expected no hand-off; came 1 agent.end_call and 0 agent.transfer_call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_after_the_crew_ended_the_call_are_not_reached() {
    let url = support_crew().await;
    let scenario = r#"
        name = "talking after goodbye"
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "Bye!"
        expect.end_call = true

        [[turns]]
        say = "Hello? Are you still there?"
        expect.reply.contains = ["help"]
    "#;
    let report = run(scenario, &url).await;

    assert!(!report.passed);
    assert!(check(&report, "turn 1: the crew ends the call").passed);
    let message = &check(&report, r#"turn 2: reply contains "help""#).failures[0].message;
    assert_eq!(
        message,
        "not reached: the call stopped at turn 2: the crew has ended or transferred the call"
    );
}
