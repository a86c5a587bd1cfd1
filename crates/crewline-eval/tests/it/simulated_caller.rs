//! Simulated callers: a model (the testkit's mock, scripted here) plays the caller from a
//! persona and a goal until it is done, the crew hands the call off, or the turn limit; the
//! judge (another mock) decides whether the goal was met.

use crate::common;

use std::time::Duration;

use common::{check, run, support_crew, weather_crew};
use crewline_testkit::mock_llm::{MockLlm, RunningMockLlm, Script};

async fn mock(script: &str) -> RunningMockLlm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    MockLlm::new(Script::from_json_str(script).expect("a script"))
        .serve(listener)
        .expect("serve the mock")
}

/// A caller who asks about Paris, thanks the crew once it hears a temperature, and ends.
const WEATHER_CALLER: &str = r#"{"replies": [
    {"when": {"last_user_contains": "degrees"}, "reply": {"content_chunks": ["Lovely, thanks. Bye! [END]"]}},
    {"reply": {"content_chunks": ["What's the weather in Paris?"]}}
]}"#;

/// A judge who finds the goal reached when the call mentions 18 degrees, and not otherwise.
const JUDGE: &str = r#"{"replies": [
    {"when": {"last_user_contains": "18 degrees"}, "reply": {"content_chunks": ["{\"score\": 0.95, \"reason\": \"The caller heard the weather in Paris.\"}"]}},
    {"reply": {"content_chunks": ["{\"score\": 0.1, \"reason\": \"The caller never heard a forecast.\"}"]}}
]}"#;

fn scenario(caller: &str, judge: &str, max_turns: u32, goal_met: bool) -> String {
    format!(
        r#"
name = "a caller wants the weather"
runs = 2
crew.url = "ws://replaced.invalid/ws"

[caller]
persona = "Ada, a brisk caller who wants a quick answer."
goal = "Learn the weather in Paris."
max_turns = {max_turns}
llm = {{ base_url = "{caller}", model = "caller-mock" }}

[judge]
base_url = "{judge}"
model = "judge-mock"

[expect]
goal_met = {goal_met}
tools = [{{ name = "get_weather", args.location = {{ equals = "Paris" }}, once = true }}]
agent_error = false
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_caller_talks_until_its_goal_is_met_and_the_judge_agrees() {
    let url = weather_crew(Duration::from_millis(1), Duration::from_millis(5)).await;
    let (caller, judge) = (mock(WEATHER_CALLER).await, mock(JUDGE).await);
    let report = run(
        &scenario(&caller.base_url(), &judge.base_url(), 6, true),
        &url,
    )
    .await;

    assert!(report.passed, "{:#?}", report.checks);
    let goal = report
        .checks
        .iter()
        .find(|c| c.name.contains("The caller's goal was reached"))
        .expect("the goal check");
    assert_eq!(goal.verdicts.len(), 2);
    assert_eq!(
        goal.verdicts[0].reason,
        "The caller heard the weather in Paris."
    );
    // Two caller turns a run (the question, then thanks and goodbye), each a model request
    // reading the persona, the goal and what the crew said.
    let asked = caller.mock().requests();
    assert_eq!(asked.len(), 4);
    let system = asked[0].body["messages"][0]["content"]
        .as_str()
        .unwrap_or("");
    assert!(system.contains("Learn the weather in Paris."), "{system}");
    assert!(system.contains("Ada, a brisk caller"), "{system}");
    let second = &asked
        .iter()
        .find(|r| r.body["messages"].as_array().is_some_and(|m| m.len() > 2))
        .expect("a second turn")
        .body;
    let heard = second["messages"][3]["content"].as_str().unwrap_or("");
    assert!(
        heard.contains("18 degrees"),
        "the caller heard the crew: {heard}"
    );
    assert_eq!(report.turns.len(), 2, "{:#?}", report.turns);
    // The report keeps what was said.
    assert_eq!(report.conversations.len(), 2);
    let said = &report.conversations[0].turns;
    assert_eq!(said[0].caller, "What's the weather in Paris?");
    assert!(said[0].crew.contains("18 degrees"), "{said:#?}");
    assert_eq!(said[1].caller, "Lovely, thanks. Bye!");
    // The judge read the simulated caller's words.
    let question = judge.mock().requests()[0].body["messages"][1]["content"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        question.contains("Caller: What's the weather in Paris?"),
        "{question}"
    );
    assert!(
        question.contains("Caller: Lovely, thanks. Bye!"),
        "{question}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_never_gets_there_stops_at_the_turn_limit_and_the_goal_fails() {
    // A crew that only greets: the weather crew asked nothing it can look up.
    let url = weather_crew(Duration::from_millis(1), Duration::from_millis(5)).await;
    let stuck = r#"{"replies": [{"reply": {"content_chunks": ["Hi there!"]}}]}"#;
    let (caller, judge) = (mock(stuck).await, mock(JUDGE).await);
    let report = run(
        &scenario(&caller.base_url(), &judge.base_url(), 3, true),
        &url,
    )
    .await;

    assert!(!report.passed);
    assert_eq!(report.turns.len(), 3, "three turns, then the limit");
    assert_eq!(caller.mock().requests().len(), 2 * 3);
    let goal = report
        .checks
        .iter()
        .find(|c| c.name.contains("The caller's goal was reached"))
        .expect("the goal check");
    assert_eq!(
        goal.failures[0].message,
        "expected a judge's score of at least 0.7; it scored 0.1: The caller never heard a forecast."
    );
    assert!(
        check(&report, "call: the call runs every turn").passed,
        "reaching the limit is not a broken call"
    );
    // The summary shows how the failing call went.
    let mut table = Vec::new();
    crewline_eval::report::write_table(std::slice::from_ref(&report), &mut table).expect("table");
    let table = String::from_utf8(table).expect("utf-8");
    assert!(
        table.contains("  run 1, as it went:\n      caller: Hi there!\n      crew:   "),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crew_ending_the_call_ends_the_simulation() {
    let url = support_crew().await;
    let leaving = r#"{"replies": [{"reply": {"content_chunks": ["Nothing more, bye!"]}}]}"#;
    let (caller, judge) = (mock(leaving).await, mock(JUDGE).await);
    let toml = format!(
        r#"
name = "a caller says goodbye"
crew.url = "ws://replaced.invalid/ws"
[caller]
persona = "A caller in a hurry."
goal = "Get off the phone."
llm = {{ base_url = "{}", model = "caller-mock" }}
[judge]
base_url = "{}"
model = "judge-mock"
[expect]
end_call = true
goal_met = false
"#,
        caller.base_url(),
        judge.base_url()
    );
    let report = run(&toml, &url).await;
    assert!(report.passed, "{:#?}", report.checks);
    assert_eq!(
        report.turns.len(),
        1,
        "the crew hung up after the first turn"
    );
    assert_eq!(caller.mock().requests().len(), 1);
}
