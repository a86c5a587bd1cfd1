//! The JSON Lines ledger: written off the caller's thread, in order, rotated by size, and a
//! write error is a log line, never a panic.

#![allow(clippy::unwrap_used)]

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use crewline_core::ToolErrorKind;
use crewline_tools::executor::{
    approval::ApprovalRecord,
    ledger::{JsonlLedger, LedgerRecord, LedgerSink, Outcome},
};
use serde_json::json;

fn record(id: usize) -> LedgerRecord {
    LedgerRecord {
        call_id: format!("call_{id:04}"),
        tool: "pay".to_owned(),
        arguments: json!({"amount": id}),
        outcome: Outcome::Ok,
        error_kind: None::<ToolErrorKind>,
        message: None,
        detail: None,
        latency_us: 10,
        approval: Some(ApprovalRecord::Approved),
        cache_hit: false,
        timestamp_ms: 1,
        ran_on: false,
        intent_id: None,
    }
}

/// A fresh directory of its own for each test.
fn temp_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!(
        "crewline-ledger-{name}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ids(records: &[LedgerRecord]) -> Vec<String> {
    records.iter().map(|r| r.call_id.clone()).collect()
}

fn line_len() -> u64 {
    u64::try_from(serde_json::to_vec(&record(0)).unwrap().len() + 1).unwrap()
}

#[test]
fn the_file_rotates_at_its_size_and_the_reader_reads_the_set_in_order() {
    let dir = temp_dir("rotate");
    let path = dir.join("ledger.jsonl");
    // Three records per file.
    let max = line_len() * 3;
    let ledger = JsonlLedger::options().rotate(max, 2).open(&path).unwrap();
    for id in 0..10 {
        ledger.record(&record(id)).unwrap();
    }
    drop(ledger);

    for file in [
        path.clone(),
        dir.join("ledger.jsonl.1"),
        dir.join("ledger.jsonl.2"),
    ] {
        let size = std::fs::metadata(&file).unwrap().len();
        assert!(
            size <= max,
            "{} is {size} bytes, over {max}",
            file.display()
        );
    }
    assert!(
        !dir.join("ledger.jsonl.3").exists(),
        "only two rotated files are kept"
    );
    // 0..10 in files of three: [0 1 2] [3 4 5] [6 7 8] [9]; the oldest file is gone.
    let expected: Vec<String> = (3..10).map(|id| record(id).call_id).collect();
    assert_eq!(ids(&JsonlLedger::read(&path).unwrap()), expected);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn records_from_many_threads_are_all_written_once_each_thread_in_order() {
    let dir = temp_dir("order");
    let path = dir.join("ledger.jsonl");
    let ledger = Arc::new(
        JsonlLedger::options()
            .rotate(line_len() * 50, 100)
            .sync_data(true)
            .open(&path)
            .unwrap(),
    );
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                for i in 0..100 {
                    ledger.record(&record(t * 1000 + i)).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    ledger.flush();
    let records = JsonlLedger::read(&path).unwrap();
    assert_eq!(records.len(), 400);
    for t in 0..4 {
        let mine: Vec<u64> = records
            .iter()
            .filter_map(|r| r.arguments["amount"].as_u64())
            .filter(|n| n / 1000 == t)
            .collect();
        let expected: Vec<u64> = (0..100).map(|i| t * 1000 + i).collect();
        assert_eq!(mine, expected, "thread {t}'s records are out of order");
    }
    assert_eq!(ledger.dropped(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_write_error_is_logged_and_counted_not_a_panic() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        // Every write to /dev/full fails with "no space left on device".
        let ledger = JsonlLedger::open(Path::new("/dev/full")).unwrap();
        for id in 0..3 {
            assert!(
                ledger.record(&record(id)).is_ok(),
                "queueing never fails the call"
            );
        }
        ledger.flush();
        assert_eq!(ledger.write_errors(), 3);
    });
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("the tool ledger could not be written"),
        "{text}"
    );
}

/// A FIFO nobody reads: writes to it block once its buffer is full, like a stalled disk.
#[cfg(unix)]
fn stalled_file(dir: &Path) -> PathBuf {
    let path = dir.join("stalled.jsonl");
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    path
}

#[cfg(unix)]
#[test]
fn a_stalled_disk_never_blocks_the_caller() {
    use std::io::Read;

    let dir = temp_dir("stalled");
    let path = stalled_file(&dir);
    let ledger = JsonlLedger::options().capacity(16).open(&path).unwrap();
    // Far more than the pipe's 64 KiB buffer: a write from the caller's thread would block.
    let (done, finished) = std::sync::mpsc::channel();
    let caller = std::thread::spawn(move || {
        for id in 0..2000 {
            ledger.record(&record(id)).unwrap();
        }
        let _ = done.send(ledger.dropped());
        ledger
    });
    let dropped = finished
        .recv_timeout(Duration::from_secs(10))
        .expect("record() blocked on the stalled file");
    assert!(dropped > 0, "a full queue drops (and counts) records");
    // Unstall the "disk" so the ledger can be dropped (its writer finishes the queue).
    let mut reader = std::fs::File::open(&path).unwrap();
    let drain = std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = reader.read_to_end(&mut sink);
        sink
    });
    drop(caller.join().unwrap());
    let written = drain.join().unwrap();
    let lines = written
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(u64::try_from(lines).unwrap() + dropped, 2000);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn records_are_written_while_the_runtime_thread_is_busy() {
    let dir = temp_dir("busy");
    let path = dir.join("ledger.jsonl");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ledger = Arc::new(JsonlLedger::open(&path).unwrap());
    let in_task = Arc::clone(&ledger);
    let seen = runtime.block_on(async move {
        tokio::spawn(async move {
            for id in 0..5 {
                in_task.record(&record(id)).unwrap();
            }
            // Hog the only runtime thread: the records still reach the file.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let records = JsonlLedger::read(&path).unwrap_or_default();
                if records.len() == 5 || std::time::Instant::now() > deadline {
                    return records.len();
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
        .await
        .unwrap()
    });
    assert_eq!(seen, 5);
    drop(ledger);
    let _ = std::fs::remove_dir_all(&dir);
}
