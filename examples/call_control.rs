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

use crewline_examples::{args::ServeCrewArgs, call_control};

/// Serves the support crew (whose tools end and transfer the call) on `/ws`.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    crew: ServeCrewArgs,
}

#[tokio::main]
async fn main() -> Result<(), crewline_server::BoxError> {
    let _logs = crewline_examples::args::init_logs("info");
    let Args { crew } = clap::Parser::parse();
    crew.serve(
        "support crew",
        call_control::scripted_support_model,
        call_control::support_crew,
    )
    .await
}
