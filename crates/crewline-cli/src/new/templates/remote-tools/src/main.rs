//! Serves the crew on `ws://127.0.0.1:8080/ws` and its task API on `/task`
//! (`--port`, `--host`, `--token`, `--model`: see `--help`); with `--client --url
//! http://127.0.0.1:8080`, runs the weather station that answers the crew's tool calls from
//! this process instead. Without `OPENAI_API_KEY` or `OPENAI_BASE_URL` the crew runs on the
//! offline scripted model.

use std::{io::Write, sync::Arc};

use crewline::prelude::*;
use crewline_remote::ClientConfig;
use crewline_server::{BoxError, CrewArgs, CrewServer};

use crew_template::{crew, scripted_model, station, task_api};

/// The crew (`/ws` and the task API), or with `--client` the station.
#[derive(Debug, clap::Parser)]
struct Args {
    /// Where to listen, the token, the model.
    #[command(flatten)]
    crew: CrewArgs,
    /// Run the weather station (the client) instead of the crew.
    #[arg(long, requires = "url")]
    client: bool,
    /// The crew server's task API, for --client: e.g. http://127.0.0.1:8080.
    #[arg(long)]
    url: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Args = clap::Parser::parse();
    // Logs to stderr (RUST_LOG): the client's stdout carries its task id for scripts.
    let _logs = crewline_server::init_logs("info");
    if let (true, Some(url)) = (args.client, args.url) {
        let outcome = station::run(ClientConfig::new(url), |task_id| {
            // Give the call this id as its `task_id` variable.
            let _ = writeln!(std::io::stdout(), "task_id={task_id}");
        })
        .await?;
        writeln!(std::io::stdout(), "status={}", outcome.status)?;
        return Ok(());
    }
    // The real model when OPENAI_API_KEY or OPENAI_BASE_URL is set, else the scripted one.
    let model = args.crew.model.choose(scripted_model).await?;
    let (llm, tasks) = (Arc::clone(&model.llm), task_api());
    let server = CrewServer::new({
        let tasks = tasks.clone();
        move |setup: SessionSetup| {
            let (llm, tasks) = (Arc::clone(&llm), tasks.clone());
            async move { crew(&setup, llm, &tasks).await }
        }
    })
    .merge(tasks.router());
    // Until SIGTERM or Ctrl-C; the log line `crew server listening addr=…` has the port.
    args.crew.serve(server, &model).await
}
