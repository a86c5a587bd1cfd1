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
//!
//! The crew is the `voice_agent` example's: a copy of this file needs a copy of
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
//! crewline = { version = "0.1", features = ["async-openai"] }
//! async-openai = { version = "0.41", default-features = false, features = ["chat-completion", "byot"] }
//! reqwest = "0.13"
//! mimalloc = { version = "0.1", default-features = false }
//! ```

use std::sync::Arc;

use crewline::llm::AsyncOpenAiClient;
use crewline_server::{BoxError, CrewServer, ServeArgs};

/// The weather crew: the `voice_agent` example's (its `main` and flags unused here).
#[path = "voice_agent.rs"]
#[allow(dead_code)]
pub mod voice_agent;

/// Serves the weather crew on `/ws`, its model an Azure OpenAI deployment.
#[derive(Debug, clap::Parser)]
pub struct Args {
    /// Where to listen, and the token every call must carry.
    #[command(flatten)]
    pub serve: ServeArgs,
    /// The port to listen on.
    #[arg(long, default_value_t = crewline_server::DEFAULT_PORT)]
    pub port: u16,
    /// The Azure OpenAI resource, e.g. `https://my-resource.openai.azure.com`.
    #[arg(long, env = "AZURE_OPENAI_ENDPOINT")]
    pub endpoint: String,
    /// The deployment the crew talks to.
    #[arg(long, env = "AZURE_OPENAI_DEPLOYMENT")]
    pub deployment: String,
    /// The `api-version` query parameter.
    #[arg(long, env = "AZURE_OPENAI_API_VERSION", default_value = "2024-10-21")]
    pub api_version: String,
    /// The resource's key, sent as the `api-key` header.
    #[arg(long, env = "AZURE_OPENAI_API_KEY", hide_env_values = true)]
    pub api_key: String,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The flags, then the logs: stderr, and each turn traced over OTLP when
    // OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let args = <Args as clap::Parser>::parse();
    let _logs = crewline_server::init_logs("info");

    // The team's own client (see `azure_model`): whatever else a team sets on it (an HTTP
    // client with a proxy, headers, a retry policy) goes with it unchanged.
    let model = azure_model(
        &args.endpoint,
        &args.deployment,
        &args.api_version,
        &args.api_key,
    );

    let weather =
        voice_agent::WeatherCrew::new(Arc::new(model), voice_agent::WEATHER_SERVICE_DELAY)?;
    let server = args
        .serve
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

/// The weather crew's model on Azure OpenAI: a team's `async_openai::Client<AzureConfig>` for
/// `deployment` of the resource at `endpoint`, handed to the crew unchanged.
pub fn azure_model(
    endpoint: &str,
    deployment: &str,
    api_version: &str,
    api_key: &str,
) -> AsyncOpenAiClient<async_openai::config::AzureConfig> {
    // Bounded: error bodies and stream lines are capped, as the default client's are.
    let azure = AsyncOpenAiClient::bounded_client(
        async_openai::config::AzureConfig::new()
            .with_api_base(endpoint)
            .with_deployment_id(deployment)
            .with_api_version(api_version)
            .with_api_key(api_key),
        reqwest::Client::new(),
    );
    // Azure reads the model from the deployment's URL; the name is only logged and sent.
    AsyncOpenAiClient::new(azure, deployment)
}
