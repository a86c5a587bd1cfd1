//! The example crews' eval suites (`examples/evals/`), run offline against the crews the
//! examples serve, built here on their scripted models.

use crate::common;

use std::{path::Path, time::Duration};

use crewline_eval::{
    CheckCategory, CheckOptions, CrewTarget, RunOptions, ScenarioFile, SuiteFailure, check_file,
    check_file_with, run_scenario,
};
use std::sync::Arc;

use crewline::{SessionSetup, llm::LlmClient};
use crewline_examples::{azure_weather, bank_support as bank, voice_agent};
use crewline_server::CrewServer;
use crewline_server::model::ModelChoice;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_voice_agent_suite_passes_against_the_example_crew() {
    // What `cargo run --example voice_agent` serves without OPENAI_API_KEY: the scripted
    // model at 20 ms a chunk, the weather service at 300 ms a lookup.
    let model = voice_agent::model(ModelChoice::Scripted, None, Duration::from_millis(20))
        .expect("the scripted model");
    let crew = voice_agent::WeatherCrew::new(model.llm, voice_agent::WEATHER_SERVICE_DELAY)
        .expect("the weather tools");
    let url = common::serve(CrewServer::new(crew.agent().clone())).await;

    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/evals/voice_agent.toml"
    ));
    let scenarios = ScenarioFile::load(path).expect("the suite reads");
    let has_budgets = scenarios
        .iter()
        .any(|s| s.turns.iter().any(|t| !t.expect.budget.is_empty()));
    assert!(has_budgets, "the suite sets latency budgets");
    assert_eq!(scenarios.len(), 3);
    let options = RunOptions {
        crew_url: Some(url),
        ..RunOptions::default()
    };
    for scenario in &scenarios {
        let report =
            tokio::time::timeout(Duration::from_secs(60), run_scenario(scenario, &options))
                .await
                .expect("the scenario ran within its bound");
        // Latency budgets are measured and reported, not asserted here: speed lives in the
        // benchmarks, and a loaded test machine is not a phone line.
        let failed: Vec<_> = report
            .checks
            .iter()
            .filter(|c| !c.passed && c.category != CheckCategory::Latency)
            .collect();
        assert!(failed.is_empty(), "{}: {failed:#?}", scenario.name);
        assert_eq!(report.runs, 3);
        // Every check was judged on every run (none skipped).
        assert!(report.checks.iter().all(|c| c.over_runs || c.runs == 3));
        assert!(
            report.turns.iter().all(|t| t.runs == 3),
            "{:#?}",
            report.turns
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bank_suite_passes_and_money_moves_once_per_yes() {
    // What `cargo run --example bank_support` serves offline: the scripted model over the
    // demo books (booking without the example's 300 ms processing time).
    let books = bank::Bank::demo();
    let llm: Arc<dyn LlmClient> = Arc::new(bank::scripted_bank_model());
    let shared = bank::BankShared::in_memory(books.clone());
    let url = common::serve(CrewServer::new(move |setup: SessionSetup| {
        let crew = bank::bank_crew(&setup, llm.clone(), &shared);
        async move { crew }
    }))
    .await;
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/evals/bank_support.toml"
    ));
    let scenarios = ScenarioFile::load(path).expect("the suite reads");
    let options = RunOptions {
        crew_url: Some(url),
        ..RunOptions::default()
    };
    for scenario in &scenarios {
        let report =
            tokio::time::timeout(Duration::from_secs(60), run_scenario(scenario, &options))
                .await
                .expect("the scenario ran within its bound");
        assert!(report.passed, "{}: {:#?}", scenario.name, report.checks);
    }
    // Three runs said yes once each: $50 moved three times, never more.
    assert_eq!(books.balance("alice"), Some(10_000 + 3 * 5_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weather_crew_whose_model_looks_up_the_wrong_city_fails_the_suite_saying_so() {
    use crewline::{
        llm::{Reply, ScriptedLlm},
        types::Message,
    };
    // A broken variant of the example: whatever is asked, its model looks up Lyon.
    let broken = ScriptedLlm::from_fn(|request| match request.messages.last() {
        Some(Message::Tool { .. }) => Reply::text("Sorry, I found nothing."),
        _ => Reply::tool_call("get_weather", serde_json::json!({"location": "Lyon"})),
    });
    let crew =
        voice_agent::WeatherCrew::new(Arc::new(broken), Duration::ZERO).expect("the weather tools");
    let url = common::serve(CrewServer::new(crew.agent().clone())).await;
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/evals/voice_agent.toml"
    ));
    let scenarios = ScenarioFile::load(path).expect("the suite reads");
    let options = RunOptions {
        crew_url: Some(url),
        runs: Some(1),
        ..RunOptions::default()
    };
    let two_cities = &scenarios[1];
    let report = tokio::time::timeout(Duration::from_secs(60), run_scenario(two_cities, &options))
        .await
        .expect("the scenario ran within its bound");

    assert!(!report.passed);
    let paris = common::check(
        &report,
        "turn 1: get_weather(location ~ /(?i)^paris/) called once",
    );
    assert_eq!(
        paris.failures[0].message,
        "expected exactly one call of get_weather(location ~ /(?i)^paris/); 0 matched, came: \
         get_weather {\"location\":\"Lyon\"} (failed: No weather data for Lyon; ask the caller \
         for a larger city nearby.)"
    );
    let reply = common::check(&report, r#"turn 1: reply contains "18""#);
    assert!(
        reply.failures[0]
            .message
            .starts_with(r#"expected the reply to contain "18"; came: "#),
        "{reply:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_voice_agent_fault_suite_passes_on_the_model_it_scripts() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/evals/voice_agent_faults.toml"
    ));
    let scenarios = ScenarioFile::load(path).expect("the suite reads");
    assert!(
        scenarios
            .iter()
            .all(|s| s.turns.iter().any(|t| t.fault.is_some()))
    );
    // What the runner does for the suite's command crew, in process: the mock model plays
    // the suite's [model] script and the example's crew talks to it through crewline's
    // OpenAI client, as `cargo run --example voice_agent` does with OPENAI_BASE_URL set.
    let (_model, client) = suite_model(&scenarios[0]).await;
    let crew = voice_agent::WeatherCrew::new(Arc::new(client), Duration::from_millis(5))
        .expect("the weather tools");
    let url = common::serve(CrewServer::new(crew.agent().clone())).await;
    let options = RunOptions {
        crew_url: Some(url),
        ..RunOptions::default()
    };
    for mut scenario in scenarios {
        scenario.model = None;
        let report =
            tokio::time::timeout(Duration::from_secs(60), run_scenario(&scenario, &options))
                .await
                .expect("the scenario ran within its bound");
        assert!(report.passed, "{}: {:#?}", scenario.name, report.checks);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_control_yaml_suite_passes_against_the_example_crew() -> Result<(), SuiteFailure> {
    // What a crew author writes: one test per suite file, the crew served on 127.0.0.1:0.
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/evals/call_control.yaml"
    ));
    let scenarios = ScenarioFile::load(path).expect("the suite reads");
    assert!(
        scenarios
            .iter()
            .any(|s| s.turns.iter().any(|t| t.silence_ms.is_some())),
        "the suite has a silence"
    );
    let url = common::support_crew().await;
    let reports = tokio::time::timeout(
        Duration::from_secs(120),
        check_file(path, CrewTarget::Url(url)),
    )
    .await
    .expect("the suite ran within its bound")?;
    assert_eq!(reports.len(), scenarios.len());
    assert!(reports.iter().all(|r| r.passed && r.runs == 3));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_file_fails_a_broken_crew_with_the_readable_summary() {
    use crewline::{
        llm::{Reply, ScriptedLlm},
        types::Message,
    };
    // The weather crew's broken variant: whatever is asked, its model looks up Lyon.
    let broken = ScriptedLlm::from_fn(|request| match request.messages.last() {
        Some(Message::Tool { .. }) => Reply::text("Sorry, I found nothing."),
        _ => Reply::tool_call("get_weather", serde_json::json!({"location": "Lyon"})),
    });
    let crew =
        voice_agent::WeatherCrew::new(Arc::new(broken), Duration::ZERO).expect("the weather tools");
    let url = common::serve(CrewServer::new(crew.agent().clone())).await;
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/evals/voice_agent.toml"
    ));
    let options = CheckOptions::default().runs(1).latency_reported_only();
    let failure = tokio::time::timeout(
        Duration::from_secs(120),
        check_file_with(path, CrewTarget::Url(url), &options),
    )
    .await
    .expect("the suite ran within its bound")
    .expect_err("a crew that looks up Lyon fails the suite");
    let text = format!("{failure:?}");
    assert!(text.contains("voice_agent.toml: "), "{text}");
    assert!(text.contains(" scenarios failed"), "{text}");
    assert!(text.contains("FAIL "), "{text}");
    assert!(
        text.contains("expected exactly one call of get_weather(location ~ /(?i)^paris/)"),
        "{text}"
    );
    assert!(
        text.contains(r#"get_weather {"location":"Lyon"}"#),
        "{text}"
    );
    assert_eq!(failure.to_string(), text);
    assert!(failure.error.is_none());
}

#[tokio::test]
async fn check_file_names_a_file_that_is_not_a_suite() {
    let failure = check_file("no/such/suite.toml", CrewTarget::FromFile)
        .await
        .expect_err("no such file");
    assert!(failure.error.is_some());
    assert!(
        failure
            .text()
            .starts_with("no/such/suite.toml: could not read"),
        "{failure}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bank_fault_suite_moves_money_once_when_the_answer_after_it_breaks() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/evals/bank_support_faults.toml"
    ));
    let scenarios = ScenarioFile::load(path).expect("the suite reads");
    // The suite's [model] served here, and the example's bank crew on crewline's OpenAI
    // client pointed at it (what `cargo run --example bank_support` does with
    // OPENAI_BASE_URL set), over the demo books.
    let (model, client) = suite_model(&scenarios[0]).await;
    let llm: Arc<dyn LlmClient> = Arc::new(client);
    let books = bank::Bank::demo();
    let shared = bank::BankShared::in_memory(books.clone());
    let url = common::serve(CrewServer::new(move |setup: SessionSetup| {
        let crew = bank::bank_crew(&setup, llm.clone(), &shared);
        async move { crew }
    }))
    .await;
    let options = RunOptions {
        crew_url: Some(url),
        ..RunOptions::default()
    };
    for mut scenario in scenarios {
        scenario.model = None;
        let report =
            tokio::time::timeout(Duration::from_secs(60), run_scenario(&scenario, &options))
                .await
                .expect("the scenario ran within its bound");
        assert!(report.passed, "{}: {:#?}", scenario.name, report.checks);
    }
    // Three runs, one yes that moved money each: $50 three times, never more.
    assert_eq!(books.balance("alice"), Some(10_000 + 3 * 5_000));
    // The fault hit the read-back after each run's transfer, and nothing else.
    let outcomes: Vec<String> = model
        .mock()
        .requests()
        .into_iter()
        .map(|r| r.outcome)
        .collect();
    let cut = outcomes
        .iter()
        .filter(|o| o.starts_with("cut_by_script"))
        .count();
    assert_eq!(cut, 3, "{outcomes:?}");
}

/// The collections_router example's crew on `llm`, served on 127.0.0.1:0.
async fn collections_crew(llm: Arc<dyn LlmClient>) -> String {
    use crewline_examples::collections_router;
    common::serve(CrewServer::new(move |setup: SessionSetup| {
        let crew = collections_router::collections_crew(&setup, llm.clone());
        async move { crew }
    }))
    .await
}

const COLLECTIONS_SUITE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/evals/collections_router.toml"
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collections_suite_passes_against_the_example_crew() -> Result<(), SuiteFailure> {
    let llm: Arc<dyn LlmClient> =
        Arc::new(crewline_examples::collections_router::scripted_collections_model());
    let url = collections_crew(llm).await;
    let reports = tokio::time::timeout(
        Duration::from_secs(120),
        check_file(COLLECTIONS_SUITE, CrewTarget::Url(url)),
    )
    .await
    .expect("the suite ran within its bound")?;
    assert_eq!(reports.len(), 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collections_crew_that_hands_every_caller_off_fails_its_suite() {
    use crewline::llm::{Reply, ScriptedLlm};
    // The broken variant: whatever is said, its model transfers the call to a person.
    let broken: Arc<dyn LlmClient> = Arc::new(ScriptedLlm::from_fn(|_| {
        Reply::tool_call(
            "transfer_to_human",
            serde_json::json!({"reason": "anything"}),
        )
    }));
    let url = collections_crew(broken).await;
    let failure = tokio::time::timeout(
        Duration::from_secs(120),
        check_file_with(
            COLLECTIONS_SUITE,
            CrewTarget::Url(url),
            &CheckOptions::default().runs(1),
        ),
    )
    .await
    .expect("the suite ran within its bound")
    .expect_err("a crew that transfers everyone fails");
    let text = failure.text();
    assert!(text.contains("2 of 3 scenarios failed"), "{text}");
    assert!(
        text.contains("find_account(account_id = \"12345\")"),
        "{text}"
    );
}

/// The suite file `examples/evals/NAME`.
fn suite(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/evals")
        .join(name)
}

/// Runs the suite `name` against the crew at `url`, bounded so that a hang fails the test;
/// budgets are reported, not enforced (a loaded test machine is not a phone line).
async fn check_suite(
    name: &str,
    target: CrewTarget,
    options: CheckOptions,
) -> Result<Vec<crewline_eval::ScenarioReport>, SuiteFailure> {
    tokio::time::timeout(
        Duration::from_secs(120),
        check_file_with(suite(name), target, &options.latency_reported_only()),
    )
    .await
    .expect("the suite ran within its bound")
}

/// The text_chat example's crew on `llm`, served on 127.0.0.1:0.
async fn chat_crew(llm: Arc<dyn LlmClient>) -> String {
    use crewline_examples::text_chat;
    common::serve(CrewServer::new(move |setup: SessionSetup| {
        let crew = text_chat::chat_crew(&setup, llm.clone());
        async move { crew }
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_text_chat_suite_passes_against_the_example_crew() -> Result<(), SuiteFailure> {
    let llm: Arc<dyn LlmClient> = Arc::new(crewline_examples::text_chat::scripted_chat_model());
    let url = chat_crew(llm).await;
    let reports = check_suite(
        "text_chat.toml",
        CrewTarget::Url(url),
        CheckOptions::default(),
    )
    .await?;
    assert_eq!(reports.len(), 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_crew_that_looks_up_the_wrong_order_fails_its_suite_saying_so() {
    use crewline::{
        llm::{Reply, ScriptedLlm},
        types::Message,
    };
    // The broken variant: whatever order is named, its model looks up 1043.
    let broken: Arc<dyn LlmClient> = Arc::new(ScriptedLlm::from_fn(|request| {
        match request.messages.last() {
            Some(Message::Tool { .. }) => Reply::text("**Your order** is on its way."),
            _ => Reply::tool_call("order_status", serde_json::json!({"order_id": "1043"})),
        }
    }));
    let url = chat_crew(broken).await;
    let failure = check_suite(
        "text_chat.toml",
        CrewTarget::Url(url),
        CheckOptions::default().runs(1),
    )
    .await
    .expect_err("a crew that looks up the wrong order fails");
    let text = failure.text();
    assert!(text.contains("3 of 3 scenarios failed"), "{text}");
    assert!(
        text.contains(
            r#"expected exactly one call of order_status(order_id = "1042") that succeeded; 0 matched, came: order_status {"order_id":"1043"}"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"expected the reply to contain "**Order 1042**"; came: "#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentiment_suite_passes_and_a_crew_without_the_observer_fails_it() {
    use crewline_examples::sentiment_background;
    let llm = sentiment_background::scripted_model(Duration::from_millis(2));
    let url = common::serve(sentiment_background::server(llm).expect("the weather tools")).await;
    let reports = check_suite(
        "sentiment_background.toml",
        CrewTarget::Url(url),
        CheckOptions::default(),
    )
    .await
    .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(reports.len(), 3);

    // The broken variant: the same weather agent without its background observer: nothing
    // escalates, so the frustrated caller is never handed to the desk.
    let plain = voice_agent::WeatherCrew::new(
        Arc::new(voice_agent::scripted_weather_model(Duration::ZERO)),
        Duration::ZERO,
    )
    .expect("the weather tools");
    let url = common::serve(CrewServer::new(plain.agent().clone())).await;
    let failure = check_suite(
        "sentiment_background.toml",
        CrewTarget::Url(url),
        CheckOptions::default().runs(1),
    )
    .await
    .expect_err("a crew that never escalates fails");
    let text = failure.text();
    // Without the observer nothing is on the timeline either: every scenario misses it.
    assert!(text.contains("3 of 3 scenarios failed"), "{text}");
    assert!(
        text.contains(
            "expected exactly one agent.log sentiment(frustrated_turns = 1, label = \"negative\"); 0 matched"
        ),
        "{text}"
    );
    assert!(
        text.contains("FAIL two frustrated turns in a row: an apology, then one transfer"),
        "{text}"
    );
    assert!(text.contains("+15550100"), "{text}");
    assert!(
        text.contains(r#"expected the reply to contain "sorry this has been frustrating""#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remote_weather_suite_passes_with_the_station_answering_from_its_process() {
    use crewline_examples::remote_weather::{self, station};
    use crewline_remote::{ClientConfig, TaskApi};
    // The crew and its task API, as `cargo run --example remote_weather` serves them.
    let tasks = TaskApi::new();
    let llm: Arc<dyn LlmClient> = Arc::new(remote_weather::scripted_model(Duration::ZERO));
    let weather = remote_weather::RemoteWeatherCrew::new(llm, tasks.clone());
    let server = CrewServer::new(move |setup: SessionSetup| {
        let weather = weather.clone();
        async move { weather.build(&setup).await }
    })
    .merge(tasks.router());
    let url = common::serve(server).await;
    // The station (the example's `--client`), in this process over HTTP: it registers its
    // get_weather as a task and answers the crew's calls until the call ends.
    let api = url.replace("ws://", "http://").replace("/ws", "");
    let (task_tx, task_rx) = tokio::sync::oneshot::channel();
    let station = tokio::spawn(station::run(ClientConfig::new(api), move |task_id| {
        let _ = task_tx.send(task_id.to_owned());
    }));
    let task_id = task_rx.await.expect("the station registered its task");

    let reports = check_suite(
        "remote_weather.toml",
        CrewTarget::Url(url),
        CheckOptions::default().variable("task_id", task_id),
    )
    .await
    .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(reports.len(), 1);
    // The call hung up: the task is done, and the station answered both lookups itself.
    let outcome = tokio::time::timeout(Duration::from_secs(30), station)
        .await
        .expect("the station stopped with the call")
        .expect("the station's task")
        .expect("the station's outcome");
    assert_eq!(outcome.calls_answered, 2, "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weather_agent_suite_passes_and_a_long_winded_model_fails_its_budget() {
    use crewline::{
        llm::{Reply, ScriptedLlm},
        types::Message,
    };
    let url = common::weather_crew(Duration::from_millis(2), Duration::from_millis(20)).await;
    let reports = check_suite(
        "weather_agent.toml",
        CrewTarget::Url(url),
        CheckOptions::default(),
    )
    .await
    .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(reports.len(), 3);

    // The broken variant: the right lookups, read back at length.
    let broken = ScriptedLlm::from_fn(|request| match request.messages.last() {
        Some(Message::Tool { .. }) => Reply::text(
            "In Tokyo it is 24 degrees and sunny. The sky is clear. The wind is light. Take \
             sunglasses. Enjoy your day!",
        ),
        _ => Reply::tool_call("get_weather", serde_json::json!({"location": "Tokyo"})),
    });
    let crew =
        voice_agent::WeatherCrew::new(Arc::new(broken), Duration::ZERO).expect("the weather tools");
    let url = common::serve(CrewServer::new(crew.agent().clone())).await;
    let failure = check_suite(
        "weather_agent.toml",
        CrewTarget::Url(url),
        CheckOptions::default().runs(1),
    )
    .await
    .expect_err("a long-winded crew fails");
    let text = failure.text();
    assert!(text.contains("FAIL a short answer stays short"), "{text}");
    assert!(
        text.contains(
            "expected at most 2 sentences; came 5: \"Let me check that for you.In Tokyo it is 24"
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_azure_weather_suite_passes_on_the_runners_model_through_the_azure_client() {
    // What the suite's command does offline (`--endpoint {model_url}`), in process: the
    // runner serves the suite's [model]; the crew is the example's, on an Azure client
    // pointed at it.
    let factory = crewline_eval::CrewFactory::new(|model_url: Option<String>| async move {
        let endpoint = model_url.ok_or("the suite has a [model]")?;
        let model = azure_weather::azure_model(&endpoint, "gpt-4o-mini", "2024-10-21", "offline");
        let crew = voice_agent::WeatherCrew::new(Arc::new(model), Duration::from_millis(5))
            .map_err(|e| e.to_string())?;
        Ok(common::serve(CrewServer::new(crew.agent().clone())).await)
    });
    let reports = check_suite(
        "azure_weather.toml",
        CrewTarget::Serve(factory),
        CheckOptions::default(),
    )
    .await
    .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(reports.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weather_crew_passes_on_thirteen_providers_recorded_streams() {
    // What `cargo run --example voice_agent` does with OPENAI_BASE_URL set, in process: the
    // crew's OpenAI client pointed at the runner's model, which plays the recordings.
    let factory = crewline_eval::CrewFactory::new(|model_url: Option<String>| async move {
        let base_url = model_url.ok_or("the suite has a [model]")?;
        let client = crewline::llm::OpenAiClient::builder()
            .api_key("offline")
            .base_url(base_url)
            .read_env(false)
            .model("recorded")
            .build()
            .map_err(|e| e.to_string())?;
        let crew = voice_agent::WeatherCrew::new(Arc::new(client), Duration::ZERO)
            .map_err(|e| e.to_string())?;
        Ok(common::serve(CrewServer::new(crew.agent().clone())).await)
    });
    let path = suite("weather_recorded_providers.toml");
    let scenarios = ScenarioFile::load(&path).expect("the suite reads its recordings");
    // Every reply of every script is a recording, served byte for byte.
    assert!(scenarios.iter().all(|s| {
        s.model.as_ref().is_some_and(|m| {
            m.replies
                .iter()
                .all(|r| r.pointer("/reply/sse_body").is_some())
        })
    }));
    let reports = check_suite(
        "weather_recorded_providers.toml",
        CrewTarget::Serve(factory),
        CheckOptions::default(),
    )
    .await
    .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(reports.len(), 17);
}

/// What the runner serves for a suite's `[model]`, in process: the mock model playing the
/// scenario's script, and crewline's OpenAI client pointed at it (keep the first alive).
async fn suite_model(
    scenario: &crewline_eval::Scenario,
) -> (
    crewline_testkit::mock_llm::RunningMockLlm,
    crewline::llm::OpenAiClient,
) {
    let script = scenario
        .model
        .as_ref()
        .expect("the suite's [model]")
        .script()
        .expect("a valid script");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let model = crewline_testkit::mock_llm::MockLlm::new(script)
        .serve(listener)
        .expect("serve the mock");
    let client = model
        .client_builder()
        .model("mock")
        .build()
        .expect("a client");
    (model, client)
}
