//! A fake bank over HTTP, outside the crews' processes: it executes transfers and counts them
//! by idempotency key, so that a chaos run (`deploy/test/chaos.sh`) can tell whether a crash,
//! a reconnect or a retry moved money twice.
//!
//! - `POST /transfers` with `{"account", "recipient", "amount", "idempotency_key"}` (`amount`
//!   in cents, the key optional): executes the transfer after the processing delay and answers
//!   `{"transfer_id", "status": "executed", ...}`. A key seen before returns the first result
//!   (waiting for it when that first request is still being processed) with the header
//!   `idempotent-replayed: true`, and counts a duplicate attempt; the same key with other
//!   arguments is refused (422). A request without a key is executed every time.
//! - `GET /stats`: requested, executed, duplicate attempts by key, and the transfers executed
//!   more than once by (account, recipient, amount): with a unique amount per transfer, that is
//!   money moved twice.
//!
//! A transfer is executed in a task of its own: a client that hangs up mid-request (a replica
//! killed while it waits) does not cancel it, as a real bank's would not be.
//!
//! ```no_run
//! use crewline_testkit::bank::FakeBank;
//!
//! # async fn go() -> std::io::Result<()> {
//! let bank = FakeBank::new().spawn("127.0.0.1:0".parse().unwrap()).await?;
//! let url = bank.url(); // hand it to the crew, e.g. CREWLINE_BANK_URL
//! let stats = bank.stats();
//! assert_eq!(stats.duplicated, 0);
//! # Ok(()) }
//! ```

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, State},
    http::{HeaderName, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::{Deserialize, Serialize};
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

/// The largest request body the bank reads: a transfer is a few short fields.
const MAX_BODY_BYTES: usize = 16 * 1024;

/// The longest account, recipient or key the bank accepts, in bytes.
const MAX_FIELD_BYTES: usize = 256;

/// How many transfers executed more than once `GET /stats` lists as examples.
const DUPLICATE_SAMPLES: usize = 16;

/// The header set on a replayed answer (the first result of a key seen before).
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// A transfer request, the body of `POST /transfers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferRequest {
    /// The account the money leaves.
    pub account: String,
    /// Who gets it.
    pub recipient: String,
    /// How much, in cents.
    pub amount: i64,
    /// The caller's idempotency key: a repeated key returns the first result.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// An executed transfer, the answer of `POST /transfers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferReceipt {
    /// The bank's number for the transfer (from 1).
    pub transfer_id: u64,
    /// Always `executed`.
    pub status: String,
    /// The account the money left.
    pub account: String,
    /// Who got it.
    pub recipient: String,
    /// How much, in cents.
    pub amount: i64,
}

/// A transfer executed more than once, by (account, recipient, amount).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DuplicatedTransfer {
    /// The account.
    pub account: String,
    /// The recipient.
    pub recipient: String,
    /// The amount in cents.
    pub amount: i64,
    /// How many times it was executed.
    pub times: u64,
}

/// What the bank has seen, the answer of `GET /stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BankStats {
    /// Transfer requests received (valid ones, replays included).
    pub requested: u64,
    /// Transfers executed (money moved).
    pub executed: u64,
    /// Requests without an idempotency key.
    pub without_key: u64,
    /// Requests whose key was seen before (answered with the first result, not executed).
    pub duplicate_attempts: u64,
    /// Distinct keys that came more than once.
    pub keys_repeated: u64,
    /// Distinct (account, recipient, amount) executed.
    pub distinct_executed: u64,
    /// (account, recipient, amount) executed more than once: money moved twice.
    pub duplicated: u64,
    /// Executions beyond the first of each duplicated transfer.
    pub duplicated_executions: u64,
    /// A few of the duplicated transfers.
    pub duplicated_samples: Vec<DuplicatedTransfer>,
    /// Requests refused: malformed, a key reused with other arguments, or the bank full.
    pub refused: u64,
}

/// The fake bank's settings; [`FakeBank::spawn`] serves it.
#[derive(Debug, Clone)]
pub struct FakeBank {
    delay: Duration,
    max_entries: usize,
}

impl Default for FakeBank {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeBank {
    /// A bank that books at once and remembers up to a million keys and transfers.
    pub fn new() -> Self {
        Self {
            delay: Duration::ZERO,
            max_entries: 1_000_000,
        }
    }

    /// Each transfer takes `delay` to book (the window a crash can fall into).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Remember at most `max` keys and `max` distinct transfers; beyond, new ones are refused
    /// (503), so the bank's memory stays bounded.
    pub fn with_max_entries(mut self, max: usize) -> Self {
        self.max_entries = max;
        self
    }

    /// Serves the bank on `addr` (port 0 picks a free one) until shut down.
    pub async fn spawn(self, addr: SocketAddr) -> std::io::Result<RunningBank> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Books {
            settings: self,
            ledger: Mutex::new(Ledger::default()),
        });
        let app = Router::new()
            .route("/transfers", post(transfer))
            .route("/stats", get(stats))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(Arc::clone(&state));
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            if let Err(error) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::warn!(error = %crewline::types::ErrorChain(&error), "the fake bank stopped");
            }
        });
        Ok(RunningBank {
            addr,
            books: state,
            stop,
            task,
        })
    }
}

/// A served fake bank.
#[derive(Debug)]
pub struct RunningBank {
    addr: SocketAddr,
    books: Arc<Books>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RunningBank {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it has seen so far.
    pub fn stats(&self) -> BankStats {
        self.books.lock().stats()
    }

    /// Stops serving, waiting at most `grace` for open requests.
    pub async fn shutdown(self, grace: Duration) {
        self.stop.send_replace(true);
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// The result of a key: pending while its first request is booked, then its answer.
type Settled = watch::Receiver<Option<TransferReceipt>>;

#[derive(Debug)]
struct Books {
    settings: FakeBank,
    ledger: Mutex<Ledger>,
}

impl Books {
    fn lock(&self) -> MutexGuard<'_, Ledger> {
        // Every update is a few counters and inserts under the lock: a poisoned ledger is whole.
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// (account, recipient, amount).
type TransferKey = (String, String, i64);

#[derive(Debug, Default)]
struct Ledger {
    stats: BankStats,
    /// Per key: the request it came with, its result, and how many times it came.
    keys: HashMap<String, (TransferRequest, Settled, u64)>,
    /// Per transfer, how many times it was executed.
    executions: HashMap<TransferKey, u64>,
    next_id: u64,
}

impl Ledger {
    fn stats(&self) -> BankStats {
        let mut stats = self.stats.clone();
        stats.distinct_executed = self.executions.len() as u64;
        stats.duplicated = 0;
        stats.duplicated_executions = 0;
        let mut samples = Vec::new();
        for ((account, recipient, amount), &times) in &self.executions {
            if times > 1 {
                stats.duplicated += 1;
                stats.duplicated_executions += times - 1;
                if samples.len() < DUPLICATE_SAMPLES {
                    samples.push(DuplicatedTransfer {
                        account: account.clone(),
                        recipient: recipient.clone(),
                        amount: *amount,
                        times,
                    });
                }
            }
        }
        samples.sort_by_key(|s| s.amount);
        stats.duplicated_samples = samples;
        stats
    }
}

/// Why a transfer was refused; its `Display` is the answer's message.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("{0}")]
    Invalid(String),
    #[error("this idempotency key was used with other arguments")]
    KeyReused,
    #[error("the fake bank holds as many keys and transfers as it may ({0}); start a new one")]
    Full(usize),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = match self {
            Self::Invalid(_) => StatusCode::BAD_REQUEST,
            Self::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Full(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        (status, Json(serde_json::json!({"error": self.to_string()}))).into_response()
    }
}

fn check(request: &TransferRequest) -> Result<(), Refusal> {
    let fields = [
        ("account", Some(&request.account)),
        ("recipient", Some(&request.recipient)),
        ("idempotency_key", request.idempotency_key.as_ref()),
    ];
    for (name, value) in fields {
        match value {
            Some(value) if value.is_empty() => {
                return Err(Refusal::Invalid(format!("{name} is empty")));
            }
            Some(value) if value.len() > MAX_FIELD_BYTES => {
                return Err(Refusal::Invalid(format!(
                    "{name} is over {MAX_FIELD_BYTES} bytes"
                )));
            }
            _ => {}
        }
    }
    if request.amount <= 0 {
        return Err(Refusal::Invalid(
            "amount must be a positive number of cents".to_owned(),
        ));
    }
    Ok(())
}

/// What a request turned into under the lock: book it now, or wait for the first one.
enum Step {
    Book(u64, Option<watch::Sender<Option<TransferReceipt>>>),
    Replay(Settled),
}

async fn transfer(
    State(books): State<Arc<Books>>,
    Json(request): Json<TransferRequest>,
) -> Response {
    let step = {
        let mut guard = books.lock();
        // Through a plain reference, so that the key table and the counters borrow apart.
        let ledger = &mut *guard;
        if let Err(refusal) = check(&request) {
            ledger.stats.refused += 1;
            return refusal.into_response();
        }
        let max = books.settings.max_entries;
        let key_transfer = (
            request.account.clone(),
            request.recipient.clone(),
            request.amount,
        );
        let full = |ledger: &Ledger, new_key: bool| {
            (new_key && ledger.keys.len() >= max)
                || (!ledger.executions.contains_key(&key_transfer)
                    && ledger.executions.len() >= max)
        };
        match &request.idempotency_key {
            Some(key) => {
                if let Some((first, settled, times)) = ledger.keys.get_mut(key) {
                    if *first != request {
                        ledger.stats.refused += 1;
                        return Refusal::KeyReused.into_response();
                    }
                    let settled = settled.clone();
                    *times += 1;
                    if *times == 2 {
                        ledger.stats.keys_repeated += 1;
                    }
                    ledger.stats.requested += 1;
                    ledger.stats.duplicate_attempts += 1;
                    Step::Replay(settled)
                } else if full(ledger, true) {
                    ledger.stats.refused += 1;
                    return Refusal::Full(max).into_response();
                } else {
                    let (sender, settled) = watch::channel(None);
                    ledger
                        .keys
                        .insert(key.clone(), (request.clone(), settled, 1));
                    ledger.stats.requested += 1;
                    ledger.next_id += 1;
                    Step::Book(ledger.next_id, Some(sender))
                }
            }
            None if full(ledger, false) => {
                ledger.stats.refused += 1;
                return Refusal::Full(max).into_response();
            }
            None => {
                ledger.stats.requested += 1;
                ledger.stats.without_key += 1;
                ledger.next_id += 1;
                Step::Book(ledger.next_id, None)
            }
        }
    };
    match step {
        Step::Book(id, sender) => {
            // Booked in a task of its own: a client hanging up does not cancel a transfer.
            let books = Arc::clone(&books);
            let booking = tokio::spawn(async move {
                tokio::time::sleep(books.settings.delay).await;
                let receipt = TransferReceipt {
                    transfer_id: id,
                    status: "executed".to_owned(),
                    account: request.account.clone(),
                    recipient: request.recipient.clone(),
                    amount: request.amount,
                };
                {
                    let mut ledger = books.lock();
                    ledger.stats.executed += 1;
                    *ledger
                        .executions
                        .entry((request.account, request.recipient, request.amount))
                        .or_default() += 1;
                }
                if let Some(sender) = sender {
                    sender.send_replace(Some(receipt.clone()));
                }
                receipt
            });
            match booking.await {
                Ok(receipt) => Json(receipt).into_response(),
                Err(error) => {
                    tracing::warn!(error = %crewline::types::ErrorChain(&error), "a booking task failed");
                    StatusCode::INTERNAL_SERVER_ERROR.into_response()
                }
            }
        }
        Step::Replay(mut settled) => {
            let Ok(result) = settled.wait_for(Option::is_some).await.map(|r| r.clone()) else {
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            };
            let mut response = match result {
                Some(receipt) => Json(receipt).into_response(),
                None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            };
            response.headers_mut().insert(
                HeaderName::from_static(REPLAYED_HEADER),
                HeaderValue::from_static("true"),
            );
            response
        }
    }
}

async fn stats(State(books): State<Arc<Books>>) -> Json<BankStats> {
    Json(books.lock().stats())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.1 request on a fresh connection: (status, body).
    async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: bank\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let status = answer[9..12].parse().unwrap();
        let body = answer
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        (status, body)
    }

    fn transfer_body(amount: i64, key: Option<&str>) -> String {
        serde_json::to_string(&TransferRequest {
            account: "caller".to_owned(),
            recipient: "Alice".to_owned(),
            amount,
            idempotency_key: key.map(str::to_owned),
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_repeated_key_returns_the_first_result_and_moves_money_once() {
        let bank = FakeBank::new()
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let body = transfer_body(5_001, Some("call-1:transfer"));
        let (status, first) = http(bank.addr(), "POST", "/transfers", &body).await;
        assert_eq!(status, 200, "{first}");
        let (status, again) = http(bank.addr(), "POST", "/transfers", &body).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(first, again, "the replay is the first result");
        let stats = bank.stats();
        assert_eq!(stats.requested, 2);
        assert_eq!(stats.executed, 1);
        assert_eq!(stats.duplicate_attempts, 1);
        assert_eq!(stats.duplicated, 0);
        let (status, served) = http(bank.addr(), "GET", "/stats", "").await;
        assert_eq!(status, 200);
        let served: BankStats = serde_json::from_str(&served).unwrap();
        assert_eq!(served, stats);
    }

    #[tokio::test]
    async fn the_same_transfer_without_a_key_is_counted_as_duplicated() {
        let bank = FakeBank::new()
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        for _ in 0..2 {
            let (status, _) =
                http(bank.addr(), "POST", "/transfers", &transfer_body(777, None)).await;
            assert_eq!(status, 200);
        }
        let (status, _) = http(bank.addr(), "POST", "/transfers", &transfer_body(778, None)).await;
        assert_eq!(status, 200);
        let stats = bank.stats();
        assert_eq!(stats.executed, 3);
        assert_eq!(stats.distinct_executed, 2);
        assert_eq!(stats.duplicated, 1);
        assert_eq!(stats.duplicated_samples[0].amount, 777);
        assert_eq!(stats.duplicated_samples[0].times, 2);
    }

    #[tokio::test]
    async fn a_key_reused_with_other_arguments_is_refused() {
        let bank = FakeBank::new()
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let (status, _) = http(
            bank.addr(),
            "POST",
            "/transfers",
            &transfer_body(1, Some("k")),
        )
        .await;
        assert_eq!(status, 200);
        let (status, body) = http(
            bank.addr(),
            "POST",
            "/transfers",
            &transfer_body(2, Some("k")),
        )
        .await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(bank.stats().executed, 1);
        assert_eq!(bank.stats().refused, 1);
    }

    #[tokio::test]
    async fn a_full_bank_refuses_new_keys_and_keeps_the_old_ones() {
        let bank = FakeBank::new()
            .with_max_entries(1)
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let (status, _) = http(
            bank.addr(),
            "POST",
            "/transfers",
            &transfer_body(1, Some("a")),
        )
        .await;
        assert_eq!(status, 200);
        let (status, _) = http(
            bank.addr(),
            "POST",
            "/transfers",
            &transfer_body(2, Some("b")),
        )
        .await;
        assert_eq!(status, 503);
        let (status, _) = http(
            bank.addr(),
            "POST",
            "/transfers",
            &transfer_body(1, Some("a")),
        )
        .await;
        assert_eq!(status, 200, "a key already held is still answered");
        assert_eq!(bank.stats().executed, 1);
    }

    #[tokio::test]
    async fn a_client_that_hangs_up_mid_booking_does_not_cancel_the_transfer() {
        let bank = FakeBank::new()
            .with_delay(Duration::from_millis(200))
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let body = transfer_body(4_242, Some("hang-up"));
        let mut stream = tokio::net::TcpStream::connect(bank.addr()).await.unwrap();
        let request = format!(
            "POST /transfers HTTP/1.1\r\nhost: bank\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(stream);
        // The retry with the same key waits for the first booking and gets its result.
        let (status, _) = http(bank.addr(), "POST", "/transfers", &body).await;
        assert_eq!(status, 200);
        let stats = bank.stats();
        assert_eq!(stats.executed, 1);
        assert_eq!(stats.duplicate_attempts, 1);
    }

    #[tokio::test]
    async fn a_malformed_transfer_is_refused() {
        let bank = FakeBank::new()
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let (status, _) = http(bank.addr(), "POST", "/transfers", &transfer_body(0, None)).await;
        assert_eq!(status, 400);
        let long = "k".repeat(MAX_FIELD_BYTES + 1);
        let (status, _) = http(
            bank.addr(),
            "POST",
            "/transfers",
            &transfer_body(5, Some(&long)),
        )
        .await;
        assert_eq!(status, 400);
        let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(MAX_BODY_BYTES));
        let (status, _) = http(bank.addr(), "POST", "/transfers", &huge).await;
        assert_eq!(status, 413);
        assert_eq!(bank.stats().executed, 0);
    }
}
