//! The crew: two sub-agents on crewline's deterministic router, each with its
//! own prompt and one tool. Intake finds the caller's order (`find_order`); once the order is
//! known, the router moves the call to returns, which books a return (`book_return`). The move
//! is decided in code from what the tools wrote to the router's state, never by the model,
//! and reaches the platform as an `agent.log` `agent.transition` event.
//!
//! Without `OPENAI_API_KEY` (or `OPENAI_BASE_URL`) it runs on [`scripted_model`], an offline
//! stand-in that plays each sub-agent, so the crew runs and its tests pass with no network.

use std::sync::Arc;

use crewline::{
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    router::{DeterministicRouter, RouterState, SubAgent, when},
    tool::ToolRegistry,
    types::Message,
};
use serde_json::{Value, json};

/// Intake: find the order.
pub const INTAKE_PROMPT: &str = "You are the intake agent of a shop's phone line. Ask for the \
order number and look it up with find_order. Keep answers to one or two short sentences.";

/// Returns: book the return of the order found.
pub const RETURNS_PROMPT: &str = "You are the returns agent of a shop's phone line. The order \
was found. Ask why the caller returns it and book the return with book_return. Keep answers \
short.";

/// Why the crew could not be built: a tool that cannot be registered or an invalid graph.
pub type CrewError = Box<dyn std::error::Error + Send + Sync>;

/// The crew's tools, one per sub-agent; each writes what it learned to the router's state.
pub struct ShopTools {
    state: RouterState,
}

#[tools]
impl ShopTools {
    /// Look up an order by its number.
    ///
    /// # Arguments
    /// * `order_id` - The order number the caller gave, digits only
    #[function_tool]
    async fn find_order(&self, order_id: String) -> Result<Value, ToolError> {
        let item = match order_id.trim() {
            "1042" => "a blue kettle",
            "2077" => "two cotton towels",
            _ => {
                return Err(ToolError::new(format!(
                    "No order {order_id}: ask the caller to repeat the number."
                )));
            }
        };
        // The router moves the call to returns once this is set.
        self.state.set("order_id", order_id.trim());
        Ok(json!({"order_id": order_id.trim(), "item": item}))
    }

    /// Book the return of the order found.
    ///
    /// # Arguments
    /// * `reason` - Why the caller returns it
    #[function_tool]
    async fn book_return(&self, reason: String) -> Result<Value, ToolError> {
        let Some(order_id) = self.state.get("order_id") else {
            return Err(ToolError::new("No order was found yet."));
        };
        let label = format!("RET-{}", order_id.as_str().unwrap_or_default());
        self.state.set("return_label", label.as_str());
        Ok(json!({"label": label, "reason": reason}))
    }
}

/// The crew for one call: the router, with its own state and tools, as its only output node.
pub fn crew(_setup: &SessionSetup, llm: Arc<dyn LlmClient>) -> Result<Crew, CrewError> {
    let state = RouterState::new();
    let mut registry = ToolRegistry::new();
    registry.discover(&Arc::new(ShopTools {
        state: state.clone(),
    }))?;
    let router = DeterministicRouter::builder("intake", llm)
        .tools(Arc::new(registry))
        .state(state)
        .sub_agent(SubAgent::new("intake", INTAKE_PROMPT).with_tools(["find_order"]))
        .sub_agent(SubAgent::new("returns", RETURNS_PROMPT).with_tools(["book_return"]))
        .add_transition("intake", "returns", when::present("order_id"))
        .build()?;
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new("shop", router));
    Ok(crew)
}

/// What the scripted model says after a tool: it reads the result (or the error) back.
fn after_tool(request: &ChatRequest) -> Reply {
    let result: Value = ScriptedLlm::last_tool_results(request)
        .first()
        .and_then(|result| serde_json::from_str(result).ok())
        .unwrap_or(Value::Null);
    if let Some(message) = result.pointer("/error/message").and_then(Value::as_str) {
        return Reply::text(format!("Sorry, I couldn't do that. {message}"));
    }
    match (result.get("item"), result.get("label")) {
        (Some(item), _) => Reply::text(format!(
            "I found your order of {}. Why would you like to return it?",
            item.as_str().unwrap_or("your item")
        )),
        (None, Some(label)) => Reply::text(format!(
            "Your return is booked, label {}.",
            label.as_str().unwrap_or_default()
        )),
        (None, None) => Reply::text("Done."),
    }
}

/// The offline stand-in for a model: it plays each sub-agent by the active prompt and what
/// the caller said.
pub fn scripted_model() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| {
        if let Some(Message::Tool { .. }) = request.messages.last() {
            return after_tool(request);
        }
        let said = ScriptedLlm::last_user_text(request).unwrap_or_default();
        let prompt = match request.messages.first() {
            Some(Message::System { content }) => content.as_str(),
            _ => "",
        };
        let digits: String = said.chars().filter(char::is_ascii_digit).collect();
        match prompt {
            INTAKE_PROMPT if digits.len() >= 4 => {
                Reply::tool_call("find_order", json!({"order_id": digits}))
            }
            INTAKE_PROMPT => {
                Reply::text("Hello! I'm the offline scripted model. What is your order number?")
            }
            RETURNS_PROMPT => Reply::tool_call("book_return", json!({"reason": said})),
            _ => Reply::text("Sorry, I lost track. Could you repeat that?"),
        }
    })
}
