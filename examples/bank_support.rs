//! A bank's phone assistant that checks balances and sends money, and sends it only after
//! the caller says yes. "Send $50 to Alice": the model calls `transfer_money`, a `confirm`
//! tool, so the executor parks the call on this call's deferred approver and the agent asks
//! "Shall I transfer $50.00 to Alice?". The caller's next words decide: a clear yes runs the
//! parked call (same id) and the model reads the new balance; a no, or anything that is not a
//! clear yes, denies it, and the model reads `ApprovalDenied` with nothing moved. The platform
//! sees each step as `tool_call_start` / `tool_call_error` / `tool_call_end` logs. An approved
//! transfer is never cut off by a barge-in: it is booked anyway and the next turn tells the
//! caller. Runs offline on a scripted model, or on a real one with `OPENAI_API_KEY` (or
//! `OPENAI_BASE_URL`) set.
//!
//! ```sh
//! cargo run --example bank_support -- --port 8080
//! crewline chat --url ws://127.0.0.1:8080/ws    # try: "send $50 to Alice", then "yes"
//! ```
//!
//! With `CREWLINE_BANK_URL=http://127.0.0.1:18002` (`crewline fake-bank`), transfers are booked
//! by that bank over HTTP instead of the in-memory books.
//!
//!
//! `transfer_money` is a `confirm` tool: the executor asks the crew's [`BankApprovals`] (in this
//! process, or in Redis for every replica) before running it. The approver does not wait (the
//! caller has to hear the question before they can answer), so the call is parked, the model reads
//! `ApprovalPending` and asks "Shall I transfer $50.00 to Alice?". The caller's next words decide
//! the parked call, by the id the executor gave its approval request: a clear yes approves it,
//! anything else denies it. The agent then runs the same call (same tool and arguments, in the
//! call's session) again, the executor collects the decision, and the transfer happens, or the
//! model reads `ApprovalDenied` and the balance stays as it was. A decision is bound to the call's
//! session, the tool and the hash of its arguments: a yes for $50 to Alice never sends $500 to Bob,
//! whatever call ids the model uses. The model never approves anything: the decision is taken from
//! the caller's own words, by code. A barge-in while an approved transfer is being booked ends the
//! turn, not the transfer; its outcome is kept and told on the next turn.
//!
//! A call outlives its replica: with Redis, the parked transfer lives there and the question
//! last asked is kept in the call's checkpoint, so when the platform reconnects the call to
//! another replica (same call id, the conversation so far), the caller's yes decides the
//! question they heard, the transfer runs once, and the caller is not asked again.
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
//! async-stream = "0.3"
//! crewline-redis = "0.1"
//! futures = "0.3"
//! reqwest = { version = "0.13", features = ["json"] }
//! thiserror = "2"
//! ```

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use crewline::{
    call::CallControl,
    crew::OutputAgent,
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    tool::{
        Executor, RegistryError, SessionScope, ToolRegistry,
        executor::{
            approval::{
                ApprovalDecision, ApprovalError, ApprovalPort, ApprovalRequest, DeferredApproval,
            },
            claims::{ClaimStore, MemoryClaims},
            ledger::LedgerSink,
        },
    },
    turn::{ToolLoop, TurnEvent, TurnStream},
    types::{Context, Message, ToolErrorKind, ToolResult},
};
use crewline_server::{BoxError, CrewArgs, CrewServer};
use futures::StreamExt;
use serde_json::{Value, json};

/// Serves the bank crew on `/ws`.
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
    let args = <Args as clap::Parser>::parse();
    let _logs = crewline_server::init_logs("info");
    // The model: OPENAI_BASE_URL's or OpenAI's (with OPENAI_API_KEY), else the scripted one.
    let model = args.crew.model.choose(scripted_bank_model).await?;
    // One set of books for every call (booking takes a moment, as a real core system's
    // does). With CREWLINE_BANK_URL, transfers are booked by that bank over HTTP (e.g.
    // `crewline fake-bank`, which deploy/test/chaos.sh runs): books outside the replicas'
    // processes.
    let mut bank = Bank::demo().with_processing_time(Duration::from_millis(300));
    if let Ok(url) = std::env::var(BANK_URL_VARIABLE) {
        tracing::info!(%url, "transfers are booked by the bank over HTTP");
        bank = bank.with_http(HttpBank::new(&url)?);
    }
    // Claims of running transfers, approvals and the ledger are shared by every call (with
    // CREWLINE_REDIS_URL, by every replica): a reconnected call finds its transfer, and the
    // question it was asked, on any replica.
    let shared = BankShared::from_env(bank).await?;
    // The crew, one per call: tools bound to the caller's account. The model is shared.
    let llm = Arc::clone(&model.llm);
    let server =
        CrewServer::new(move |setup: &SessionSetup| bank_crew(setup, Arc::clone(&llm), &shared));
    // Served on --host and --port with the token until SIGTERM or Ctrl-C; with
    // CREWLINE_REDIS_URL each call's checkpoint is kept in Redis (it resumes on any replica).
    args.crew.serve(server, &model).await
}

/// The agent's instructions.
pub const PROMPT: &str = "You are the phone assistant of Crewline Bank. Answer in one or two \
short spoken sentences. Use get_balance for balance questions and transfer_money to send money. \
When transfer_money answers that it is waiting for approval, ask the caller exactly: 'Shall I \
transfer $AMOUNT to RECIPIENT?' with the amount and recipient of that call, and nothing else. \
When it answers that it was not approved, tell the caller nothing was transferred.";

/// The caller's account when the call's variables name none.
pub const DEFAULT_ACCOUNT: &str = "caller";

/// The call variable naming the caller's account.
pub const ACCOUNT_VARIABLE: &str = "account";

/// The environment variable that points the example at a bank over HTTP (`HttpBank`), e.g.
/// the testkit's fake bank (`crewline fake-bank`); without it the books are in memory.
pub const BANK_URL_VARIABLE: &str = "CREWLINE_BANK_URL";

/// Why the bank refused (or could not confirm) a transfer.
#[derive(Debug, thiserror::Error)]
pub enum BankError {
    /// No such account.
    #[error("there is no account for {0}")]
    UnknownAccount(String),
    /// Not enough money.
    #[error("the balance of {available} is not enough to send {amount}")]
    InsufficientFunds {
        /// What the account holds.
        available: String,
        /// What was asked.
        amount: String,
    },
    /// A zero, negative or absurd amount.
    #[error("{0} is not an amount that can be sent")]
    InvalidAmount(String),
    /// The bank could not be reached: the transfer was never sent, so nothing moved.
    #[error("the bank could not be reached; nothing was transferred")]
    Unreachable(#[source] reqwest::Error),
    /// The bank got the transfer but did not confirm it: it may have been made, and must not
    /// be sent again (its idempotency key lets the bank answer a retry with the first result).
    #[error(
        "the bank did not confirm the transfer; it may have been made, so do not send it again"
    )]
    OutcomeUnknown(#[source] reqwest::Error),
    /// The bank answered with a refusal.
    #[error("the bank refused the transfer (HTTP {status}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The bank's message.
        message: String,
    },
    /// The bank's answer is not one it should give (too large, not JSON).
    #[error("the bank's answer could not be read; the transfer may have been made")]
    BadAnswer,
}

/// The largest answer read from the HTTP bank: a receipt is a few short fields.
const MAX_BANK_ANSWER_BYTES: usize = 64 * 1024;

/// A bank reached over HTTP (`POST {url}/transfers` with `account`, `recipient`, `amount` in
/// cents and `idempotency_key`), such as the testkit's fake bank: the books live outside the
/// crew's processes, so a transfer made by a replica that then dies is still on them.
#[derive(Debug, Clone)]
pub struct HttpBank {
    client: reqwest::Client,
    transfers: String,
}

impl HttpBank {
    /// The bank at `base_url` (e.g. `http://127.0.0.1:18002`), with a caller's patience: a
    /// second to connect, ten for an answer.
    pub fn new(base_url: &str) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(Self {
            client,
            transfers: format!("{}/transfers", base_url.trim_end_matches('/')),
        })
    }

    /// Sends `cents` from `from` to `to`, with `idempotency_key` when there is one (a bank
    /// that dedupes answers a repeated key with the first result, moving nothing more).
    pub async fn transfer(
        &self,
        from: &str,
        to: &str,
        cents: i64,
        idempotency_key: Option<&str>,
    ) -> Result<(), BankError> {
        let body = json!({
            "account": from,
            "recipient": to,
            "amount": cents,
            "idempotency_key": idempotency_key,
        });
        let sent = self
            .client
            .post(&self.transfers)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            // Not connected: the request never left, so the transfer was not made.
            Err(error) if error.is_connect() => return Err(BankError::Unreachable(error)),
            Err(error) => return Err(BankError::OutcomeUnknown(error)),
        };
        let status = response.status();
        let mut answer = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) if answer.len() + chunk.len() <= MAX_BANK_ANSWER_BYTES => {
                    answer.extend_from_slice(&chunk);
                }
                Ok(Some(_)) => return Err(BankError::BadAnswer),
                Ok(None) => break,
                Err(error) => return Err(BankError::OutcomeUnknown(error)),
            }
        }
        let answer: Value = serde_json::from_slice(&answer).map_err(|_| BankError::BadAnswer)?;
        if status.is_success() {
            return Ok(());
        }
        Err(BankError::Refused {
            status: status.as_u16(),
            message: answer["error"]
                .as_str()
                .unwrap_or("no reason given")
                .to_owned(),
        })
    }
}

/// The bank's books: balances in cents by account, shared by every call (in memory), or, with
/// [`Bank::with_http`], transfers booked by a bank over HTTP.
#[derive(Debug, Clone, Default)]
pub struct Bank {
    accounts: Arc<Mutex<HashMap<String, i64>>>,
    /// How long the core banking system takes to book a transfer.
    processing: Duration,
    /// Where transfers are booked instead of the in-memory books.
    http: Option<HttpBank>,
}

impl Bank {
    /// A bank holding `accounts` (name, balance in cents).
    pub fn with_accounts<'a>(accounts: impl IntoIterator<Item = (&'a str, i64)>) -> Self {
        let accounts = accounts
            .into_iter()
            .map(|(name, cents)| (name.to_lowercase(), cents))
            .collect();
        Self {
            accounts: Arc::new(Mutex::new(accounts)),
            processing: Duration::ZERO,
            http: None,
        }
    }

    /// The same balances, with transfers booked by `bank` (balances are then not moved here).
    pub fn with_http(mut self, bank: HttpBank) -> Self {
        self.http = Some(bank);
        self
    }

    /// Books a transfer where this bank books them: over HTTP with `idempotency_key`, or in
    /// memory after the processing time. The new balance of `from` when it is known.
    pub async fn book(
        &self,
        from: &str,
        to: &str,
        cents: i64,
        idempotency_key: Option<&str>,
    ) -> Result<Option<i64>, BankError> {
        match &self.http {
            Some(http) => {
                if cents <= 0 {
                    return Err(BankError::InvalidAmount(dollars(cents)));
                }
                http.transfer(from, to, cents, idempotency_key).await?;
                Ok(None)
            }
            None => {
                tokio::time::sleep(self.processing).await;
                self.transfer(from, to, cents).map(Some)
            }
        }
    }

    /// The same books, with each transfer taking `processing` to book.
    pub fn with_processing_time(mut self, processing: Duration) -> Self {
        self.processing = processing;
        self
    }

    /// The demo bank: the caller with $1,250.00, and two payees.
    pub fn demo() -> Self {
        Self::with_accounts([(DEFAULT_ACCOUNT, 125_000), ("alice", 10_000), ("bob", 0)])
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        // Every update is one insert pair under the lock, so a poisoned map is still whole.
        self.accounts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The balance of `account` in cents.
    pub fn balance(&self, account: &str) -> Option<i64> {
        self.lock().get(&account.to_lowercase()).copied()
    }

    /// Moves `cents` from `from` to `to`; returns the new balance of `from`.
    pub fn transfer(&self, from: &str, to: &str, cents: i64) -> Result<i64, BankError> {
        let (from, to) = (from.to_lowercase(), to.to_lowercase());
        let mut accounts = self.lock();
        let available = *accounts
            .get(&from)
            .ok_or_else(|| BankError::UnknownAccount(from.clone()))?;
        if !accounts.contains_key(&to) {
            return Err(BankError::UnknownAccount(to));
        }
        if cents <= 0 {
            return Err(BankError::InvalidAmount(dollars(cents)));
        }
        if cents > available {
            return Err(BankError::InsufficientFunds {
                available: dollars(available),
                amount: dollars(cents),
            });
        }
        let left = available - cents;
        accounts.insert(from, left);
        *accounts.entry(to).or_default() += cents;
        Ok(left)
    }
}

/// Cents as the caller hears them: `$1,250.00`.
pub fn dollars(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let cents = cents.unsigned_abs();
    let whole = (cents / 100).to_string();
    let mut grouped = String::new();
    for (i, digit) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    format!("{sign}${grouped}.{:02}", cents % 100)
}

/// A dollar amount from the model as cents; `None` when it is not a sane positive amount.
fn to_cents(amount: f64) -> Option<i64> {
    // Up to a billion dollars: anything larger is a misheard number, not a transfer.
    if !amount.is_finite() || amount <= 0.0 || amount > 1e9 {
        return None;
    }
    // In range, so the cast cannot truncate.
    Some((amount * 100.0).round() as i64)
}

/// The caller's banking tools, bound to their account for this call.
pub struct BankTools {
    bank: Bank,
    account: String,
}

#[tools]
impl BankTools {
    /// Get the caller's current balance.
    #[function_tool]
    async fn get_balance(&self) -> Result<Value, ToolError> {
        let cents = self
            .bank
            .balance(&self.account)
            .ok_or_else(|| ToolError::new("The caller's account could not be found."))?;
        Ok(json!({"balance": dollars(cents)}))
    }

    /// Transfer money from the caller's account to a payee. Needs the caller's confirmation.
    ///
    /// # Arguments
    /// * `amount` - The amount in dollars, e.g. 50 or 12.5
    /// * `recipient` - The payee's name, e.g. Alice
    #[function_tool(confirm, cancellable = false)]
    async fn transfer_money(&self, amount: f64, recipient: String) -> Result<Value, ToolError> {
        // Not cancellable: once approved, a barge-in must not cut a transfer half-way.
        let cents = to_cents(amount).ok_or_else(|| {
            ToolError::invalid_arguments(format!("{amount} is not an amount that can be sent"))
        })?;
        // The key the executor minted for this call: the same on a retry, a reconnect or
        // another replica, so the bank books it once whatever fails in between.
        let idempotency_key = IdempotencyKey::current();
        let balance = self
            .bank
            .book(
                &self.account,
                &recipient,
                cents,
                idempotency_key.as_ref().map(IdempotencyKey::as_str),
            )
            .await
            .map_err(|error| match error {
                // Sent but not confirmed: the model must not send it again, nor tell the
                // caller it failed.
                BankError::OutcomeUnknown(_) | BankError::BadAnswer => {
                    ToolError::outcome_unknown(error.to_string())
                }
                other => ToolError::from(other),
            })?;
        let mut receipt = json!({
            "status": "completed",
            "amount": dollars(cents),
            "recipient": recipient,
        });
        if let Some(balance) = balance {
            receipt["new_balance"] = json!(dollars(balance));
        }
        Ok(receipt)
    }
}

/// What the caller's words say about a pending transfer: `Some(true)` for a clear yes,
/// `Some(false)` for a clear no, `None` for anything else (which is not a yes either).
pub fn caller_answer(words: &str) -> Option<bool> {
    const YES: [&str; 12] = [
        "yes",
        "yeah",
        "yep",
        "yup",
        "sure",
        "correct",
        "confirm",
        "confirmed",
        "ok",
        "okay",
        "absolutely",
        "affirmative",
    ];
    const YES_PHRASES: [&str; 3] = ["go ahead", "do it", "please do"];
    const NO: [&str; 8] = [
        "no", "nope", "nah", "don't", "dont", "cancel", "stop", "wait",
    ];
    const NO_PHRASES: [&str; 3] = ["do not", "never mind", "not now"];
    let lower = words.to_lowercase().replace('’', "'");
    let tokens: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|t| !t.is_empty())
        .collect();
    let said = |list: &[&str], phrases: &[&str]| {
        tokens.iter().any(|t| list.contains(t)) || phrases.iter().any(|p| lower.contains(p))
    };
    match (said(&YES, &YES_PHRASES), said(&NO, &NO_PHRASES)) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        // "yes... no, wait": mixed or silent on it, so not a yes.
        _ => None,
    }
}

/// The decision for a parked transfer from the caller's reply.
fn decision_for(reply: &str) -> ApprovalDecision {
    match caller_answer(reply) {
        Some(true) => ApprovalDecision::Approve,
        Some(false) => ApprovalDecision::Deny {
            reason: "the caller said no".to_owned(),
        },
        None => ApprovalDecision::Deny {
            reason: format!(
                "the caller did not confirm (they said \"{reply}\"); call the tool again if \
                 they still want the transfer"
            ),
        },
    }
}

/// A settled call and its outcome.
type Outcome = (ToolCall, ToolResult);

/// The key of the bank agent's record in the call's checkpoint: the ids of the approval
/// requests the caller was last asked about.
pub const ASKED_CHECKPOINT_KEY: &str = "bank_agent.asked";

/// The most approval requests one question may name: a model parks one transfer per question;
/// more in one turn are kept in memory but not in the checkpoint beyond this many.
const MAX_ASKED: usize = 8;

/// The bank agent: a tool loop whose `confirm` calls are decided by the caller's next words.
pub struct BankAgent {
    context: Context,
    tool_loop: ToolLoop,
    approvals: BankApprovals,
    /// The call, when the agent keeps what it asked in the call's checkpoint.
    call: Option<CallControl>,
    /// Settled calls whose outcome the caller has not been told yet (a barge-in cut the turn
    /// that was telling it); the next turn tells it.
    untold: Arc<Mutex<Vec<Outcome>>>,
    /// The approval requests (by id) parked by the latest turn that parked any: the ones the
    /// caller was last asked about, so the ones their answer decides.
    last_asked: Vec<String>,
}

impl BankAgent {
    /// An agent answering with `tool_loop`, whose registry asks `approvals` about its
    /// `confirm` tools.
    pub fn new(
        prompt: impl Into<String>,
        tool_loop: ToolLoop,
        approvals: impl Into<BankApprovals>,
    ) -> Self {
        Self {
            context: Context::with_system(prompt),
            tool_loop,
            approvals: approvals.into(),
            call: None,
            untold: Arc::default(),
            last_asked: Vec::new(),
        }
    }

    /// The same agent keeping the question it last asked in `call`'s checkpoint, and reading
    /// it back when the call resumed there (on this replica or another): the caller's answer
    /// then decides the question they heard, not a guess.
    pub fn with_call(mut self, call: CallControl) -> Self {
        match call.checkpoint_get::<Vec<String>>(ASKED_CHECKPOINT_KEY) {
            Ok(asked) => self.last_asked = asked.unwrap_or_default(),
            Err(error) => {
                let error = crewline::types::error_chain(&error);
                tracing::warn!(%error, "the question asked before the resume could not be read");
            }
        }
        self.call = Some(call);
        self
    }

    /// Whether the call's checkpoint holds what this agent asks: then a parked request it
    /// holds no record of was never asked in full, and is not guessed to be.
    fn keeps_record(&self) -> bool {
        self.call.as_ref().is_some_and(CallControl::is_checkpointed)
    }

    /// Keeps `last_asked` in the call's checkpoint (written at this turn's end).
    fn record_asked(&self) {
        let Some(call) = &self.call else {
            return;
        };
        let asked = &self.last_asked[..self.last_asked.len().min(MAX_ASKED)];
        if let Err(error) = call.checkpoint_put(ASKED_CHECKPOINT_KEY, &asked) {
            // The question is still known here; only a resume elsewhere would not know it,
            // and then the caller is asked again, nothing runs without a yes.
            let error = crewline::types::error_chain(&error);
            tracing::warn!(%error, "the question asked was not kept in the checkpoint");
        }
    }

    /// The caller's latest words.
    fn last_user_words(&self) -> String {
        self.context
            .messages()
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }
}

/// The outcomes not told yet (a poisoned lock still holds whole entries).
fn untold(outcomes: &Mutex<Vec<Outcome>>) -> std::sync::MutexGuard<'_, Vec<Outcome>> {
    outcomes.lock().unwrap_or_else(PoisonError::into_inner)
}

impl OutputAgent for BankAgent {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }

    fn generate_response(&mut self) -> TurnStream<'_> {
        // Only words the caller said after the question decide it: a request that ends
        // with the agent's own words (a platform's nudge after silence) leaves it parked.
        let caller_answered = matches!(self.context.last(), Some(Message::User { .. }));
        // Only this call's requests: the approver is shared by every call (of the process, or
        // of every replica).
        let scope = self.tool_loop.scope().clone();
        let reply = self.last_user_words();
        Box::pin(async_stream::stream! {
            // A checkpointed call with no question outstanding has nothing to decide: it does
            // not read the parked requests (with Redis, every replica's), so a turn that
            // answers no question costs the approver nothing.
            let outstanding = !self.keeps_record() || !self.last_asked.is_empty();
            let mut parked: Vec<ApprovalRequest> = if caller_answered && outstanding {
                match self.approvals.pending_of(&scope).await {
                    Ok(parked) => parked,
                    Err(error) => {
                        // Nothing is decided: the transfer stays parked, and runs only after
                        // a yes the approver can take.
                        tracing::warn!(error = %crewline::types::ErrorChain(&error), "the parked transfers could not be read");
                        Vec::new()
                    }
                }
            } else {
                Vec::new()
            };
            // An agent built for a reconnected call that keeps no checkpoint has not seen the
            // question asked: a single parked request of this call is the one the caller was
            // asked about. A checkpointed call knows what it asked.
            if self.last_asked.is_empty()
                && !self.keeps_record()
                && let [only] = parked.as_slice()
            {
                self.last_asked.push(only.id.clone());
            }
            // Superseded calls first, then the ones asked about, each by the model's id, then
            // by request id: reproducible turns.
            parked.sort_by_key(|r| {
                (
                    self.last_asked.contains(&r.id),
                    r.call_id.clone(),
                    r.id.clone(),
                )
            });
            // Outcomes an interrupted turn could not tell come first: the model tells them now.
            let mut telling: Vec<String> = Vec::new();
            for (call, result) in untold(&self.untold).iter() {
                telling.push(call.id.clone());
                self.context.add(Message::assistant_with_tools("", vec![call.clone()]));
                self.context.add(result.to_message());
            }
            // A transfer waits for the caller's word: this turn's words decide it, and the
            // same call runs again so the executor collects the decision.
            let decided_any = !parked.is_empty();
            for request in parked {
                // The answer is to the last question; a call parked before it (the model
                // asked about another transfer since) is superseded.
                let decision = if self.last_asked.contains(&request.id) {
                    decision_for(&reply)
                } else {
                    ApprovalDecision::Deny {
                        reason: "superseded: the caller's answer was not to this request (they \
                                 were asked about another, or did not hear this one in full)"
                            .to_owned(),
                    }
                };
                if let Err(error) = self.approvals.decide(&request.id, decision).await {
                    // Only this agent decides; the request may have expired. Without a
                    // decision the executor answers pending again and nothing is transferred.
                    tracing::warn!(error = %crewline::types::ErrorChain(&error), "a parked transfer had no approval slot");
                }
                let call = ToolCall::new(
                    request.call_id.clone(),
                    request.tool.clone(),
                    request.arguments.to_string(),
                );
                yield Ok(TurnEvent::tool_started(call.clone()));
                // The call runs as a task of its own: a barge-in ends this turn, not the
                // transfer, and the outcome is kept until the caller has been told. It runs in
                // the call's session, where the decision is bound.
                let tools = self.tool_loop.tools().clone();
                let context = self.tool_loop.call_context();
                let outcomes = self.untold.clone();
                let task_call = call.clone();
                let task = tokio::spawn(async move {
                    let run = tools.execute_one(&task_call, &context).await;
                    untold(&outcomes).push((task_call, run.result.clone()));
                    run
                });
                match task.await {
                    Ok(run) => {
                        // The call and its outcome join the conversation together, after the
                        // caller's answer, so the model's next request is valid.
                        telling.push(call.id.clone());
                        self.context.add(Message::assistant_with_tools("", vec![call]));
                        self.context.add(run.result.to_message());
                        yield Ok(TurnEvent::ToolFinished(run));
                    }
                    // The executor catches tool panics; this is the runtime shutting down.
                    Err(error) => tracing::warn!(error = %crewline::types::ErrorChain(&error), "a settled call did not finish"),
                }
            }
            if decided_any && self.keeps_record() {
                // Every parked request of this call was decided: the question is answered.
                self.last_asked.clear();
                self.record_asked();
            }
            let mut completed = true;
            // The calls this turn asked the caller about: (tool, arguments).
            let mut asked_now: Vec<(String, Value)> = Vec::new();
            {
                let mut turn = self.tool_loop.run(&mut self.context);
                let mut started: Vec<ToolCall> = Vec::new();
                while let Some(event) = turn.next().await {
                    completed &= event.is_ok();
                    match &event {
                        Ok(TurnEvent::ToolStarted { call, .. }) => started.push(call.clone()),
                        Ok(TurnEvent::ToolFinished(run))
                            if run.result.error_kind() == Some(ToolErrorKind::ApprovalPending) =>
                        {
                            if let Some(call) =
                                started.iter().find(|c| c.id == run.result.tool_call_id)
                                && let Ok(arguments) = call.parse_arguments()
                            {
                                asked_now.push((call.name.clone(), arguments));
                            }
                        }
                        _ => {}
                    }
                    yield event;
                }
            }
            if !asked_now.is_empty() {
                // The parked requests of the calls just asked about (a call asked about again
                // keeps the request it was parked under).
                match self.approvals.pending_of(&scope).await {
                    Ok(pending) => {
                        self.last_asked = pending
                            .into_iter()
                            .filter(|r| {
                                asked_now.iter().any(|(tool, arguments)| {
                                    r.tool == *tool && r.arguments == *arguments
                                })
                            })
                            .map(|r| r.id)
                            .collect();
                        self.record_asked();
                    }
                    // Not known what was asked: the next answer decides nothing, and the
                    // caller is asked again.
                    Err(error) => tracing::warn!(error = %crewline::types::ErrorChain(&error), "the questions asked could not be read"),
                }
            }
            if completed {
                // The model has read these outcomes and its answer went out in full.
                untold(&self.untold).retain(|(call, _)| !telling.contains(&call.id));
            }
        })
    }
}

/// What every call of the bank crew in one process shares: the books, where run-once claims
/// of transfers live, the approver, and the ledger.
///
/// Shared because a call outlives its socket: when the platform reconnects a dropped call (same
/// call id), on this replica or another, the retry of a transfer must find the first run's claim
/// (join it or read its outcome, never run again) and the caller's yes must find its parked
/// request. With `CREWLINE_REDIS_URL` set ([`BankShared::from_env`]) claims, approvals and the
/// ledger live in Redis, so every replica sees them; otherwise in this process.
#[derive(Clone)]
pub struct BankShared {
    bank: Bank,
    claims: Arc<dyn ClaimStore>,
    approvals: BankApprovals,
    ledger: Option<Arc<dyn LedgerSink>>,
}

impl BankShared {
    /// `bank`'s books with claims and approvals in this process's memory, and no ledger.
    pub fn in_memory(bank: Bank) -> Self {
        Self {
            bank,
            claims: Arc::new(MemoryClaims::new()),
            // Parked calls answer `ApprovalPending` at once: the caller must hear the question
            // first.
            approvals: BankApprovals::Memory(DeferredApproval::new().wait(false)),
            ledger: None,
        }
    }

    /// `bank`'s books, with claims, approvals and the ledger in Redis when
    /// `CREWLINE_REDIS_URL` is set (the crash-safe set-up: a transfer's intent is recorded
    /// before it runs, a retry on any replica joins it, and a question asked on one replica is
    /// answered on another), else [`in_memory`](Self::in_memory).
    pub async fn from_env(bank: Bank) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let shared = Self::in_memory(bank);
        if std::env::var_os(crewline_server::REDIS_URL_VARIABLE).is_none_or(|url| url.is_empty()) {
            return Ok(shared);
        }
        {
            let connection = crewline_redis::RedisConfig::from_env()?.open().await?;
            tracing::info!(
                prefix = connection.prefix(),
                "bank crew: transfers claimed, approved and recorded in Redis"
            );
            Ok(shared
                .with_claims(Arc::new(crewline_redis::RedisClaims::new(
                    connection.clone(),
                )))
                .with_approvals(BankApprovals::Redis(
                    // Parked calls answer `ApprovalPending` at once, as in memory.
                    crewline_redis::RedisApproval::new(connection.clone()).wait(false),
                ))
                .with_ledger(Arc::new(crewline_redis::RedisLedger::new(connection))))
        }
    }

    /// The same, with claims kept in `claims`.
    pub fn with_claims(mut self, claims: Arc<dyn ClaimStore>) -> Self {
        self.claims = claims;
        self
    }

    /// The same, with transfers parked for the caller's word in `approvals`.
    pub fn with_approvals(mut self, approvals: BankApprovals) -> Self {
        self.approvals = approvals;
        self
    }

    /// The same, with every transfer's intent and outcome recorded in `ledger`.
    pub fn with_ledger(mut self, ledger: Arc<dyn LedgerSink>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// The books.
    pub fn bank(&self) -> &Bank {
        &self.bank
    }

    /// The approver every call's transfers are parked on (each call collects only its own).
    pub fn approvals(&self) -> &BankApprovals {
        &self.approvals
    }
}

/// Where the bank crew's transfers wait for the caller's word.
#[derive(Clone)]
#[non_exhaustive]
pub enum BankApprovals {
    /// In this process: a call that resumes on another replica does not find its transfer,
    /// and the caller is asked again.
    Memory(DeferredApproval),
    /// In Redis, bound to the call id, the tool and the arguments' hash: a call resumed on any
    /// replica finds the transfer it was asked about, and the caller's yes decides it there.
    Redis(crewline_redis::RedisApproval),
}

impl From<DeferredApproval> for BankApprovals {
    fn from(approvals: DeferredApproval) -> Self {
        Self::Memory(approvals)
    }
}

impl BankApprovals {
    /// The approver the executor asks.
    pub fn port(&self) -> Arc<dyn ApprovalPort> {
        match self {
            Self::Memory(approvals) => Arc::new(approvals.clone()),
            Self::Redis(approvals) => Arc::new(approvals.clone()),
        }
    }

    /// The requests of the call `scope` waiting for a decision.
    pub async fn pending_of(
        &self,
        scope: &SessionScope,
    ) -> Result<Vec<ApprovalRequest>, ApprovalError> {
        let pending = match self {
            Self::Memory(approvals) => approvals.pending(),
            Self::Redis(approvals) => approvals.pending().await?,
        };
        Ok(pending
            .into_iter()
            .filter(|request| request.scope == *scope)
            .collect())
    }

    /// Decides on the parked request `id`.
    pub async fn decide(&self, id: &str, decision: ApprovalDecision) -> Result<(), ApprovalError> {
        match self {
            Self::Memory(approvals) => approvals.decide(id, decision),
            Self::Redis(approvals) => approvals.decide(id, decision).await,
        }
    }
}

/// The crew for one call: the bank agent over tools bound to the caller's account. Approvals,
/// claims and the ledger come from `shared`; a decision is bound to this call's scope (its
/// call id), the tool and the arguments, so a yes on one call never approves another's.
pub fn bank_crew(
    setup: &SessionSetup,
    llm: Arc<dyn LlmClient>,
    shared: &BankShared,
) -> Result<Crew, RegistryError> {
    let account = setup
        .initial_variables()
        .get(ACCOUNT_VARIABLE)
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_ACCOUNT)
        .to_owned();
    let mut executor = Executor::builder()
        .approval(shared.approvals.port())
        .claims(Arc::clone(&shared.claims));
    if let Some(ledger) = &shared.ledger {
        executor = executor.ledger(Arc::clone(ledger));
    }
    let mut registry = ToolRegistry::new().with_executor(Arc::new(executor.build()));
    registry.discover(&Arc::new(BankTools {
        bank: shared.bank.clone(),
        account,
    }))?;
    // The call's session scope: approvals and running transfers are bound to this call.
    let tool_loop = ToolLoop::new(llm, Arc::new(registry)).with_scope(setup.call().scope().clone());
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new(
        "bank-agent",
        BankAgent::new(PROMPT, tool_loop, shared.approvals.clone()).with_call(setup.call().clone()),
    ));
    Ok(crew)
}

/// The arguments of the call `call_id` in the request.
fn arguments_of(request: &ChatRequest, call_id: &str) -> Option<Value> {
    request.messages.iter().rev().find_map(|m| {
        m.tool_calls()
            .iter()
            .find(|c| c.id == call_id)
            .and_then(|c| c.parse_arguments().ok())
    })
}

/// The offline model: checks balances, asks to transfer when the caller names an amount and
/// a payee, and reads the outcome of each tool back.
pub fn scripted_bank_model() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| {
        if let Some(Message::Tool {
            tool_call_id,
            content,
        }) = request.messages.last()
        {
            let result: Value = serde_json::from_str(content).unwrap_or(Value::Null);
            let arguments = arguments_of(request, tool_call_id).unwrap_or(Value::Null);
            return Reply::text(read_back(&result, &arguments));
        }
        let said = ScriptedLlm::last_user_text(request)
            .unwrap_or_default()
            .to_lowercase();
        // A yes to the question the conversation shows, with no decided call to read (the
        // crew did not find the transfer parked, e.g. on a replica that never heard of it): a
        // model asks for the transfer again, and the caller hears the question again.
        let asked = request
            .messages
            .iter()
            .rev()
            .skip_while(|m| matches!(m, Message::User { .. }))
            .find_map(|m| match m {
                Message::Assistant {
                    content: Some(text),
                    ..
                } if !text.is_empty() => Some(asked_transfer(text)),
                _ => None,
            })
            .flatten();
        if let (Some(true), Some((amount, recipient))) = (caller_answer(&said), asked) {
            Reply::tool_call(
                "transfer_money",
                json!({"amount": amount, "recipient": recipient}),
            )
        } else if let Some((amount, recipient)) = transfer_request(&said) {
            Reply::tool_call(
                "transfer_money",
                json!({"amount": amount, "recipient": recipient}),
            )
        } else if said.contains("balance") {
            Reply::tool_call("get_balance", json!({}))
        } else {
            Reply::text("I can check your balance or send money to one of your payees.")
        }
    })
    .with_chunk_delay(Duration::from_millis(5))
}

/// What the offline model says about a tool's result.
fn read_back(result: &Value, arguments: &Value) -> String {
    if let Some(error) = result.get("error") {
        let message = error["message"].as_str().unwrap_or("it failed");
        return match error["kind"].as_str() {
            Some("ApprovalPending") => {
                let cents = arguments["amount"].as_f64().and_then(to_cents).unwrap_or(0);
                let recipient = arguments["recipient"].as_str().unwrap_or("them");
                format!("Shall I transfer {} to {recipient}?", dollars(cents))
            }
            Some("ApprovalDenied") => {
                "Okay, I haven't transferred anything. Your balance is unchanged.".to_owned()
            }
            // It may have gone through: never "it failed", never a second try.
            Some("OutcomeUnknown") => "I can't confirm that transfer yet: it may already have \
                gone through, so I won't send it again. We'll check on it and get back to you."
                .to_owned(),
            _ => format!("Sorry, I couldn't do that: {message}."),
        };
    }
    // The same transfer asked again after it was made (a reconnect lost the answer): the
    // executor did not run it twice, and hands back the first outcome.
    if result["already_done"] == true {
        let first = &result["outcome"];
        if first["status"] != "completed" {
            return "That was already done, so I haven't done it again.".to_owned();
        }
        return format!(
            "That transfer was already made: I've sent {} to {}.",
            first["amount"].as_str().unwrap_or("the money"),
            first["recipient"].as_str().unwrap_or("them"),
        );
    }
    if result["status"] == "completed" {
        let balance = result["new_balance"]
            .as_str()
            .map(|balance| format!(" Your new balance is {balance}."))
            .unwrap_or_default();
        return format!(
            "Done: I've sent {} to {}.{balance}",
            result["amount"].as_str().unwrap_or("the money"),
            result["recipient"].as_str().unwrap_or("them"),
        );
    }
    match result["balance"].as_str() {
        Some(balance) => format!("Your balance is {balance}."),
        None => "Done.".to_owned(),
    }
}

/// `(dollars, payee)` of the agent's question "Shall I transfer $50.00 to Alice?".
fn asked_transfer(said: &str) -> Option<(f64, String)> {
    let (amount, recipient) = said
        .trim()
        .strip_prefix("Shall I transfer $")?
        .strip_suffix('?')?
        .split_once(" to ")?;
    let amount: f64 = amount.replace(',', "").parse().ok()?;
    Some((amount, recipient.to_owned()))
}

/// `(dollars, payee)` when the words ask to send a `$` amount to a known payee.
fn transfer_request(said: &str) -> Option<(f64, String)> {
    if !(said.contains("send") || said.contains("transfer") || said.contains("pay")) {
        return None;
    }
    let amount: f64 = said
        .split_whitespace()
        .find_map(|word| word.strip_prefix('$'))?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .replace(',', "")
        .parse()
        .ok()?;
    let recipient = ["alice", "bob", "carol"]
        .into_iter()
        .find(|name| said.contains(name))?;
    let mut name = recipient.to_owned();
    name[..1].make_ascii_uppercase();
    Some((amount, name))
}
