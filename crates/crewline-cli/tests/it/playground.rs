//! `crewline playground` and `crewline demo --playground`, the binary end to end: the page's
//! address is printed, `/config.json` hands the page the crew and token, and with `demo` the
//! crew is served (with the token) beside the page.

use crate::common;

use std::process::Stdio;

use common::bounded;
use crewline_testkit::platform::{CrewFrame, PlatformClient, PlatformConfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Starts the binary with `args` and returns it with the first `lines` lines of its output.
async fn start(args: &[&str], lines: usize) -> (tokio::process::Child, Vec<String>) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_crewline"))
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("CREWLINE_AUTH_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut reader = BufReader::new(child.stdout.take().expect("its output")).lines();
    let mut printed = Vec::new();
    while printed.len() < lines {
        let line = bounded(reader.next_line()).await.expect("its output reads");
        printed.push(line.expect("the binary printed its addresses"));
    }
    (child, printed)
}

/// The `http://…/` address in `line`.
fn page_address(line: &str) -> String {
    let start = line.find("http://").expect("a page address") + "http://".len();
    let rest = &line[start..];
    rest[..rest.find('/').expect("a path")].to_owned()
}

/// `GET path` on `addr`, the whole answer (headers and body).
async fn get(addr: &str, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the page's port answers");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("the request is written");
    let mut answer = String::new();
    bounded(stream.read_to_string(&mut answer))
        .await
        .expect("the answer reads");
    answer
}

fn body(answer: &str) -> serde_json::Value {
    let (_, body) = answer.split_once("\r\n\r\n").expect("a body");
    serde_json::from_str(body).expect("JSON")
}

#[tokio::test]
async fn playground_prints_the_page_and_serves_it_for_the_crew_with_its_token() {
    let (mut child, lines) = start(
        &[
            "playground",
            "--url",
            "ws://127.0.0.1:9/ws",
            "--token",
            "s3cret",
            "--playground-port",
            "0",
        ],
        1,
    )
    .await;
    assert!(
        lines[0].starts_with("playground: http://127.0.0.1:"),
        "{lines:?}"
    );
    assert!(lines[0].contains("ws://127.0.0.1:9/ws"), "{lines:?}");
    assert!(
        !lines[0].contains("s3cret"),
        "the token is not printed: {lines:?}"
    );
    let addr = page_address(&lines[0]);
    let page = get(&addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(
        page.contains("content-security-policy: default-src 'none'"),
        "{page}"
    );
    assert_eq!(
        body(&get(&addr, "/config.json").await),
        serde_json::json!({"crew_url": "ws://127.0.0.1:9/ws", "token": "s3cret"})
    );
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_playground_serves_the_crew_with_the_token_beside_the_page() {
    let (mut child, lines) = start(
        &[
            "demo",
            "--playground",
            "--scripted",
            "--port",
            "0",
            "--playground-port",
            "0",
            "--token",
            "demo-token",
        ],
        2,
    )
    .await;
    assert!(
        lines[0].starts_with("serving the demo weather crew"),
        "{lines:?}"
    );
    let addr = page_address(&lines[1]);
    let config = body(&get(&addr, "/config.json").await);
    assert_eq!(config["token"], "demo-token");
    let crew_url = config["crew_url"].as_str().unwrap().to_owned();
    assert!(lines[0].ends_with(&crew_url), "{lines:?} vs {crew_url}");

    // The crew the page points at is served, behind the token.
    let mut platform = PlatformConfig::new(crew_url.clone());
    platform.token = Some("demo-token".to_owned());
    let mut client = bounded(PlatformClient::connect(platform)).await.unwrap();
    let turn = client.user_turn("Hi there!").unwrap();
    let summary = bounded(turn.finish()).await.unwrap();
    assert!(summary.text.contains("weather"), "{}", summary.text);
    // The page's cost figures come from the crew's usage log, on in the playground's crew.
    let usage = summary.frames.iter().find_map(|f| match &f.frame {
        CrewFrame::Log { name, payload } if name == "llm_usage" => Some(payload),
        _ => None,
    });
    let usage = usage.expect("an llm_usage log in the turn");
    assert_eq!(usage["model"], "scripted", "{usage:?}");
    assert!(
        usage["usage"]["prompt_tokens"].as_u64() > Some(0),
        "{usage:?}"
    );
    client.close().await.unwrap();
    assert!(
        bounded(PlatformClient::connect(PlatformConfig::new(crew_url)))
            .await
            .is_err(),
        "without the token the crew refuses"
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn the_old_port_flag_of_playground_still_names_the_pages_port() {
    let (mut child, lines) = start(
        &["playground", "--url", "ws://127.0.0.1:9/ws", "--port", "0"],
        1,
    )
    .await;
    let addr = page_address(&lines[0]);
    assert!(get(&addr, "/").await.starts_with("HTTP/1.1 200"));
    child.kill().await.unwrap();
}
