//! The example crews tested the way a crew author tests their own, with `crewline-testkit`:
//! a scripted conversation through the real server, asserted on what the caller hears, the
//! tools the crew ran and the hand-offs it asked for.

#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use crewline::tool::RegistryError;
use crewline_examples::{call_control, collections_router, voice_agent};
use crewline_testkit::TestCrew;
use serde_json::json;

/// A bound on each whole test, far above what it needs, so a hang fails instead of stalling.
async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("the test took longer than its bound")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weather_crew_looks_up_two_cities_in_one_round_and_says_the_filler_first() {
    bounded(async {
        let llm = Arc::new(voice_agent::scripted_weather_model(Duration::ZERO));
        let weather = voice_agent::WeatherCrew::new(llm, Duration::from_millis(20)).unwrap();
        let crew = TestCrew::serve(move |setup| Ok::<_, RegistryError>(weather.build(setup)))
            .await
            .unwrap();
        let mut call = crew.call().await.unwrap();

        let turn = call
            .say("What's the weather in Paris and Tokyo?")
            .await
            .unwrap();
        turn.assert_tools_called(&["get_weather", "get_weather"])
            .assert_no_errors()
            .assert_no_handoff();
        turn.assert_tool_call("get_weather", json!({"location": "Paris"}))
            .succeeded();
        turn.assert_tool_call("get_weather", json!({"location": "Tokyo"}))
            .succeeded();
        let said = turn.text();
        assert!(said.starts_with(voice_agent::FILLER), "{said}");
        assert!(said.contains("In Paris it is"), "{said}");
        assert!(said.contains("In Tokyo it is"), "{said}");

        // Off its script, the offline model says what it knows instead of guessing.
        let turn = call.say("Can you book me a flight?").await.unwrap();
        turn.assert_no_tool_calls().assert_text_contains("Paris");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_support_crew_transfers_on_request_and_ends_the_call_on_goodbye() {
    bounded(async {
        let crew = TestCrew::serve(|setup| {
            call_control::support_crew(setup, Arc::new(call_control::scripted_support_model()))
        })
        .await
        .unwrap();

        let mut call = crew.call().await.unwrap();
        call.say("Can I talk to a person?")
            .await
            .unwrap()
            .assert_tools_called(&["transfer_to_human"])
            .assert_transferred_to(call_control::SUPPORT_DESK)
            .assert_text_contains("connecting you with a colleague");

        let mut call = crew.call().await.unwrap();
        let turn = call.say("That's all, bye!").await.unwrap();
        turn.assert_tools_called(&["end_call"])
            .assert_ended_call()
            .assert_text("Thanks for calling, goodbye!");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collections_router_moves_from_intake_to_verify_on_the_tools_data() {
    bounded(async {
        let crew = TestCrew::serve(|setup| {
            collections_router::collections_crew(
                setup,
                Arc::new(collections_router::scripted_collections_model()),
            )
        })
        .await
        .unwrap();
        let mut call = crew.call().await.unwrap();

        call.say("My account is 12345.")
            .await
            .unwrap()
            .assert_tools_called(&["find_account"])
            .assert_no_errors();
        // Intake found the account, so the router moved to verify: a date of birth is checked.
        call.say("It's 1980-04-02.")
            .await
            .unwrap()
            .assert_tools_called(&["verify_identity"])
            .assert_no_errors()
            .assert_no_handoff();
        call.say("Can I talk to a person?")
            .await
            .unwrap()
            .assert_tools_called(&["transfer_to_human"])
            .assert_transferred_to(collections_router::COLLECTIONS_DESK);
    })
    .await;
}
