//! A collections crew on the deterministic router: three sub-agents, each with its own prompt
//! and tools, and transitions decided in code from what the tools learned. Intake finds the
//! account (`find_account`), verify checks the date of birth (`verify_identity`), resolve agrees
//! a payment plan (`propose_payment_plan`). A caller verified before (the call variable
//! `verified: true`, or ringing from the number on file) skips verify: a transition past it.
//! Asking for a person transfers the call to the collections desk (`transfer_to_human`), after
//! which the crew says nothing more. Each move reaches the platform as an `agent.log`
//! `agent.transition` event `{from, to, state}`. Offline on a scripted model by default; on a
//! real model when OPENAI_API_KEY is set (`--model`, default gpt-4o-mini).
//!
//! ```sh
//! cargo run --example collections_router -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws
//! # try: "my account is 12345", "1980-04-02", "I can pay 50 a month", "can I talk to a person?"
//! ```

// Shared with the example's integration test (tests/collections_router.rs).
#[allow(dead_code, unreachable_pub)]
mod crew;

use std::sync::Arc;

use crewline::prelude::*;
use crewline_server::CrewServer;

/// Serves the collections crew on `/ws`.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    serve: crewline_server::ServeArgs,
    /// The port to listen on.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The model, with OPENAI_API_KEY set (otherwise a scripted one).
    #[arg(long, default_value = "gpt-4o-mini")]
    model: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let Args { serve, port, model } = clap::Parser::parse();
    let (llm, description): (Arc<dyn LlmClient>, String) =
        if std::env::var_os("OPENAI_API_KEY").is_some() {
            (Arc::new(OpenAiClient::from_env(model.clone())?), model)
        } else {
            (
                Arc::new(crew::scripted_collections_model()),
                "scripted (offline)".to_owned(),
            )
        };
    // The model is shared by every call; each call gets its own router, state and tools.
    let crew = CrewServer::new(move |setup: SessionSetup| {
        let crew = crew::collections_crew(&setup, llm.clone());
        async move { crew }
    });
    let server = serve.apply(crew, port);
    tracing::info!(port, model = %description, "collections crew listening on /ws");
    server.run().await?;
    Ok(())
}
