//! A support agent that ends and transfers calls from its tools. The caller says goodbye: the
//! model calls `end_call`, says goodbye, and the platform gets `agent.end_call` right after the
//! last words. The caller asks for a person: `transfer_to_human` sends `agent.transfer_call`
//! (a warm transfer with a private briefing for the colleague and hold music). A hand-off asked
//! for during a turn that the caller interrupts is never sent, and once the call is handed off
//! the crew stops answering. Runs offline on a scripted model, or on a real one with
//! `OPENAI_API_KEY` (or `OPENAI_BASE_URL`) set.
//!
//! ```sh
//! cargo run --example call_control -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws      # try: "can I talk to a person?" or "bye"
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
    call::CallControl,
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    protocol::{HandoffKind, HandoffOption, HoldMusic, TransferOptions, TransferType},
    types::Message,
};
use crewline_server::{BoxError, CrewArgs, CrewServer};
use serde_json::json;

/// Serves the support crew (whose tools end and transfer the call) on `/ws`.
#[derive(Debug, clap::Parser)]
pub struct Args {
    /// crewline-server's shared flags: where to listen, the token, the model.
    #[command(flatten)]
    pub crew: CrewArgs,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The flags, then the logs: stderr, and each turn traced over OTLP when
    // OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let Args { crew } = clap::Parser::parse();
    let _logs = crewline_server::init_logs("info");
    // The model: OPENAI_BASE_URL's or OpenAI's (with OPENAI_API_KEY), else the scripted one.
    let model = crew.model.choose(scripted_support_model).await?;
    // The crew, one per call: its tools act on that call. The model is shared.
    let llm = Arc::clone(&model.llm);
    let server = CrewServer::new(move |setup: &SessionSetup| support_crew(setup, Arc::clone(&llm)));
    // Served on --host and --port with the token until SIGTERM or Ctrl-C; with
    // CREWLINE_REDIS_URL each call's checkpoint is kept in Redis (it resumes on any replica).
    crew.serve(server, &model).await
}

/// The support desk's number.
pub const SUPPORT_DESK: &str = "+15550100";

/// Tools that end or hand over the call, through the call's controls.
pub struct CallTools {
    call: CallControl,
}

#[tools]
impl CallTools {
    /// End the call when the caller says goodbye or has nothing more to ask.
    #[function_tool]
    async fn end_call(&self) -> Result<&'static str, ToolError> {
        self.call.end_call().await.map_err(ToolError::from)?;
        Ok("The call will end after your goodbye.")
    }

    /// Transfer the caller to a human colleague.
    ///
    /// # Arguments
    /// * `reason` - Why the caller wants a person, for the colleague's briefing
    #[function_tool]
    async fn transfer_to_human(&self, reason: String) -> Result<&'static str, ToolError> {
        let options = TransferOptions {
            kind: TransferType::WarmTransfer,
            private_handoff_option: Some(HandoffOption {
                kind: HandoffKind::Static,
                prompt: format!("Caller transferred by the assistant: {reason}"),
            }),
            public_handoff_option: None,
        };
        self.call
            .transfer_call(SUPPORT_DESK, options, Some(HoldMusic::RelaxingSound))
            .await
            .map_err(ToolError::from)?;
        Ok("Transferring after your next words.")
    }
}

/// The offline model: goodbye ends the call, asking for a person transfers it.
pub fn scripted_support_model() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| {
        if let Some(Message::Tool { .. }) = request.messages.last() {
            return Reply::text("");
        }
        let last = ScriptedLlm::last_user_text(request)
            .unwrap_or_default()
            .to_lowercase();
        if last.contains("bye") {
            Reply::tool_call("end_call", json!({})).with_text("Thanks for calling, goodbye!")
        } else if last.contains("person") || last.contains("human") || last.contains("agent") {
            Reply::tool_call("transfer_to_human", json!({"reason": last}))
                .with_text("Of course, I'm connecting you with a colleague now.")
        } else {
            Reply::text("I can help with your account, or put you through to a colleague.")
        }
    })
    .with_chunk_delay(Duration::from_millis(20))
}

/// The crew for one call: the support agent with tools bound to this call's controls.
pub fn support_crew(setup: &SessionSetup, llm: Arc<dyn LlmClient>) -> Result<Crew, AgentError> {
    // The tools act on this call, so they are made per call from its controls.
    let agent = Agent::builder(llm)
        .name("support")
        .prompt(
            "You are a support agent. End the call when the caller says goodbye; \
             transfer to a human when asked.",
        )
        .tools(CallTools {
            call: setup.call().clone(),
        })
        .build()?;
    Ok(agent.crew_for(setup))
}
