//! The reference's weather agent served as a crew: the platform connects to `/ws`, sends
//! `system.init`, and asks for each LLM turn; the crew streams its answers, runs `get_weather`
//! (several cities in one round run in parallel, at most `MAX_TOOL_ROUNDS` = 4 rounds) and
//! reports tool activity as `agent.log` events. The weather service is slow, so the moment the
//! model asks for it the crew says "Let me check that for you." (the tool loop's filler, said
//! once per turn and only if nothing was said yet), and the answer follows when the lookups
//! finish; a barge-in silences the filler, cancels the lookups and nothing more is said. A
//! drop-in for the same agent written with the Python SDK.
//!
//! ```sh
//! cargo run --example voice_agent -- --port 8080            # scripted model, offline
//! OPENAI_API_KEY=... cargo run --example voice_agent -- --model gpt-4o-mini
//! crewline chat --url ws://127.0.0.1:8080/ws                 # talk to it
//! ```
//!
//! `--service-delay-ms N` sets the pretend weather service's time per call (default 300; the
//! load benchmarks use 0, like the reference's tool).

// Shared with the other weather examples and `crewline demo`; not every item is used here.
#[allow(dead_code, unreachable_pub)]
mod crew;

use std::{net::SocketAddr, time::Duration};

use crewline_server::CrewServer;

/// mimalloc instead of glibc malloc: each call allocates a few small buffers per frame, and
/// glibc's malloc/free were ~30 % of this server's CPU under load (BENCHMARKS.md "Load").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Reads `--port N`, `--model NAME` and `--service-delay-ms N` from the command line.
fn args() -> Result<(u16, Option<String>, Duration), String> {
    let mut port = 8080;
    let mut model = None;
    let mut service_delay = crew::WEATHER_SERVICE_DELAY;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => {
                port = args
                    .next()
                    .and_then(|p| p.parse().ok())
                    .ok_or("--port needs a number")?;
            }
            "--model" => model = Some(args.next().ok_or("--model needs a name")?),
            "--service-delay-ms" => {
                service_delay = args
                    .next()
                    .and_then(|ms| ms.parse().ok())
                    .map(Duration::from_millis)
                    .ok_or("--service-delay-ms needs a number")?;
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}` (use --port N, --model NAME, --service-delay-ms N)"
                ));
            }
        }
    }
    Ok((port, model, service_delay))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let (port, model, service_delay) = args()?;
    let (llm, description) =
        crew::model_named(crew::ModelChoice::FromEnv, model, Duration::from_millis(20))?;
    // The model and the tools are shared by every call; each call gets its own conversation.
    let weather = crew::WeatherCrew::new(llm, service_delay)?;
    let server = CrewServer::new(weather.setup_fn()).bind(SocketAddr::from(([0, 0, 0, 0], port)));
    tracing::info!(port, model = %description, "weather crew listening on /ws");
    server.run().await?;
    Ok(())
}
