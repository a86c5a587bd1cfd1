//! Scenarios against the voice_agent example's weather crew, served on loopback on its
//! scripted model and called over the real protocol: what passes, and what a broken
//! expectation says when it fails.

use crate::common;

use std::time::Duration;

use common::{check, run, weather_crew};

/// Two turns the weather crew meets: a greeting, then two cities looked up in parallel.
const MEETS: &str = r#"
name = "weather in two cities"
runs = 3
crew.url = "ws://replaced.invalid/ws"

[[turns]]
say = "Hi there!"
expect.reply.contains = ["weather"]
expect.reply.max_sentences = 3
expect.tools = [{ name = "get_weather", never = true }]

[[turns]]
say = "What's the weather in Paris and Tokyo?"
expect.reply.contains = ["Let me check that for you", "18 degrees"]
expect.reply.regex = ['Tokyo it is \d+ degrees']
expect.reply.not_contains = ["No weather data"]
expect.tool_order = ["get_weather"]

[[turns.expect.tools]]
name = "get_weather"
args.location = { equals = "Paris" }
once = true

[[turns.expect.tools]]
name = "get_weather"
args_subset = { location = "Tokyo" }
once = true

[[expect.tools]]
name = "get_weather"
count = 2

[[expect.tools]]
name = "get_weather"
args.location = { regex = "(?i)^lyon$" }
never = true

[expect]
handoff = false
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_the_weather_crew_meets_passes_in_every_run() {
    let url = weather_crew(Duration::from_millis(1), Duration::from_millis(20)).await;
    let report = run(MEETS, &url).await;

    assert!(report.passed, "{:#?}", report.checks);
    assert_eq!(report.runs, 3);
    assert!(report.error.is_none());
    for check in &report.checks {
        assert!(check.failures.is_empty(), "{check:#?}");
        let expected_runs = if check.over_runs { 1 } else { 3 };
        assert_eq!(
            (check.passed_runs, check.runs),
            (expected_runs, expected_runs)
        );
    }
    let paris = check(
        &report,
        r#"turn 2: get_weather(location = "Paris") called once"#,
    );
    assert_eq!(paris.pass_rate, 1.0);
    check(&report, "call: get_weather() called 2 times");
    // Both turns measured in every run.
    assert_eq!(report.turns.len(), 2);
    assert!(
        report
            .turns
            .iter()
            .all(|t| t.runs == 3 && t.p95_turn_ms.is_some())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_expectation_fails_saying_what_was_expected_and_what_came() {
    let url = weather_crew(Duration::from_millis(1), Duration::from_millis(20)).await;
    let broken = r#"
        name = "the wrong city"
        runs = 2
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "What's the weather in Paris and Tokyo?"
        expect.reply.contains = ["sunny in Lyon"]
        expect.reply.max_sentences = 1
        # Budgets no turn can meet: the failure path, with no claim about speed.
        expect.budget = { first_chunk_ms = 0, p95_turn_ms = 0 }

        [[turns.expect.tools]]
        name = "get_weather"
        args.location = { equals = "Lyon" }
    "#;
    let report = run(broken, &url).await;

    assert!(!report.passed);
    let tool = check(&report, r#"turn 1: get_weather(location = "Lyon") called"#);
    assert_eq!((tool.passed_runs, tool.runs, tool.passed), (0, 2, false));
    assert_eq!(
        tool.failures[0].message,
        r#"expected a call of get_weather(location = "Lyon"); 0 matched, came: get_weather {"location":"Paris"}, get_weather {"location":"Tokyo"}"#
    );
    let reply = check(&report, r#"turn 1: reply contains "sunny in Lyon""#);
    assert_eq!(
        reply.failures[0].message,
        r#"expected the reply to contain "sunny in Lyon"; came: "Let me check that for you.In Paris it is 18 degrees and cloudy. In Tokyo it is 24 degrees and sunny.""#
    );
    let sentences = check(&report, "turn 1: reply has at most 1 sentences");
    assert!(
        sentences.failures[0]
            .message
            .starts_with("expected at most 1 sentences; came 2"),
        "{sentences:#?}"
    );
    let first_chunk = check(&report, "turn 1: first chunk within 0 ms");
    assert!(
        first_chunk.failures[0]
            .message
            .starts_with("expected the first chunk within 0 ms; came after "),
        "{first_chunk:#?}"
    );
    let p95 = check(&report, "turn 1: p95 turn time within 0 ms");
    assert!(p95.over_runs && p95.runs == 1 && !p95.passed, "{p95:#?}");
    assert!(
        p95.failures[0]
            .message
            .starts_with("turn 1: expected a p95 turn time within 0 ms; came "),
        "{p95:#?}"
    );
    assert!(
        p95.failures[0].message.ends_with(" ms over 2 runs"),
        "{p95:#?}"
    );
    // What did hold still passes: the call itself ran.
    assert!(check(&report, "call: the call runs every turn").passed);

    let mut table = Vec::new();
    crewline_eval::report::write_table(std::slice::from_ref(&report), &mut table).unwrap();
    let table = String::from_utf8(table).unwrap();
    assert!(table.contains("FAIL the wrong city"), "{table}");
    assert!(
        table.contains(
            r#"✗ turn 1: get_weather(location = "Lyon") called: held in 0/2 runs (needs 100%)"#
        ),
        "{table}"
    );
    assert!(
        table.contains(r#"run 1: expected a call of get_weather"#),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barge_in_during_the_slow_lookup_leaves_no_chunk_after_it() {
    // A lookup far slower than the test: only the barge-in can end the turn in time.
    let url = weather_crew(Duration::from_millis(1), Duration::from_secs(60)).await;
    let scenario = r#"
        name = "barge in on the lookup"
        runs = 2
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "What's the weather in London?"
        barge_in = { after_chunks = 1 }   # the filler; the lookup is running
        expect.budget.chunks_after_barge_in = 0
        expect.reply.not_contains = ["rainy"]

        [[turns]]
        say = "Never mind, bye!"
        expect.reply.contains = ["lovely day"]

        [[turns]]
        hang_up = true
    "#;
    let report = run(scenario, &url).await;

    assert!(report.passed, "{:#?}", report.checks);
    assert!(check(&report, "turn 1: the barge-in point is reached").passed);
    assert!(check(&report, "turn 1: at most 0 chunks after the barge-in").passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barge_in_the_moment_a_tool_starts_silences_the_crew_and_the_call_goes_on() {
    // A lookup far slower than the test: the caller talks over it as soon as it starts.
    let url = weather_crew(Duration::from_millis(1), Duration::from_secs(60)).await;
    let scenario = r#"
        name = "barge in as the lookup starts"
        runs = 2
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "What's the weather in London?"
        barge_in = { on_tool_start = true }
        expect.budget.chunks_after_barge_in = 0
        expect.reply.not_contains = ["rainy"]
        expect.tools = [{ name = "get_weather", args.location = { equals = "London" }, once = true }]

        [[turns]]
        say = "Never mind, bye!"
        expect.reply.contains = ["lovely day"]
    "#;
    let report = run(scenario, &url).await;

    assert!(report.passed, "{:#?}", report.checks);
    assert!(check(&report, "turn 1: the barge-in point is reached").passed);

    // A greeting calls no tool: the barge-in point is never reached, and the check says so.
    let no_tool = scenario.replace("What's the weather in London?", "Hi there!");
    let report = run(&no_tool, &url).await;
    let reached = check(&report, "turn 1: the barge-in point is reached");
    assert!(!reached.passed);
    assert!(
        reached.failures[0]
            .message
            .starts_with("expected to barge in during the reply; it ended first"),
        "{reached:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_ends_before_the_barge_in_point_fails_that_check() {
    let url = weather_crew(Duration::from_millis(1), Duration::from_millis(20)).await;
    let scenario = r#"
        name = "barge in too late"
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "Hello!"
        barge_in = { after_chunks = 1000 }
    "#;
    let report = run(scenario, &url).await;

    assert!(!report.passed);
    let barge_in = check(&report, "turn 1: the barge-in point is reached");
    assert!(
        barge_in.failures[0]
            .message
            .starts_with("expected to barge in during the reply; it ended first, after"),
        "{barge_in:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crew_nobody_answers_at_fails_every_check_with_the_reason() {
    // A port nothing listens on: bound and dropped.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}/ws", listener.local_addr().unwrap());
    drop(listener);
    let scenario = r#"
        name = "nobody home"
        runs = 2
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "Hi"
        expect.reply.contains = ["hello"]
    "#;
    let report = run(scenario, &url).await;

    assert!(!report.passed);
    for check in &report.checks {
        assert_eq!(check.passed_runs, 0, "{check:#?}");
        assert!(
            check.failures[0]
                .message
                .starts_with("not reached: the call did not start: could not connect"),
            "{check:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barge_in_after_some_ms_cuts_the_long_story_short() {
    // The story streams for well over a second at 20 ms a piece.
    let url = weather_crew(Duration::from_millis(20), Duration::from_millis(20)).await;
    let scenario = r#"
        name = "barge in on the story"
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "Tell me a story"
        barge_in = { after_ms = 200 }
        expect.reply.not_contains = ["thin and wispy again"]

        [[turns]]
        say = "Paris?"
        expect.tools = [{ name = "get_weather", once = true }]
    "#;
    let report = run(scenario, &url).await;

    assert!(report.passed, "{:#?}", report.checks);
    assert!(check(&report, "turn 1: the barge-in point is reached").passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_check_on_a_failed_turn_quotes_the_crew_s_agent_error() {
    // A model with nothing scripted: every request fails, and the crew says so.
    let llm = std::sync::Arc::new(crewline::llm::ScriptedLlm::new([]));
    let crew = crewline_examples::voice_agent::WeatherCrew::new(llm, Duration::ZERO)
        .expect("the weather tools");
    let url = common::serve(crewline_server::CrewServer::new(crew.agent().clone())).await;
    let scenario = r#"
        name = "a model that fails"
        crew.url = "ws://replaced.invalid/ws"

        [[turns]]
        say = "Hi"
        expect.reply.contains = ["weather"]
    "#;
    let report = run(scenario, &url).await;

    let message = &check(&report, r#"turn 1: reply contains "weather""#).failures[0].message;
    assert!(
        message.starts_with(
            r#"expected the reply to contain "weather"; came: an empty reply (the crew sent agent.error: "#
        ),
        "{message}"
    );
}
