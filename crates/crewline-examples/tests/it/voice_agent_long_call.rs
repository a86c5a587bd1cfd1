//! The weather crew with `--summarize`, through the real server: its context is counted by
//! OpenAI's tokenizer for an OpenAI model name, and a long call's oldest turns are summarized
//! (the summary logged with `--log-usage`); without the flag nothing is summarized.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use clap::Parser;
use crewline::{
    llm::{Reply, ScriptedLlm},
    summary::SUMMARY_LOG,
};
use crewline_examples::voice_agent::{self, Args, WeatherCrew};
use crewline_server::CrewServer;
use crewline_testkit::{PlatformClient, TestCrew, platform::CrewFrame};

#[test]
fn the_summarize_flags_are_off_unless_given() {
    let args = Args::try_parse_from(["voice_agent"]).unwrap();
    assert!(!args.summarize);
    let args = Args::try_parse_from([
        "voice_agent",
        "--summarize",
        "--summary-model",
        "gpt-4o-mini",
    ])
    .unwrap();
    assert!(args.summarize);
    assert_eq!(args.summary_model.as_deref(), Some("gpt-4o-mini"));
    // A summary model without summaries is a mistake the flags refuse.
    assert!(Args::try_parse_from(["voice_agent", "--summary-model", "x"]).is_err());
}

#[tokio::test(start_paused = true)]
async fn with_summarize_a_long_call_gets_its_oldest_turns_summarized() {
    let model = Arc::new(voice_agent::scripted_weather_model(Duration::ZERO));
    let summaries = Arc::new(ScriptedLlm::from_fn(|_| {
        Reply::text("The caller asked about the weather in Paris, several times.")
    }));
    let crew = WeatherCrew::new(model, Duration::ZERO)
        .unwrap()
        .with_long_call(summaries.clone(), Some("gpt-4o-mini"), None)
        .with_cost(None, true);
    assert!(crew.agent().summarizer().is_some(), "the crew summarizes");
    let served = TestCrew::serve_server(CrewServer::new(crew.agent().clone()))
        .await
        .unwrap();
    let mut client = PlatformClient::connect(served.config()).await.unwrap();
    // 16k tokens at 75%: a long call of long questions.
    let question = format!("What's the weather in Paris? {}", "I wonder. ".repeat(300));
    let mut landed = false;
    for _ in 0..40 {
        let turn = client
            .user_turn(question.clone())
            .unwrap()
            .finish()
            .await
            .unwrap();
        landed |= turn
            .frames
            .iter()
            .any(|f| matches!(&f.frame, CrewFrame::Log { name, .. } if name == SUMMARY_LOG));
        if landed || !summaries.requests().is_empty() {
            break;
        }
    }
    assert_eq!(summaries.requests().len(), 1, "one summary asked for");
    client.close().await.unwrap();
}
