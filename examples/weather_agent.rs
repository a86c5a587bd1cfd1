//! The reference SDK's weather agent in crewline, one turn at a time without a server: the
//! `get_weather` tool on an agent type, discovered into a registry, and the
//! `generate_response` tool loop streaming the answer. When the caller asks about several
//! cities, the model calls the tool once per city in one round and the calls run in parallel.
//!
//! Runs offline on the built-in scripted model; with `OPENAI_API_KEY` set (and optionally
//! `OPENAI_BASE_URL`, `OPENAI_MODEL`) it talks to a real OpenAI-compatible endpoint instead.
//!
//! ```sh
//! cargo run --example weather_agent -- "What's the weather in Paris and Tokyo?"
//! ```

use std::{io::Write, time::Duration};

use crewline::{
    TurnEvent,
    types::{Context, Message},
};
use crewline_examples::{args::ModelArgs, voice_agent};
use futures::StreamExt;

/// Asks the weather agent one question and prints its turn as it streams, tools included.
#[derive(clap::Parser)]
struct Args {
    /// What the caller says.
    #[arg(default_value = "What's the weather in Paris and Tokyo?", num_args = 1..)]
    question: Vec<String>,
    #[command(flatten)]
    model: ModelArgs,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _logs = crewline_examples::args::init_logs("warn");
    let args = <Args as clap::Parser>::parse();
    let question = args.question.join(" ");

    // The main model, behind a fallback over other providers when --fallback-base-url is given.
    let model = args
        .model
        .with_fallbacks(voice_agent::model(
            args.model.choice(),
            args.model.model.clone(),
            Duration::from_millis(15),
        )?)
        .await
        .map_err(|error| -> Box<dyn std::error::Error> { error })?;
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
