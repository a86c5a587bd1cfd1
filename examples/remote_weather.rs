//! A crew whose weather tool runs in another process. The crew server serves the task API
//! beside `/ws`; a client (this binary with `--client`, or any program that speaks the API)
//! registers its `get_weather` with `POST /task`, prints the task id, and answers the crew's
//! tool calls as they come (`GET /task/{id}?event_t=..&wait_ms=..`, then
//! `POST /task/{id}/event`). A platform call that carries `task_id` in its variables gets
//! the client's tool; when the call ends, the task is done with the agent's last reply as its
//! output, and the client prints it and exits.
//!
//! ```sh
//! cargo run --example remote_weather -- --port 8080                 # the crew (scripted model)
//! cargo run --example remote_weather -- --client --url http://127.0.0.1:8080/api/v1
//! #   prints task_id=task_...; then talk to the crew with that variable, e.g.
//! crewline chat --url ws://127.0.0.1:8080/ws --var task_id=task_...  # "weather in Oslo?"
//! ```
//!
//! `--api-key KEY` (both sides) protects the task API; `OPENAI_API_KEY` switches the crew to
//! a real model; `CREWLINE_REDIS_URL` (e.g. `redis://127.0.0.1:6379`) keeps the tasks in Redis,
//! so several replicas of this server behind a load balancer serve one set of tasks.

use std::{io::Write, time::Duration};

use crewline::SessionSetup;
use crewline_examples::{args::ServeCrewArgs, remote_weather};
use crewline_remote::ClientConfig;
use crewline_server::CrewServer;

/// The remote weather crew (`/ws` and the task API on `/task`), or with `--client` the
/// client whose process runs `get_weather`.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    crew: ServeCrewArgs,
    /// Run the client instead of the server.
    #[arg(long)]
    client: bool,
    /// The task API's base URL, as for Smooth's: e.g. http://127.0.0.1:8080/api/v1 (the
    /// server's root works too).
    #[arg(long)]
    url: Option<String>,
    /// The task API's key (server: required of task clients; client: sent with each request).
    #[arg(long)]
    api_key: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Logs go to stderr: the client's stdout carries its task id for scripts.
    let _logs = crewline_examples::args::init_logs("info");
    let args = <Args as clap::Parser>::parse();
    if args.client {
        let url = args
            .url
            .ok_or("--client needs --url http://HOST:PORT/api/v1")?;
        let mut config = ClientConfig::new(url);
        if let Some(key) = args.api_key {
            config = config.api_key(key);
        }
        let outcome = remote_weather::station::run(config, |task_id| {
            // One line a script (or the test) can read: the id to give the call.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "task_id={task_id}");
            let _ = out.flush();
        })
        .await?;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "status={} answered={} rejected={} output={}",
            outcome.status,
            outcome.calls_answered,
            outcome.answers_rejected,
            outcome.output.unwrap_or_default()
        )?;
        return Ok(());
    }

    let crew = args.crew;
    // The main model, behind a fallback over other providers when --fallback-base-url is given.
    let model = crew
        .model
        .with_fallbacks(remote_weather::model(
            crew.model.choice(),
            crew.model.model.clone(),
            Duration::from_millis(20),
        )?)
        .await
        .map_err(|error| -> Box<dyn std::error::Error> { error })?;
    // In memory, or shared by every replica through Redis when CREWLINE_REDIS_URL is set.
    let mut tasks = remote_weather::task_api()
        .await
        .map_err(|error| -> Box<dyn std::error::Error> {
            // Said once, readably, before main's own report of the error.
            tracing::error!(%error, "the task API's store is unavailable; not serving");
            error
        })?
        .tool_timeout(Duration::from_secs(10));
    if let Some(key) = args.api_key {
        tasks = tasks.api_key(key)?;
    }
    let weather = remote_weather::RemoteWeatherCrew::new(model.llm, tasks.clone());
    // Attaching a call's task is async: the setup is an async closure of the call.
    let server = CrewServer::new(move |setup: SessionSetup| {
        let weather = weather.clone();
        async move { weather.build(&setup).await }
    })
    .merge(tasks.router());
    let server = crew.apply(server);
    tracing::info!(port = crew.port, model = %model.description, "remote weather crew on /ws, task API on /task");
    server.run().await?;
    Ok(())
}
