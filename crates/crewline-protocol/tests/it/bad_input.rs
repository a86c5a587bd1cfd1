//! Bad input for the frame decoder, beyond "does not panic": every bad frame gets the typed
//! error that names what is wrong.
//!
//! - Wrong types in every field of every event type, nested fields included: each frame is
//!   either accepted (the field is lenient, e.g. `null` for an optional one) and then encodes
//!   and decodes back to itself, or refused with `InvalidFields` for its own type whose message
//!   starts with the field's name.
//! - Deep nesting at, just over and far over `MAX_DEPTH`, in every place a frame can nest.
//! - A proptest corpus: arbitrary bytes, arbitrary JSON with a known `type` and random
//!   fields, and valid frames with one value swapped for a random one. `PROPTEST_CASES` sets
//!   the cases per property (default 2,000).

use crewline_protocol::{DecodeError, MAX_DEPTH, decode, decode_str, encode};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A valid frame of every event type, with every field set (nested ones too).
fn valid_frames() -> Vec<Value> {
    let handoff = json!({"type": "prompt", "prompt": "Say hello to the agent"});
    vec![
        json!({"type": "system.init", "timestamp": "2030-01-02T03:04:05.000006",
            "version": "1.0",
            "session_context": {
                "initial_variables": {"name": "Ada", "tier": 3},
                "conversation_type": "telephonyInbound",
                "caller": {"user_number": "+15550100", "agent_number": "+15550199",
                    "direction": "inbound", "call_id": "call-1", "region": "eu"}
            },
            "output_agent_settings": {"interruptible": false, "voice": "x"}}),
        json!({"type": "system.user.joined", "timestamp": 1_900_000_000}),
        json!({"type": "system.user.started_speaking", "timestamp": 1_900_000_000.5}),
        json!({"type": "system.user.stopped_speaking", "timestamp": "2030-01-02 03:04:05"}),
        json!({"type": "system.llm.request", "timestamp": "2030-01-02T03:04:05Z",
            "messages": [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                    "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
            "extra_params": {"temperature": 0.2}}),
        json!({"type": "system.control.interrupt"}),
        json!({"type": "system.output_agent.update_settings", "settings": {"interruptible": true}}),
        json!({"type": "agent.transcript.update", "role": "user", "content": "Hello"}),
        json!({"type": "agent.ready"}),
        json!({"type": "agent.error", "message": "boom", "severity": "fatal",
            "payload": {"node_name": "n"}}),
        json!({"type": "agent.llm.response.start", "request_id": "r1"}),
        json!({"type": "agent.llm.response.chunk", "text": "Hel"}),
        json!({"type": "agent.llm.response.end"}),
        json!({"type": "agent.speak", "text": "One moment"}),
        json!({"type": "agent.end_call"}),
        json!({"type": "agent.transfer_call", "transfer_call_number": "+15550123",
            "transfer_options": {"type": "warm_transfer",
                "private_handoff_option": handoff,
                "public_handoff_option": {"type": "static", "prompt": "Transferring you"}},
            "on_hold_music": "relaxing_sound"}),
        json!({"type": "agent.log", "name": "tool_call_start",
            "payload": {"turn_id": "t", "context": {"arguments": {"a": [1, 2]}}}}),
        json!({"type": "agent.control.mute_user"}),
        json!({"type": "agent.control.unmute_user"}),
        json!({"type": "agent.control.interrupt"}),
    ]
}

/// Values of every JSON type, for swapping in where another was expected.
fn wrong_values() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(u64::MAX),
        json!(""),
        json!("not-an-enum-value"),
        json!([]),
        json!([1, "two", null]),
        json!({}),
        json!({"unexpected": {"nested": [true]}}),
    ]
}

/// Every path to a value inside `value` (object keys and array positions), not the root.
fn paths(value: &Value) -> Vec<Vec<PathStep>> {
    let mut out = Vec::new();
    let mut stack = vec![(Vec::new(), value)];
    while let Some((path, value)) = stack.pop() {
        let children: Vec<(PathStep, &Value)> = match value {
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| (PathStep::Key(k.clone()), v))
                .collect(),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (PathStep::Index(i), v))
                .collect(),
            _ => Vec::new(),
        };
        for (step, child) in children {
            let mut child_path = path.clone();
            child_path.push(step);
            out.push(child_path.clone());
            stack.push((child_path, child));
        }
    }
    out
}

#[derive(Debug, Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn at_mut<'a>(value: &'a mut Value, path: &[PathStep]) -> &'a mut Value {
    path.iter().fold(value, |value, step| match step {
        PathStep::Key(key) => &mut value[key.as_str()],
        PathStep::Index(i) => &mut value[*i],
    })
}

/// Checks the decoder's answer to `frame`, derived from a valid frame of `event_type` by
/// changing the value at top-level field `field`.
fn check_changed_frame(frame: &Value, event_type: &str, field: &str) -> Result<(), String> {
    let text = frame.to_string();
    match decode_str(&text) {
        Ok(event) => {
            // Accepted: then it is a well-formed event that survives a round trip.
            let again = decode(&encode(&event)).map_err(|e| format!("{text}: re-decode: {e}"))?;
            if again != event {
                return Err(format!("{text}: round trip changed the event"));
            }
            Ok(())
        }
        Err(DecodeError::MissingType) if field == "type" => Ok(()),
        Err(DecodeError::UnknownType(_)) if field == "type" => Ok(()),
        Err(DecodeError::InvalidFields {
            event_type: got,
            message,
        }) => {
            if got != event_type {
                return Err(format!("{text}: error for `{got}`, not `{event_type}`"));
            }
            // The error names the field, as written or by its snake_case name.
            let names_it = message.starts_with(field)
                || message.contains(&format!("`{field}`"))
                || message.starts_with(&snake_case(field));
            if !names_it {
                return Err(format!("{text}: `{message}` does not name `{field}`"));
            }
            Ok(())
        }
        Err(other) => Err(format!("{text}: unexpected {other:?}")),
    }
}

fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn field_of(path: &[PathStep]) -> String {
    match path.first() {
        Some(PathStep::Key(key)) => key.clone(),
        _ => String::new(),
    }
}

#[test]
fn a_frame_that_is_not_json_keeps_serdes_error_as_its_cause() {
    let error = decode(br#"{"type": "system.user.joined""#).unwrap_err();
    assert!(matches!(error, DecodeError::NotJson(_)), "{error:?}");
    // The layer says itself; serde's words (where the frame broke) are the cause's.
    assert_eq!(error.to_string(), "frame is not JSON");
    let cause = std::error::Error::source(&error).expect("the cause is kept");
    assert!(cause.to_string().contains("EOF"), "{cause}");
    let serde = cause
        .source()
        .and_then(|c| c.downcast_ref::<serde_json::Error>());
    assert!(serde.is_some_and(|e| e.is_eof()), "{cause:?}");
    assert_eq!(
        crewline_core::error_chain(&error),
        format!("frame is not JSON: {cause}")
    );
}

#[test]
fn every_valid_frame_decodes() {
    for frame in valid_frames() {
        let event = decode_str(&frame.to_string()).unwrap_or_else(|e| panic!("{frame}: {e}"));
        assert_eq!(Some(event.body.type_name()), frame["type"].as_str());
    }
}

#[test]
fn wrong_types_in_every_field_of_every_event_get_a_typed_error_naming_the_field() {
    let mut tried = 0usize;
    let mut refused = 0usize;
    let mut failures = Vec::new();
    for valid in valid_frames() {
        let event_type = valid["type"].as_str().expect("type").to_owned();
        for path in paths(&valid) {
            let field = field_of(&path);
            for wrong in wrong_values() {
                let mut frame = valid.clone();
                *at_mut(&mut frame, &path) = wrong;
                tried += 1;
                if decode_str(&frame.to_string()).is_err() {
                    refused += 1;
                }
                if let Err(failure) = check_changed_frame(&frame, &event_type, &field) {
                    failures.push(failure);
                }
            }
            // And the field missing altogether.
            if let [PathStep::Key(key)] = path.as_slice() {
                let mut frame = valid.clone();
                frame.as_object_mut().expect("object").remove(key);
                tried += 1;
                if let Err(failure) = check_changed_frame(&frame, &event_type, key) {
                    failures.push(failure);
                }
            }
        }
    }
    eprintln!("wrong-type frames tried: {tried}, refused with a typed error: {refused}");
    assert!(tried > 1000, "{tried}");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `depth` nested arrays around `inner`.
fn nested(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn nesting_is_accepted_up_to_max_depth_and_refused_past_it_wherever_it_is() {
    // The frame itself is level 1, so a field may nest MAX_DEPTH - 1 levels.
    let places = [
        r#"{"type":"agent.log","name":"n","payload":{"deep":HOLE}}"#,
        r#"{"type":"system.llm.request","extra_params":{"x":HOLE}}"#,
        r#"{"type":"system.init","version":"1","session_context":{"initial_variables":{"v":HOLE},"conversation_type":"chat"}}"#,
        r#"{"type":"agent.ready","unknown_extra_field":HOLE}"#,
    ];
    let mut tried = 0;
    for place in places {
        // The levels left for the hole: the frame and the objects around it take theirs.
        let room = MAX_DEPTH
            - place[..place.find("HOLE").expect("hole")]
                .matches('{')
                .count();
        for depth in [1, room - 1, room] {
            let frame = place.replace("HOLE", &nested(depth, "1"));
            assert!(decode_str(&frame).is_ok(), "depth {depth}: {frame}");
            tried += 1;
        }
        for depth in [room + 1, room + 50, 100_000] {
            let frame = place.replace("HOLE", &nested(depth, "1"));
            assert_eq!(
                decode_str(&frame),
                Err(DecodeError::TooDeep),
                "depth {depth}"
            );
            tried += 1;
        }
        // Objects nest the same way.
        let objects = format!("{}1{}", r#"{"a":"#.repeat(room + 1), "}".repeat(room + 1));
        assert_eq!(
            decode_str(&place.replace("HOLE", &objects)),
            Err(DecodeError::TooDeep)
        );
        tried += 1;
    }
    // Brackets inside strings do not count; unclosed ones are refused before parsing.
    let in_string = format!(
        r#"{{"type":"agent.speak","text":"{}"}}"#,
        "[".repeat(100_000)
    );
    assert!(decode_str(&in_string).is_ok());
    assert_eq!(
        decode_str(&"[".repeat(1_000_000)),
        Err(DecodeError::TooDeep)
    );
    assert_eq!(
        decode_str(&"{\"a\":".repeat(1_000_000)),
        Err(DecodeError::TooDeep)
    );
    eprintln!("nesting frames tried: {}", tried + 3);
}

/// Proptest cases per property: `PROPTEST_CASES`, else 2,000.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(2000)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        prop::sample::select(vec![
            "user",
            "assistant",
            "fatal",
            "warning",
            "cold_transfer",
            "prompt",
            "webcall",
            "none",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(field_name(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Field names the decoder knows, and a few it does not.
fn field_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "version",
        "session_context",
        "initial_variables",
        "conversation_type",
        "caller",
        "call_id",
        "output_agent_settings",
        "interruptible",
        "messages",
        "role",
        "content",
        "extra_params",
        "settings",
        "message",
        "severity",
        "payload",
        "request_id",
        "text",
        "transfer_call_number",
        "transferCallNumber",
        "transfer_options",
        "private_handoff_option",
        "privateHandoffOption",
        "on_hold_music",
        "name",
        "timestamp",
        "zzz",
    ])
    .prop_map(str::to_owned)
}

fn event_type() -> impl Strategy<Value = String> {
    let types: Vec<String> = valid_frames()
        .iter()
        .filter_map(|f| f["type"].as_str().map(str::to_owned))
        .collect();
    prop::sample::select(types)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn arbitrary_bytes_get_not_utf8_exactly_when_they_are_not_utf8(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let result = decode(&bytes);
        if std::str::from_utf8(&bytes).is_err() {
            prop_assert_eq!(result, Err(DecodeError::NotUtf8));
        } else if let Err(error) = result {
            prop_assert_ne!(error, DecodeError::NotUtf8);
        }
    }

    #[test]
    fn arbitrary_fields_under_a_known_type_are_accepted_or_refused_for_that_type(
        event_type in event_type(),
        fields in prop::collection::btree_map(field_name(), json_value(), 0..8),
    ) {
        let mut frame: serde_json::Map<String, Value> = fields.into_iter().collect();
        frame.insert("type".to_owned(), Value::from(event_type.clone()));
        let text = Value::Object(frame).to_string();
        match decode_str(&text) {
            Ok(event) => {
                prop_assert_eq!(event.body.type_name(), event_type.as_str());
                prop_assert_eq!(decode(&encode(&event)).ok(), Some(event));
            }
            Err(DecodeError::InvalidFields { event_type: got, message }) => {
                prop_assert_eq!(&got, &event_type);
                prop_assert!(!message.is_empty());
            }
            Err(DecodeError::TooDeep) => {}
            Err(other) => prop_assert!(false, "{text}: unexpected {other:?}"),
        }
    }

    #[test]
    fn one_value_swapped_in_a_valid_frame_is_accepted_or_names_its_field(
        frame_index in any::<prop::sample::Index>(),
        path_index in any::<prop::sample::Index>(),
        replacement in json_value(),
    ) {
        let frames = valid_frames();
        let valid = frame_index.get(&frames);
        let event_type = valid["type"].as_str().unwrap_or_default().to_owned();
        let all = paths(valid);
        prop_assume!(!all.is_empty());
        let path = path_index.get(&all);
        let mut frame = valid.clone();
        *at_mut(&mut frame, path) = replacement;
        if let Err(failure) = check_changed_frame(&frame, &event_type, &field_of(path)) {
            prop_assert!(false, "{}", failure);
        }
    }
}
