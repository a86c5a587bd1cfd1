//! The crew on its scripted model, called over a real WebSocket as the voice platform would.

use crewline_eval::{CrewTarget, SuiteFailure, check_file};
use crewline_testkit::TestCrew;
use serde_json::json;

use crew_template::{agent, scripted_model};

#[tokio::test]
async fn a_weather_question_calls_the_tool_and_reads_the_answer_back() {
    let crew = TestCrew::serve(agent(scripted_model()).unwrap())
        .await
        .unwrap();
    let mut call = crew.call().await.unwrap();

    let turn = call.say("What's the weather in Paris?").await.unwrap();
    turn.assert_tool_call("get_weather", json!({"city": "Paris"}))
        .succeeded();
    turn.assert_text_contains("18 degrees and cloudy")
        .assert_no_errors();

    // A city the tool does not know: its error is read back, and the call goes on.
    let turn = call.say("And in Atlantis?").await.unwrap();
    turn.assert_tool_call("get_weather", json!({"city": "Atlantis"}))
        .failed_with("No weather data for Atlantis");
    call.hang_up().await.unwrap();
}

/// The eval scenarios of `evals/crew.toml`, run against the crew served here. The same file
/// runs against a real model with `crewline eval evals/crew.toml`.
#[tokio::test]
async fn the_eval_scenarios_pass() -> Result<(), SuiteFailure> {
    let crew = TestCrew::serve(agent(scripted_model()).unwrap())
        .await
        .unwrap();
    let url = crew.url().unwrap().to_owned();
    check_file("evals/crew.toml", CrewTarget::Url(url)).await?;
    Ok(())
}
