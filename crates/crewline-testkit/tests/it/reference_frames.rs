//! The client reads the Python reference's recorded frames: echoes are told apart from crew
//! frames, and tool logs are parsed.

// The fixture helpers panic on a missing or malformed fixture, which should fail the test.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use crewline::protocol::decode;
use crewline_testkit::platform::{CrewFrame, ToolLog};
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/reference")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Every decodable outbound frame of `name`, classified.
fn frames(name: &str) -> Vec<(String, Option<CrewFrame>)> {
    fixture(name)["outbound"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|frame| {
            let raw = frame["raw"].as_str()?;
            // Masked values (`"<latency_ms>"`) are still valid JSON.
            let event = decode(raw.as_bytes()).ok()?;
            let kind = frame["type"].as_str()?.to_owned();
            Some((kind, CrewFrame::from_body(event.body)))
        })
        .collect()
}

#[test]
fn platform_events_coming_back_are_echoes_and_everything_else_is_a_crew_frame() {
    for name in [
        "text_turn",
        "tool_turn",
        "interrupt_mid_stream",
        "end_call",
        "transfer_call",
        "tool_errors",
        "llm_error_mid_stream",
        "background_error",
        "frame_extra_fields",
    ] {
        let frames = frames(name);
        assert!(!frames.is_empty(), "{name}");
        for (kind, frame) in frames {
            let echo = kind.starts_with("system.") || kind == "agent.transcript.update";
            match frame {
                None => assert!(echo, "{name}: {kind} is not an echo"),
                Some(frame) => {
                    assert!(!echo, "{name}: {kind} is an echo");
                    assert_eq!(frame.wire_type(), kind, "{name}");
                }
            }
        }
    }
}

#[test]
fn the_references_tool_logs_are_parsed() {
    let logs: Vec<CrewFrame> = frames("tool_turn")
        .into_iter()
        .filter_map(|(_, f)| f)
        .filter(|f| matches!(f, CrewFrame::ToolStart(_) | CrewFrame::ToolEnd(_)))
        .collect();
    let [CrewFrame::ToolStart(start), CrewFrame::ToolEnd(end)] = logs.as_slice() else {
        panic!("{logs:?}");
    };
    assert_eq!(start.call_id, "call_weather_paris");
    assert_eq!(start.name, "get_weather");
    assert_eq!(start.arguments, json!({"location": "Paris"}));
    assert_eq!(start.response, None);
    assert_eq!(end.response.as_ref().unwrap()["temperature_c"], 18);

    let errors: Vec<ToolLog> = frames("tool_errors")
        .into_iter()
        .filter_map(|(_, f)| match f {
            Some(CrewFrame::ToolError(log)) => Some(log),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.error.as_deref().is_some_and(|m| !m.is_empty()))
    );
}
