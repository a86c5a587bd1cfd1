//! A collections crew on the deterministic router: three sub-agents, each with its own prompt
//! and tools, and transitions decided in code from what the tools learned in the router's
//! state. Intake finds the account (`find_account`), verify checks the date of birth
//! (`verify_identity`), resolve agrees a payment plan (`propose_payment_plan`). A caller
//! verified before (the call variable `verified: true`, or ringing from the number on file)
//! skips verify: a transition past it. Asking for a person transfers the call to the
//! collections desk (`transfer_to_human`), after which the crew says nothing more. Each move
//! reaches the platform as an `agent.log` `agent.transition` event `{from, to, state}`.
//! Offline on a scripted model by default; on a real model when `OPENAI_API_KEY` (or
//! `OPENAI_BASE_URL`) is set (`--model`, default gpt-4o-mini).
//!
//! ```sh
//! cargo run --example collections_router -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws
//! # try: "my account is 12345", "1980-04-02", "I can pay 50 a month", "can I talk to a person?"
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
    call::CallControl,
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    protocol::{HandoffKind, HandoffOption, HoldMusic, TransferOptions, TransferType},
    router::{DeterministicRouter, RouterState, SubAgent, when},
    tool::ToolRegistry,
    types::Message,
};
use crewline_server::{BoxError, CrewArgs, CrewServer};
use serde_json::{Map, Value, json};

/// Serves the collections crew (intake, verify, resolve on the router) on `/ws`.
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
    let model = crew.model.choose(scripted_collections_model).await?;
    // The crew, one per call: its own router, state and tools. The model is shared.
    let llm = Arc::clone(&model.llm);
    let server =
        CrewServer::new(move |setup: &SessionSetup| collections_crew(setup, Arc::clone(&llm)));
    // Served on --host and --port with the token until SIGTERM or Ctrl-C; with
    // CREWLINE_REDIS_URL each call's checkpoint is kept in Redis (it resumes on any replica).
    crew.serve(server, &model).await
}

/// The collections desk, where callers who ask for a person are transferred.
pub const COLLECTIONS_DESK: &str = "+15550199";

/// The call variable a platform sets when it verified the caller before the call (say, in the
/// app the caller rang from): verification is then skipped.
pub const VERIFIED_VARIABLE: &str = "verified";

/// Intake: find the account.
pub const INTAKE_PROMPT: &str = "You are the intake agent of Acme Collections on a phone call. \
    Greet the caller and ask for their account number, then look it up with find_account. \
    When it is found, thank the caller by name; if the result says they are verified, ask how \
    much they could pay each month, otherwise ask for their date of birth. Keep answers to one \
    or two short sentences. If the caller asks for a person, call \
    transfer_to_human.";

/// Verify: check the caller's date of birth.
pub const VERIFY_PROMPT: &str = "You are the verification agent of Acme Collections on a phone \
    call. The account was found. Ask for the caller's date of birth and check it with \
    verify_identity (as YYYY-MM-DD). Never reveal the balance or the date on file before the \
    caller is verified. Keep answers short. If the caller asks for a person, call \
    transfer_to_human.";

/// Resolve: agree a payment plan.
pub const RESOLVE_PROMPT: &str = "You are the resolution agent of Acme Collections on a phone \
    call. The caller is verified. Tell them the balance if they ask, and agree a monthly \
    payment plan with propose_payment_plan. Keep answers short. If the caller asks for a \
    person, call transfer_to_human.";

/// An account on the books.
#[derive(Debug, Clone)]
struct Account {
    id: &'static str,
    name: &'static str,
    balance_cents: u64,
    date_of_birth: &'static str,
    phone: &'static str,
}

/// The demo's accounts.
const ACCOUNTS: &[Account] = &[
    Account {
        id: "12345",
        name: "Jordan Lee",
        balance_cents: 42_050,
        date_of_birth: "1980-04-02",
        phone: "+15550123",
    },
    Account {
        id: "67890",
        name: "Sam Rivera",
        balance_cents: 9_900,
        date_of_birth: "1975-11-30",
        phone: "+15550456",
    },
];

fn account(id: &str) -> Option<&'static Account> {
    ACCOUNTS.iter().find(|a| a.id == id)
}

fn dollars(cents: u64) -> f64 {
    cents as f64 / 100.0
}

/// The crew's tools: each writes what it learned to the router's state, which decides the
/// next step.
pub struct CollectionsTools {
    state: RouterState,
    call: CallControl,
    /// The number the caller rings from, when the platform knows it.
    caller_number: Option<String>,
}

impl CollectionsTools {
    /// The account found by `find_account`, if any.
    fn current(&self) -> Result<&'static Account, ToolError> {
        self.state
            .get("account_id")
            .and_then(|id| id.as_str().and_then(account))
            .ok_or_else(|| {
                ToolError::new("No account has been found yet: ask for the account number first.")
            })
    }
}

#[tools]
impl CollectionsTools {
    /// Look up the caller's account by its number.
    ///
    /// # Arguments
    /// * `account_id` - The account number the caller gave, digits only
    #[function_tool]
    async fn find_account(&self, account_id: String) -> Result<Value, ToolError> {
        let digits: String = account_id.chars().filter(char::is_ascii_digit).collect();
        let Some(found) = account(&digits) else {
            return Err(ToolError::new(format!(
                "No account {account_id}: ask the caller to repeat the number."
            )));
        };
        self.state.set("account_id", found.id);
        // A caller ringing from the number on file was verified by the phone network.
        if self.caller_number.as_deref() == Some(found.phone) {
            self.state.set("verified", true);
            self.state.set("verified_by", "caller_number");
        }
        Ok(json!({
            "found": true,
            "name": found.name,
            "verified": self.state.flag("verified"),
        }))
    }

    /// Check the caller's identity against the account's date of birth.
    ///
    /// # Arguments
    /// * `date_of_birth` - The date of birth the caller gave, as YYYY-MM-DD
    #[function_tool]
    async fn verify_identity(&self, date_of_birth: String) -> Result<Value, ToolError> {
        let found = self.current()?;
        let attempts = self
            .state
            .get("verify_attempts")
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
            + 1;
        self.state.set("verify_attempts", attempts);
        let verified = date_of_birth.trim() == found.date_of_birth;
        if verified {
            self.state.set("verified", true);
            self.state.set("verified_by", "date_of_birth");
        }
        Ok(json!({"verified": verified, "attempts": attempts}))
    }

    /// Set up a monthly payment plan for the balance.
    ///
    /// # Arguments
    /// * `monthly_amount` - What the caller can pay each month, in dollars
    #[function_tool]
    async fn propose_payment_plan(&self, monthly_amount: f64) -> Result<Value, ToolError> {
        let found = self.current()?;
        if !self.state.flag("verified") {
            return Err(ToolError::new("The caller is not verified."));
        }
        if !(monthly_amount.is_finite() && monthly_amount >= 10.0) {
            return Err(ToolError::invalid_arguments(
                "The monthly amount must be at least 10 dollars.",
            ));
        }
        let balance = dollars(found.balance_cents);
        // Whole months; the last one may be smaller.
        let months = (balance / monthly_amount).ceil() as u64;
        let plan = json!({"monthly_amount": monthly_amount, "months": months, "balance": balance});
        self.state.set("plan", plan.clone());
        Ok(plan)
    }

    /// Transfer the caller to a person at the collections desk.
    ///
    /// # Arguments
    /// * `reason` - Why the caller wants a person, for the colleague's briefing
    #[function_tool]
    async fn transfer_to_human(&self, reason: String) -> Result<&'static str, ToolError> {
        let briefing = match self.state.get("account_id") {
            Some(Value::String(id)) => format!("Account {id}. Caller asked for a person: {reason}"),
            _ => format!("Caller asked for a person: {reason}"),
        };
        let options = TransferOptions {
            kind: TransferType::WarmTransfer,
            private_handoff_option: Some(HandoffOption {
                kind: HandoffKind::Static,
                prompt: briefing,
            }),
            public_handoff_option: None,
        };
        self.call
            .transfer_call(COLLECTIONS_DESK, options, Some(HoldMusic::RelaxingSound))
            .await
            .map_err(ToolError::from)?;
        Ok("Transferring now.")
    }
}

/// Why the crew could not be built: a tool that cannot be registered or an invalid graph.
pub type CrewError = Box<dyn std::error::Error + Send + Sync>;

/// The router for one call: tools bound to this call's controls and caller, state seeded from
/// the call's variables.
pub fn collections_router(
    setup: &SessionSetup,
    llm: Arc<dyn LlmClient>,
) -> Result<DeterministicRouter, CrewError> {
    let state = RouterState::new();
    if setup.initial_variables().get(VERIFIED_VARIABLE) == Some(&Value::Bool(true)) {
        state.set("verified", true);
        state.set("verified_by", "platform");
    }
    let tools = Arc::new(CollectionsTools {
        state: state.clone(),
        call: setup.call().clone(),
        caller_number: setup.caller().and_then(|c| c.user_number.clone()),
    });
    let mut registry = ToolRegistry::new();
    registry.discover(&tools)?;

    let verified_account =
        |s: &Map<String, Value>| when::present("account_id")(s) && when::flag("verified")(s);
    let router = DeterministicRouter::builder("intake", llm)
        .tools(Arc::new(registry))
        .state(state)
        .sub_agent(
            SubAgent::new("intake", INTAKE_PROMPT)
                .with_tools(["find_account", "transfer_to_human"]),
        )
        .sub_agent(
            SubAgent::new("verify", VERIFY_PROMPT)
                .with_tools(["verify_identity", "transfer_to_human"]),
        )
        .sub_agent(
            SubAgent::new("resolve", RESOLVE_PROMPT)
                .with_tools(["propose_payment_plan", "transfer_to_human"]),
        )
        // A caller verified before (call variable, or ringing from the number on file) skips
        // verification: a transition past it.
        .add_transition("intake", "resolve", verified_account)
        .add_transition("intake", "verify", when::present("account_id"))
        .add_transition("verify", "resolve", when::flag("verified"))
        .build()?;
    Ok(router)
}

/// The crew for one call: the router as its only output node.
pub fn collections_crew(setup: &SessionSetup, llm: Arc<dyn LlmClient>) -> Result<Crew, CrewError> {
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new(
        "collections",
        collections_router(setup, llm)?,
    ));
    Ok(crew)
}

/// The last thing the caller said, lower-cased.
fn last_user(request: &ChatRequest) -> String {
    ScriptedLlm::last_user_text(request)
        .unwrap_or_default()
        .to_lowercase()
}

/// The first run of at least `min` digits in `text`.
fn digits(text: &str, min: usize) -> Option<String> {
    text.split(|c: char| !c.is_ascii_digit())
        .find(|run| run.len() >= min)
        .map(str::to_owned)
}

/// The first `YYYY-MM-DD` in `text`.
fn iso_date(text: &str) -> Option<String> {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_ascii_digit()))
        .find(|w| {
            let parts: Vec<&str> = w.split('-').collect();
            parts.len() == 3
                && [4, 2, 2].iter().zip(&parts).all(|(len, part)| {
                    part.len() == *len && part.chars().all(|c| c.is_ascii_digit())
                })
        })
        .map(str::to_owned)
}

/// What the offline model says after the tools it called: it reads their results.
fn after_tools(request: &ChatRequest) -> Reply {
    let name = request
        .messages
        .iter()
        .rev()
        .find_map(|m| m.tool_calls().first().map(|c| c.name.clone()))
        .unwrap_or_default();
    let result: Value = ScriptedLlm::last_tool_results(request)
        .first()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or(Value::Null);
    if result.get("error").is_some() {
        let message = result
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("Sorry, that didn't work.");
        return Reply::text(format!("Sorry, I couldn't do that. {message}"));
    }
    let text = match name.as_str() {
        "find_account" => {
            let who = result["name"].as_str().unwrap_or("there");
            if result["verified"] == json!(true) {
                format!("Thanks, {who}. I found your account, and you're already verified.")
            } else {
                format!("Thanks, {who}. I found your account. What is your date of birth?")
            }
        }
        "verify_identity" if result["verified"] == json!(true) => {
            "Thank you, you're verified.".to_owned()
        }
        "verify_identity" => "That doesn't match our records. Could you say it again?".to_owned(),
        "propose_payment_plan" => format!(
            "Done: {} dollars a month for {} months.",
            result["monthly_amount"].as_f64().unwrap_or_default(),
            result["months"]
        ),
        // A model often adds a line after a transfer; the router never asks it (the call has
        // left the crew), so this is never heard.
        "transfer_to_human" => "Please hold while I transfer you.".to_owned(),
        _ => String::new(),
    };
    Reply::text(text)
}

/// The offline model: it plays each sub-agent by the active prompt and what the caller said.
pub fn scripted_collections_model() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| {
        if let Some(Message::Tool { .. }) = request.messages.last() {
            return after_tools(request);
        }
        let said = last_user(request);
        if ["person", "human", "agent", "representative"]
            .iter()
            .any(|w| said.contains(w))
        {
            return Reply::tool_call("transfer_to_human", json!({"reason": said}))
                .with_text("Of course, I'm connecting you with a colleague now.");
        }
        let prompt = match request.messages.first() {
            Some(Message::System { content }) => content.as_str(),
            _ => "",
        };
        match prompt {
            INTAKE_PROMPT => match digits(&said, 4) {
                Some(id) => Reply::tool_call("find_account", json!({"account_id": id})),
                None => {
                    Reply::text("Hello, this is Acme Collections. What is your account number?")
                }
            },
            VERIFY_PROMPT => match iso_date(&said) {
                Some(date) => Reply::tool_call("verify_identity", json!({"date_of_birth": date})),
                None => Reply::text("Could you tell me your date of birth, year first?"),
            },
            RESOLVE_PROMPT => match digits(&said, 2) {
                Some(amount) => Reply::tool_call(
                    "propose_payment_plan",
                    json!({"monthly_amount": amount.parse::<f64>().unwrap_or(0.0)}),
                ),
                None => Reply::text("How much could you pay each month toward your balance?"),
            },
            _ => Reply::text("Sorry, I lost track. Could you repeat that?"),
        }
    })
    .with_chunk_delay(Duration::from_millis(20))
}
