//! Silence turns: the caller says nothing for a while, and the scenario sees what the crew
//! does meanwhile: nothing (the weather crew), or an idle prompt (a crew that asks whether
//! the caller is still there).

use crate::common;

use std::{sync::Arc, time::Duration};

use common::{check, run, serve, weather_crew};
use crewline::SessionSetup;
use crewline_examples::voice_agent;
use crewline_server::CrewServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weather_crew_stays_quiet_while_the_caller_is_silent_and_the_call_goes_on() {
    let url = weather_crew(Duration::from_millis(1), Duration::from_millis(5)).await;
    let scenario = r#"
        name = "a pause"
        runs = 2
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "Hi there!"

        [[turns]]
        silence_ms = 300
        expect.silent = true
        expect.tools = [{ name = "get_weather", never = true }]

        [[turns]]
        say = "What's the weather in Paris?"
        expect.silent = false
        expect.tools = [{ name = "get_weather", once = true }]

        [expect]                       # every reply: the silence has none and is skipped
        reply.contains = ["e"]
        budget.turn_ms = 30000
        budget.p95_turn_ms = 30000
    "#;
    let report = run(scenario, &url).await;
    assert!(report.passed, "{:#?}", report.checks);
    assert_eq!(
        check(&report, "turn 2: the crew says nothing").passed_runs,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_prompt_during_a_silence_is_heard_and_a_silent_expectation_fails_quoting_it() {
    // The weather crew, which asks whether the caller is still there soon after the call
    // starts (as an idle timer would), through `agent.speak`.
    let llm = Arc::new(voice_agent::scripted_weather_model(Duration::from_millis(
        1,
    )));
    let crew = voice_agent::WeatherCrew::new(llm, Duration::from_millis(5)).expect("tools");
    let url = serve(CrewServer::new(move |setup: SessionSetup| {
        let call = setup.call().clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = call.speak("Are you still there?").await;
        });
        let crew = crew.build(&setup);
        async move { crew }
    }))
    .await;
    let scenario = r#"
        name = "an idle prompt"
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        silence_ms = 3000
        expect.silent = false
        expect.reply.contains = ["still there"]

        [[turns]]
        silence_ms = 200
        expect.silent = true

        [[turns]]
        say = "Yes, hi!"
        expect.reply.contains = ["weather"]
    "#;
    let report = run(scenario, &url).await;
    assert!(report.passed, "{:#?}", report.checks);

    let wrong = scenario.replacen("expect.silent = false", "expect.silent = true", 1);
    let report = run(&wrong, &url).await;
    assert!(!report.passed);
    assert_eq!(
        check(&report, "turn 1: the crew says nothing").failures[0].message,
        r#"expected the crew to say nothing; came: "Are you still there?""#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_no_reply_may_say_the_crew_may_not_say_during_a_silence_either() {
    let llm = Arc::new(voice_agent::scripted_weather_model(Duration::from_millis(
        1,
    )));
    let crew = voice_agent::WeatherCrew::new(llm, Duration::from_millis(5)).expect("tools");
    let url = serve(CrewServer::new(move |setup: SessionSetup| {
        let call = setup.call().clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = call.speak("Hello? Hello?? HELLO???").await;
        });
        let crew = crew.build(&setup);
        async move { crew }
    }))
    .await;
    let scenario = r#"
        name = "an impatient idle prompt"
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        silence_ms = 3000

        [[turns]]
        say = "Hi there!"

        [expect]
        reply.not_contains = ["HELLO???"]
        reply.contains = ["weather"]       # every reply; the silence has none and is skipped
    "#;
    let report = run(scenario, &url).await;
    assert!(!report.passed);
    assert_eq!(
        check(&report, r#"every turn: reply does not contain "HELLO???""#).failures[0].message,
        r#"turn 1: expected the reply not to contain "HELLO???"; came: "Hello? Hello?? HELLO???""#
    );
    assert!(check(&report, r#"every turn: reply contains "weather""#).passed);
}
