//! `crewline ledger pending`, the binary end to end: it lists exactly the intents with no
//! outcome, from a JSON Lines ledger (a torn last line included) or a Redis stream, and an
//! unreadable source is a clear error and a failing exit status.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::{Ipv4Addr, TcpListener},
    path::PathBuf,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use crewline::tool::executor::ledger::{LedgerEntry, LedgerIntent, LedgerRecord, LedgerSink};
use crewline_redis::{RedisConfig, RedisLedger};
use serde_json::json;

fn crewline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_crewline"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

fn intent(id: &str, cents: u64) -> LedgerIntent {
    LedgerIntent {
        intent_id: id.to_owned(),
        idempotency_key: Some(format!("key-{id}")),
        scope: "call:c1".to_owned(),
        call_id: format!("tc_{id}"),
        tool: "transfer_money".to_owned(),
        arguments: json!({"to": "alice", "cents": cents}),
        timestamp_ms: 1_764_686_400_123,
    }
}

fn outcome(of: &str) -> LedgerRecord {
    LedgerRecord {
        intent_id: Some(of.to_owned()),
        ..serde_json::from_value(json!({
            "call_id": format!("tc_{of}"), "tool": "transfer_money", "arguments": {},
            "outcome": "ok", "error_kind": null, "message": null, "detail": null,
            "latency_us": 1, "approval": null, "cache_hit": false, "timestamp_ms": 2
        }))
        .unwrap()
    }
}

fn temp_path(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "crewline-cli-ledger-{name}-{}-{nanos}.jsonl",
        std::process::id()
    ))
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn pending_lists_the_intents_with_no_outcome_from_a_file_with_a_torn_line() {
    let path = temp_path("file");
    let mut text = Vec::new();
    for entry in [
        LedgerEntry::Intent(intent("int_a", 100)),
        LedgerEntry::Intent(intent("int_b", 5000)),
        LedgerEntry::Outcome(outcome("int_a")),
    ] {
        text.extend(entry.to_json().unwrap());
        text.push(b'\n');
    }
    // The process died writing an outcome.
    text.extend(br#"{"call_id":"tc_int_b","tool":"trans"#);
    std::fs::write(&path, text).unwrap();

    let output = crewline(&["ledger", "pending", "--file", path.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output),
        "2025-12-02T14:40:00.123Z  call:c1/tc_int_b  transfer_money  key=key-int_b  \
         {\"to\":\"alice\",\"cents\":5000}\n"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn an_unreadable_source_is_a_clear_error() {
    let path = temp_path("missing");
    let output = crewline(&["ledger", "pending", "--file", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("could not read the ledger file")
            && stderr.contains(path.to_str().unwrap()),
        "{stderr}"
    );

    // A port nobody listens on: bound and never listening.
    let socket = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = socket.local_addr().unwrap().port();
    drop(socket);
    let url = format!("redis://127.0.0.1:{port}");
    let output = crewline(&["ledger", "pending", "--redis", &url]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("could not connect to the ledger's Redis"),
        "{stderr}"
    );

    let output = crewline(&["ledger", "pending"]);
    assert!(!output.status.success(), "a source is required");
}

/// A `redis-server` on a free loopback port, killed when dropped.
struct Redis(std::process::Child, u16);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn redis_server() -> Option<Redis> {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let Ok(child) = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        // Snapshots configured (so crewline accepts it) but never taken within a test.
        .args(["--save", "3600 1", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        eprintln!(
            "note: redis-server is not installed; the Redis ledger's CLI test passes without running"
        );
        return None;
    };
    let server = Redis(child, port);
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_reads_the_redis_stream_under_its_prefix() {
    let Some(server) = redis_server() else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", server.1);
    let connection = RedisConfig::new(&url).prefix("bank:").open().await.unwrap();
    let ledger = RedisLedger::new(connection);
    for id in ["int_a", "int_b"] {
        ledger.intent(&intent(id, 7)).await.unwrap();
    }
    ledger.record(&outcome("int_b")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ledger.pending().await.unwrap().len() != 1 {
        assert!(Instant::now() < deadline, "the outcome never reached Redis");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let output = tokio::task::spawn_blocking(move || {
        crewline(&["ledger", "pending", "--redis", &url, "--prefix", "bank:"])
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    let printed = stdout(&output);
    assert_eq!(printed.lines().count(), 1, "{printed}");
    assert!(
        printed.contains("call:c1/tc_int_a  transfer_money  key=key-int_a"),
        "{printed}"
    );
}
