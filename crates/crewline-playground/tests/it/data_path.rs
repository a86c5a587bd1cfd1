//! The page's data path without a browser: its script run by Node (with a stand-in DOM) on a
//! recorded call, read back through `figures()`. Which model provider answered each turn
//! comes from the crew's `agent.log` named `llm_provider` (`{"turn_id", "provider"}`), matched
//! to the turn by its request id; a turn without one names none. What each turn cost comes
//! from the `llm_usage` log (tokens, model, money), the call's total from its running `call.cost`.
//!
//! Where `node` is missing the test prints a note and passes, unless `CREWLINE_REQUIRE_NODE`
//! is set; the browser tests (tests/it/browser.rs) cover the same in Chromium.

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Stdio},
};

use serde_json::{Value, json};

/// The page's figures after loading `frames` (`(t, dir, frame)`), or `None` without Node.
fn figures(frames: &[(u64, &str, Value)]) -> Option<Value> {
    let jsonl: String = frames
        .iter()
        .map(|(t, dir, frame)| format!("{}\n", json!({"t": t, "dir": dir, "frame": frame})))
        .collect();
    run_page(&jsonl, None)
}

/// The page's output after loading `jsonl`: its figures, or with `download_cap`
/// `{"figures", "jsonl"}` (the download at that cap); `None` without Node.
fn run_page(jsonl: &str, download_cap: Option<usize>) -> Option<Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let child = Command::new("node")
        .arg(root.join("tests/node/figures.js"))
        .arg(root.join("assets"))
        .args(download_cap.map(|cap| cap.to_string()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => {
            assert!(
                std::env::var_os("CREWLINE_REQUIRE_NODE").is_none(),
                "node could not be started ({error}), and CREWLINE_REQUIRE_NODE requires it"
            );
            // Past the test harness's capture, so that every run shows what it skipped.
            {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: node could not be started ({error})"
                );
            }
            return None;
        }
    };
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(jsonl.as_bytes())
        .expect("the call written");
    let output = child.wait_with_output().expect("node ends");
    assert!(
        output.status.success(),
        "the page's script failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_slice(&output.stdout).expect("figures as JSON"))
}

fn request(text: &str) -> Value {
    json!({"type": "system.llm.request", "messages": [{"role": "user", "content": text}]})
}

fn start(id: &str) -> Value {
    json!({"type": "agent.llm.response.start", "request_id": id})
}

fn chunk(text: &str) -> Value {
    json!({"type": "agent.llm.response.chunk", "text": text})
}

fn end() -> Value {
    json!({"type": "agent.llm.response.end"})
}

fn provider(turn_id: &str, name: &str) -> Value {
    json!({"type": "agent.log", "name": "llm_provider", "payload": {"turn_id": turn_id, "provider": name}})
}

#[test]
fn each_turn_names_the_provider_that_answered_it_and_none_without_a_fallback() {
    let Some(figures) = figures(&[
        (0, "out", request("Hello?")),
        (5, "in", start("t1")),
        (9, "in", chunk("Hello from the backup.")),
        (10, "in", provider("t1", "backup")),
        (11, "in", end()),
        // A turn whose log comes late, after the next turn began: matched by its id.
        (20, "out", request("Still there?")),
        (25, "in", start("t2")),
        (29, "in", chunk("Yes.")),
        (30, "in", end()),
        (40, "out", request("Good.")),
        (41, "in", provider("t2", "primary")),
        (45, "in", start("t3")),
        (49, "in", chunk("Great.")),
        (50, "in", end()),
    ]) else {
        return;
    };
    let providers: Vec<&Value> = figures["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .map(|turn| &turn["provider"])
        .collect();
    assert_eq!(
        providers,
        [&json!("backup"), &json!("primary"), &Value::Null],
        "{figures}"
    );
}

#[test]
fn a_call_on_one_model_names_no_provider() {
    let Some(figures) = figures(&[
        (0, "out", request("Hello?")),
        (5, "in", start("t1")),
        (9, "in", chunk("Hi.")),
        (11, "in", end()),
    ]) else {
        return;
    };
    assert_eq!(figures["turns"][0]["provider"], Value::Null, "{figures}");
    assert_eq!(figures["turns"][0]["timeToEnd"], 11, "{figures}");
}

fn tool_log(name: &str) -> Value {
    json!({"type": "agent.log", "name": name, "payload": {
        "tool_call_id": "call_1", "function_name": "get_weather", "latency": 5,
        "context": {"arguments": {"city": "Paris"}, "response": {"temp": 18}}}})
}

#[test]
fn the_text_before_a_tool_call_and_the_answer_after_it_are_apart() {
    let Some(figures) = figures(&[
        (0, "out", request("Weather in Paris?")),
        (10, "in", start("r1")),
        (20, "in", chunk("Let me check that for you.")),
        (30, "in", tool_log("tool_call_start")),
        (40, "in", tool_log("tool_call_end")),
        (50, "in", chunk("In Paris it is 18 degrees.")),
        (60, "in", end()),
    ]) else {
        return;
    };
    assert_eq!(
        figures["turns"][0]["reply"],
        "Let me check that for you. In Paris it is 18 degrees."
    );
}

#[test]
fn the_download_is_capped_and_its_last_line_says_what_was_left_out() {
    let frames: String = (0..50u64)
        .map(|i| {
            let frame = if i == 0 {
                request("Tell me a long story.")
            } else {
                chunk("and then the wind turned, ")
            };
            format!(
                "{}\n",
                json!({"t": i, "dir": if i == 0 { "out" } else { "in" }, "frame": frame})
            )
        })
        .collect();
    let cap = 2000;
    let Some(out) = run_page(&frames, Some(cap)) else {
        return;
    };
    let download = out["jsonl"].as_str().expect("the download");
    let lines: Vec<&str> = download.lines().collect();
    let last: Value = serde_json::from_str(lines.last().expect("a line")).expect("JSON");
    let kept = lines.len() - 1;
    assert_eq!(last["omitted"]["frames"], 50 - kept, "{last}");
    assert!(download.len() - lines.last().map_or(0, |l| l.len() + 1) <= cap);
    // Loaded back, the cut is said, not taken for a broken line.
    let Some(replayed) = run_page(download, None) else {
        return;
    };
    assert_eq!(replayed["call"]["frames"], kept);
    assert_eq!(replayed["call"]["errors"], 1);
}

fn usage(turn_id: &str, usage: Value, cost: Value, call_cost: Value) -> Value {
    json!({"type": "agent.log", "name": "llm_usage", "payload": {
        "turn_id": turn_id, "model": "gpt-4o-mini", "provider": null,
        "usage": usage, "cost": cost,
        "call": {"turns": 1, "usage": null, "cost": call_cost, "priced_turns": 1}}})
}

#[test]
fn each_turn_shows_its_tokens_and_cost_and_the_call_its_total_from_the_usage_log() {
    let tokens = json!({"prompt_tokens": 1200, "completion_tokens": 7, "total_tokens": 1207,
        "reasoning_tokens": 3, "cached_tokens": 1024});
    let Some(figures) = figures(&[
        (0, "out", request("Hello?")),
        (5, "in", start("t1")),
        (9, "in", chunk("Hi.")),
        (
            10,
            "in",
            usage("t1", tokens.clone(), json!("0.0001074"), json!("0.0001074")),
        ),
        (11, "in", end()),
        (20, "out", request("Again?")),
        (25, "in", start("t2")),
        (29, "in", chunk("Yes.")),
        (
            30,
            "in",
            usage("t2", tokens, json!("0.0001074"), json!("0.0002148")),
        ),
        (31, "in", end()),
    ]) else {
        return;
    };
    let turns = figures["turns"].as_array().expect("turns");
    for turn in turns {
        assert_eq!(turn["cost"], json!("0.0001074"), "{figures}");
        assert_eq!(turn["model"], json!("gpt-4o-mini"), "{figures}");
        assert_eq!(turn["tokens"]["prompt"], json!(1200), "{figures}");
        assert_eq!(turn["tokens"]["completion"], json!(7), "{figures}");
    }
    // The call's cost is the crew's exact running total, not a float sum of the turns'.
    assert_eq!(figures["call"]["cost"], json!("0.0002148"), "{figures}");
    assert_eq!(figures["call"]["tokens"], json!(2414), "{figures}");
}

#[test]
fn a_usage_log_without_usage_leaves_tokens_and_cost_not_reported() {
    let Some(figures) = figures(&[
        (0, "out", request("Hello?")),
        (5, "in", start("t1")),
        (9, "in", chunk("Hi.")),
        (10, "in", usage("t1", Value::Null, Value::Null, Value::Null)),
        (11, "in", end()),
    ]) else {
        return;
    };
    assert_eq!(figures["call"]["tokens"], Value::Null, "{figures}");
    assert_eq!(figures["call"]["cost"], Value::Null, "{figures}");
    assert_eq!(figures["turns"][0]["cost"], Value::Null, "{figures}");
    assert_eq!(
        figures["turns"][0]["model"],
        json!("gpt-4o-mini"),
        "{figures}"
    );
}

#[test]
fn each_turn_shows_its_context_size_and_a_summary_is_a_note() {
    let tokens = json!({"prompt_tokens": 1200, "completion_tokens": 7, "total_tokens": 1207,
        "reasoning_tokens": 0, "cached_tokens": 0});
    let mut logged = usage("t1", tokens, Value::Null, Value::Null);
    logged["payload"]["context_tokens"] = json!(12_480);
    let Some(figures) = figures(&[
        (0, "out", request("Hello?")),
        (5, "in", start("t1")),
        (9, "in", chunk("Hi.")),
        (10, "in", logged),
        (11, "in", end()),
        (
            40,
            "in",
            json!({"type": "agent.log", "name": "context_summary", "payload": {
                "messages": 14, "tokens_before": 12_480, "tokens_after": 3_120,
                "summary_tokens": 160}}),
        ),
    ]) else {
        return;
    };
    assert_eq!(
        figures["turns"][0]["contextTokens"],
        json!(12_480),
        "{figures}"
    );
    assert_eq!(figures["call"]["summaries"], json!(1), "{figures}");
}
