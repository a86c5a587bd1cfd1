//! A simulated caller that barges in and stays silent: its model (the testkit's mock, scripted
//! here) ends a line with `[BARGE_IN]` to talk over the reply, or answers `[SILENCE]` to say
//! nothing for a while, and the call plays them as a scripted turn's barge-in and silence.

use crate::common;

use std::time::Duration;

use common::{run, weather_crew};
use crewline_testkit::mock_llm::{MockLlm, RunningMockLlm, Script};

async fn mock(script: &str) -> RunningMockLlm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    MockLlm::new(Script::from_json_str(script).expect("a script"))
        .serve(listener)
        .expect("serve the mock")
}

/// Asks for a story and talks over it, then stays silent, then asks about Paris and ends.
const IMPATIENT_CALLER: &str = r#"{"replies": [
    {"when": {"last_user_contains": "degrees"}, "reply": {"content_chunks": ["Thanks, bye! [END]"]}},
    {"when": {"last_user_contains": "You interrupted the agent here"}, "reply": {"content_chunks": ["[SILENCE]"]}},
    {"when": {"last_user_contains": "said nothing"}, "reply": {"content_chunks": ["What's the weather in Paris?"]}},
    {"reply": {"content_chunks": ["Tell me a story. ", "[BARGE_IN]"]}}
]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_caller_barges_in_stays_silent_and_goes_on() {
    let url = weather_crew(Duration::from_millis(20), Duration::from_millis(5)).await;
    let caller = mock(IMPATIENT_CALLER).await;
    let toml = format!(
        r#"
name = "an impatient caller"
runs = 2
crew.url = "ws://replaced.invalid/ws"

[caller]
persona = "Bo, impatient."
goal = "Learn the weather in Paris."
max_turns = 6
barge_in_after_chunks = 2
silence_ms = 300
llm = {{ base_url = "{}", model = "caller-mock" }}

[expect]
# The story was cut short: its last words never came.
reply.not_contains = ["wispy again"]
tools = [{{ name = "get_weather", args.location = {{ equals = "Paris" }}, once = true }}]
"#,
        caller.base_url()
    );
    let report = run(&toml, &url).await;
    assert!(report.passed, "{report:#?}");
    let conversation = &report.conversations[0];
    let said: Vec<&str> = conversation
        .turns
        .iter()
        .map(|turn| turn.caller.as_str())
        .collect();
    assert_eq!(
        said,
        [
            "Tell me a story.",
            "",
            "What's the weather in Paris?",
            "Thanks, bye!"
        ]
    );
    // The story was cut short, and the silence heard nothing from this crew.
    assert!(
        conversation.turns[0].crew.starts_with("Once upon"),
        "{:?}",
        conversation.turns
    );
    assert_eq!(conversation.turns[1].crew, "");
    assert!(conversation.turns[2].crew.contains("18 degrees"));

    // What the caller's model read: the reply up to its barge-in, then its own silence.
    let requests = caller.mock().requests();
    let asked: Vec<String> = requests
        .iter()
        .map(|request| request.body.to_string())
        .collect();
    assert!(
        asked
            .iter()
            .any(|r| r.contains("You interrupted the agent here")),
        "{asked:#?}"
    );
    assert!(
        asked.iter().any(|r| r.contains("You stayed silent")),
        "{asked:#?}"
    );
}

#[test]
fn caller_barge_in_and_silence_settings_are_checked() {
    for (key, says) in [
        ("barge_in_after_chunks = 0", "barge_in_after_chunks"),
        ("silence_ms = 0", "silence_ms"),
    ] {
        let error = crewline_eval::Scenario::from_toml(&format!(
            r#"
name = "x"
crew.url = "ws://a/ws"
[caller]
persona = "p"
goal = "g"
{key}
llm = {{ base_url = "http://127.0.0.1:9/v1", model = "m" }}
"#
        ))
        .expect_err(key)
        .to_string();
        assert!(error.contains(says), "{key}: {error}");
    }
}
