//! The reference SDK's weather agent in crewline, one turn at a time without a server: the
//! `get_weather` tool on an agent type, discovered into a registry, and the
//! `generate_response` tool loop streaming the answer. When the caller asks about several
//! cities, the model calls the tool once per city in one round and the calls run in parallel.
//!
//! Runs offline on the built-in scripted model; with `OPENAI_API_KEY` or `OPENAI_BASE_URL`
//! set (and optionally `OPENAI_MODEL`) it talks to a real OpenAI-compatible endpoint instead.
//!
//! ```sh
//! cargo run --example weather_agent -- "What's the weather in Paris and Tokyo?"
//! ```
//!
//! The agent is the `voice_agent` example's: a copy of this file needs a copy of
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
//! futures = "0.3"
//! mimalloc = { version = "0.1", default-features = false }
//! ```

use std::{io::Write, time::Duration};

use crewline::{
    turn::TurnEvent,
    types::{Context, Message},
};
use crewline_server::{BoxError, ModelArgs};
use futures::StreamExt;

/// The weather agent: the `voice_agent` example's crew (its `main` and flags unused here).
#[path = "voice_agent.rs"]
#[allow(dead_code)]
pub mod voice_agent;

/// Asks the weather agent one question and prints its turn as it streams, tools included.
#[derive(Debug, clap::Parser)]
pub struct Args {
    /// What the caller says.
    #[arg(default_value = "What's the weather in Paris and Tokyo?", num_args = 1..)]
    pub question: Vec<String>,
    /// Which model the agent runs on.
    #[command(flatten)]
    pub model: ModelArgs,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The flags, then the logs (warnings only: stdout is the conversation).
    let args = <Args as clap::Parser>::parse();
    let _logs = crewline_server::init_logs("warn");
    let question = args.question.join(" ");

    // The model: OPENAI_BASE_URL's or OpenAI's (with OPENAI_API_KEY), else the scripted one;
    // behind a fallback over other providers when --fallback-base-url is given.
    let chosen = voice_agent::model(
        args.model.choice(),
        args.model.model.clone(),
        Duration::from_millis(15),
    )?;
    let model = args.model.with_fallbacks(chosen).await?;
    // The agent, and one turn of its tool loop on a conversation of our own.
    let agent = voice_agent::WeatherCrew::new(model.llm, voice_agent::WEATHER_SERVICE_DELAY)?;
    let mut context = Context::with_system(voice_agent::PROMPT);
    context.add(Message::user(question.clone()));

    let mut out = std::io::stdout().lock();
    writeln!(out, "caller: {question}")?;
    // The agent's text is printed as it streams; tool activity goes on lines of its own.
    let mut mid_line = false;
    let mut turn = agent.tool_loop().run(&mut context);
    while let Some(event) = turn.next().await {
        match event? {
            TurnEvent::Text(chunk) => {
                if !mid_line {
                    write!(out, "agent:  ")?;
                    mid_line = true;
                }
                write!(out, "{chunk}")?;
                out.flush()?;
            }
            TurnEvent::ToolStarted { call, .. } => {
                if std::mem::take(&mut mid_line) {
                    writeln!(out)?;
                }
                writeln!(out, "  tool> {}({})", call.name, call.arguments)?;
            }
            TurnEvent::ToolFinished(run) => {
                writeln!(
                    out,
                    "  tool< {} -> {} ({} ms)",
                    run.result.name,
                    run.result.content(),
                    run.latency.as_millis()
                )?;
            }
            TurnEvent::Done(report) => {
                writeln!(
                    out,
                    "\n\n{} LLM round(s), first text after {} ms, turn took {} ms",
                    report.rounds.len(),
                    report.time_to_first_token.map_or(0, |d| d.as_millis()),
                    report.total.as_millis()
                )?;
            }
        }
    }
    Ok(())
}
