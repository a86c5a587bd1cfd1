//! The sentiment background example driven through the real server by the platform client:
//! each user turn gets a `sentiment` log, and two frustrated turns in a row end with an
//! apology and a transfer to a human.

use crate::common;

use std::time::Duration;

use crewline_examples::sentiment_background as sentiment;
use crewline_testkit::platform::{Handoff, PlatformError, TurnSummary};
use serde_json::{Map, Value, json};

use common::{connect, say};

/// Serves the sentiment crew on 127.0.0.1 (port 0); returns its WebSocket URL.
async fn serve() -> String {
    let server = sentiment::server(sentiment::scripted_model(Duration::from_millis(2)))
        .expect("the weather tools register");
    common::serve(server).await
}

/// The turn's `sentiment` log entries.
fn sentiment_logs(summary: &TurnSummary) -> Vec<Map<String, Value>> {
    summary
        .logs
        .iter()
        .filter(|(name, _)| name == "sentiment")
        .map(|(_, payload)| payload.clone())
        .collect()
}

#[tokio::test]
async fn two_frustrated_turns_in_a_row_end_with_an_apology_and_a_transfer() {
    let url = serve().await;
    let mut client = connect(&url).await;

    let first = say(&mut client, "This is useless.").await;
    let logs = sentiment_logs(&first);
    assert_eq!(logs.len(), 1, "{:?}", first.logs);
    assert_eq!(
        Value::Object(logs[0].clone()),
        json!({"score": -1.0, "label": "negative", "frustrated_turns": 1})
    );
    assert!(first.handoff.is_none(), "one bad turn is not enough");
    // Off the weather script: the scripted model says what it knows.
    assert!(
        first
            .text
            .contains("Paris, Tokyo, London, New York or San Francisco"),
        "{}",
        first.text
    );

    let second = say(&mut client, "I hate this, it's terrible!").await;
    let logs = sentiment_logs(&second);
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0]["frustrated_turns"], 2);
    assert_eq!(second.text, sentiment::APOLOGY, "the answer is the apology");
    // The verdict came before the answer, and the transfer right after the last words.
    let types = second.wire_types();
    let log = types.iter().position(|t| *t == "agent.log").expect("log");
    let start = types
        .iter()
        .position(|t| *t == "agent.llm.response.start")
        .expect("start");
    assert!(log < start, "{types:?}");
    assert_eq!(
        types[types.len() - 2..],
        ["agent.transfer_call", "agent.llm.response.end"],
        "{types:?}"
    );
    let transfer = common::transfer_of(&second);
    assert_eq!(transfer.transfer_call_number, sentiment::HUMAN_DESK);
    assert!(transfer.transfer_options.private_handoff_option.is_some());
    assert!(
        matches!(&second.handoff, Some(Handoff::Transfer(number)) if number == sentiment::HUMAN_DESK)
    );
    assert!(matches!(
        client.user_turn("hello?"),
        Err(PlatformError::HandedOff)
    ));
}

#[tokio::test]
async fn a_calm_turn_resets_the_streak_and_the_call_goes_on() {
    let url = serve().await;
    let mut client = connect(&url).await;

    let mut streak = Vec::new();
    for words in [
        "This is ridiculous.",
        "What's the weather in Paris?",
        "Great, thanks! And the worst part is the rain.",
        "Ugh, awful.",
    ] {
        let summary = say(&mut client, words).await;
        assert!(summary.handoff.is_none(), "{words}: {:?}", summary.handoff);
        let logs = sentiment_logs(&summary);
        assert_eq!(logs.len(), 1, "{words}");
        streak.push((
            logs[0]["label"].clone(),
            logs[0]["frustrated_turns"].clone(),
        ));
        if words.contains("Paris") {
            assert!(
                summary.text.contains("In Paris it is 18 degrees"),
                "{}",
                summary.text
            );
        }
    }

    assert_eq!(
        streak,
        [
            (json!("negative"), json!(1)),
            (json!("neutral"), json!(0)),
            (json!("positive"), json!(0)),
            (json!("negative"), json!(1)),
        ]
    );
    assert!(client.handoff().is_none());
}

#[test]
fn scores_follow_the_words() {
    assert_eq!(sentiment::score("I hate this"), -1.0);
    assert_eq!(sentiment::score("thanks, that was helpful"), 1.0);
    assert_eq!(sentiment::score("great, but the worst timing"), 0.0);
    assert_eq!(sentiment::score("What's the weather in Paris?"), 0.0);
}
