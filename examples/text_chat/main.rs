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

use std::{net::SocketAddr, sync::Arc};

use crewline::prelude::*;
use crewline_server::CrewServer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let port = std::env::args()
        .skip_while(|a| a != "--port")
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(8080u16);
    let llm: Arc<dyn LlmClient> = if std::env::var_os("OPENAI_API_KEY").is_some() {
        Arc::new(OpenAiClient::from_env(
            std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into()),
        )?)
    } else {
        Arc::new(crew::scripted_chat_model())
    };
    tracing::info!(port, "chat crew listening on /ws");
    CrewServer::new(move |setup: SessionSetup| {
        let crew = crew::chat_crew(&setup, llm.clone());
        async move { crew }
    })
    .bind(SocketAddr::from(([0, 0, 0, 0], port)))
    .run()
    .await?;
    Ok(())
}
