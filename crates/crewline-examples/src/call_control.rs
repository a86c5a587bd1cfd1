//! The call-control crew: a support agent whose tools end and transfer the call. Shared by the
//! `call_control` example and its integration test.

use crewline::{
    AgentError, CallControl,
    llm::{Reply, ScriptedLlm},
    types::Message,
};
use std::{sync::Arc, time::Duration};

use crewline::{
    llm::ChatRequest,
    prelude::*,
    protocol::{HandoffKind, HandoffOption, HoldMusic, TransferOptions, TransferType},
};
use serde_json::json;

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
