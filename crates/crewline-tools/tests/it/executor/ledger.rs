//! Ledger.

use super::*;

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "crewline-{name}-{}-{}.jsonl",
        std::process::id(),
        uuid_like()
    ))
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[tokio::test]
async fn the_jsonl_ledger_survives_a_torn_last_line() {
    let path = temp_path("ledger");
    let (echo, _) = counting_echo("echo", ToolPolicy::new());
    {
        let ledger = Arc::new(JsonlLedger::open(&path).unwrap());
        let registry = registry(Executor::builder().ledger(ledger).build(), [echo]);
        registry
            .execute(
                &[call("a", "echo", r#"{"n": 1}"#), call("b", "nope", "{}")],
                ExecuteOptions::new().sequential(),
            )
            .await;
    }
    // A crash mid-write: half a record, no newline.
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(br#"{"call_id":"torn","tool":"ec"#).unwrap();
    }
    let records = JsonlLedger::read(&path).unwrap();
    let ids: Vec<_> = records.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(records[0].arguments, json!({"n": 1}));
    assert_eq!(records[1].error_kind, Some(ToolErrorKind::UnknownTool));

    // Reopened after the crash, new records start on a line of their own.
    let reopened = JsonlLedger::open(&path).unwrap();
    let mut record = records[0].clone();
    record.call_id = "c".to_owned();
    reopened.record(&record).unwrap();
    // The writer thread writes it; wait for that before reading.
    reopened.flush();
    let ids: Vec<_> = JsonlLedger::read(&path)
        .unwrap()
        .into_iter()
        .map(|r| r.call_id)
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn the_ledger_has_one_record_per_call_with_its_kind_and_latency() {
    let ledger = Arc::new(MemoryLedger::new());
    let (echo, _) = counting_echo("echo", ToolPolicy::new());
    let registry = registry(Executor::builder().ledger(ledger.clone()).build(), [echo]);
    registry
        .execute(
            &[
                call("1", "echo", "{}"),
                call("2", "echo", "[1]"),
                call("3", "x", "{}"),
            ],
            ExecuteOptions::new(),
        )
        .await;
    let mut records = ledger.records();
    records.sort_by(|a, b| a.call_id.cmp(&b.call_id));
    let kinds: Vec<_> = records.iter().map(|r| r.error_kind).collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(ToolErrorKind::ToolArgsInvalid),
            Some(ToolErrorKind::UnknownTool)
        ]
    );
    assert!(records.iter().all(|r| r.timestamp_ms > 0));
    assert_eq!(records[1].arguments, json!("[1]"));
}
