//! A web shop's chat assistant for conversations of type `chat`: it looks orders up with the
//! `order_status` tool and answers in markdown (bold, bullet lists, links) for the chat widget
//! to render, where a voice crew would say one or two short sentences. There is no filler
//! while the tool runs (it would stay in the transcript; the widget shows typing instead),
//! and a voice conversation is refused at setup with an `agent.error` saying this crew serves
//! chats. Runs offline on a scripted model, or on a real one with `OPENAI_API_KEY` set.
//!
//! ```sh
//! cargo run --example text_chat -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws --type chat    # try: "where is order 1042?"
//! ```

// Shared with the example's integration test (tests/text_chat.rs).
#[allow(dead_code, unreachable_pub)]
mod crew;

use std::sync::Arc;

use crewline::prelude::*;
use crewline_server::CrewServer;

/// Serves the chat crew on `/ws`.
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
        Arc::new(crew::scripted_chat_model())
    };
    tracing::info!(port, "chat crew listening on /ws");
    serve
        .apply(
            CrewServer::new(move |setup: SessionSetup| {
                let crew = crew::chat_crew(&setup, llm.clone());
                async move { crew }
            }),
            port,
        )
        .run()
        .await?;
    Ok(())
}
