//! Calls' checkpoints and owners in a real Redis (issue 31): a call taken over by a newer
//! connection on another replica is fenced (its writes refused, its session closed with a
//! reason), and the newer connection resumes the call where it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use common::RedisServer;
use crewline::{
    Crew, SessionSetup,
    crew::OutputNode,
    llm::{ChatRequest, Reply, ScriptedLlm},
    router::{DeterministicRouter, SubAgent},
    session_store::{CallStore, Checkpoint, Fenced},
    types::Message,
};
use crewline_redis::{RedisCheckpoints, RedisConfig};
use crewline_server::CrewServer;
use crewline_testkit::platform::PlatformConfig;
use crewline_testkit::platform::raw::RawSocket;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

async fn checkpoints(server: &RedisServer, lease: Duration) -> RedisCheckpoints {
    let connection = RedisConfig::new(server.url())
        .prefix("t31:")
        .open()
        .await
        .expect("connected");
    RedisCheckpoints::new(connection)
        .lease(lease)
        .ttl(Duration::from_secs(60))
}

#[tokio::test]
async fn a_newer_owner_fences_the_older_and_every_key_expires() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = (
        checkpoints(&server, Duration::from_secs(3)).await,
        checkpoints(&server, Duration::from_secs(3)).await,
    );
    let old = a.claim("c-1").await.expect("claim");
    let mut checkpoint = Checkpoint::default();
    checkpoint.turns = 3;
    let json = checkpoint.to_json().expect("json");
    assert_eq!(
        a.save("c-1", &old, &json).await.expect("save"),
        Fenced::Owner
    );

    // Replica B takes the call over and reads where it was.
    let new = b.claim("c-1").await.expect("claim");
    let loaded = b.load("c-1").await.expect("load").expect("a checkpoint");
    assert_eq!(Checkpoint::from_json(&loaded).expect("readable").turns, 3);

    // A's late write is refused, and A learns it lost.
    assert_eq!(a.save("c-1", &old, "{}").await.expect("save"), Fenced::Lost);
    assert_eq!(a.renew("c-1", &old).await.expect("renew"), Fenced::Lost);
    assert_eq!(b.load("c-1").await.expect("load"), Some(loaded));
    assert_eq!(b.renew("c-1", &new).await.expect("renew"), Fenced::Owner);
    // Another call shares nothing.
    assert_eq!(b.load("c-2").await.expect("load"), None);

    let keys = server.keys_with_ttl("t31:call:*").await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    for (key, ttl) in keys {
        assert!(ttl > 0, "{key} never expires");
    }
}

/// The platform's handshake for a phone call with `call_id`.
fn phone_init(call_id: &str) -> Value {
    json!({
        "type": "system.init",
        "version": "1.0",
        "session_context": {
            "initial_variables": {},
            "conversation_type": "telephonyInbound",
            "caller": {"user_number": "+15550100", "direction": "inbound", "call_id": call_id}
        },
        "output_agent_settings": {"interruptible": true}
    })
}

/// A replica of a collections router (`intake` moves to `resolve` after a completed turn)
/// whose model answers with the active sub-agent's prompt, on `store`.
fn replica(store: RedisCheckpoints) -> CrewServer {
    let llm: Arc<dyn crewline::llm::LlmClient> =
        Arc::new(ScriptedLlm::from_fn(|request: &ChatRequest| {
            let prompt = request
                .messages
                .iter()
                .find_map(|m| match m {
                    Message::System { content } => Some(content.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            Reply::text(prompt)
        }));
    CrewServer::new(move |_setup: SessionSetup| {
        let router = DeterministicRouter::builder("intake", llm.clone())
            .sub_agent(SubAgent::new("intake", "intake"))
            .sub_agent(SubAgent::new("resolve", "resolve"))
            .add_default("intake", "resolve")
            .build()
            .unwrap();
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new("collections", router));
        crew
    })
    .allow_unauthenticated()
    .call_store(store)
}

async fn serve(server: CrewServer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve(listener));
    addr
}

async fn call(addr: SocketAddr, call_id: &str) -> RawSocket {
    let mut config = PlatformConfig::new(format!("ws://{addr}/ws"));
    config.timeouts.connect = WAIT;
    let mut socket = RawSocket::connect(&config)
        .await
        .expect("connect")
        .with_wait(WAIT);
    socket.send_json(&phone_init(call_id)).await.expect("init");
    let frames = socket.recv_until("agent.ready").await.expect("ready");
    assert!(!frames.is_empty());
    socket
}

async fn turn(socket: &mut RawSocket, words: &str) -> String {
    socket
        .send_json(&json!({"type": "system.llm.request", "messages": [{"role": "user", "content": words}]}))
        .await
        .expect("request");
    let frames = socket
        .recv_until("agent.llm.response.end")
        .await
        .expect("a turn");
    frames
        .iter()
        .filter(|f| f["type"] == "agent.llm.response.chunk")
        .filter_map(|f| f["text"].as_str())
        .collect()
}

#[tokio::test]
async fn a_call_taken_over_by_another_replica_resumes_there_and_the_old_session_closes() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let lease = Duration::from_millis(900);
    let a = serve(replica(checkpoints(&redis, lease).await)).await;
    let b = serve(replica(checkpoints(&redis, lease).await)).await;

    let mut on_a = call(a, "call-7").await;
    assert_eq!(turn(&mut on_a, "Hi").await, "intake");
    // Give the checkpointer its write (one per turn, after the turn's end).
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The platform reconnects through the balancer, to replica B, while A still holds the
    // socket (A is frozen, or the platform lost sight of it).
    let mut on_b = call(b, "call-7").await;
    assert_eq!(turn(&mut on_b, "Still there?").await, "resolve");

    // A learns at its next renewal (a third of the lease) and closes with a reason.
    let (frames, close) = tokio::time::timeout(WAIT, on_a.recv_until_close())
        .await
        .expect("A closes in time")
        .expect("frames, then a close frame");
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "agent.error" && f["payload"]["reason"] == "superseded"),
        "{frames:?}"
    );
    let close = close.expect("a close frame");
    assert_eq!(close.code, 4409, "{close:?}");

    // B goes on, where the call was.
    assert_eq!(turn(&mut on_b, "Go on").await, "resolve");
}

/// Waits until call `id`'s checkpoint holds a completed turn (written after the turn's end).
async fn written_after_a_turn(redis: &RedisServer, id: &str) {
    let checkpoints = checkpoints(redis, Duration::from_secs(3)).await;
    for _ in 0..100 {
        if let Some(json) = checkpoints.load(id).await.expect("load")
            && Checkpoint::from_json(&json).expect("readable").turns >= 1
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no checkpoint after the turn");
}

#[tokio::test]
async fn a_call_taken_over_on_another_replica_closes_the_old_session_without_waiting_for_a_renewal()
{
    let Some(redis) = RedisServer::start() else {
        return;
    };
    // Owners renew every 10 minutes: only the takeover notice can close A within the test.
    let lease = Duration::from_secs(30 * 60);
    let a = serve(replica(checkpoints(&redis, lease).await)).await;
    let b = serve(replica(checkpoints(&redis, lease).await)).await;

    let mut on_a = call(a, "call-notice").await;
    assert_eq!(turn(&mut on_a, "Hi").await, "intake");
    written_after_a_turn(&redis, "call-notice").await;

    // The platform reconnects to replica B while A still holds the socket.
    let mut on_b = call(b, "call-notice").await;
    let taken = std::time::Instant::now();

    let (frames, close) = tokio::time::timeout(WAIT, on_a.recv_until_close())
        .await
        .expect("A closes long before its next renewal")
        .expect("frames, then a close frame");
    eprintln!("A closed {:?} after B was ready", taken.elapsed());
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "agent.error" && f["payload"]["reason"] == "superseded"),
        "{frames:?}"
    );
    assert_eq!(close.expect("a close frame").code, 4409);
    assert_eq!(turn(&mut on_b, "Still there?").await, "resolve");
}

#[tokio::test]
async fn a_lost_subscription_makes_every_owner_check_since_a_notice_may_have_been_missed() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = checkpoints(&redis, Duration::from_secs(30 * 60)).await;
    let mut hints = store
        .takeover_hints("call-quiet")
        .expect("Redis sends notices");

    // Redis drops every subscriber (a restart, a network blip): notices sent meanwhile are
    // lost, so once subscribed again every owner is told to look.
    let client = redis::Client::open(redis.url()).expect("url");
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .expect("CLIENT KILL");
    assert!(killed >= 1, "the store's subscription was killed");
    tokio::time::timeout(WAIT, futures::StreamExt::next(&mut hints))
        .await
        .expect("a hint once subscribed again")
        .expect("the hints go on");
}

/// Set in a child process of this test binary: the Redis URL its replica checkpoints to.
const REPLICA_VARIABLE: &str = "CREWLINE_TEST_RESUME_REPLICA_REDIS";

/// Not a test on its own: in a child process started by
/// [`a_call_resumes_in_its_sub_agent_after_its_replica_is_killed`] (the variable set), serves
/// the router crew with Redis checkpoints on a free loopback port, prints the port, and runs
/// until killed.
#[test]
fn replica_process() {
    let Ok(url) = std::env::var(REPLICA_VARIABLE) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async move {
        let connection = RedisConfig::new(url)
            .prefix("t31:")
            .open()
            .await
            .expect("redis");
        let store = RedisCheckpoints::new(connection).lease(Duration::from_secs(3));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        println!("PORT={port}");
        replica(store).serve(listener).await.expect("served");
    });
}

/// A replica in a process of its own; killed (SIGKILL) when dropped.
struct Replica {
    child: Child,
    addr: SocketAddr,
}

impl Replica {
    fn start(redis: &RedisServer) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .args([
                "checkpoint::replica_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(REPLICA_VARIABLE, redis.url())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("a replica process");
        let stdout = child.stdout.take().expect("its stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("the replica printed its port")
                .expect("a line");
            // libtest writes `test replica_process ... ` before it, on the same line.
            if let Some((_, port)) = line.split_once("PORT=") {
                break port.trim().parse::<u16>().expect("a port");
            }
        };
        // The rest of its output is not read: keep the pipe drained so it never blocks.
        std::thread::spawn(move || for _ in lines {});
        Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// SIGKILL: no polite path, nothing flushed.
    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_call_resumes_in_its_sub_agent_after_its_replica_is_killed() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let first = Replica::start(&redis);
    let mut socket = call(first.addr, "call-kill").await;
    assert_eq!(turn(&mut socket, "Hi").await, "intake");
    // The turn moved the router to `resolve`; its checkpoint is written after the turn's end.
    written_after_a_turn(&redis, "call-kill").await;
    first.kill();
    drop(socket);

    // The platform reconnects with the same call id; the balancer sends it to a new process.
    let second = Replica::start(&redis);
    let mut socket = call(second.addr, "call-kill").await;
    assert_eq!(
        turn(&mut socket, "Hello? Are you still there?").await,
        "resolve",
        "the call did not continue in the sub-agent it was in"
    );
}
