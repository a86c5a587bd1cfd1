//! Conformance with the reference's recorded frames (`tests/fixtures/reference/*.json`).
//!
//! Every inbound frame the harness sent is decoded (or, if the reference rejected it, must fail
//! with the matching error), and every outbound frame's exact wire text is decoded and encoded
//! again: the result must be the same JSON with the same key order, nested objects included.

use std::fs;
use std::path::{Path, PathBuf};

use crewline_protocol::{Event, decode_str, encode, encode_string};
use serde_json::Value;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/reference"
);

/// Stand-ins for the masked values: a crew-generated timestamp and a tool latency.
const TIMESTAMP: &str = "2026-11-30T06:43:19.875855";
const LATENCY_MS: &str = "12.5";

/// Inbound frames the reference did not accept, with the error kind we give them.
/// (Frames it closed the socket over for transport reasons, a text frame or non-JSON bytes,
/// are not listed: text frames are valid for crewline and `send_raw` data is checked apart.)
const REJECTED_BY_REFERENCE: &[(&str, &str)] = &[
    // bad_frame_no_type: logged and dropped.
    (
        r#"{"timestamp":"2030-01-02T03:04:06.006666","foo":"bar"}"#,
        "missing_type",
    ),
    // bad_frame_unknown_type: logged and dropped.
    (
        r#"{"type":"system.foo","timestamp":"2030-01-02T03:04:07.007777","bar":1}"#,
        "unknown_type",
    ),
    // bad_frame_wrong_field_type: logged and dropped.
    (
        r#"{"type":"system.llm.request","timestamp":"2030-01-02T03:04:08.008888","messages":5}"#,
        "invalid_fields",
    ),
    // handshake_invalid_init: no conversation_type; the reference drops the socket.
    (
        r#"{"type":"system.init","timestamp":"2030-01-02T03:04:00.000000","version":"1.0","session_context":{"initial_variables":{}}}"#,
        "invalid_fields",
    ),
];

/// Inbound fields the reference drops from its echoes (unknown to its models); so do we.
const UNKNOWN_INBOUND_FIELDS: &[&str] = &["pause_ms", "some_new_field"];

/// Fields our encoding adds to an inbound frame that lacked them, with the value added. The
/// reference adds the same to its echoes (`system.llm.request` is echoed with
/// `extra_params: {}`); a frame without `timestamp` gets a generated one (text_turn).
const DEFAULTS_ADDED: &[(&str, &str, &str)] = &[("system.llm.request", "extra_params", "{}")];

/// Differences from the reference's wire text we accept, by design. They are normalised away
/// before comparing, by re-serialising the reference's text compactly (key order kept):
/// - the reference writes `json.dumps` defaults, a space after `:` and `,`; we write compact
///   JSON (same JSON to every parser, fewer bytes on the hot path);
/// - the reference escapes non-ASCII as `\uXXXX` (e.g. `18\u00b0C`); we write UTF-8.
const ACCEPTED_TEXT_DIFFERENCES: &[&str] = &["spacing after : and ,", "\\uXXXX escapes"];

fn fixture_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(FIXTURES)
        .unwrap_or_else(|err| panic!("{FIXTURES}: {err}"))
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "fixtures missing: {files:?}");
    files
}

fn load(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{path:?}: {err}"))
}

fn name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Every object's key sequence, depth first, with its path.
fn key_orders(value: &Value, path: &str, out: &mut Vec<(String, Vec<String>)>) {
    match value {
        Value::Object(map) => {
            out.push((path.to_owned(), map.keys().cloned().collect()));
            for (key, inner) in map {
                key_orders(inner, &format!("{path}.{key}"), out);
            }
        }
        Value::Array(items) => {
            for (index, inner) in items.iter().enumerate() {
                key_orders(inner, &format!("{path}[{index}]"), out);
            }
        }
        _ => {}
    }
}

fn orders(value: &Value) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    key_orders(value, "$", &mut out);
    out
}

fn reencode(event: &Event) -> Value {
    serde_json::from_slice(&encode(event)).unwrap_or_else(|err| panic!("our output: {err}"))
}

#[test]
fn outbound_frames_reencode_identically() {
    let mut checked = 0;
    let mut types = std::collections::BTreeSet::new();
    for path in fixture_files() {
        let fixture = load(&path);
        let scenario = name(&path);
        for frame in fixture["outbound"].as_array().into_iter().flatten() {
            let Some(raw) = frame["raw"].as_str() else {
                panic!("{scenario}: an undecodable frame was recorded: {frame}");
            };
            let raw = raw
                .replace("\"<timestamp>\"", &format!("\"{TIMESTAMP}\""))
                .replace("\"<latency_ms>\"", LATENCY_MS);
            let event = decode_str(&raw).unwrap_or_else(|err| panic!("{scenario}: {raw}: {err}"));
            let reference: Value = serde_json::from_str(&raw).unwrap_or_default();
            let ours = reencode(&event);

            assert_eq!(ours, reference, "{scenario}: value differs for {raw}");
            assert_eq!(
                orders(&ours),
                orders(&reference),
                "{scenario}: key order for {raw}"
            );
            let keys: Vec<&str> = ours
                .as_object()
                .map(|map| map.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let recorded: Vec<&str> = frame["keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            assert_eq!(keys, recorded, "{scenario}: top-level keys for {raw}");
            // Byte for byte, once the reference's text is made compact and unescaped.
            let compact = serde_json::to_string(&reference).unwrap_or_default();
            assert_eq!(
                encode_string(&event),
                compact,
                "{scenario}: differs beyond {ACCEPTED_TEXT_DIFFERENCES:?}"
            );
            assert_eq!(
                frame["frame"], "binary",
                "{scenario}: the reference sends binary"
            );

            types.insert(event.body.type_name());
            checked += 1;
        }
    }
    assert!(checked > 150, "only {checked} outbound frames");
    // Every type the reference sent in the recordings was covered.
    for expected in [
        "agent.ready",
        "agent.error",
        "agent.log",
        "agent.llm.response.start",
        "agent.llm.response.chunk",
        "agent.llm.response.end",
        "agent.end_call",
        "agent.transfer_call",
        "agent.transcript.update",
        "system.user.joined",
        "system.user.stopped_speaking",
        "system.llm.request",
        "system.control.interrupt",
    ] {
        assert!(types.contains(expected), "no {expected} frame checked");
    }
}

#[test]
fn inbound_frames_decode_like_the_reference() {
    let mut accepted = 0;
    let mut rejected = Vec::new();
    for path in fixture_files() {
        let fixture = load(&path);
        let scenario = name(&path);
        let outbound: Vec<&Value> = fixture["outbound"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        for step in fixture["inbound"].as_array().into_iter().flatten() {
            match step["op"].as_str() {
                Some("send") => {}
                Some("send_raw") => {
                    // Raw bytes the reference could not read as JSON: so do we.
                    let data = step["data"].as_str().unwrap_or_default();
                    let err = decode_str(data).err();
                    assert_eq!(
                        err.map(|e| e.kind().as_str()),
                        Some("not_json"),
                        "{scenario}"
                    );
                    continue;
                }
                _ => continue,
            }
            let frame = &step["frame"];
            let text = serde_json::to_string(frame).unwrap_or_default();
            let expected_rejection = REJECTED_BY_REFERENCE
                .iter()
                .find(|(rejected, _)| *rejected == text)
                .map(|(_, kind)| *kind);
            let event = match (decode_str(&text), expected_rejection) {
                (Ok(event), None) => event,
                (Err(err), Some(kind)) => {
                    assert_eq!(err.kind().as_str(), kind, "{scenario}: {text}: {err}");
                    rejected.push(text);
                    continue;
                }
                (Ok(event), Some(_)) => panic!("{scenario}: {text} was accepted: {event:?}"),
                (Err(err), None) => panic!("{scenario}: {text} was rejected: {err}"),
            };
            accepted += 1;
            check_against_frame(&scenario, frame, &event);

            // Where the reference echoed this frame (same type, our original timestamp), our
            // encoding is its echo: same JSON, same key order.
            let echo = outbound.iter().find(|out| {
                out["timestamp_is_inbound_original"] == true
                    && out["event"]["type"] == frame["type"]
                    && out["event"]["timestamp"] == frame["timestamp"]
            });
            if let Some(echo) = echo {
                let ours = reencode(&event);
                assert_eq!(ours, echo["event"], "{scenario}: echo of {text}");
                assert_eq!(
                    orders(&ours),
                    orders(&echo["event"]),
                    "{scenario}: echo order"
                );
            }
        }
    }
    assert!(accepted > 80, "only {accepted} inbound frames");
    // Each documented rejection was met in the recordings (so the list stays honest).
    for (frame, _) in REJECTED_BY_REFERENCE {
        assert!(
            rejected.iter().any(|seen| seen == frame),
            "never seen: {frame}"
        );
    }
}

/// Our encoding of a decoded inbound frame is the frame itself, save the documented drops and
/// additions, in the frame's key order.
fn check_against_frame(scenario: &str, frame: &Value, event: &Event) {
    let ours = reencode(event);
    let (Some(ours_map), Some(frame_map)) = (ours.as_object(), frame.as_object()) else {
        panic!("{scenario}: not objects");
    };
    let event_type = frame["type"].as_str().unwrap_or_default();
    for (key, value) in frame_map {
        if UNKNOWN_INBOUND_FIELDS.contains(&key.as_str()) {
            assert!(!ours_map.contains_key(key), "{scenario}: {key} kept");
        } else {
            assert_eq!(
                ours_map.get(key),
                Some(value),
                "{scenario}: {key} of {frame}"
            );
        }
    }
    for (key, value) in ours_map {
        if frame_map.contains_key(key) {
            continue;
        }
        let documented = DEFAULTS_ADDED.iter().any(|(ty, field, default)| {
            *ty == event_type
                && field == key
                && serde_json::from_str::<Value>(default).ok().as_ref() == Some(value)
        });
        let generated_timestamp = key == "timestamp" && value.is_string();
        assert!(
            documented || generated_timestamp,
            "{scenario}: added {key}: {value}"
        );
    }
    // Nested objects keep the frame's order (messages, session_context, ...).
    let kept: Vec<(String, Vec<String>)> = orders(frame)
        .into_iter()
        .map(|(path, keys)| {
            let keys = keys
                .into_iter()
                .filter(|key| !UNKNOWN_INBOUND_FIELDS.contains(&key.as_str()))
                .collect();
            (path, keys)
        })
        .filter(|(path, _)| {
            !UNKNOWN_INBOUND_FIELDS
                .iter()
                .any(|f| path.starts_with(&format!("$.{f}")))
        })
        .collect();
    let ours_orders = orders(&ours);
    for (path, keys) in kept {
        let Some((_, our_keys)) = ours_orders.iter().find(|(p, _)| *p == path) else {
            panic!("{scenario}: {path} missing");
        };
        let our_keys: Vec<&String> = our_keys.iter().filter(|k| keys.contains(k)).collect();
        let keys: Vec<&String> = keys.iter().collect();
        assert_eq!(our_keys, keys, "{scenario}: key order at {path} of {frame}");
    }
}
