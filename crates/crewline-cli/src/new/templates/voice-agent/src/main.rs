//! Serves the crew on `ws://127.0.0.1:8080/ws` (`--port`, `--host`, `--token`,
//! `--model`: see `--help`). Without `OPENAI_API_KEY` or `OPENAI_BASE_URL` it runs on the
//! offline scripted model.

use crewline_server::{BoxError, CrewArgs, CrewServer};

use crew_template::{agent, scripted_model};

/// Serves the crew on `/ws`.
#[derive(Debug, clap::Parser)]
struct Args {
    /// Where to listen, the token, the model.
    #[command(flatten)]
    crew: CrewArgs,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let Args { crew } = clap::Parser::parse();
    // Logs to stderr (RUST_LOG), traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let _logs = crewline_server::init_logs("info");
    // The real model when OPENAI_API_KEY or OPENAI_BASE_URL is set, else the scripted one.
    let model = crew.model.choose(scripted_model).await?;
    let server = CrewServer::new(agent(model.llm.clone())?);
    // Until SIGTERM or Ctrl-C; the log line `crew server listening addr=…` has the port.
    crew.serve(server, &model).await
}
