//! The example crews tested the way a crew author tests their own, with `crewline-testkit`:
//! a scripted conversation through the real server, asserted on what the caller hears, the
//! tools the crew ran (with their arguments and results), the hand-offs it asked for and what
//! its background nodes logged. One section per example crew in `crewline-examples`.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::bounded;

use std::{sync::Arc, time::Duration};

use crewline::{Crew, SessionSetup, protocol::ConversationType, tool::RegistryError};
use crewline_examples::{
    azure_weather, bank_support, call_control, collections_router, sentiment_background, text_chat,
    voice_agent,
};
use crewline_testkit::{TestCrew, TestkitError, platform::PlatformError};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weather_crew_looks_up_two_cities_in_one_round_and_says_the_filler_first() {
    bounded(async {
        let llm = Arc::new(voice_agent::scripted_weather_model(Duration::ZERO));
        let weather = voice_agent::WeatherCrew::new(llm, Duration::from_millis(20)).unwrap();
        let crew = TestCrew::serve(move |setup: &SessionSetup| weather.build(setup))
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
        let crew = TestCrew::serve(|setup: &SessionSetup| {
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
        let crew = TestCrew::serve(|setup: &SessionSetup| {
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

/// The bank crew over `books`, on its offline model.
async fn bank_crew(books: &bank_support::Bank) -> TestCrew {
    let shared = bank_support::BankShared::in_memory(books.clone());
    TestCrew::serve(move |setup: &SessionSetup| {
        bank_support::bank_crew(
            setup,
            Arc::new(bank_support::scripted_bank_model()),
            &shared,
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bank_crew_moves_money_only_after_the_callers_yes() {
    bounded(async {
        let books = bank_support::Bank::demo();
        let crew = bank_crew(&books).await;
        let mut call = crew.call().await.unwrap();

        let turn = call.say("What's my balance?").await.unwrap();
        turn.assert_tool_call("get_balance", json!({}))
            .returned(json!({"balance": "$1,250.00"}));
        turn.assert_text("Your balance is $1,250.00.");

        // The transfer is parked: the caller is asked, and nothing moves yet.
        let turn = call.say("Please send $50 to Alice.").await.unwrap();
        turn.assert_tool_call(
            "transfer_money",
            json!({"amount": 50.0, "recipient": "Alice"}),
        )
        .failed_with("waiting for approval");
        turn.assert_text("Shall I transfer $50.00 to Alice?")
            .assert_no_errors();
        assert_eq!(books.balance("caller"), Some(125_000));
        assert_eq!(books.balance("alice"), Some(10_000));

        // The caller's yes runs that same call.
        let turn = call.say("Yes, please.").await.unwrap();
        turn.assert_tools_called(&["transfer_money"])
            .assert_tool_call(
                "transfer_money",
                json!({"amount": 50.0, "recipient": "Alice"}),
            )
            .returned(json!({
                "status": "completed",
                "amount": "$50.00",
                "recipient": "Alice",
                "new_balance": "$1,200.00",
            }));
        turn.assert_text("Done: I've sent $50.00 to Alice. Your new balance is $1,200.00.");
        assert_eq!(books.balance("caller"), Some(120_000));
        assert_eq!(books.balance("alice"), Some(15_000));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bank_crew_moves_nothing_on_a_no_and_serves_the_account_the_call_names() {
    bounded(async {
        let books = bank_support::Bank::demo();
        let crew = bank_crew(&books).await;
        let mut call = crew.call().await.unwrap();

        call.say("Send $50 to Alice.")
            .await
            .unwrap()
            .assert_text("Shall I transfer $50.00 to Alice?");
        let turn = call.say("No, don't do that.").await.unwrap();
        turn.assert_tool_call(
            "transfer_money",
            json!({"amount": 50.0, "recipient": "Alice"}),
        )
        .failed_with("the caller said no");
        turn.assert_text("Okay, I haven't transferred anything. Your balance is unchanged.");
        assert_eq!(books.balance("caller"), Some(125_000));
        assert_eq!(books.balance("alice"), Some(10_000));

        // The call's `account` variable picks whose books the tools read.
        let mut config = crew.config();
        config
            .initial_variables
            .insert(bank_support::ACCOUNT_VARIABLE.to_owned(), json!("alice"));
        let mut call = crew.call_with(config).await.unwrap();
        call.say("What's my balance?")
            .await
            .unwrap()
            .assert_text("Your balance is $100.00.");
    })
    .await;
}

/// The sentiment crew's setup: the observer in front of the weather agent, on the offline
/// model.
fn sentiment_setup() -> impl Fn(&SessionSetup) -> Result<Crew, RegistryError> + Send + Sync {
    let llm = sentiment_background::scripted_model(Duration::ZERO);
    let weather = voice_agent::WeatherCrew::new(llm, Duration::from_millis(20)).unwrap();
    move |setup| Ok(sentiment_background::sentiment_crew(&weather, setup))
}

/// The sentiment crew, served on 127.0.0.1.
async fn sentiment_crew() -> TestCrew {
    TestCrew::serve(sentiment_setup()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentiment_observer_scores_each_turn_and_two_frustrated_turns_go_to_a_human() {
    bounded(async {
        let crew = sentiment_crew().await;
        let mut call = crew.call().await.unwrap();

        let turn = call.say("This is useless.").await.unwrap();
        turn.assert_logged(
            "sentiment",
            json!({"score": -1.0, "label": "negative", "frustrated_turns": 1}),
        );
        // One bad turn is not enough: the weather agent answers as usual.
        turn.assert_no_handoff().assert_text_contains("Paris");

        let turn = call.say("I hate this, it's terrible!").await.unwrap();
        turn.assert_logged(
            "sentiment",
            json!({"label": "negative", "frustrated_turns": 2}),
        );
        turn.assert_text(sentiment_background::APOLOGY)
            .assert_no_tool_calls()
            .assert_transferred_to(sentiment_background::HUMAN_DESK);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calm_turn_resets_the_frustration_streak() {
    bounded(async {
        let crew = sentiment_crew().await;
        let mut call = crew.call().await.unwrap();

        call.say("This is ridiculous.")
            .await
            .unwrap()
            .assert_logged("sentiment", json!({"frustrated_turns": 1}));
        let turn = call.say("What's the weather in Paris?").await.unwrap();
        turn.assert_logged(
            "sentiment",
            json!({"label": "neutral", "frustrated_turns": 0}),
        );
        turn.assert_tool_call("get_weather", json!({"location": "Paris"}))
            .succeeded();
        turn.assert_text_contains("In Paris it is");
        call.say("Ugh, awful.")
            .await
            .unwrap()
            .assert_logged("sentiment", json!({"frustrated_turns": 1}))
            .assert_no_handoff();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentiment_crew_answers_the_same_in_process_as_through_a_socket() {
    bounded(async {
        let mut transcripts = Vec::new();
        for crew in [
            sentiment_crew().await,
            TestCrew::in_process(sentiment_setup()),
        ] {
            let mut call = crew.call().await.unwrap();
            let mut turns = Vec::new();
            for words in [
                "What's the weather in Paris?",
                "This is useless.",
                "I hate this!",
            ] {
                turns.push(call.say(words).await.unwrap().to_string());
            }
            transcripts.push(turns);
        }
        // The background node's logs, the tool call, the apology and the transfer, in order.
        assert_eq!(transcripts[0], transcripts[1]);
        assert!(
            transcripts[1][2].contains("transfer_call to"),
            "{:?}",
            transcripts[1]
        );
    })
    .await;
}

/// The chat crew, on its offline model.
async fn chat_crew() -> TestCrew {
    TestCrew::serve(|setup: &SessionSetup| {
        text_chat::chat_crew(setup, Arc::new(text_chat::scripted_chat_model()))
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_crew_looks_the_order_up_and_answers_in_markdown_without_a_filler() {
    bounded(async {
        let crew = chat_crew().await;
        let mut config = crew.config();
        config.conversation_type = ConversationType::Chat;
        let mut call = crew.call_with(config).await.unwrap();

        call.say("Hi!")
            .await
            .unwrap()
            .assert_no_tool_calls()
            .assert_text_contains("**order number**");

        let turn = call.say("Where is my order #1042?").await.unwrap();
        let order = turn
            .assert_tool_call("order_status", json!({"order_id": "1042"}))
            .succeeded();
        assert_eq!(order["status"], "shipped", "{turn}");
        // No "Let me check that": what the widget shows is only the answer.
        turn.assert_text(
            "**Order 1042** is shipped.\n\n\
             - 1 × Trail runner shoes\n\
             - 2 × Merino socks\n\n\
             Expected delivery: **Friday**. Details are on \
             [your order page](https://shop.example.com/orders/1042).",
        )
        .assert_no_errors();

        let turn = call.say("And order 9999?").await.unwrap();
        turn.assert_tool_call("order_status", json!({"order_id": "9999"}))
            .failed_with("There is no order 9999");
        turn.assert_text_contains("Sorry, I couldn't find that order.");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_crew_refuses_a_voice_call_and_says_why() {
    bounded(async {
        let crew = chat_crew().await;
        // The default call is a web call: a voice conversation.
        match crew.call().await {
            Err(TestkitError::Platform(PlatformError::Rejected { message })) => {
                assert!(message.contains("answers text chats"), "{message}");
            }
            other => panic!("a voice call was not refused: {other:?}"),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remote_weather_crew_speaks_what_the_callers_own_station_answers() {
    use crewline_examples::remote_weather::{self, station};
    use crewline_remote::{ClientConfig, TaskApi, wire::TaskStatus};
    use crewline_server::CrewServer;

    bounded(async {
        // The crew with its task API, as the example serves it.
        let tasks = TaskApi::new();
        let model = Arc::new(remote_weather::scripted_model(Duration::ZERO));
        let weather = remote_weather::RemoteWeatherCrew::new(model, tasks.clone());
        let server = CrewServer::new(move |setup: SessionSetup| {
            let weather = weather.clone();
            async move { weather.build(&setup).await }
        })
        .merge(tasks.router());
        let crew = TestCrew::serve_server(server).await.unwrap();

        // The station (the remote side) registers its tools as a task, here in the test.
        let base = crew.url().unwrap().replacen("ws://", "http://", 1);
        let base = base.trim_end_matches("/ws").to_owned();
        let (task_tx, task_rx) = tokio::sync::oneshot::channel();
        let station = tokio::spawn(station::run(ClientConfig::new(base), move |id| {
            let _ = task_tx.send(id.to_owned());
        }));
        let task_id = task_rx.await.unwrap();

        let mut config = crew.config();
        config
            .initial_variables
            .insert("task_id".to_owned(), json!(task_id));
        let mut call = crew.call_with(config).await.unwrap();
        let oslo = call.say("What's the weather in Oslo?").await.unwrap();
        let answer = oslo
            .assert_tool_call("get_weather", json!({"location": "Oslo"}))
            .succeeded();
        assert_eq!(answer["source"], "client weather station");
        oslo.assert_text_contains("In Oslo it is 4 degrees and snowing.");

        // The station's own error reaches the model as a tool error, and is said.
        let atlantis = call.say("And in Atlantis?").await.unwrap();
        atlantis
            .assert_tool_call("get_weather", json!({"location": "Atlantis"}))
            .failed_with("no data for Atlantis");
        atlantis.assert_text_contains("The station has no data for Atlantis");

        // Hanging up ends the task; the station stops, having answered both calls.
        call.hang_up().await.unwrap();
        let outcome = station.await.unwrap().unwrap();
        assert_eq!(outcome.status, TaskStatus::Done);
        assert_eq!(outcome.calls_answered, 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weather_crew_on_an_azure_async_openai_client_calls_its_deployment() {
    use crewline_testkit::mock_llm::{MockLlm, Script};
    bounded(async {
        let mock = MockLlm::new(Script::weather_tool(3, Duration::ZERO))
            .start()
            .await
            .unwrap();
        let endpoint = mock.base_url().trim_end_matches("/v1").to_owned();
        let model = azure_weather::azure_model(&endpoint, "weather-prod", "2024-10-21", "az-key");
        let weather = voice_agent::WeatherCrew::new(Arc::new(model), Duration::ZERO).unwrap();
        let crew = TestCrew::serve(move |setup: &SessionSetup| weather.build(setup))
            .await
            .unwrap();
        let mut call = crew.call().await.unwrap();

        let turn = call.say("What's the weather in Paris?").await.unwrap();

        turn.assert_tool_call("get_weather", json!({"location": "Paris"}))
            .succeeded();
        turn.assert_no_errors();
        assert!(!turn.text().is_empty());
        // Both rounds went to the deployment's URL (its key header and `api-version` are
        // checked in crewline-llm's tests/it/async_openai_client.rs).
        let requests = mock.mock().requests();
        assert_eq!(requests.len(), 2, "{requests:?}");
        for request in &requests {
            assert_eq!(
                request.path,
                "/openai/deployments/weather-prod/chat/completions"
            );
        }
    })
    .await;
}
