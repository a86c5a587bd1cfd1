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

use crewline_examples::{args::ServeCrewArgs, text_chat};

/// Serves the web shop's chat crew (conversations of type `chat`) on `/ws`.
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
        "chat crew",
        text_chat::scripted_chat_model,
        text_chat::chat_crew,
    )
    .await
}
