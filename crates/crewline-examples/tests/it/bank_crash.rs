//! `bank_support` across a crash (issue 31): a call's replica is killed with SIGKILL between
//! the agent's "Shall I transfer $50.00 to Alice?" and the caller's "yes", and the platform
//! reconnects the call to another replica process (same call id, the conversation so far). The
//! replicas share one real `redis-server` (claims, approvals, the ledger and the calls'
//! checkpoints) and a fake bank outside them: the transfer is booked exactly once, and the
//! caller is not asked again.
//!
//! Each replica is this test binary run again as a child process ([`replica_process`]), serving
//! the crew as `examples/bank_support.rs` does. Without `redis-server` the tests pass with a
//! note.

// A test: a failed step should panic and fail it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use crewline::{CallStore, Checkpoint, SessionSetup, llm::LlmClient};
use crewline_examples::bank_support as bank;
use crewline_redis::{RedisCheckpoints, RedisConfig};
use crewline_server::CrewServer;
use crewline_server::call_store_from_env;
use crewline_testkit::{
    bank::{FakeBank, RunningBank},
    platform::{CrewFrame, PlatformClient},
};
use serde_json::json;

use crate::replicas::{Redis, Replica, WAIT, say};

/// Set in a child process of this test binary: it is a replica.
const REPLICA_VARIABLE: &str = "CREWLINE_TEST_BANK_REPLICA";
/// Set in a child process: the scripted model's pause between chunks, in milliseconds.
const CHUNK_DELAY_VARIABLE: &str = "CREWLINE_TEST_BANK_CHUNK_DELAY_MS";
/// The key prefix the replicas and the test share.
const PREFIX: &str = "bank-crash:";

/// Not a test on its own: in a child process started by a [`Replica`] (the variable set),
/// serves the bank crew as `examples/bank_support.rs` does (transfers booked by the bank at
/// `CREWLINE_BANK_URL`; claims, approvals, the ledger and the calls' checkpoints in the Redis
/// at `CREWLINE_REDIS_URL`) on a free loopback port, prints the port, and runs until killed.
#[test]
fn replica_process() {
    if std::env::var_os(REPLICA_VARIABLE).is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async move {
        let url = std::env::var(bank::BANK_URL_VARIABLE).expect("the bank's URL");
        let books = bank::Bank::demo().with_http(bank::HttpBank::new(&url).expect("a client"));
        let shared = bank::BankShared::from_env(books).await.expect("Redis");
        let mut model = bank::scripted_bank_model();
        if let Some(millis) = std::env::var(CHUNK_DELAY_VARIABLE)
            .ok()
            .and_then(|millis| millis.parse().ok())
        {
            model = model.with_chunk_delay(Duration::from_millis(millis));
        }
        let llm: Arc<dyn LlmClient> = Arc::new(model);
        let server = CrewServer::new(move |setup: SessionSetup| {
            let crew = bank::bank_crew(&setup, llm.clone(), &shared);
            async move { crew }
        })
        .allow_unauthenticated();
        let server = call_store_from_env(server).await.expect("the call store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        println!("PORT={port}");
        server.serve(listener).await.expect("served");
    });
}

/// A replica serving the bank crew, its model speaking a chunk every 5 ms.
fn replica(redis: &Redis, bank: &RunningBank) -> Replica {
    replica_speaking_every(redis, bank, Duration::from_millis(5))
}

/// A replica whose model speaks a chunk every `chunk_delay`.
fn replica_speaking_every(redis: &Redis, bank: &RunningBank, chunk_delay: Duration) -> Replica {
    Replica::start(
        "bank_crash::replica_process",
        &[
            (REPLICA_VARIABLE, "1".to_owned()),
            (CHUNK_DELAY_VARIABLE, chunk_delay.as_millis().to_string()),
            ("CREWLINE_REDIS_URL", redis.url()),
            ("CREWLINE_REDIS_PREFIX", PREFIX.to_owned()),
            (bank::BANK_URL_VARIABLE, bank.url()),
        ],
    )
}

/// The platform's connection for the phone call `call_id` to `replica`.
async fn phone_call(replica: &Replica, call_id: &str) -> PlatformClient {
    replica.call(call_id, None).await
}

/// Waits until the call's checkpoint in Redis holds the question the agent asked (written
/// after the turn's end, off its path): what a caller's few seconds of thinking give it.
async fn until_the_question_is_checkpointed(redis: &Redis, call_id: &str) {
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
            if checkpoint
                .nodes
                .get(bank::ASKED_CHECKPOINT_KEY)
                .is_some_and(|asked| asked.as_array().is_some_and(|ids| !ids.is_empty()))
            {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the question was never checkpointed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yes_after_the_asking_replica_is_killed_sends_once_and_is_not_asked_again() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let bank = FakeBank::new()
        .spawn(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("the fake bank");
    let call_id = "call-bank-crash-1";

    let a = replica(&redis, &bank);
    let mut on_a = phone_call(&a, call_id).await;
    let ask = say(&mut on_a, "Please send $50 to Alice.").await;
    assert_eq!(ask.text, "Shall I transfer $50.00 to Alice?");
    until_the_question_is_checkpointed(&redis, call_id).await;

    // Replica A dies while the caller thinks; the platform reconnects the call to B with the
    // same call id and the conversation so far, and the caller says yes.
    a.kill();
    let b = replica(&redis, &bank);
    let mut on_b = phone_call(&b, call_id).await;
    on_b.set_messages(on_a.messages().to_vec());
    drop(on_a);
    let confirm = say(&mut on_b, "Yes, go ahead.").await;

    assert!(
        !confirm.text.contains("Shall I"),
        "the caller was asked again: {}",
        confirm.text
    );
    assert_eq!(confirm.text, "Done: I've sent $50.00 to Alice.");
    assert_eq!(confirm.tool_events(), ["tool_call_start", "tool_call_end"]);
    let stats = bank.stats();
    assert_eq!(stats.executed, 1, "{stats:?}");
    assert_eq!(stats.duplicated, 0, "{stats:?}");

    // The decision was used up: another yes moves nothing more.
    let again = say(&mut on_b, "yes").await;
    assert!(again.tools.is_empty(), "{:?}", again.tools);
    assert_eq!(bank.stats().executed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yes_after_a_kill_mid_question_approves_nothing_the_caller_did_not_hear_asked() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let bank = FakeBank::new()
        .spawn(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("the fake bank");
    let call_id = "call-bank-crash-2";

    // A speaks slowly, so the kill falls while it asks, after the transfer was parked.
    let a = replica_speaking_every(&redis, &bank, Duration::from_millis(400));
    let mut on_a = phone_call(&a, call_id).await;
    let mut ask = on_a
        .user_turn("Please send $50 to Alice.")
        .expect("turn sent");
    loop {
        let frame = tokio::time::timeout(WAIT, ask.next())
            .await
            .expect("a frame in time")
            .expect("frame")
            .expect("the turn goes on");
        if matches!(frame.frame, CrewFrame::ToolError(_)) {
            break;
        }
    }
    a.kill();
    drop(ask);
    drop(on_a);

    // The caller heard no question; their "yes" on B answers something else.
    let b = replica(&redis, &bank);
    let mut on_b = phone_call(&b, call_id).await;
    on_b.set_messages(vec![
        json!({"role": "user", "content": "Please send $50 to Alice."}),
    ]);
    let hello = say(&mut on_b, "Yes, hello? Are you still there?").await;

    assert_eq!(
        bank.stats().executed,
        0,
        "a transfer ran on a yes to a question never heard in full: {}",
        hello.text
    );
    assert!(!hello.text.contains("sent"), "{}", hello.text);
}
