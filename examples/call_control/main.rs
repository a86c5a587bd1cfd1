//! A support agent that ends and transfers calls from its tools. The caller says goodbye: the
//! model calls `end_call`, says goodbye, and the platform gets `agent.end_call` right after the
//! last words. The caller asks for a person: `transfer_to_human` sends `agent.transfer_call`
//! (a warm transfer with a private briefing for the colleague and hold music). A hand-off asked
//! for during a turn that the caller interrupts is never sent, and once the call is handed off
//! the crew stops answering.
//!
//! ```sh
//! cargo run --example call_control -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws      # try: "can I talk to a person?" or "bye"
//! ```

// Shared with the example's integration test (tests/example_crews.rs).
#[allow(unreachable_pub)]
mod crew;

use std::sync::Arc;

use crewline::prelude::*;
use crewline_server::CrewServer;

/// Serves the support crew on `/ws`.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    serve: crewline_server::ServeArgs,
    /// The port to listen on.
    #[arg(long, default_value_t = 8080)]
    port: u16,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let Args { serve, port } = clap::Parser::parse();
    let llm: Arc<dyn LlmClient> = if std::env::var_os("OPENAI_API_KEY").is_some() {
        Arc::new(OpenAiClient::from_env(
            std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into()),
        )?)
    } else {
        Arc::new(crew::scripted_support_model())
    };
    serve
        .apply(
            CrewServer::new(move |setup: SessionSetup| {
                let crew = crew::support_crew(&setup, llm.clone());
                async move { crew }
            }),
            port,
        )
        .run()
        .await?;
    Ok(())
}
