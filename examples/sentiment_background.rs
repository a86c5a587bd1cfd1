//! An output node plus a background node: the weather agent answers the caller while a
//! sentiment observer reads every user transcript, puts its score on the call's timeline as
//! an `agent.log` event named `sentiment`, and transfers the call to a human after two
//! frustrated turns in a row. The observer never speaks; its errors would be warnings and the
//! call would go on.
//!
//! ```sh
//! cargo run --example sentiment_background -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws      # try: "this is useless, I hate this"
//! ```

#[path = "voice_agent/crew.rs"]
#[allow(dead_code, unreachable_pub)]
mod crew;

use std::{net::SocketAddr, time::Duration};

use crewline::{
    prelude::*,
    protocol::{TranscriptRole, TransferOptions},
};
use crewline_server::CrewServer;
use serde_json::{Map, json};

/// Words that suggest the caller is unhappy, and happy.
const NEGATIVE: [&str; 8] = [
    "hate",
    "useless",
    "terrible",
    "awful",
    "angry",
    "worst",
    "stupid",
    "ridiculous",
];
const POSITIVE: [&str; 6] = ["thanks", "great", "perfect", "love", "good", "helpful"];

/// Where frustrated callers are transferred.
const HUMAN_DESK: &str = "+15550100";

/// Scores each user transcript and escalates repeated frustration.
#[derive(Default)]
struct SentimentObserver {
    /// Frustrated turns in a row.
    streak: u32,
}

/// A score in -1..=1 from a tiny lexicon (a real crew would call a classifier here).
fn score(text: &str) -> f64 {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .collect();
    let count = |lexicon: &[&str]| {
        words
            .iter()
            .filter(|w| lexicon.contains(&w.as_str()))
            .count() as f64
    };
    let (neg, pos) = (count(&NEGATIVE), count(&POSITIVE));
    if neg + pos == 0.0 {
        0.0
    } else {
        (pos - neg) / (pos + neg)
    }
}

#[async_trait::async_trait]
impl BackgroundAgent for SentimentObserver {
    async fn on_event(&mut self, event: &Event, node: &NodeHandle) -> Result<(), NodeError> {
        let EventBody::TranscriptUpdate(update) = &event.body else {
            return Ok(());
        };
        if update.role != TranscriptRole::User {
            return Ok(());
        }
        let score = score(&update.content);
        let label = match score {
            s if s < 0.0 => "negative",
            s if s > 0.0 => "positive",
            _ => "neutral",
        };
        self.streak = if score < 0.0 { self.streak + 1 } else { 0 };
        let mut payload = Map::new();
        payload.insert("score".into(), json!(score));
        payload.insert("label".into(), json!(label));
        payload.insert("frustrated_turns".into(), json!(self.streak));
        node.log("sentiment", payload).await;
        if self.streak >= 2 && !node.call().is_handed_off() {
            tracing::info!("repeated frustration: transferring to a human");
            node.call()
                .speak("I'm sorry this has been frustrating. Let me get you to a colleague.")
                .await?;
            node.call()
                .transfer_call(HUMAN_DESK, TransferOptions::default(), None)
                .await?;
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let port = std::env::args()
        .skip_while(|a| a != "--port")
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(8080u16);
    let (llm, _) = crew::demo_model(crew::ModelChoice::FromEnv, Duration::from_millis(20))?;
    let weather = crew::WeatherCrew::new(llm, crew::WEATHER_SERVICE_DELAY)?;
    CrewServer::new(move |setup: SessionSetup| {
        let mut crew = weather.build(&setup);
        async move {
            // Both nodes are roots and leaves: each sees every platform event, and what each
            // sends goes to the platform.
            crew.add_node(BackgroundNode::new(
                "sentiment",
                SentimentObserver::default(),
            ));
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(crew)
        }
    })
    .bind(SocketAddr::from(([0, 0, 0, 0], port)))
    .run()
    .await?;
    Ok(())
}
