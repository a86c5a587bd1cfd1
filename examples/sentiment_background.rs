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
//! again. Runs offline on the scripted weather model, or on a real one with `OPENAI_API_KEY`.
//!
//! ```sh
//! cargo run --example sentiment_background -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws   # try "this is useless" twice in a row
//! ```

use std::time::Duration;

use crewline_examples::{args::ServeCrewArgs, sentiment_background, voice_agent};

/// Serves the sentiment crew (a sentiment observer in front of the weather agent) on `/ws`.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    crew: ServeCrewArgs,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _logs = crewline_examples::args::init_logs("info");
    let Args { crew } = clap::Parser::parse();
    // The main model, behind a fallback over other providers when --fallback-base-url is given.
    let model = crew
        .model
        .with_fallbacks(voice_agent::model(
            crew.model.choice(),
            crew.model.model.clone(),
            Duration::from_millis(20),
        )?)
        .await
        .map_err(|error| -> Box<dyn std::error::Error> { error })?;
    tracing::info!(port = crew.port, model = %model.description, "sentiment crew listening on /ws");
    crew.apply(sentiment_background::server(model.llm)?)
        .run()
        .await?;
    Ok(())
}
