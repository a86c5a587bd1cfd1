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
//! OPENAI_API_KEY=... cargo run --example voice_agent -- --llm-client async-openai
//! crewline chat --url ws://127.0.0.1:8080/ws                 # talk to it
//! ```
//!
//! `--service-delay-ms N` sets the pretend weather service's time per call (default 300; the
//! load benchmarks use 0, like the reference's tool). Calls run on one single-threaded
//! runtime per CPU (`CrewServer::worker_runtimes`); `--worker-runtimes 0` runs them on one
//! shared, multi-threaded runtime instead.

use std::time::Duration;

use crewline_examples::{args::ServeCrewArgs, voice_agent};
use crewline_server::CrewServer;

/// mimalloc instead of glibc malloc: each call allocates a few small buffers per frame, and
/// glibc's malloc/free were ~30 % of this server's CPU under load (BENCHMARKS.md "Load").
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Serves the weather crew on `/ws`.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    crew: ServeCrewArgs,
    /// How long the weather service takes to answer, in milliseconds.
    #[arg(long = "service-delay-ms", value_name = "MS", value_parser = parse_millis, default_value = "300")]
    service_delay: Duration,
    /// Serve calls on N single-threaded runtimes (default: one per CPU; 0: on one shared,
    /// multi-threaded runtime).
    #[arg(long, value_name = "N", default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
    worker_runtimes: usize,
}

fn parse_millis(text: &str) -> Result<Duration, std::num::ParseIntError> {
    text.parse().map(Duration::from_millis)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _logs = crewline_examples::args::init_logs("info");
    let args = <Args as clap::Parser>::parse();
    // With worker runtimes the calls run on the server's own threads, and this runtime only
    // waits for the shutdown signal: one thread is enough for it.
    let runtime = if args.worker_runtimes > 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
    };
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let Args {
        crew,
        service_delay,
        worker_runtimes,
    } = args;
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
    // The model and the tools are shared by every call; each call gets its own conversation.
    let weather = voice_agent::WeatherCrew::new(model.llm, service_delay)?;
    let mut server = crew.apply(CrewServer::new(weather.agent().clone()));
    // Requests, failovers, hedges and breaker state per provider on /metrics.
    if let Some(fallback) = &model.fallback {
        server.handle().metrics().watch_providers(fallback);
    }
    if worker_runtimes > 0 {
        server = server.worker_runtimes(worker_runtimes);
    }
    // With CREWLINE_REDIS_URL, each call's checkpoint lives in Redis: it resumes on any replica.
    let server = crewline_examples::args::with_call_store_from_env(server)
        .await
        .map_err(|error| -> Box<dyn std::error::Error> { error })?;
    tracing::info!(port = crew.port, model = %model.description, worker_runtimes, "weather crew listening on /ws");
    server.run().await?;
    Ok(())
}
