//! A background node in front of the output node: a sentiment observer reads every user
//! transcript, puts its score on the call's timeline as an `agent.log` event named
//! `sentiment` (`score` in -1..=1, `label`, `frustrated_turns`), and after two frustrated
//! turns in a row escalates: the weather agent's answer to that turn is an apology, and the
//! call is transferred to a human right after it (`agent.transfer_call`, sent just before the
//! turn's `end`). The observer never speaks itself; if it failed, the platform would get a
//! warning and the call would go on.
//!
//! The observer sits before the agent in the crew's graph and forwards every event after
//! scoring it, so the agent always answers knowing the verdict on the words it answers (no
//! race between the two nodes); interrupts still reach the agent at once, on their own line.
//! A barge-in on the apology drops the transfer with the turn, and the next turn escalates
//! again. Runs offline on the scripted weather model, or on a real one with `OPENAI_API_KEY`
//! (or `OPENAI_BASE_URL`) set.
//!
//! ```sh
//! cargo run --example sentiment_background -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws   # try "this is useless" twice in a row
//! ```
//!
//! The weather agent is the `voice_agent` example's: a copy of this file needs a copy of
//! `voice_agent.rs` beside it (and that file's dependencies).
//!
//! A copy of this file is a whole project: save it as `src/main.rs` beside this `Cargo.toml`
//!
//! ```toml
//! [dependencies]
//! crewline = "0.1"
//! crewline-server = { version = "0.1", features = ["clap", "otel", "redis"] }
//! clap = { version = "4", features = ["derive"] }
//! serde_json = "1"
//! tokio = { version = "1", features = ["full"] }
//! tracing = "0.1"
//! async-stream = "0.3"
//! mimalloc = { version = "0.1", default-features = false }
//! ```

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crewline::{
    agent::{AgentError, LoopAgent},
    call::CallControl,
    crew::{NodeError, NodeHandle, OutputAgent},
    prelude::*,
    protocol::{
        Event, EventBody, HandoffKind, HandoffOption, HoldMusic, TranscriptRole, TransferOptions,
        TransferType,
    },
    turn::{TurnEvent, TurnStream},
    types::{Context, Message},
};
use crewline_server::{BoxError, CrewArgs, CrewServer};
use serde_json::{Map, json};

/// The weather agent this crew puts behind its observer: the `voice_agent` example's crew
/// (its `main` and flags unused here).
#[path = "voice_agent.rs"]
#[allow(dead_code)]
pub mod voice_agent;

use voice_agent::WeatherCrew;

/// Serves the sentiment crew (a sentiment observer in front of the weather agent) on `/ws`.
#[derive(Debug, clap::Parser)]
pub struct Args {
    /// crewline-server's shared flags: where to listen, the token, the model.
    #[command(flatten)]
    pub crew: CrewArgs,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The flags, then the logs: stderr, and each turn traced over OTLP when
    // OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let args = <Args as clap::Parser>::parse();
    let _logs = crewline_server::init_logs("info");
    // The weather agent's model: OPENAI_BASE_URL's or OpenAI's (with OPENAI_API_KEY), else
    // its scripted one; behind a fallback when --fallback-base-url is given.
    let chosen = voice_agent::model(
        args.crew.model.choice(),
        args.crew.model.model.clone(),
        Duration::from_millis(20),
    )?;
    let model = args.crew.model.with_fallbacks(chosen).await?;
    // The crew, one per call: the observer, then the weather agent.
    let server = args.crew.apply(server(model.llm.clone())?);
    model.watch_on(&server);
    tracing::info!(port = args.crew.port, "sentiment crew listening on /ws");
    server.run().await?;
    Ok(())
}

/// Words that suggest the caller is unhappy.
const NEGATIVE: [&str; 9] = [
    "hate",
    "useless",
    "terrible",
    "awful",
    "angry",
    "worst",
    "stupid",
    "ridiculous",
    "frustrating",
];

/// Words that suggest the caller is happy.
const POSITIVE: [&str; 6] = ["thanks", "great", "perfect", "love", "good", "helpful"];

/// Where frustrated callers are transferred.
pub const HUMAN_DESK: &str = "+15550100";

/// Frustrated turns in a row that escalate the call.
pub const ESCALATE_AFTER: u32 = 2;

/// What the agent says before handing a frustrated caller over.
pub const APOLOGY: &str =
    "I'm sorry this has been frustrating. Let me get you to a colleague who can help.";

/// A score in -1..=1 from a tiny lexicon (a real crew would call a classifier here).
pub fn score(text: &str) -> f64 {
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

/// The observer's decision that the call should go to a human, shared with the agent.
#[derive(Debug, Clone, Default)]
pub struct Escalation(Arc<AtomicBool>);

impl Escalation {
    fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the observer asked for a human.
    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Scores each user transcript and escalates repeated frustration.
struct SentimentObserver {
    /// Frustrated turns in a row.
    streak: u32,
    escalation: Escalation,
}

#[async_trait]
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
        if self.streak >= ESCALATE_AFTER && !self.escalation.is_requested() {
            tracing::info!(
                streak = self.streak,
                "repeated frustration: escalating to a human"
            );
            self.escalation.request();
        }
        Ok(())
    }
}

/// The weather agent, which hands the call over once the observer escalated.
struct EscalatingAgent {
    agent: LoopAgent,
    escalation: Escalation,
    call: CallControl,
}

impl OutputAgent for EscalatingAgent {
    fn context(&mut self) -> &mut Context {
        self.agent.context()
    }

    fn generate_response(&mut self) -> TurnStream<'_> {
        if !self.escalation.is_requested() {
            return self.agent.generate_response();
        }
        Box::pin(async_stream::stream! {
            yield Ok(TurnEvent::Text(APOLOGY.to_owned()));
            self.agent.context().add(Message::assistant(APOLOGY));
            let options = TransferOptions {
                kind: TransferType::WarmTransfer,
                private_handoff_option: Some(HandoffOption {
                    kind: HandoffKind::Static,
                    prompt: "The caller was frustrated on several turns in a row.".to_owned(),
                }),
                public_handoff_option: None,
            };
            // Held by the call until this answer is complete: sent right after the apology,
            // and dropped with the turn if the caller interrupts it.
            if let Err(error) = self
                .call
                .transfer_call(HUMAN_DESK, options, Some(HoldMusic::RelaxingSound))
                .await
            {
                tracing::warn!(error = %crewline::types::ErrorChain(&error), "the escalation could not be sent");
            }
        })
    }
}

/// The crew for one call: the sentiment observer, then the weather agent.
pub fn sentiment_crew(weather: &WeatherCrew, setup: &SessionSetup) -> Crew {
    let escalation = Escalation::default();
    let agent = weather.agent().loop_agent(setup);
    let mut crew = Crew::new();
    // The observer forwards each event after scoring it: the agent answers a turn only once
    // the verdict on it is in.
    crew.add_node(
        BackgroundNode::new(
            "sentiment",
            SentimentObserver {
                streak: 0,
                escalation: escalation.clone(),
            },
        )
        .forward_events(true),
    );
    crew.add_node(OutputNode::new(
        "weather-agent",
        EscalatingAgent {
            agent,
            escalation,
            call: setup.call().clone(),
        },
    ));
    crew.add_edge("sentiment", "weather-agent");
    crew
}

/// The crew server for `llm`.
pub fn server(llm: Arc<dyn LlmClient>) -> Result<CrewServer, AgentError> {
    let weather = WeatherCrew::new(llm, voice_agent::WEATHER_SERVICE_DELAY)?;
    Ok(CrewServer::new(move |setup: SessionSetup| {
        sentiment_crew(&weather, &setup)
    }))
}

/// The offline model (the weather agent's script).
pub fn scripted_model(chunk_delay: Duration) -> Arc<dyn LlmClient> {
    Arc::new(voice_agent::scripted_weather_model(chunk_delay))
}
