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
        Arc::new(crew::scripted_support_model())
    };
    CrewServer::new(move |setup: SessionSetup| {
        let crew = crew::support_crew(&setup, llm.clone());
        async move { crew }
    })
    .bind(SocketAddr::from(([0, 0, 0, 0], port)))
    .run()
    .await?;
    Ok(())
}
