//! The LLM judge: a mock model of the testkit serves its verdicts (no network); what it
//! scores passes or fails the check, its reasons are kept in the report, and an answer that
//! is not a verdict is a failed check that says so.

use crate::common;

use std::time::Duration;

use common::{check, run, weather_crew};
use crewline_eval::report;
use crewline_testkit::mock_llm::{MockLlm, RunningMockLlm, Script};

/// A judge that answers by the rubric it is given: each rule matches a word of a rubric.
async fn judge() -> RunningMockLlm {
    let script = Script::from_json_str(
        r#"{"replies": [
            {"when": {"last_user_contains": "temperature"},
             "reply": {"content_chunks": ["{\"score\": 0.9, ", "\"reason\": \"It gives Paris's temperature.\"}"]}},
            {"when": {"last_user_contains": "poem"},
             "reply": {"content_chunks": ["```json\n{\"score\": 0.2, \"reason\": \"No poem, only weather.\"}\n```"]}},
            {"when": {"last_user_contains": "rambling"},
             "reply": {"content_chunks": ["I'd say it's pretty good overall!"]}},
            {"reply": {"content_chunks": ["{\"score\": 0.5}"]}}
        ]}"#,
    )
    .expect("a script");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    MockLlm::new(script)
        .serve(listener)
        .expect("serve the judge")
}

fn scenario(judge_url: &str, api_key_env: Option<&str>) -> String {
    let key = api_key_env
        .map(|name| format!("api_key_env = {name:?}\n"))
        .unwrap_or_default();
    format!(
        r#"
name = "judged"
runs = 2
crew.url = "ws://replaced.invalid/ws"

[judge]
base_url = "{judge_url}"
model = "judge-mock"
{key}
[[turns]]
say = "What's the weather in Paris?"
[[turns.expect.judge]]
rubric = "The reply gives the temperature in Paris."
[[turns.expect.judge]]
rubric = "The reply is a poem."
min_score = 0.5

[[expect.judge]]
rubric = "A rambling call."
[[expect.judge]]
rubric = "Anything."
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_judge_s_scores_pass_or_fail_and_its_reasons_are_kept() {
    let url = weather_crew(Duration::from_millis(1), Duration::from_millis(5)).await;
    let judge = judge().await;
    let report = run(&scenario(&judge.base_url(), None), &url).await;

    assert!(!report.passed);
    let good = check(
        &report,
        "turn 1: judge scores at least 0.7: The reply gives the temperature in Paris.",
    );
    assert!(good.passed, "{good:#?}");
    assert_eq!(good.verdicts.len(), 2);
    assert_eq!(good.verdicts[0].score, Some(0.9));
    assert_eq!(good.verdicts[0].reason, "It gives Paris's temperature.");

    let poem = check(
        &report,
        "turn 1: judge scores at least 0.5: The reply is a poem.",
    );
    assert!(!poem.passed);
    assert_eq!(
        poem.failures[0].message,
        "expected a judge's score of at least 0.5; it scored 0.2: No poem, only weather."
    );

    // Answers that are not verdicts fail their check, saying what came.
    let rambling = check(&report, "call: judge scores at least 0.7: A rambling call.");
    assert!(!rambling.passed);
    assert!(
        rambling.failures[0]
            .message
            .starts_with("the judge's answer is not a verdict (no JSON object"),
        "{rambling:#?}"
    );
    assert!(rambling.failures[0].message.contains("pretty good overall"));
    assert_eq!(rambling.verdicts[0].score, None);
    let no_reason = check(&report, "call: judge scores at least 0.7: Anything.");
    assert!(no_reason.failures[0].message.contains("no `reason`"));

    // The judge read the conversation: the caller's words, the lookup and the reply.
    let asked = judge.mock().requests();
    assert_eq!(asked.len(), 2 * 4, "two runs, four rubrics");
    let question = asked[0].body["messages"][1]["content"]
        .as_str()
        .unwrap_or("");
    assert!(
        question.contains("Caller: What's the weather in Paris?"),
        "{question}"
    );
    assert!(question.contains("the tool get_weather"), "{question}");
    assert!(question.contains("Agent: "), "{question}");

    // JSON and JUnit keep every verdict, passing runs' reasons too.
    let mut json = Vec::new();
    report::write_json(std::slice::from_ref(&report), &mut json).expect("json");
    let json: serde_json::Value = serde_json::from_slice(&json).expect("valid JSON");
    let checks = json["scenarios"][0]["checks"].as_array().expect("checks");
    let judged = checks
        .iter()
        .find(|c| {
            c["name"]
                .as_str()
                .is_some_and(|n| n.contains("temperature"))
        })
        .expect("the judged check");
    assert_eq!(judged["category"], "judge");
    assert_eq!(
        judged["verdicts"][1]["reason"],
        "It gives Paris's temperature."
    );
    let mut junit = Vec::new();
    report::write_junit(std::slice::from_ref(&report), &mut junit).expect("junit");
    let junit = String::from_utf8(junit).expect("utf-8");
    assert!(
        junit.contains("<system-out>run 1: scored 0.9: It gives Paris&apos;s temperature."),
        "{junit}"
    );
    assert!(
        junit.contains("it scored 0.2: No poem, only weather."),
        "{junit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_judge_whose_key_is_not_set_fails_its_checks_naming_the_variable() {
    let url = weather_crew(Duration::from_millis(1), Duration::from_millis(5)).await;
    let judge = judge().await;
    let variable = "CREWLINE_EVAL_TEST_JUDGE_KEY_NOT_SET";
    let report = run(&scenario(&judge.base_url(), Some(variable)), &url).await;
    let good = check(
        &report,
        "turn 1: judge scores at least 0.7: The reply gives the temperature in Paris.",
    );
    assert!(!good.passed);
    assert_eq!(
        good.failures[0].message,
        format!("the judge's key variable {variable} is not set")
    );
    assert!(judge.mock().requests().is_empty(), "nothing was asked");
}
