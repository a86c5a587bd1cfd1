//! `crewline demo` end to end: the demo function in-process against the real server, and the
//! binary.

mod common;

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
