//! The weather crew on Azure OpenAI through a team's own `async_openai::Client<AzureConfig>`:
//! the client is configured the way a team already configures it (resource endpoint,
//! deployment, `api-version`, key) and handed to the crew unchanged with
//! `AsyncOpenAiClient::new`; the crew, its tool and its server are the `voice_agent` example's.
//!
//! ```sh
//! AZURE_OPENAI_ENDPOINT=https://my-resource.openai.azure.com \
//! AZURE_OPENAI_DEPLOYMENT=gpt-4o-mini AZURE_OPENAI_API_KEY=... \
//!   cargo run --example azure_weather -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws
//! ```
//!
//! `AZURE_OPENAI_API_VERSION` (or `--api-version`) picks the API version (default 2024-10-21).

use std::sync::Arc;

use crewline_examples::voice_agent;
use crewline_server::{CrewServer, ServeArgs};

/// Serves the weather crew on `/ws`, its model an Azure OpenAI deployment.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    listen: ServeArgs,
    /// The port to listen on.
    #[arg(long, default_value_t = crewline_examples::args::DEFAULT_PORT)]
    port: u16,
    /// The Azure OpenAI resource, e.g. `https://my-resource.openai.azure.com`.
    #[arg(long, env = "AZURE_OPENAI_ENDPOINT")]
    endpoint: String,
    /// The deployment the crew talks to.
    #[arg(long, env = "AZURE_OPENAI_DEPLOYMENT")]
    deployment: String,
    /// The `api-version` query parameter.
    #[arg(long, env = "AZURE_OPENAI_API_VERSION", default_value = "2024-10-21")]
    api_version: String,
    /// The resource's key, sent as the `api-key` header.
    #[arg(long, env = "AZURE_OPENAI_API_KEY", hide_env_values = true)]
    api_key: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _logs = crewline_examples::args::init_logs("info");
    let args = <Args as clap::Parser>::parse();

    // The team's own client (see `voice_agent::azure_model`): whatever else a team sets on
    // it (an HTTP client with a proxy, headers, a retry policy) goes with it unchanged.
    let model = voice_agent::azure_model(
        &args.endpoint,
        &args.deployment,
        &args.api_version,
        &args.api_key,
    );

    let weather =
        voice_agent::WeatherCrew::new(Arc::new(model), voice_agent::WEATHER_SERVICE_DELAY)?;
    let server = args
        .listen
        .apply(CrewServer::new(weather.agent().clone()), args.port);
    tracing::info!(
        port = args.port,
        endpoint = %args.endpoint,
        deployment = %args.deployment,
        "weather crew on Azure OpenAI listening on /ws"
    );
    server.run().await?;
    Ok(())
}
