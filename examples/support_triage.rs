//! A home-services support line that routes on typed answers. At the start of each triage turn
//! the router asks the model for an `Intent` (a JSON answer by the schema of a Rust type, sent
//! as OpenAI's strict `response_format`) and writes it to the router's state: a billing
//! question moves the call to the billing desk, an internet problem to tech support, both in
//! the same turn, and anything else stays with triage, which asks what the caller needs. The
//! billing desk's `record_new_address` tool asks the model to pull the street, city and
//! postcode out of what the caller said (a typed `Address`). An answer that does not parse is
//! asked for once more with the parse error, then reported as an `agent.log`
//! `agent.structured_error` entry (triage answers), or as the tool's error (the model asks the
//! caller again). Offline on a scripted model by default; on a real model when
//! `OPENAI_API_KEY` (or `OPENAI_BASE_URL`) is set (`--model`, default gpt-4o-mini).
//!
//! ```sh
//! cargo run --example support_triage -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws
//! # try: "hi", "I moved: 12 Oak Street, Springfield, 12345", or "my internet is slow"
//! ```
//!
//! A copy of this file is a whole project: save it as `src/main.rs` beside this `Cargo.toml`
//!
//! ```toml
//! [dependencies]
//! crewline = "0.1"
//! crewline-server = { version = "0.1", features = ["clap", "otel", "redis"] }
//! clap = { version = "4", features = ["derive"] }
//! schemars = "1"
//! serde = { version = "1", features = ["derive"] }
//! serde_json = "1"
//! tokio = { version = "1", features = ["full"] }
//! tracing = "0.1"
//! ```

use std::{sync::Arc, time::Duration};

use crewline::{
    llm::{ChatRequest, Reply, ResponseFormat, ScriptedLlm},
    prelude::*,
    router::{DeterministicRouter, RouterState, StructuredStep, SubAgent, when},
    structured::Structured,
    tool::ToolRegistry,
    types::Message,
};
use crewline_server::{BoxError, CrewArgs, CrewServer};
use serde_json::{Value, json};

/// Serves the support line (triage, billing, tech support on the router) on `/ws`.
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
    let model = crew.model.choose(scripted_triage_model).await?;
    // The crew, one per call: its own router and state. The model is shared.
    let llm = Arc::clone(&model.llm);
    let server = CrewServer::new(move |_: &SessionSetup| triage_crew(Arc::clone(&llm)));
    crew.serve(server, &model).await
}

/// Which desk a caller needs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Desk {
    /// Bills, payments, the address on the account.
    Billing,
    /// The internet connection, the router, the TV box.
    TechSupport,
    /// Not clear yet.
    Unclear,
}

/// The triage step's typed answer, merged into the router's state as `{"desk": ...}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Intent {
    /// The desk that should handle the caller's request.
    pub desk: Desk,
}

/// A postal address, as the billing tool pulls it out of what the caller said.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Address {
    /// Number and street.
    pub street: String,
    /// Town or city.
    pub city: String,
    /// Postcode, when the caller said one.
    pub postcode: Option<String>,
}

/// The triage step's instruction (the model classifies; it does not speak).
pub const CLASSIFY_PROMPT: &str = "Classify the caller's latest request for Acme Home's support \
    line. billing: bills, payments, refunds, the address on the account. tech_support: the \
    internet connection, the router, the TV box. unclear: anything else, or a greeting.";

/// Triage: greet and find out what the caller needs.
pub const TRIAGE_PROMPT: &str = "You are the receptionist of Acme Home's support line on a \
    phone call. Greet the caller and ask whether they are calling about a bill or about their \
    internet. One short sentence.";

/// Billing: bills and the account's address.
pub const BILLING_PROMPT: &str = "You are Acme Home's billing desk on a phone call. Help with \
    bills and payments. When the caller gives a new address, call record_new_address with their \
    words. Keep answers to one or two short sentences.";

/// Tech support: the connection.
pub const TECH_PROMPT: &str = "You are Acme Home's tech support on a phone call. Help the \
    caller get their internet working, one step at a time. Keep answers short.";

/// What the extraction asks the model.
pub const EXTRACT_PROMPT: &str = "Extract the postal address from the caller's words. Use null \
    for a postcode the caller did not say.";

/// The billing desk's tools: the address on the account, read out of speech by the model.
pub struct BillingTools {
    llm: Arc<dyn LlmClient>,
    extract: Structured<Address>,
    state: RouterState,
}

#[tools]
impl BillingTools {
    /// Record the caller's new address on the account.
    ///
    /// # Arguments
    /// * `what_the_caller_said` - The caller's words with the address, as they said them
    #[function_tool]
    async fn record_new_address(&self, what_the_caller_said: String) -> Result<Value, ToolError> {
        let messages = vec![
            Message::system(EXTRACT_PROMPT),
            Message::user(what_the_caller_said),
        ];
        // One model call (and one retry if its answer does not parse); a failure is the
        // tool's error: the model hears what to do, the log gets the parse error and raw text.
        let address = self
            .extract
            .ask(&*self.llm, messages)
            .await
            .map_err(|error| {
                ToolError::new("The address was not clear: ask the caller to say it again.")
                    .with_detail(error)
            })?;
        let address = serde_json::to_value(address).map_err(ToolError::from)?;
        self.state.set("address", address.clone());
        Ok(json!({"recorded": true, "address": address}))
    }
}

/// Why the crew could not be built: a tool that cannot be registered or an invalid graph.
pub type CrewError = Box<dyn std::error::Error + Send + Sync>;

/// The router for one call: triage classifies, billing and tech support answer.
pub fn triage_router(llm: Arc<dyn LlmClient>) -> Result<DeterministicRouter, CrewError> {
    let state = RouterState::new();
    let tools = Arc::new(BillingTools {
        llm: Arc::clone(&llm),
        extract: Structured::new().description("The caller's new postal address."),
        state: state.clone(),
    });
    let mut registry = ToolRegistry::new();
    registry.discover(&tools)?;
    let router = DeterministicRouter::builder("triage", llm)
        .tools(Arc::new(registry))
        .state(state)
        .sub_agent(SubAgent::new("triage", TRIAGE_PROMPT))
        .sub_agent(SubAgent::new("billing", BILLING_PROMPT).with_tools(["record_new_address"]))
        .sub_agent(SubAgent::new("tech_support", TECH_PROMPT))
        // Each triage turn starts with the typed question; its answer picks the desk.
        .classify("triage", StructuredStep::<Intent>::new(CLASSIFY_PROMPT))
        .add_transition("triage", "billing", when::equals("desk", "billing"))
        .add_transition(
            "triage",
            "tech_support",
            when::equals("desk", "tech_support"),
        )
        .build()?;
    Ok(router)
}

/// The crew for one call: the router as its only output node.
pub fn triage_crew(llm: Arc<dyn LlmClient>) -> Result<Crew, CrewError> {
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new("support", triage_router(llm)?));
    Ok(crew)
}

/// The last thing the caller said, lower-cased.
fn last_user(request: &ChatRequest) -> String {
    ScriptedLlm::last_user_text(request)
        .unwrap_or_default()
        .to_lowercase()
}

/// The name of the typed answer a request asks for, if it asks for one.
pub fn schema_asked(request: &ChatRequest) -> Option<&str> {
    match &request.options.response_format {
        Some(ResponseFormat::JsonSchema { json_schema }) => Some(&json_schema.name),
        _ => None,
    }
}

/// The offline model's typed answers: an intent by keywords, an address by commas.
fn typed_answer(schema: &str, request: &ChatRequest) -> Reply {
    let said = last_user(request);
    let has = |words: &[&str]| words.iter().any(|w| said.contains(w));
    match schema {
        "Intent" => {
            let desk = if has(&["bill", "charge", "pay", "address", "moved"]) {
                Desk::Billing
            } else if has(&["internet", "wifi", "router", "slow", "connect"]) {
                Desk::TechSupport
            } else {
                Desk::Unclear
            };
            Reply::text(json!({ "desk": desk }).to_string())
        }
        "Address" => {
            // "... 12 Oak Street, Springfield, 12345": the street starts at its number.
            let original = ScriptedLlm::last_user_text(request).unwrap_or_default();
            let parts: Vec<&str> = original.split(',').map(str::trim).collect();
            let street = parts
                .first()
                .and_then(|p| p.find(|c: char| c.is_ascii_digit()).map(|i| &p[i..]))
                .unwrap_or_default();
            let postcode = parts
                .iter()
                .find(|p| p.len() >= 4 && p.chars().all(|c| c.is_ascii_digit()));
            let city = parts.get(1).copied().unwrap_or_default();
            Reply::text(json!({"street": street, "city": city, "postcode": postcode}).to_string())
        }
        _ => Reply::text("{}"),
    }
}

/// One answer of the offline model: a typed answer when one is asked for, else the active
/// desk's words by its prompt.
pub fn scripted_triage_reply(request: &ChatRequest) -> Reply {
    if let Some(schema) = schema_asked(request) {
        return typed_answer(schema, request);
    }
    if let Some(Message::Tool { .. }) = request.messages.last() {
        let result: Value = ScriptedLlm::last_tool_results(request)
            .first()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or(Value::Null);
        return match result.pointer("/address") {
            Some(address) => Reply::text(format!(
                "Thanks, I've updated your address to {} in {}.",
                address["street"].as_str().unwrap_or_default(),
                address["city"].as_str().unwrap_or_default()
            )),
            None => Reply::text("Sorry, I didn't catch the address. Could you say it again?"),
        };
    }
    let said = last_user(request);
    let prompt = match request.messages.first() {
        Some(Message::System { content }) => content.as_str(),
        _ => "",
    };
    match prompt {
        BILLING_PROMPT if said.contains("moved") || said.contains("address") => {
            let words = ScriptedLlm::last_user_text(request).unwrap_or_default();
            Reply::tool_call(
                "record_new_address",
                json!({ "what_the_caller_said": words }),
            )
        }
        BILLING_PROMPT => Reply::text("I can help with your bill. What would you like to do?"),
        TECH_PROMPT => Reply::text(
            "Let's get you back online. Please restart your router and tell me when the light is green.",
        ),
        _ => Reply::text("Hello, you've reached Acme Home. Is this about a bill or your internet?"),
    }
}

/// The offline model: typed answers for the triage step and the address tool, and each desk's
/// words.
pub fn scripted_triage_model() -> ScriptedLlm {
    ScriptedLlm::from_fn(scripted_triage_reply).with_chunk_delay(Duration::from_millis(20))
}
