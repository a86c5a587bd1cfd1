//! `ModelArgs` reading the environment as a crew binary does: `OPENAI_BASE_URL` without
//! `OPENAI_API_KEY` is that endpoint (a local server needs no key), and the crew says at start
//! which model serves it and at which URL, never a key. The environment is the process's, so
//! each case runs in a child process of this test binary with its own variables.

// A binary of its own, not in tests/it: it installs the process's one global log subscriber
// (`CapturedLogs`) with its own filter and asserts on every line it captured.

#![cfg(feature = "clap")]

use std::{process::Command, time::Duration};

use clap::Parser;
use crewline::{
    llm::{ChatRequest, Reply, ScriptedLlm, StreamItem},
    types::Message,
};
use crewline_server::ModelArgs;
use crewline_testkit::{
    CapturedLogs,
    mock_llm::{MockLlm, Script},
};
use futures::StreamExt;

/// Set in the child process: the case it runs.
const CHILD_VARIABLE: &str = "CREWLINE_TEST_MODEL_FROM_ENV_CHILD";

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    model: ModelArgs,
}

/// Runs `case` in a child process with `env` set and `OPENAI_*` otherwise unset; its
/// combined output when it passed.
fn child(case: &str, env: &[(&str, &str)]) -> String {
    let mut command = Command::new(std::env::current_exe().expect("this test binary"));
    command
        .args([case, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VARIABLE, case)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_MODEL")
        .env_remove("CREWLINE_REDIS_URL");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("the child test runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{case} failed:\n{text}");
    text
}

/// Whether this process is the child running `case`.
fn is_child(case: &str) -> bool {
    std::env::var(CHILD_VARIABLE).is_ok_and(|running| running == case)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_url_without_a_key_is_that_endpoint_and_the_start_says_so() {
    let local = MockLlm::new(Script::text(3, Duration::ZERO))
        .start()
        .await
        .expect("the mock model starts");
    // The child blocks this thread while the mock answers it on this runtime's.
    let url = local.base_url();
    tokio::task::spawn_blocking(move || {
        child(
            "base_url_child",
            &[("OPENAI_BASE_URL", &url), ("OPENAI_MODEL", "local-model")],
        )
    })
    .await
    .expect("the child ran");
    // The crew asked the local server, not OpenAI and not its script.
    assert_eq!(local.mock().request_count(), 1);
}

#[tokio::test]
async fn base_url_child() {
    if !is_child("base_url_child") {
        return;
    }
    let logs = CapturedLogs::install("info");
    let args = Args::parse_from(["crew"]);
    let model = args
        .model
        .choose(|| ScriptedLlm::new([Reply::text("the script")]))
        .await
        .expect("a local endpoint needs no key");
    assert!(!model.is_scripted(), "{model:?}");
    let url = std::env::var("OPENAI_BASE_URL").expect("set by the parent");
    assert_eq!(model.base_url.as_deref(), Some(url.as_str()));

    let mut stream = model
        .llm
        .stream_chat(ChatRequest::new(vec![Message::user("hello")]))
        .await
        .expect("the local server answers");
    let mut text = String::new();
    while let Some(item) = stream.next().await {
        if let StreamItem::Text(piece) = item.expect("a clean stream") {
            text.push_str(&piece);
        }
    }
    assert!(!text.is_empty() && text != "the script", "{text}");

    let said = logs.text();
    let line = said
        .lines()
        .find(|line| line.contains("the crew's model"))
        .unwrap_or_else(|| panic!("no line names the model:\n{said}"));
    assert!(line.contains("INFO"), "{line}");
    assert!(
        line.contains("local-model") && line.contains(&url),
        "{line}"
    );
    assert_eq!(said.matches("the crew's model").count(), 1, "{said}");
}

#[tokio::test]
async fn with_a_key_the_start_names_the_url_and_never_the_key() {
    let text = child(
        "key_child",
        &[("OPENAI_API_KEY", "sk-test-secret-0123456789")],
    );
    assert!(!text.contains("sk-test-secret"), "{text}");
}

#[tokio::test]
async fn key_child() {
    if !is_child("key_child") {
        return;
    }
    let logs = CapturedLogs::install("info");
    let args = Args::parse_from(["crew", "--model", "gpt-4o-mini"]);
    let model = args
        .model
        .choose(|| ScriptedLlm::new([Reply::text("the script")]))
        .await
        .expect("a key makes OpenAI's model");
    assert!(!model.is_scripted());
    let said = logs.text();
    // Printed, so the parent can check the key is nowhere in it either.
    println!("{said}");
    assert!(
        said.contains("the crew's model") && said.contains("https://api.openai.com/v1"),
        "{said}"
    );
    assert!(!said.contains("sk-test-secret"), "{said}");
}

#[tokio::test]
async fn with_neither_the_crew_runs_on_its_script_and_says_so() {
    child("offline_child", &[]);
}

#[tokio::test]
async fn offline_child() {
    if !is_child("offline_child") {
        return;
    }
    let logs = CapturedLogs::install("info");
    let model = Args::parse_from(["crew"])
        .model
        .choose(|| ScriptedLlm::new([Reply::text("the script")]))
        .await
        .expect("the scripted model");
    assert!(model.is_scripted());
    let said = logs.text();
    assert!(
        said.contains("the crew's model") && said.contains("scripted model (offline)"),
        "{said}"
    );
}
