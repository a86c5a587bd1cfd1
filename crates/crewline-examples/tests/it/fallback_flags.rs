//! The examples' `--fallback-base-url` chain (`model::chain`) on two mock providers, the
//! first down: the turn is answered by the fallback, on both model clients, and through a real
//! crew (the weather crew `voice_agent` serves).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crewline::{
    llm::{ChatRequest, LlmClient, StreamItem},
    types::Message,
};
use crewline_examples::voice_agent::WeatherCrew;
use crewline_server::model::{ChainSettings, ModelChoice, Provider, chain};
use crewline_testkit::{
    TestCrew,
    mock_llm::{Fault, MockLlm, RunningMockLlm, Script},
};
use futures::StreamExt;

async fn provider() -> RunningMockLlm {
    MockLlm::new(Script::text(3, Duration::ZERO))
        .start()
        .await
        .unwrap()
}

fn providers(primary: &RunningMockLlm, backup: &RunningMockLlm) -> Vec<Provider> {
    vec![
        Provider {
            name: "primary".into(),
            base_url: Some(primary.base_url()),
            model: "main-model".into(),
            api_key_env: None,
        },
        Provider {
            name: "fallback-1".into(),
            base_url: Some(backup.base_url()),
            model: "backup-model".into(),
            api_key_env: None,
        },
    ]
}

async fn answered_by_the_fallback(choice: ModelChoice) {
    let (primary, backup) = (provider().await, provider().await);
    primary.set_fault(Some(Fault::Down));
    let model = chain(
        choice,
        Some("sk-test-not-a-key"),
        &providers(&primary, &backup),
        &ChainSettings::default(),
    )
    .unwrap();
    assert!(
        model
            .description
            .contains("primary main-model at http://127.0.0.1:")
            && model.description.contains("fallback-1 backup-model at"),
        "{}",
        model.description
    );
    let mut stream = model
        .llm
        .stream_chat(ChatRequest::new(vec![Message::user("hello")]))
        .await
        .unwrap();
    let mut provider = None;
    let mut text = String::new();
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            StreamItem::Provider(name) => provider = Some(name),
            StreamItem::Text(piece) => text.push_str(&piece),
            _ => {}
        }
    }
    assert_eq!(provider.as_deref(), Some("fallback-1"));
    assert_eq!(text, "tok0 tok1 tok2 ");
    // The backup was asked for its own model; the primary's connection was reset, once (no
    // retries of its own behind the fallback).
    let asked = backup.mock().requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].body["model"], "backup-model");
    let primary_stats = primary.mock().stats();
    assert_eq!(
        primary_stats.requests + primary_stats.connections_reset,
        1,
        "{primary_stats:?}"
    );
}

#[tokio::test]
async fn the_default_client_chain_fails_over_to_the_fallback() {
    answered_by_the_fallback(ModelChoice::FromEnv).await;
}

#[tokio::test]
async fn the_async_openai_chain_fails_over_to_the_fallback() {
    answered_by_the_fallback(ModelChoice::AsyncOpenAiFromEnv).await;
}

#[tokio::test]
async fn a_crew_on_the_chain_answers_through_an_outage_and_after_it() {
    let (primary, backup) = (provider().await, provider().await);
    let model = chain(
        ModelChoice::FromEnv,
        Some("sk-test-not-a-key"),
        &providers(&primary, &backup),
        &ChainSettings::default(),
    )
    .unwrap();
    let weather = WeatherCrew::new(model.llm, Duration::ZERO).unwrap();
    let crew = TestCrew::in_process(weather.agent().clone());
    let mut call = crew.call().await.unwrap();

    call.say("Hello")
        .await
        .unwrap()
        .assert_text("tok0 tok1 tok2 ");
    assert_eq!(primary.mock().request_count(), 1);

    primary.set_fault(Some(Fault::Status(503)));
    call.say("Are you there?")
        .await
        .unwrap()
        .assert_text("tok0 tok1 tok2 ");
    assert_eq!(backup.mock().request_count(), 1);
    assert_eq!(
        primary.mock().requests().last().unwrap().outcome,
        "http_503"
    );
    call.hang_up().await.unwrap();
}
