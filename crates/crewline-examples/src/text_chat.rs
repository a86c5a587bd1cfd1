//! The text chat crew: a web shop's chat assistant for conversations of type `chat`. Shared by
//! the `text_chat` example and its integration test.
//!
//! What changes from a voice crew is what the words are for: they are read, not heard. The
//! prompt asks for markdown (the chat widget renders it) instead of one or two short spoken
//! sentences, and the tool loop has no filler: a "Let me check that for you." would stay in
//! the transcript for good, while the widget's typing indicator already covers the wait. The
//! crew serves chats only: its markdown read aloud by a voice platform would be noise, so a
//! voice call is refused at setup with an error that says why.

use crewline::{
    AgentError,
    llm::{Reply, ScriptedLlm},
    types::Message,
};
use std::{sync::Arc, time::Duration};

use crewline::{llm::ChatRequest, prelude::*, protocol::ConversationType};
use serde_json::{Value, json};

/// The assistant's instructions for the chat widget.
pub const PROMPT: &str = "You are the chat assistant of Crewline Outfitters' web shop. Your \
replies are shown in a chat widget that renders markdown: use **bold** for the key fact, short \
bullet lists for items, and a markdown link to the order page. Use order_status to look up \
orders; never guess an order's state.";

/// Why the chat crew would not take a conversation.
#[derive(Debug, thiserror::Error)]
pub enum ChatCrewError {
    /// A voice conversation reached the chat crew.
    #[error(
        "this crew answers text chats (conversation type `chat`), not `{0}` conversations: \
         its markdown replies are meant to be read, not spoken"
    )]
    NotChat(String),
    /// The agent could not be built.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

/// One line of an order.
struct Line {
    quantity: u32,
    item: &'static str,
}

/// The pretend order system.
pub struct OrderDesk;

impl OrderDesk {
    fn find(order_id: &str) -> Option<(&'static str, &'static str, Vec<Line>)> {
        match order_id {
            "1042" => Some((
                "shipped",
                "Friday",
                vec![
                    Line {
                        quantity: 1,
                        item: "Trail runner shoes",
                    },
                    Line {
                        quantity: 2,
                        item: "Merino socks",
                    },
                ],
            )),
            "1043" => Some((
                "processing",
                "next Tuesday",
                vec![Line {
                    quantity: 1,
                    item: "Rain shell jacket",
                }],
            )),
            _ => None,
        }
    }
}

#[tools]
impl OrderDesk {
    /// Look up an order's status, items and expected delivery.
    ///
    /// # Arguments
    /// * `order_id` - The order number, digits only, e.g. 1042
    #[function_tool]
    async fn order_status(&self, order_id: String) -> Result<Value, ToolError> {
        let id = order_id.trim().trim_start_matches('#');
        let (status, eta, lines) = Self::find(id).ok_or_else(|| {
            ToolError::new(format!(
                "There is no order {order_id}; ask the customer to check the number in their \
                 confirmation email."
            ))
        })?;
        let items: Vec<Value> = lines
            .iter()
            .map(|l| json!({"quantity": l.quantity, "item": l.item}))
            .collect();
        Ok(json!({
            "order_id": id,
            "status": status,
            "expected_delivery": eta,
            "items": items,
            "url": format!("https://shop.example.com/orders/{id}"),
        }))
    }
}

/// The crew for one chat: one output node answering with `llm` over the order desk.
pub fn chat_crew(setup: &SessionSetup, llm: Arc<dyn LlmClient>) -> Result<Crew, ChatCrewError> {
    let kind = setup.session_context().conversation_type;
    // The server's startup check builds the crew for a synthetic web call: let it through.
    if kind != ConversationType::Chat && !setup.is_dry_run() {
        // The type's wire name (`telephonyInbound`), as the platform's operator knows it.
        let name = serde_json::to_value(kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("{kind:?}"));
        return Err(ChatCrewError::NotChat(name));
    }
    // No filler: in a chat it would stay in the transcript, and the widget shows typing.
    let agent = Agent::builder(llm)
        .name("chat-assistant")
        .prompt(PROMPT)
        .tools(OrderDesk)
        .build()?;
    Ok(agent.crew_for(setup))
}

/// An order number in the customer's words: the first run of three or more digits.
fn order_number(said: &str) -> Option<String> {
    said.split(|c: char| !c.is_ascii_digit())
        .find(|digits| digits.len() >= 3)
        .map(str::to_owned)
}

/// The offline model: looks up the order the customer names and answers in markdown.
pub fn scripted_chat_model() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| {
        if let Some(Message::Tool { content, .. }) = request.messages.last() {
            let result: Value = serde_json::from_str(content).unwrap_or(Value::Null);
            return Reply::text(render_order(&result));
        }
        let said = request
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        match order_number(&said) {
            Some(order_id) => Reply::tool_call("order_status", json!({"order_id": order_id})),
            None => Reply::text(
                "Hi! I can look up your orders. What's your **order number**? You'll find it \
                 in your confirmation email.",
            ),
        }
    })
    .with_chunk_delay(Duration::from_millis(5))
}

/// An order (or the desk's error) as the markdown the widget renders.
fn render_order(result: &Value) -> String {
    if let Some(message) = result.pointer("/error/message").and_then(Value::as_str) {
        return format!("Sorry, I couldn't find that order. {message}");
    }
    let text = |key: &str| result[key].as_str().unwrap_or("unknown").to_owned();
    let items: String = result["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    format!(
                        "- {} × {}\n",
                        i["quantity"],
                        i["item"].as_str().unwrap_or("item")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "**Order {}** is {}.\n\n{items}\nExpected delivery: **{}**. Details are on \
         [your order page]({}).",
        text("order_id"),
        text("status"),
        text("expected_delivery"),
        text("url"),
    )
}
