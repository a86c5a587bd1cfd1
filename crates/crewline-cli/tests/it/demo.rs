//! `crewline demo` end to end: the demo function in-process against the real server, and the
//! binary.

use crate::common;

use std::time::Duration;

use common::bounded;
use crewline_cli::demo::{DemoConfig, SCRIPT, run_demo};
use crewline_server::model::ModelChoice;
use crewline_testkit::platform::CrewFrame;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_call_streams_every_turn_uses_tools_and_barges_in_cleanly() {
    let config = DemoConfig {
        chunk_delay: Duration::from_millis(20),
        model: ModelChoice::Scripted,
        service_delay: Duration::from_millis(100),
        ..DemoConfig::default()
    };
    let mut out = Vec::new();
    let report = bounded(run_demo(config, &mut out)).await.unwrap();
    let text = String::from_utf8(out).unwrap();

    assert_eq!(report.turns.len(), SCRIPT.len());
    for turn in &report.turns {
        let s = &turn.summary;
        let types = s.wire_types();
        assert!(s.started && s.ended, "{}: {types:?}", turn.label);
        assert!(
            s.chunks > 0 && s.time_to_first_chunk.is_some(),
            "{}",
            turn.label
        );
        assert_eq!(
            types.first(),
            Some(&"agent.llm.response.start"),
            "{}",
            turn.label
        );
        assert_eq!(
            types.last(),
            Some(&"agent.llm.response.end"),
            "{}",
            turn.label
        );
        assert!(s.errors.is_empty(), "{}: {:?}", turn.label, s.errors);
    }

    let tools = &report.turns[1].summary;
    assert_eq!(
        tools.tool_events(),
        [
            "tool_call_start",
            "tool_call_start",
            "tool_call_end",
            "tool_call_end"
        ],
        "both calls start before either ends: they run in parallel"
    );
    assert!(
        text.contains(r#"[tool] get_weather {"location":"Paris"} → "#),
        "{text}"
    );

    let barge_in = &report.turns[2].summary;
    let interrupt = barge_in
        .interrupt
        .as_ref()
        .expect("the third turn is interrupted");
    assert!(interrupt.leaked_chunks.is_empty(), "{interrupt:?}");
    assert!(interrupt.time_to_end.is_some());
    let end = barge_in
        .frames
        .iter()
        .position(|f| f.frame == CrewFrame::End)
        .unwrap();
    assert!(
        !barge_in.frames[end..]
            .iter()
            .any(|f| matches!(f.frame, CrewFrame::Chunk { .. })),
        "no chunk after the interrupted turn's end"
    );
    assert!(report.turns[3].summary.text.contains("Thanks for calling"));
    assert_eq!(report.stats.undecodable, 0);
    assert_eq!(report.stats.stray_chunks, 0);
    assert!(text.contains("[barge-in] interrupt at"), "{text}");
    assert!(text.contains("demo finished: 4 turns"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_binary_exits_zero() {
    let (ok, stdout, stderr) =
        common::run_binary(&["demo", "--scripted", "--chunk-delay-ms", "5"], "").await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("first chunk"), "{stdout}");
    assert!(stdout.contains("demo finished"), "{stdout}");
}

/// `crewline demo`'s flags, parsed as the binary does.
fn demo_args(args: &[&str]) -> crewline_cli::demo::DemoArgs {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        demo: crewline_cli::demo::DemoArgs,
    }
    Cli::try_parse_from(std::iter::once("demo").chain(args.iter().copied()))
        .expect("the test's flags parse")
        .demo
}

/// A writer the test reads while the command still runs.
#[derive(Clone, Default)]
struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .expect("no writer panicked")
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("no writer panicked")).into_owned()
    }
}

#[tokio::test]
async fn serve_on_port_0_prints_the_port_it_really_listens_on() {
    let out = Shared::default();
    let args = demo_args(&["--serve", "--scripted", "--port", "0"]);
    let serving = tokio::spawn(crewline_cli::demo::run_cli(args, out.clone()));
    let line = bounded(async {
        loop {
            if let Some(line) = out.text().lines().find(|l| l.starts_with("serving")) {
                break line.to_owned();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let addr = line
        .split("ws://")
        .nth(1)
        .and_then(|rest| rest.split("/ws").next())
        .unwrap();
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    assert_ne!(addr.port(), 0, "{line}");
    // The crew answers there.
    tokio::net::TcpStream::connect(addr).await.unwrap();
    serving.abort();
}

#[tokio::test]
async fn serve_on_a_taken_port_fails_before_saying_it_serves() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let mut out = Vec::new();
    let args = demo_args(&["--serve", "--scripted", "--port", &port]);
    let error = bounded(crewline_cli::demo::run_cli(args, &mut out))
        .await
        .unwrap_err();
    assert!(
        matches!(error, crewline_cli::demo::DemoError::Bind { .. }),
        "{error}"
    );
    assert!(!String::from_utf8_lossy(&out).contains("serving"));
}

#[tokio::test]
async fn logs_written_to_a_pipe_carry_no_colour_codes() {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_crewline"))
        .args(["demo", "--scripted", "--chunk-delay-ms", "1"])
        .env_remove("OPENAI_API_KEY")
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = bounded(child.wait_with_output()).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("INFO"), "no log lines to check: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}
