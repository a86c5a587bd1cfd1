//! A crew whose weather tool runs in another process. The crew server serves the task API
//! beside `/ws`; a client (this binary with `--client`, or any program that speaks the API)
//! registers its `get_weather` with `POST /task`, prints the task id, and answers the crew's
//! tool calls as they come (`GET /task/{id}?event_t=..&wait_ms=..`, then
//! `POST /task/{id}/event`). A platform call that carries `task_id` in its variables gets
//! the client's tool; when the call ends, the task is done and the client exits.
//!
//! ```sh
//! cargo run --example remote_weather -- --port 8080                 # the crew (scripted model)
//! cargo run --example remote_weather -- --client --url http://127.0.0.1:8080
//! #   prints task_id=task_...; then talk to the crew with that variable, e.g.
//! crewline chat --url ws://127.0.0.1:8080/ws --var task_id=task_...  # "weather in Oslo?"
//! ```
//!
//! `--api-key KEY` (both sides) protects the task API; `OPENAI_API_KEY` switches the crew to
//! a real model.

#[allow(dead_code, unreachable_pub)]
mod crew;
#[allow(dead_code, unreachable_pub)]
mod station;

use std::{io::Write, net::SocketAddr, time::Duration};

use crewline_remote::{ClientConfig, TaskApi};
use crewline_server::CrewServer;

/// The command line.
#[derive(Debug, Default)]
struct Args {
    client: bool,
    port: Option<u16>,
    url: Option<String>,
    api_key: Option<String>,
    model: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut parsed = Args::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--client" => parsed.client = true,
            "--port" => {
                parsed.port = Some(
                    value("--port")?
                        .parse()
                        .map_err(|_| "--port needs a number")?,
                );
            }
            "--url" => parsed.url = Some(value("--url")?),
            "--api-key" => parsed.api_key = Some(value("--api-key")?),
            "--model" => parsed.model = Some(value("--model")?),
            other => {
                return Err(format!(
                    "unknown argument `{other}` (use --port N, --model NAME, --api-key KEY, \
                     or --client --url URL)"
                ));
            }
        }
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Logs go to stderr: the client's stdout carries its task id for scripts.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = args()?;
    if args.client {
        let url = args.url.ok_or("--client needs --url http://HOST:PORT")?;
        let mut config = ClientConfig::new(url);
        if let Some(key) = args.api_key {
            config = config.api_key(key);
        }
        let outcome = station::run(config, |task_id| {
            // One line a script (or the test) can read: the id to give the call.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "task_id={task_id}");
            let _ = out.flush();
        })
        .await?;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "status={} answered={} rejected={}",
            outcome.status, outcome.calls_answered, outcome.answers_rejected
        )?;
        return Ok(());
    }

    let (llm, description) = crew::model(
        crew::ModelChoice::FromEnv,
        args.model,
        Duration::from_millis(20),
    )?;
    let mut tasks = TaskApi::new().tool_timeout(Duration::from_secs(10));
    if let Some(key) = args.api_key {
        tasks = tasks.api_key(key)?;
    }
    let port = args.port.unwrap_or(8080);
    let server = CrewServer::new(crew::RemoteWeatherCrew::new(llm, tasks.clone()).setup_fn())
        .merge(tasks.router())
        .bind(SocketAddr::from(([0, 0, 0, 0], port)));
    tracing::info!(port, model = %description, "remote weather crew on /ws, task API on /task");
    server.run().await?;
    Ok(())
}
