//! `crewline chat`: the chat loop with in-memory input and output, and the binary with piped
//! stdin, against the real crew server.

use crate::common;

use std::{
    io::{self, Write},
    time::Duration,
};

use common::{bounded, run_binary, start};
use crewline_cli::chat::{ChatEnd, ChatOptions, run_chat};
use crewline_testkit::platform::{PlatformClient, PlatformConfig};
use tokio::sync::mpsc;

/// A writer that forwards everything written to a channel, so the test can wait for output
/// as it appears instead of sleeping.
struct Tap(mpsc::UnboundedSender<String>);

impl Write for Tap {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = self.0.send(String::from_utf8_lossy(buf).into_owned());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Collects output until it contains `needle`; returns everything collected.
async fn wait_for(output: &mut mpsc::UnboundedReceiver<String>, seen: &mut String, needle: &str) {
    while !seen.contains(needle) {
        match output.recv().await {
            Some(piece) => seen.push_str(&piece),
            None => panic!("output ended before {needle:?}:\n{seen}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_lines_run_one_turn_each_and_print_replies_tools_and_timings() {
    bounded(async {
        let server = start(Duration::from_millis(5)).await;
        let mut client = PlatformClient::connect(PlatformConfig::new(&server.url))
            .await
            .unwrap();
        let (tx, lines) = mpsc::channel(8);
        for line in ["Hi there!", "", "What's the weather in Paris?", "/quit", "never sent"] {
            tx.send(line.to_owned()).await.unwrap();
        }
        let mut out = Vec::new();
        let options = ChatOptions {
            barge_in: false,
            echo_input: true,
            prompt: false,
            ..ChatOptions::default()
        };
        let outcome = run_chat(&mut client, lines, &mut out, options).await.unwrap();
        let out = String::from_utf8(out).unwrap();

        assert_eq!(outcome.end, ChatEnd::Quit);
        assert_eq!(outcome.turns, 2);
        assert_eq!(outcome.interrupted, 0);
        assert!(out.contains("you> Hi there!\n"), "{out}");
        assert!(
            out.contains("agent> Hi! I can tell you the weather in any big city. Which one?\n"),
            "{out}"
        );
        assert!(
            out.contains(r#"[tool] get_weather {"location":"Paris"} → {"location":"Paris","temperature_c":18,"conditions":"cloudy"}"#),
            "{out}"
        );
        assert!(out.contains("agent> In Paris it is 18 degrees and cloudy."), "{out}");
        assert_eq!(out.matches("first chunk").count(), 2, "{out}");
        assert!(!out.contains("never sent"), "{out}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_while_a_reply_streams_barges_in_and_becomes_the_next_turn() {
    bounded(async {
        let server = start(Duration::from_millis(30)).await;
        let mut client = PlatformClient::connect(PlatformConfig::new(&server.url))
            .await
            .unwrap();
        let (tx, lines) = mpsc::channel(8);
        let (out_tx, mut output) = mpsc::unbounded_channel();
        let options = ChatOptions {
            barge_in: true,
            echo_input: false,
            prompt: false,
            ..ChatOptions::default()
        };
        let chat =
            tokio::spawn(async move { run_chat(&mut client, lines, Tap(out_tx), options).await });

        let mut seen = String::new();
        tx.send("Tell me a long story.".into()).await.unwrap();
        wait_for(&mut output, &mut seen, "Once upon").await;
        tx.send("Sorry, never mind.".into()).await.unwrap();
        wait_for(&mut output, &mut seen, "Thanks for calling").await;
        // End of input ends the chat after the current turn.
        drop(tx);
        let outcome = chat.await.unwrap().unwrap();
        while let Ok(piece) = output.try_recv() {
            seen.push_str(&piece);
        }

        assert_eq!(outcome.end, ChatEnd::EndOfInput);
        assert_eq!(outcome.turns, 2);
        assert_eq!(outcome.interrupted, 1);
        assert!(seen.contains("[barge-in] interrupt at"), "{seen}");
        assert!(seen.contains("no leaked chunks"), "{seen}");
        assert!(seen.contains("agent> No problem at all."), "{seen}");
        // The story was cut short.
        assert!(!seen.contains("thin and wispy again"), "{seen}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_terminal_a_prompt_waits_for_each_line() {
    bounded(async {
        let server = start(Duration::from_millis(5)).await;
        let mut client = PlatformClient::connect(PlatformConfig::new(&server.url))
            .await
            .unwrap();
        let (tx, lines) = mpsc::channel(8);
        let (out_tx, mut output) = mpsc::unbounded_channel();
        let options = ChatOptions::for_input(true, None);
        let chat =
            tokio::spawn(async move { run_chat(&mut client, lines, Tap(out_tx), options).await });

        let mut seen = String::new();
        // Nothing typed yet: the prompt is already there.
        wait_for(&mut output, &mut seen, "you> ").await;
        assert_eq!(seen, "you> ");
        tx.send("Hi there!".into()).await.unwrap();
        wait_for(&mut output, &mut seen, "first chunk").await;
        // The reply is done: the prompt asks for the next line.
        wait_for(&mut output, &mut seen, "\nyou> ").await;
        drop(tx);
        let outcome = chat.await.unwrap().unwrap();

        assert_eq!(outcome.end, ChatEnd::EndOfInput);
        assert_eq!(outcome.turns, 1);
        assert!(seen.starts_with("you> agent> Hi!"), "{seen}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_chats_over_piped_stdin() {
    let server = start(Duration::from_millis(5)).await;
    let (ok, stdout, stderr) = run_binary(
        &[
            "chat",
            "--url",
            &server.url,
            "--type",
            "telephonyInbound",
            "--caller",
            "+15550100",
            "--var",
            "name=Ada",
        ],
        "Hi there!\nWhat's the weather in Tokyo?\n",
    )
    .await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("connected to {}", server.url)),
        "{stdout}"
    );
    assert!(stdout.contains("you> Hi there!"), "{stdout}");
    // Piped input gets its lines echoed, and no prompt.
    assert!(!stdout.contains("you> you>"), "{stdout}");
    assert!(!stdout.trim_end().ends_with("you>"), "{stdout}");
    assert!(
        stdout.contains("agent> Hi! I can tell you the weather in any big city."),
        "{stdout}"
    );
    assert!(
        stdout.contains(r#"[tool] get_weather {"location":"Tokyo"} → "#),
        "{stdout}"
    );
    assert!(
        stdout.contains("In Tokyo it is 24 degrees and sunny."),
        "{stdout}"
    );
    assert_eq!(stdout.matches("first chunk").count(), 2, "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_the_token_from_crewline_auth_token_as_demo_does() {
    let server = common::start_with(Duration::from_millis(1), |s| s.auth_token("s3cret")).await;
    let (ok, stdout, stderr) = common::run_binary_with_env(
        &["chat", "--url", &server.url],
        "Hi there!\n",
        &[("CREWLINE_AUTH_TOKEN", "s3cret")],
    )
    .await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("agent> Hi!"), "{stdout}");
    // Without it the crew refuses the call.
    let (ok, _, _) = run_binary(&["chat", "--url", &server.url], "Hi there!\n").await;
    assert!(!ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_top_level_help_names_every_command() {
    let (ok, stdout, stderr) = run_binary(&["--help"], "").await;
    assert!(ok, "{stderr}");
    for command in [
        "chat",
        "demo",
        "mock-llm",
        "load",
        "playground",
        "ledger",
        "fake-bank",
        "eval",
    ] {
        assert!(
            stdout.contains(&format!("  {command}")),
            "{command}: {stdout}"
        );
    }
    let about = stdout.lines().next().unwrap_or_default();
    for word in ["demo", "mock"] {
        assert!(about.contains(word), "{about}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reports_a_bad_conversation_type_and_an_unreachable_crew() {
    let (ok, _, stderr) = run_binary(&["chat", "--type", "fax"], "").await;
    assert!(!ok);
    assert!(stderr.contains("telephonyInbound"), "{stderr}");

    // A port nothing listens on: bound but never listening, so connecting is refused and no
    // concurrent test's server can take it meanwhile.
    let refusing = tokio::net::TcpSocket::new_v4().unwrap();
    refusing.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let url = format!("ws://{}/ws", refusing.local_addr().unwrap());
    let (ok, _, stderr) = run_binary(&["chat", "--url", &url], "Hi\n").await;
    assert!(!ok);
    assert!(stderr.contains("could not connect"), "{stderr}");
}
