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
//!
//! With `CREWLINE_BANK_URL=http://127.0.0.1:18002` (`crewline fake-bank`), transfers are booked
//! by that bank over HTTP instead of the in-memory books.

use std::time::Duration;

use crewline_examples::{args::ServeCrewArgs, bank_support};

/// Serves the bank crew on `/ws`.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    crew: ServeCrewArgs,
}

#[tokio::main]
async fn main() -> Result<(), crewline_server::BoxError> {
    let _logs = crewline_examples::args::init_logs("info");
    let Args { crew } = clap::Parser::parse();
    // One set of books for every call (booking takes a moment, as a real core system's
    // does).
    let mut bank = bank_support::Bank::demo().with_processing_time(Duration::from_millis(300));
    // With CREWLINE_BANK_URL, transfers are booked by that bank over HTTP (e.g. `crewline
    // fake-bank`, which deploy/test/chaos.sh runs): books outside the replicas' processes.
    if let Ok(url) = std::env::var(bank_support::BANK_URL_VARIABLE) {
        tracing::info!(%url, "transfers are booked by the bank over HTTP");
        bank = bank.with_http(bank_support::HttpBank::new(&url)?);
    }
    // Claims of running transfers, approvals and the ledger are shared by every call (with
    // CREWLINE_REDIS_URL, by every replica): a reconnected call finds its transfer, and the
    // question it was asked, on any replica.
    let shared = bank_support::BankShared::from_env(bank).await?;
    crew.serve(
        "bank crew",
        bank_support::scripted_bank_model,
        move |setup, llm| bank_support::bank_crew(setup, llm, &shared),
    )
    .await
}
