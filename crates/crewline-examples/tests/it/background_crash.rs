//! A background tool across a crash (issue 36): a restaurant line books a table in the
//! background (`#[function_tool(background)]`, as `examples/slow_booking.rs` does), and the
//! booking pays its deposit at a fake bank outside the replicas, which counts every payment
//! that reaches it. The call's replica is killed with SIGKILL, and the platform reconnects the
//! call to another replica process (same call id, the conversation so far), where the caller
//! asks for the booking again:
//!
//! - killed while the booking runs (its payment reached the bank, the bank still books it):
//!   the booking is not run again, and the model reads `outcome_unknown`, so the caller hears
//!   it may or may not have gone through, never a second payment;
//! - killed after it landed and was told: not run again, and the model reads `already_done`.
//!
//! The replicas share one real `redis-server` (the calls' checkpoints, which keep the
//! background calls started, written before each starts). Each replica is this test binary
//! run again as a child process ([`replica_process`]). Without `redis-server` the tests pass
//! with a note.

// A test: a failed step should panic and fail it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use crewline::{
    CallStore, Checkpoint,
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    types::{Message, Role},
};
use crewline_examples::bank_support::{BANK_URL_VARIABLE, HttpBank};
use crewline_redis::{RedisCheckpoints, RedisConfig};
use crewline_server::{CrewServer, call_store_from_env};
use crewline_testkit::{
    bank::{FakeBank, RunningBank},
    platform::{CrewFrame, PlatformClient, ToolOutcome, TurnSummary},
};
use serde_json::json;

use crate::replicas::{Redis, Replica, WAIT, say};

/// Set in a child process of this test binary: it is a replica.
const REPLICA_VARIABLE: &str = "CREWLINE_TEST_BOOKING_REPLICA";
/// Set in a child process: the scripted model's pause between chunks, in milliseconds.
const CHUNK_DELAY_VARIABLE: &str = "CREWLINE_TEST_BOOKING_CHUNK_DELAY_MS";
/// The key prefix the replicas and the test share.
const PREFIX: &str = "background-crash:";
/// The deposit a booking for two pays, in cents.
const DEPOSIT: i64 = 2_000;
/// What the model says when told that the booking landed.
const BOOKED: &str = "Your table for 2 at 8 pm is booked.";
/// What the model says when the booking's outcome is not known.
const UNSURE: &str = "I can't tell whether that booking went through; let me check for you.";
/// What the model says when the booking already ran.
const ALREADY: &str = "That booking was already made earlier in this call.";

/// The restaurant's tools: the booking pays its deposit at the bank.
struct Restaurant {
    bank: HttpBank,
}

#[tools]
impl Restaurant {
    /// Book a table for tonight at 8 pm, paying its deposit. Runs in the background.
    ///
    /// # Arguments
    /// * `people` - How many people
    #[function_tool(background, timeout_ms = 60000)]
    async fn book_table(&self, people: u32) -> Result<String, ToolError> {
        // No idempotency key: every run that reaches the bank pays, so the bank's count is
        // the count of runs.
        self.bank
            .transfer("caller", "restaurant", DEPOSIT, None)
            .await
            .map_err(|error| ToolError::new(format!("the deposit failed: {error}")))?;
        Ok(format!("booked: a table for {people} at 8 pm"))
    }
}

/// The scripted model: books on "book", and answers each status the booking may read.
fn restaurant_model() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| match request.messages.last() {
        Some(message)
            if message.role() == Role::System
                && message.text().is_some_and(|text| text.contains("booked:")) =>
        {
            Reply::text(BOOKED)
        }
        Some(Message::Tool { content, .. }) => {
            Reply::text(if content.contains("outcome_unknown") {
                UNSURE
            } else if content.contains("already_done") {
                ALREADY
            } else {
                "I'm booking it now. Anything else while I do?"
            })
        }
        _ if ScriptedLlm::last_user_text(request)
            .is_some_and(|said| said.to_lowercase().contains("book")) =>
        {
            Reply::tool_call("book_table", json!({"people": 2}))
        }
        _ => Reply::text("I can book you a table for tonight."),
    })
}

/// Not a test on its own: in a child process started by a [`Replica`] (the variable set),
/// serves the restaurant line (the bank at `CREWLINE_BANK_URL`, the calls' checkpoints in
/// the Redis at `CREWLINE_REDIS_URL`) on a free loopback port, prints the port, and runs
/// until killed.
#[test]
fn replica_process() {
    if std::env::var_os(REPLICA_VARIABLE).is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async move {
        let url = std::env::var(BANK_URL_VARIABLE).expect("the bank's URL");
        let bank = HttpBank::new(&url).expect("a client");
        let millis = std::env::var(CHUNK_DELAY_VARIABLE)
            .ok()
            .and_then(|millis| millis.parse().ok())
            .unwrap_or(5);
        let model = restaurant_model().with_chunk_delay(Duration::from_millis(millis));
        let agent = Agent::builder(model)
            .name("restaurant")
            .prompt("You are a restaurant's phone line.")
            .tools(Restaurant { bank })
            .build()
            .expect("the agent");
        let server = CrewServer::new(agent).allow_unauthenticated();
        let server = call_store_from_env(server).await.expect("the call store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        println!("PORT={port}");
        server.serve(listener).await.expect("served");
    });
}

/// A replica serving the restaurant line, its model speaking a chunk every `chunk_delay`.
fn replica(redis: &Redis, bank: &RunningBank, chunk_delay: Duration) -> Replica {
    Replica::start(
        "background_crash::replica_process",
        &[
            (REPLICA_VARIABLE, "1".to_owned()),
            (CHUNK_DELAY_VARIABLE, chunk_delay.as_millis().to_string()),
            ("CREWLINE_REDIS_URL", redis.url()),
            ("CREWLINE_REDIS_PREFIX", PREFIX.to_owned()),
            (BANK_URL_VARIABLE, bank.url()),
        ],
    )
}

/// The platform's connection for the phone call `call_id` to `replica`.
async fn phone_call(replica: &Replica, call_id: &str) -> PlatformClient {
    replica
        .call(
            call_id,
            Some(crewline::protocol::ConversationType::TelephonyInbound),
        )
        .await
}

/// The `status` the turn's only tool call answered with.
fn status(turn: &TurnSummary) -> String {
    assert_eq!(turn.tools.len(), 1, "{:?}", turn.tools);
    match &turn.tools[0].outcome {
        ToolOutcome::Ok(response) => response["status"].as_str().unwrap_or_default().to_owned(),
        other => format!("{other:?}"),
    }
}

/// Waits until `check` holds of the bank's counts.
async fn until_the_bank(bank: &RunningBank, what: &str, check: impl Fn(u64, u64) -> bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        let stats = bank.stats();
        if check(stats.requested, stats.executed) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the bank never saw {what}: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the call's checkpoint in Redis holds `key` (a landing is written after it is
/// told, off the call's path).
async fn until_checkpointed(redis: &Redis, call_id: &str, key: &str) {
    let connection = RedisConfig::new(redis.url())
        .prefix(PREFIX)
        .open()
        .await
        .expect("connected");
    let checkpoints = RedisCheckpoints::new(connection);
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(json) = checkpoints.load(call_id).await.expect("load") {
            let checkpoint = Checkpoint::from_json(&json).expect("readable");
            if checkpoint.nodes.contains_key(key) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{key} was never checkpointed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booking_whose_replica_is_killed_while_it_runs_is_not_run_again() {
    let Some(redis) = Redis::start() else {
        return;
    };
    // The bank takes its time: the kill falls while the payment is being booked there, and
    // the bank books it anyway (a real one would too), so the booking half-ran.
    let bank = FakeBank::new()
        .with_delay(Duration::from_secs(2))
        .spawn(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("the fake bank");
    let call_id = "call-booking-crash-1";

    // A speaks slowly, so the kill falls before its turn ends (the turn's own checkpoint
    // write): only a record written before the booking started survives it.
    let a = replica(&redis, &bank, Duration::from_millis(400));
    let mut on_a = phone_call(&a, call_id).await;
    let asked = on_a
        .user_turn("Please book a table for 2 tonight.")
        .expect("turn sent");
    until_the_bank(&bank, "the booking's payment", |requested, _| {
        requested == 1
    })
    .await;
    a.kill();
    drop(asked);
    drop(on_a);

    // The platform reconnects the call to B; the caller heard nothing back and asks again.
    let b = replica(&redis, &bank, Duration::from_millis(5));
    let mut on_b = phone_call(&b, call_id).await;
    on_b.set_messages(vec![
        json!({"role": "user", "content": "Please book a table for 2 tonight."}),
    ]);
    let again = say(&mut on_b, "Hello? Did you book the table for 2?").await;

    assert_eq!(status(&again), "outcome_unknown");
    assert_eq!(again.text, UNSURE);
    // The bank books A's payment, and only that one.
    until_the_bank(&bank, "A's payment booked", |_, executed| executed == 1).await;
    let stats = bank.stats();
    assert_eq!(stats.requested, 1, "the booking ran twice: {stats:?}");
    assert_eq!(stats.duplicated, 0, "{stats:?}");

    // Asked once more on B, it is still not run.
    let more = say(&mut on_b, "Please just book it.").await;
    assert_eq!(status(&more), "outcome_unknown");
    assert_eq!(bank.stats().requested, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booking_that_landed_before_its_replica_is_killed_is_not_run_again() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let bank = FakeBank::new()
        .spawn(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("the fake bank");
    let call_id = "call-booking-crash-2";

    let a = replica(&redis, &bank, Duration::from_millis(5));
    let mut on_a = phone_call(&a, call_id).await;
    let started = say(&mut on_a, "Please book a table for 2 tonight.").await;
    assert_eq!(status(&started), "started");
    // It lands, and the caller is told.
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let frame = on_a
            .recv_idle(left)
            .await
            .expect("frames")
            .expect("the booking was told in time");
        if let CrewFrame::Speak { text } = frame.frame {
            assert_eq!(text, BOOKED);
            break;
        }
    }
    until_checkpointed(&redis, call_id, "crewline.background_landed").await;
    a.kill();

    let b = replica(&redis, &bank, Duration::from_millis(5));
    let mut on_b = phone_call(&b, call_id).await;
    let mut heard = on_a.messages().to_vec();
    heard.push(json!({"role": "assistant", "content": BOOKED}));
    on_b.set_messages(heard);
    drop(on_a);
    let again = say(
        &mut on_b,
        "Sorry, the line dropped. Can you book the table?",
    )
    .await;

    assert_eq!(status(&again), "already_done");
    assert_eq!(again.text, ALREADY);
    let stats = bank.stats();
    assert_eq!(stats.requested, 1, "the booking ran twice: {stats:?}");
    assert_eq!(stats.executed, 1, "{stats:?}");
}
