//! The model providers' circuit breakers shared through a real `redis-server`: two
//! `FallbackLlm`s on one Redis and prefix are two replicas; a provider one of them found dead
//! is skipped by the other without a failure of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use common::RedisServer;
use crewline::llm::{
    BreakerConfig, BreakerState, ChatRequest, FallbackLlm, FinishReason, LlmClient, LlmError,
    LlmStream, StreamItem, collect,
};
use crewline_core::Message;
use crewline_redis::{RedisBreakers, RedisConfig};
use futures::StreamExt;

/// Generous: only reached when a test is about to fail.
const PATIENCE: Duration = Duration::from_secs(10);

/// A provider that refuses every connection, counting the attempts.
#[derive(Default)]
struct Dead {
    requests: AtomicUsize,
}

#[async_trait]
impl LlmClient for Dead {
    async fn stream_chat(&self, _request: ChatRequest) -> Result<LlmStream, LlmError> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        Err(LlmError::Connect("connection refused".into()))
    }
}

/// A provider that answers "backup".
struct Backup;

#[async_trait]
impl LlmClient for Backup {
    async fn stream_chat(&self, _request: ChatRequest) -> Result<LlmStream, LlmError> {
        Ok(futures::stream::iter([
            Ok(StreamItem::Text("backup".into())),
            Ok(StreamItem::Finish(FinishReason::Stop)),
        ])
        .boxed())
    }
}

async fn replica(url: &str, dead: &Arc<Dead>) -> FallbackLlm {
    let connection = RedisConfig::new(url)
        .prefix("breakers:")
        .open()
        .await
        .expect("connected to the test's redis-server");
    FallbackLlm::builder()
        .provider("primary", Arc::clone(dead) as Arc<dyn LlmClient>)
        .provider("backup", Arc::new(Backup))
        .breaker(BreakerConfig {
            consecutive_failures: 3,
            cool_down: Duration::from_secs(30),
            ..BreakerConfig::default()
        })
        .shared_breakers(Arc::new(RedisBreakers::new(connection)))
        .build()
        .unwrap()
}

async fn ask(llm: &FallbackLlm) -> String {
    let request = ChatRequest::new(vec![Message::user("hi")]);
    collect(llm.stream_chat(request).await.unwrap())
        .await
        .unwrap()
        .content
}

#[tokio::test]
async fn a_circuit_one_replica_opened_is_skipped_by_the_other() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let dead = Arc::new(Dead::default());
    let a = replica(&server.url(), &dead).await;
    let b = replica(&server.url(), &dead).await;
    // B's first turn starts its reading of the shared circuits (one failure of its own).
    assert_eq!(ask(&b).await, "backup");
    for _ in 0..3 {
        assert_eq!(ask(&a).await, "backup");
    }
    assert_eq!(a.stats()[0].breaker, BreakerState::Open);
    // The open circuit is written by a task of its own, off the turn's path.
    let keys = tokio::time::timeout(PATIENCE, async {
        loop {
            let keys = server.keys_with_ttl("breakers:breaker:*").await;
            if !keys.is_empty() {
                break keys;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the open circuit reaches Redis");
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        keys[0].1 > 0,
        "the shared circuit expires on its own: {keys:?}"
    );

    tokio::time::timeout(PATIENCE, async {
        while b.stats()[0].breaker != BreakerState::Open {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("B reads the circuit A opened");
    let before = dead.requests.load(Ordering::SeqCst);
    for _ in 0..5 {
        assert_eq!(ask(&b).await, "backup");
    }
    assert_eq!(
        dead.requests.load(Ordering::SeqCst),
        before,
        "B never asks the dead provider"
    );
}
