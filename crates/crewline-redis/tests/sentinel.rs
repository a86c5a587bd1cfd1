//! High availability through Redis Sentinel, on loopback: one primary, one replica and three
//! sentinels (`redis-server --sentinel`); crewline connects with a `redis+sentinel://` URL.
//! The primary is killed with SIGKILL, Sentinel promotes the replica, and the store goes on on
//! the new primary without a restart, every task written before the kill (and acknowledged by
//! the replica: replication is asynchronous, docs/deploying.md) still there.
//!
//! Skipped with a note where `redis-server` is not installed (unless CREWLINE_REQUIRE_REDIS=1).

mod common;

use std::{
    net::{Ipv4Addr, TcpListener},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{AOF_ARGS, RedisServer};
use crewline_redis::RedisConfig;
use crewline_remote::{
    StoreError, TaskStore,
    wire::{CustomTool, TaskStatus, ToolAnswer},
};

/// A `redis-server --sentinel` this test started; killed when dropped.
struct Sentinel {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl Sentinel {
    /// A sentinel watching `primary` as `mymaster`, quick to call it down (1 s).
    fn start(primary: u16) -> Self {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let dir =
            std::env::temp_dir().join(format!("crewline-sentinel-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the sentinel's directory");
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {}\n\
                 sentinel monitor mymaster 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 3000\n\
                 sentinel parallel-syncs mymaster 1\n",
                dir.display()
            ),
        )
        .expect("sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel runs");
        Self { port, dir, child }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `command` run on the server at `url`, or the error.
async fn query<T: redis::FromRedisValue>(url: &str, command: &redis::Cmd) -> redis::RedisResult<T> {
    let client = redis::Client::open(url)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    command.query_async(&mut connection).await
}

/// Polls `check` every 100 ms until it holds, failing the test after `limit`.
async fn until<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_survive_a_sentinel_failover_and_the_store_follows_the_new_primary() {
    let settings = [AOF_ARGS, &["--maxmemory-policy", "noeviction"]].concat();
    let Some(mut primary) = RedisServer::start_with(&settings) else {
        return;
    };
    let primary_port = primary.port().to_string();
    let replica = RedisServer::start_with(
        &[
            settings.as_slice(),
            &["--replicaof", "127.0.0.1", &primary_port],
        ]
        .concat(),
    )
    .expect("the replica starts");
    until(Duration::from_secs(10), "the replica in sync", || async {
        query::<String>(&replica.url(), redis::cmd("INFO").arg("replication"))
            .await
            .is_ok_and(|info| info.contains("master_link_status:up"))
    })
    .await;
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(primary.port())).collect();
    for sentinel in &sentinels {
        // Each knows the replica and the two other sentinels (they meet through the primary).
        until(
            Duration::from_secs(20),
            "the sentinels to know each other",
            || async {
                let replicas: redis::RedisResult<Vec<redis::Value>> = query(
                    &sentinel.url(),
                    redis::cmd("SENTINEL").arg("replicas").arg("mymaster"),
                )
                .await;
                let peers: redis::RedisResult<Vec<redis::Value>> = query(
                    &sentinel.url(),
                    redis::cmd("SENTINEL").arg("sentinels").arg("mymaster"),
                )
                .await;
                replicas.is_ok_and(|r| r.len() == 1) && peers.is_ok_and(|p| p.len() == 2)
            },
        )
        .await;
    }
    let url = format!(
        "redis+sentinel://{}/mymaster",
        sentinels
            .iter()
            .map(|sentinel| format!("127.0.0.1:{}", sentinel.port))
            .collect::<Vec<_>>()
            .join(",")
    );
    let store = RedisConfig::new(&url)
        .connect()
        .await
        .expect("connected through Sentinel");

    // A call on another replica waits for a tool's answer across the failover.
    let other = RedisConfig::new(&url)
        .connect()
        .await
        .expect("a second replica through Sentinel");
    let asked = store
        .create("a", None, vec![tool_t()])
        .await
        .expect("create");
    other.attach(&asked.id).await.expect("attach");
    let event = other
        .emit_tool_call(&asked.id, "t", serde_json::json!({}))
        .await
        .expect("emit");
    let waiter = {
        let (other, id, event) = (other.clone(), asked.id.clone(), event.id.clone());
        tokio::spawn(async move { other.wait_answer(&id, &event).await })
    };

    let mut ids = Vec::new();
    for i in 0..20 {
        let task = store
            .create("a", Some(format!("task {i}")), Vec::new())
            .await
            .expect("create");
        if i % 2 == 0 {
            store.attach(&task.id).await.expect("attach");
        }
        ids.push(task.id);
    }
    // Replication is asynchronous: what the primary acknowledged and the replica had not yet
    // copied is lost in a failover (docs/deploying.md). WAIT shows the replica has it all.
    let copied: i64 = query(&primary.url(), redis::cmd("WAIT").arg(1).arg(2000))
        .await
        .expect("WAIT");
    assert_eq!(copied, 1, "the replica acknowledged the writes");

    primary.stop(); // SIGKILL
    let killed = Instant::now();
    // Operations fail while Sentinel calls the primary down and promotes the replica (about
    // down-after-milliseconds plus an election), then go to the new primary.
    let mut failed = 0;
    let after = loop {
        match store
            .create("a", Some("after".to_owned()), Vec::new())
            .await
        {
            Ok(task) => break task,
            // A command that may have reached the dying primary, or one it refused at once.
            Err(StoreError::Backend(_) | StoreError::Unreachable(_)) => {
                failed += 1;
                assert!(
                    killed.elapsed() < Duration::from_secs(30),
                    "the store did not reach the new primary within 30 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(other) => panic!("not a Redis error: {other:?}"),
        }
    };
    eprintln!(
        "the store wrote to the new primary {:?} after the old one was killed ({failed} \
         operations failed meanwhile)",
        killed.elapsed()
    );
    let role: String = query(&replica.url(), redis::cmd("INFO").arg("replication"))
        .await
        .expect("INFO");
    assert!(role.contains("role:master"), "the replica was promoted");

    for (i, id) in ids.iter().enumerate() {
        let task = store.get(id).await.expect("every task is still there");
        assert_eq!(task.task.as_deref(), Some(format!("task {i}").as_str()));
        let expected = if i % 2 == 0 {
            TaskStatus::Running
        } else {
            TaskStatus::Waiting
        };
        assert_eq!(task.status, expected, "task {i} kept its status");
    }
    store
        .attach(&after.id)
        .await
        .expect("and the new task runs");

    // The answer, given on the new primary, reaches the call waiting on the other replica:
    // its wake-up subscription followed the failover too.
    store
        .answer(
            &asked.id,
            &event.id,
            ToolAnswer::ok(serde_json::json!("sunny")),
        )
        .await
        .expect("answer");
    let answer = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiting call hears the answer")
        .expect("the waiter")
        .expect("an answer");
    assert_eq!(answer.output, serde_json::json!("sunny"));
}

fn tool_t() -> CustomTool {
    CustomTool {
        name: "t".to_owned(),
        description: "A tool.".to_owned(),
        inputs: serde_json::json!({"type": "object"}),
        output: String::new(),
        timeout_ms: None,
    }
}
