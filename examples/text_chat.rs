//! A web shop's chat assistant for conversations of type `chat`: it looks orders up with the
//! `order_status` tool and answers in markdown (bold, bullet lists, links) for the chat widget
//! to render, where a voice crew would say one or two short sentences. Runs offline on a
//! scripted model, or on a real one with `OPENAI_API_KEY` (or `OPENAI_BASE_URL`) set.
//!
//! What changes from a voice crew is what the words are for: they are read, not heard. The
//! prompt asks for markdown instead of short spoken sentences, and the tool loop has no
//! filler: a "Let me check that for you." would stay in the transcript for good, while the
//! widget's typing indicator already covers the wait. The crew serves chats only: its markdown
//! read aloud by a voice platform would be noise, so a voice call is refused at setup with an
//! `agent.error` that says why.
//!
//! ```sh
//! cargo run --example text_chat -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws --type chat    # try: "where is order 1042?"
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
//! thiserror = "2"
//! ```

use std::{sync::Arc, time::Duration};

use crewline::{
    agent::AgentError,
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    protocol::ConversationType,
    types::Message,
};
use crewline_server::{BoxError, CrewArgs, CrewServer};
use serde_json::{Value, json};

/// Serves the web shop's chat crew (conversations of type `chat`) on `/ws`.
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
    let model = crew.model.choose(scripted_chat_model).await?;
    // The crew, one per chat (a voice call is refused here). The model is shared.
    let llm = Arc::clone(&model.llm);
    let server = CrewServer::new(move |setup: &SessionSetup| chat_crew(setup, Arc::clone(&llm)));
    // Served on --host and --port with the token until SIGTERM or Ctrl-C; with
    // CREWLINE_REDIS_URL each call's checkpoint is kept in Redis (it resumes on any replica).
    crew.serve(server, &model).await
}

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
        let said = ScriptedLlm::last_user_text(request)
            .unwrap_or_default()
            .to_owned();
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
