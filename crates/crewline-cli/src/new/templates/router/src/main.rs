//! Serves the crew on `ws://127.0.0.1:8080/ws` (`--port`, `--host`, `--token`,
//! `--model`: see `--help`). Without `OPENAI_API_KEY` or `OPENAI_BASE_URL` it runs on the
//! offline scripted model.

use std::sync::Arc;

use crewline::prelude::*;
use crewline_server::{BoxError, CrewArgs, CrewServer};

use crew_template::{crew, scripted_model};

/// Serves the crew on `/ws`.
#[derive(Debug, clap::Parser)]
struct Args {
    /// Where to listen, the token, the model.
    #[command(flatten)]
    crew: CrewArgs,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let Args { crew: args } = clap::Parser::parse();
    // Logs to stderr (RUST_LOG), traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let _logs = crewline_server::init_logs("info");
    // The real model when OPENAI_API_KEY or OPENAI_BASE_URL is set, else the scripted one.
    let model = args.model.choose(scripted_model).await?;
    // A crew per call (its own router state); the model is shared.
    let llm = Arc::clone(&model.llm);
    let server = CrewServer::new(move |setup: &SessionSetup| crew(setup, Arc::clone(&llm)));
    // Until SIGTERM or Ctrl-C; the log line `crew server listening addr=…` has the port.
    args.serve(server, &model).await
}
