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

use std::{net::SocketAddr, sync::Arc, time::Duration};

use crewline::{
    llm::ChatRequest,
    prelude::*,
    protocol::{HandoffKind, HandoffOption, HoldMusic, TransferOptions, TransferType},
};
use crewline_server::CrewServer;
use serde_json::json;

/// The support desk's number.
const SUPPORT_DESK: &str = "+15550100";

/// Tools that end or hand over the call, through the call's controls.
struct CallTools {
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
fn scripted_support_model() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| {
        if let Some(Message::Tool { .. }) = request.messages.last() {
            return Reply::text("");
        }
        let last = request
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content } => Some(content.to_lowercase()),
                _ => None,
            })
            .unwrap_or_default();
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
        Arc::new(scripted_support_model())
    };
    CrewServer::new(move |setup: SessionSetup| {
        let llm = llm.clone();
        async move {
            // The tools act on this call, so they are made per call from its controls.
            let mut registry = ToolRegistry::new();
            registry.discover(&Arc::new(CallTools {
                call: setup.call().clone(),
            }))?;
            let agent = LoopAgent::new(
                "You are a support agent. End the call when the caller says goodbye; \
                 transfer to a human when asked.",
                ToolLoop::new(llm, Arc::new(registry)),
            );
            let mut crew = Crew::new();
            crew.add_node(OutputNode::new("support", agent));
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(crew)
        }
    })
    .bind(SocketAddr::from(([0, 0, 0, 0], port)))
    .run()
    .await?;
    Ok(())
}
