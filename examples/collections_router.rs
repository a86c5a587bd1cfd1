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

use crewline_examples::{args::ServeCrewArgs, collections_router};

/// Serves the collections crew (intake, verify, resolve on the router) on `/ws`.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    crew: ServeCrewArgs,
}

#[tokio::main]
async fn main() -> Result<(), crewline_server::BoxError> {
    let _logs = crewline_examples::args::init_logs("info");
    let Args { crew } = clap::Parser::parse();
    // The model is shared by every call; each call gets its own router, state and tools.
    crew.serve(
        "collections crew",
        collections_router::scripted_collections_model,
        collections_router::collections_crew,
    )
    .await
}
