//! A bank's phone assistant that checks balances and sends money, and sends it only after
//! the caller says yes. "Send $50 to Alice": the model calls `transfer_money`, a `confirm`
//! tool, so the executor parks the call on this call's deferred approver and the agent asks
//! "Shall I transfer $50.00 to Alice?". The caller's next words decide: a clear yes runs the
//! parked call (same id) and the model reads the new balance; a no, or anything that is not a
//! clear yes, denies it, and the model reads `ApprovalDenied` with nothing moved. The platform
//! sees each step as `tool_call_start` / `tool_call_error` / `tool_call_end` logs. An approved
//! transfer is never cut off by a barge-in: it is booked anyway and the next turn tells the
//! caller. Runs offline on a scripted model, or on a real one with `OPENAI_API_KEY` set.
//!
//! ```sh
//! cargo run --example bank_support -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws    # try: "send $50 to Alice", then "yes"
//! ```

// Shared with the example's integration test (tests/bank_support.rs).
#[allow(dead_code, unreachable_pub)]
mod crew;

use std::{sync::Arc, time::Duration};

use crewline::prelude::*;
use crewline_server::CrewServer;

/// Serves the bank crew on `/ws`.
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
        Arc::new(crew::scripted_bank_model())
    };
    // One set of books for every call (booking takes a moment, as a real core system's
    // does); each call gets its own approver.
    let bank = crew::Bank::demo().with_processing_time(Duration::from_millis(300));
    tracing::info!(port, "bank crew listening on /ws");
    serve
        .apply(
            CrewServer::new(move |setup: SessionSetup| {
                let crew = crew::bank_crew(&setup, llm.clone(), bank.clone());
                async move { crew }
            }),
            port,
        )
        .run()
        .await?;
    Ok(())
}
