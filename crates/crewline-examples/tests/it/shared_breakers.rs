//! Two replicas of an example, each a process of its own started with the examples' flags and
//! `CREWLINE_REDIS_URL` (`ModelArgs::choose`, as every example builds its model): a provider
//! one replica found dead is skipped by the other without a failure of its own; each provider
//! is sent its own key (`--fallback-api-key-env`), and no key reaches the logs.
//!
//! Needs `redis-server` (CI has it); without it the test passes with a note, unless
//! `CREWLINE_REQUIRE_REDIS=1`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::Read,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use clap::Parser;
use crewline::{
    llm::{ChatRequest, LlmClient, ScriptedLlm, collect, fallback::SharedBreakers},
    types::Message,
};
use crewline_redis::{RedisBreakers, RedisConfig};
use crewline_server::ModelArgs;
use crewline_testkit::mock_llm::{
    MockLlm, RunningMockLlm,
    raw::{After, RawReply},
};
use serde_json::json;

use crate::replicas::Redis;

/// Set in a child process: which replica it is (`a` or `b`).
const ROLE_VARIABLE: &str = "CREWLINE_TEST_FALLBACK_REPLICA";
/// The backup provider's key, in the variable `--fallback-api-key-env` names.
const BACKUP_KEY: &str = "sk-backup-test-7d1f";
/// Generous: only reached when the test is about to fail.
const PATIENCE: Duration = Duration::from_secs(20);

/// A child process killed when dropped.
struct Replica(Child);

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A provider that answers 503 to everything.
async fn dead() -> RunningMockLlm {
    MockLlm::raw_fn(|_| RawReply::Status(503, r#"{"error":{"message":"overloaded"}}"#.into()))
        .start()
        .await
        .unwrap()
}

/// The backup: answers "backup." to everything.
async fn backup() -> RunningMockLlm {
    MockLlm::raw_fn(|_| {
        RawReply::chunks(
            &[
                json!({"choices": [{"index": 0, "delta": {"content": "backup."}}]}),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            ],
            After::Done,
        )
    })
    .start()
    .await
    .unwrap()
}

/// Starts replica `role` as a child process of this test binary, its main provider at
/// `primary`, its fallback at `backup`, both on the Redis at `redis`.
fn replica(role: &str, primary: &str, backup: &str, redis: &str) -> Replica {
    let child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "shared_breakers::replica_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_VARIABLE, role)
        .env("OPENAI_API_KEY", format!("sk-main-{role}-test"))
        .env("OPENAI_BASE_URL", primary)
        .env("CREWLINE_TEST_BACKUP_URL", backup)
        .env("CREWLINE_TEST_BACKUP_KEY", BACKUP_KEY)
        .env("CREWLINE_REDIS_URL", redis)
        .env("CREWLINE_REDIS_PREFIX", "shared-breakers-test:")
        .env("RUST_LOG", "info")
        .env_remove("OPENAI_MODEL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the replica starts");
    Replica(child)
}

/// Not a test on its own: in a child process started by [`replica`] (the variable set), builds
/// the model as every example does from its flags and the environment, then: replica `a` asks
/// until its main provider's circuit opens and keeps asking (so it stays open); replica `b`
/// asks once, waits past the shared breakers' poll, asks three more times, and exits with
/// success when every answer came from the backup.
#[test]
fn replica_process() {
    let Ok(role) = std::env::var(ROLE_VARIABLE) else {
        return;
    };
    let _logs = crewline_server::init_logs("info");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async move {
        let backup = std::env::var("CREWLINE_TEST_BACKUP_URL").expect("the backup's URL");
        #[derive(Parser)]
        struct Args {
            #[command(flatten)]
            model: ModelArgs,
        }
        let args = Args::parse_from([
            "replica",
            "--model",
            "main-model",
            "--fallback-base-url",
            &backup,
            "--fallback-model",
            "backup-model",
            "--fallback-api-key-env",
            "CREWLINE_TEST_BACKUP_KEY",
        ]);
        let model = args
            .model
            .choose(|| ScriptedLlm::new([]))
            .await
            .expect("the model");
        assert!(
            model.description.contains("breakers shared"),
            "{}",
            model.description
        );
        let fallback = model.fallback.expect("a fallback chain");
        let ask = || async {
            let request = ChatRequest::new(vec![Message::user("hi")]);
            let answer = collect(model.llm.stream_chat(request).await.expect("a stream"))
                .await
                .expect("an answer");
            assert_eq!(answer.content, "backup.");
            assert_eq!(answer.provider.as_deref(), Some("fallback-1"));
        };
        if role == "a" {
            // Until killed: the primary's circuit opens, and opens again after each probe.
            loop {
                ask().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        ask().await;
        tokio::time::sleep(crewline::llm::fallback::SHARED_BREAKERS_POLL * 3 / 2).await;
        for _ in 0..3 {
            ask().await;
        }
        drop(fallback);
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_one_replica_found_dead_is_skipped_by_the_other_and_each_gets_its_own_key() {
    if std::env::var_os(ROLE_VARIABLE).is_some() {
        return;
    }
    let Some(redis) = Redis::start() else {
        return;
    };
    let (primary_a, primary_b, backup) = (dead().await, dead().await, backup().await);

    let _a = replica("a", &primary_a.base_url(), &backup.base_url(), &redis.url());
    // Replica a's circuit for `primary` reaches Redis.
    let connection = RedisConfig::new(redis.url())
        .prefix("shared-breakers-test:")
        .open()
        .await
        .expect("the test's Redis");
    let breakers = RedisBreakers::new(connection);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let open = breakers.open_for(&["primary".to_owned()]).await.unwrap();
        if open[0].is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica a never opened the circuit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut b = replica("b", &primary_b.base_url(), &backup.base_url(), &redis.url());
    let mut log = String::new();
    let status = tokio::task::spawn_blocking(move || {
        let _ = b.0.stderr.take().expect("piped").read_to_string(&mut log);
        let status = b.0.wait().expect("replica b ends");
        (status, log)
    })
    .await
    .unwrap();
    let (status, log) = status;
    assert!(status.success(), "replica b failed:\n{log}");
    // At most its first turn reached the dead provider (before its first read of the shared
    // circuits); the three after it were sent straight to the backup. On its own it would
    // have asked the dead one every time (its circuit opens after 5 failures).
    assert!(
        primary_b.mock().raw_requests().len() <= 1,
        "replica b asked the dead provider {} times",
        primary_b.mock().raw_requests().len()
    );
    // Each provider got its own key.
    let bearer = |mock: &RunningMockLlm| -> Vec<String> {
        mock.mock()
            .raw_requests()
            .iter()
            .map(|r| r.headers.get("authorization").cloned().unwrap_or_default())
            .collect()
    };
    assert!(
        bearer(&backup)
            .iter()
            .all(|auth| auth == &format!("Bearer {BACKUP_KEY}")),
        "{:?}",
        bearer(&backup)
    );
    let main = bearer(&primary_a);
    assert!(!main.is_empty());
    assert!(
        main.iter().all(|auth| auth == "Bearer sk-main-a-test"),
        "{main:?}"
    );
    // The logs name each provider's key variable, never a key.
    assert!(
        log.contains("CREWLINE_TEST_BACKUP_KEY"),
        "no provider line in:\n{log}"
    );
    for key in [BACKUP_KEY, "sk-main-b-test"] {
        assert!(!log.contains(key), "a key in the logs:\n{log}");
    }
}
