//! A restaurant line whose tools are slow: `find_table` says how it is getting on while it
//! searches ("Still checking the evening slots..."), and `book_table` runs in the background:
//! it answers "started" at once, the conversation goes on ("Anything else while I book
//! it?"), and when the booking lands the model is asked to tell the caller, who hears it
//! between turns, never over their own words. The call's end cancels a booking still running,
//! and one booking of the same table runs once per call. Runs offline on a scripted model, or
//! on a real one with `OPENAI_API_KEY` (or `OPENAI_BASE_URL`) set.
//!
//! ```sh
//! cargo run --example slow_booking -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws      # try: "is there a table tonight?", "book it"
//! ```
//!
//! A copy of this file is a whole project: save it as `src/main.rs` beside this `Cargo.toml`
//!
//! ```toml
//! [dependencies]
//! crewline = "0.1"
//! crewline-server = { version = "0.1", features = ["clap", "otel", "redis"] }
//! clap = { version = "4", features = ["derive"] }
//! serde_json = "1"
//! tokio = { version = "1", features = ["full"] }
//! tracing = "0.1"
//! ```

use std::{sync::Arc, time::Duration};

use crewline::{
    agent::AgentError,
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    tool::Progress,
    types::{Message, Role},
};
use crewline_server::{BoxError, CrewArgs, CrewServer};
use serde_json::json;

/// Serves the restaurant line on `/ws`.
#[derive(Debug, clap::Parser)]
pub struct Args {
    /// crewline-server's shared flags: where to listen, the token, the model.
    #[command(flatten)]
    pub crew: CrewArgs,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let Args { crew } = clap::Parser::parse();
    let _logs = crewline_server::init_logs("info");
    // The model: OPENAI_BASE_URL's or OpenAI's (with OPENAI_API_KEY), else the scripted one.
    let model = crew.model.choose(scripted_restaurant_model).await?;
    let agent = restaurant_agent(Arc::clone(&model.llm), Reservations::default())?;
    crew.serve(CrewServer::new(agent), &model).await
}

/// How long the pretend reservation system takes to search, and to book.
pub const SEARCH_TIME: Duration = Duration::from_secs(4);
/// How long a booking takes: longer than a caller should wait in silence.
pub const BOOKING_TIME: Duration = Duration::from_secs(15);

/// The pretend reservation system.
#[derive(Debug, Clone, Default)]
pub struct Reservations {
    /// Its own wait, when set (the tests run it at once).
    pub delay: Option<Duration>,
}

impl Reservations {
    async fn wait(&self, usual: Duration) {
        tokio::time::sleep(self.delay.unwrap_or(usual)).await;
    }
}

#[tools]
impl Reservations {
    /// Find a free table for tonight.
    ///
    /// # Arguments
    /// * `people` - How many people
    #[function_tool]
    async fn find_table(&self, people: u32) -> Result<String, ToolError> {
        // Said between the agent's sentences while the search runs (and logged).
        if let Some(progress) = Progress::current() {
            progress.say("Still checking the evening slots...");
        }
        self.wait(SEARCH_TIME).await;
        Ok(format!("a table for {people} is free at 8 pm"))
    }

    /// Book a table for tonight at 8 pm. Runs in the background: the result comes later.
    ///
    /// # Arguments
    /// * `people` - How many people
    #[function_tool(background, timeout_ms = 120000)]
    async fn book_table(&self, people: u32) -> Result<String, ToolError> {
        // Only logged: the caller hears the result, not the steps.
        if let Some(progress) = Progress::current() {
            progress.log("sent to the restaurant's system");
        }
        self.wait(BOOKING_TIME).await;
        Ok(format!(
            "booked: a table for {people} at 8 pm, reference R-7"
        ))
    }
}

/// What the scripted model says when it is told that the booking landed.
pub const BOOKED: &str = "Your table for 2 at 8 pm is booked. The reference is R-7.";

/// The offline model: a table is searched for, then booked in the background.
pub fn scripted_restaurant_model() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| {
        let last = request.messages.last();
        match last {
            // A background booking landed: tell the caller.
            Some(message)
                if message.role() == Role::System
                    && message.text().is_some_and(|text| text.contains("R-7")) =>
            {
                return Reply::text(BOOKED);
            }
            Some(Message::Tool { content, .. }) => {
                return Reply::text(if content.contains("started") {
                    "I'm booking it now. Anything else while I do?"
                } else {
                    "There's a table for 2 free at 8 pm. Shall I book it?"
                });
            }
            _ => {}
        }
        let said = ScriptedLlm::last_user_text(request)
            .unwrap_or_default()
            .to_lowercase();
        if said.contains("book") || said.contains("yes") {
            Reply::tool_call("book_table", json!({"people": 2}))
        } else if said.contains("table") {
            Reply::tool_call("find_table", json!({"people": 2})).with_text("Let me look. ")
        } else {
            Reply::text("I can find you a table for tonight and book it.")
        }
    })
    .with_chunk_delay(Duration::from_millis(20))
}

/// The restaurant agent: `find_table` reports progress, `book_table` runs in the background.
pub fn restaurant_agent(
    llm: Arc<dyn LlmClient>,
    reservations: Reservations,
) -> Result<Agent, AgentError> {
    Agent::builder(llm)
        .name("restaurant")
        .prompt(
            "You are a restaurant's phone line. Find tables with find_table and book them with \
             book_table; a booking runs in the background, so carry on talking meanwhile and \
             tell the caller its result when it comes.",
        )
        .tools(reservations)
        .build()
}
