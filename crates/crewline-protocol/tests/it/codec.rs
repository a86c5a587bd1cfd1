//! Unit tests of the codec: errors, timestamps, round trips, leniency.

use std::time::{Duration, UNIX_EPOCH};

use crewline_protocol::{
    AgentError, Caller, ConversationType, DecodeError, Event, EventBody, HandoffKind,
    HandoffOption, HoldMusic, LlmRequest, MAX_DEPTH, Messages, OutputAgentSettings, SessionContext,
    Severity, SystemInit, Timestamp, TranscriptRole, TranscriptUpdate, TransferCall,
    TransferOptions, TransferType, decode, decode_str, encode, encode_into, encode_string,
};
use serde_json::{Map, Number, Value, json};

const TS: &str = "2030-01-02T03:04:05.123456";

fn obj(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn ok(text: &str) -> Event {
    match decode_str(text) {
        Ok(event) => event,
        Err(err) => panic!("{text} did not decode: {err}"),
    }
}

fn err(text: &str) -> DecodeError {
    match decode_str(text) {
        Ok(event) => panic!("{text} decoded to {event:?}"),
        Err(err) => err,
    }
}

/// One event of every variant, with every optional field set somewhere.
fn every_variant() -> Vec<EventBody> {
    let handoff = HandoffOption {
        kind: HandoffKind::Prompt,
        prompt: "Brief the agent".into(),
    };
    vec![
        EventBody::SystemInit(SystemInit {
            version: "1.0".into(),
            session_context: SessionContext {
                initial_variables: obj(json!({"name": "Ada", "n": 3})),
                conversation_type: ConversationType::TelephonyInbound,
                caller: Some(Caller {
                    user_number: Some("+15550001".into()),
                    agent_number: Some("+15550002".into()),
                    direction: Some("inbound".into()),
                    call_id: None,
                    extra: obj(json!({"region": "eu"})),
                }),
            },
            output_agent_settings: Some(OutputAgentSettings {
                interruptible: false,
                extra: obj(json!({"voice": "x"})),
            }),
        }),
        EventBody::UserJoined,
        EventBody::UserStartedSpeaking,
        EventBody::UserStoppedSpeaking,
        EventBody::LlmRequest(LlmRequest {
            messages: Some(Messages::from_values(&[
                json!({"role": "user", "content": "Hi"}),
            ])),
            extra_params: obj(json!({"temperature": 0.5})),
        }),
        EventBody::LlmRequest(LlmRequest::default()),
        EventBody::Interrupt,
        EventBody::UpdateSettings {
            settings: obj(json!({"interruptible": false})),
        },
        EventBody::TranscriptUpdate(TranscriptUpdate {
            role: TranscriptRole::Assistant,
            content: "Hello ° ✓".into(),
        }),
        EventBody::AgentReady,
        EventBody::AgentError(AgentError {
            message: "boom".into(),
            severity: Severity::Fatal,
            payload: obj(json!({"node_name": "n"})),
        }),
        EventBody::ResponseStart {
            request_id: Some("req-1".into()),
        },
        EventBody::ResponseStart { request_id: None },
        EventBody::ResponseChunk {
            text: "chunk \"quoted\"\n".into(),
        },
        EventBody::ResponseEnd,
        EventBody::Speak {
            text: "One moment".into(),
        },
        EventBody::EndCall,
        EventBody::TransferCall(TransferCall {
            transfer_call_number: "+15550100".into(),
            transfer_options: TransferOptions {
                kind: TransferType::WarmTransfer,
                private_handoff_option: Some(handoff.clone()),
                public_handoff_option: Some(HandoffOption {
                    kind: HandoffKind::Static,
                    ..handoff
                }),
            },
            on_hold_music: Some(HoldMusic::RelaxingSound),
        }),
        EventBody::Log {
            name: "tool_call_start".into(),
            payload: obj(json!({"turn_id": "", "tool_call_id": "c1"})),
        },
        EventBody::MuteUser,
        EventBody::UnmuteUser,
        EventBody::AgentInterrupt,
    ]
}

#[test]
fn every_variant_round_trips_with_its_type_name() {
    for body in every_variant() {
        let event = Event::with_timestamp(TS, body);
        let bytes = encode(&event);
        let back = decode(&bytes).unwrap_or_else(|err| panic!("{event:?}: {err}"));
        assert_eq!(back, event);
        let value: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(value["type"], event.body.type_name());
        assert_eq!(value["timestamp"], TS);
    }
}

#[test]
fn encoding_is_compact_ordered_and_writes_nulls() {
    let chunk = Event::with_timestamp(
        TS,
        EventBody::ResponseChunk {
            text: "18°C".into(),
        },
    );
    assert_eq!(
        encode_string(&chunk),
        r#"{"type":"agent.llm.response.chunk","timestamp":"2030-01-02T03:04:05.123456","text":"18°C"}"#
    );
    let transfer = Event::with_timestamp(
        TS,
        EventBody::TransferCall(TransferCall {
            transfer_call_number: "+15550100".into(),
            transfer_options: TransferOptions::default(),
            on_hold_music: None,
        }),
    );
    assert_eq!(
        encode_string(&transfer),
        concat!(
            r#"{"type":"agent.transfer_call","timestamp":"2030-01-02T03:04:05.123456","#,
            r#""transfer_call_number":"+15550100","transfer_options":{"type":"cold_transfer","#,
            r#""private_handoff_option":null,"public_handoff_option":null},"on_hold_music":null}"#
        )
    );
    let start = Event::with_timestamp(TS, EventBody::ResponseStart { request_id: None });
    assert!(encode_string(&start).ends_with(r#","request_id":null}"#));
    let error = Event::with_timestamp(
        TS,
        EventBody::AgentError(AgentError::new("x", Severity::Warning)),
    );
    assert!(encode_string(&error).ends_with(r#""message":"x","severity":"warning","payload":{}}"#));
}

#[test]
fn encode_into_appends_to_a_reused_buffer() {
    let mut buffer = b"prefix".to_vec();
    let end = Event::with_timestamp(TS, EventBody::ResponseEnd);
    encode_into(&end, &mut buffer);
    assert_eq!(
        buffer,
        br#"prefix{"type":"agent.llm.response.end","timestamp":"2030-01-02T03:04:05.123456"}"#
    );
}

#[test]
fn echo_keeps_the_original_timestamp_exactly() {
    for stamp in [
        r#""2030-01-02T03:04:01.001111""#,
        r#""2030-01-02 03:04:01""#,
        r#""2030-01-02T03:04:01+05:30""#,
        r#""not a time at all""#,
        "1700000000",
        "1700000000.25",
        "-5",
        "1.5e9",
    ] {
        let text = format!(r#"{{"type":"system.user.joined","timestamp":{stamp}}}"#);
        let event = ok(&text);
        let again: Value = serde_json::from_slice(&encode(&event)).unwrap_or_default();
        let original: Value = serde_json::from_str(stamp).unwrap_or_default();
        assert_eq!(again["timestamp"], original, "{stamp}");
        if !stamp.contains('e') {
            // Same text too, except a float written in exponent form (same number).
            assert_eq!(encode_string(&event), text, "{stamp}");
        }
    }
    // An integer stays an integer, a float a float.
    assert_eq!(
        ok(r#"{"type":"agent.ready","timestamp":17}"#).timestamp,
        Timestamp::Unix(Number::from(17))
    );
    assert!(encode_string(&ok(r#"{"type":"agent.ready","timestamp":17.0}"#)).contains(":17.0}"));
}

#[test]
fn missing_or_odd_timestamps_are_filled_with_now() {
    for text in [
        r#"{"type":"agent.ready"}"#,
        r#"{"type":"agent.ready","timestamp":null}"#,
        r#"{"type":"agent.ready","timestamp":{"at":1}}"#,
        r#"{"type":"agent.ready","timestamp":true}"#,
    ] {
        let event = ok(text);
        let Timestamp::Text(stamp) = &event.timestamp else {
            panic!("{text}: {:?}", event.timestamp);
        };
        assert_reference_format(stamp);
        assert!(event.timestamp.parse().is_some());
    }
}

fn assert_reference_format(stamp: &str) {
    // ^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?$ as recorded from the reference.
    let shape = stamp
        .bytes()
        .map(|b| if b.is_ascii_digit() { b'9' } else { b })
        .collect::<Vec<_>>();
    assert!(
        shape == b"9999-99-99T99:99:99.999999" || shape == b"9999-99-99T99:99:99",
        "{stamp}"
    );
}

#[test]
fn now_is_naive_local_time_in_the_reference_format() {
    let Timestamp::Text(stamp) = Timestamp::now() else {
        panic!("now() is text");
    };
    assert_reference_format(&stamp);
    let now = std::time::SystemTime::now();
    let parsed = Timestamp::Text(stamp).parse().unwrap_or(UNIX_EPOCH);
    let skew = now.duration_since(parsed).unwrap_or_else(|e| e.duration());
    assert!(skew < Duration::from_secs(5), "{skew:?}");
}

#[test]
fn timestamps_parse_in_every_accepted_form() {
    let secs = |text: &str| Timestamp::from(text).to_unix_seconds();
    let base = 1_893_553_445.0; // 2030-01-02T03:04:05Z
    assert_eq!(secs("2030-01-02T03:04:05Z"), Some(base));
    assert_eq!(secs("2030-01-02t03:04:05z"), Some(base));
    assert_eq!(secs("2030-01-02T03:04:05+00:00"), Some(base));
    assert_eq!(secs("2030-01-02T05:04:05+02:00"), Some(base));
    assert_eq!(secs("2030-01-02T05:04:05+0200"), Some(base));
    assert_eq!(secs("2030-01-02T05:04:05+02"), Some(base));
    assert_eq!(secs("2030-01-02T00:34:05-02:30"), Some(base));
    assert_eq!(secs("2030-01-02 03:04:05Z"), Some(base));
    assert_eq!(secs("2030-01-02T03:04:05.25Z"), Some(base + 0.25));
    assert_eq!(secs("2030-01-02T03:04:05,5Z"), Some(base + 0.5));
    assert_eq!(secs("2030-01-02T03:04Z"), Some(base - 5.0));
    assert_eq!(secs(" 2030-01-02T03:04:05Z "), Some(base));
    assert_eq!(secs("1893553445"), Some(base));
    assert_eq!(secs("1893553445.5"), Some(base + 0.5));

    // Naive forms are local time, as the reference writes them.
    let local = |text: &str| {
        let naive = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").ok()?;
        let local = chrono::TimeZone::from_local_datetime(&chrono::Local, &naive).earliest()?;
        Some(local.timestamp_micros() as f64 / 1e6)
    };
    for text in [
        "2030-01-02T03:04:05",
        "2030-01-02T03:04:05.875855",
        "2026-11-30T06:43:19.875855",
    ] {
        assert_eq!(secs(text), local(text), "{text}");
        assert_eq!(secs(&text.replace('T', " ")), local(text), "{text}");
    }
    assert_eq!(secs("2030-01-02"), local("2030-01-02T00:00:00"));

    // Unix numbers, with pydantic's milliseconds rule above 2e10.
    let unix = |number: Number| Timestamp::Unix(number).to_unix_seconds();
    assert_eq!(unix(Number::from(1_893_553_445)), Some(base));
    assert_eq!(unix(Number::from(1_893_553_445_500_i64)), Some(base + 0.5));
    assert_eq!(
        unix(Number::from_f64(base + 0.25).unwrap_or(Number::from(0))),
        Some(base + 0.25)
    );
    assert_eq!(unix(Number::from(-1)), Some(-1.0));
    assert_eq!(
        Timestamp::Unix(Number::from(1)).parse(),
        Some(UNIX_EPOCH + Duration::from_secs(1))
    );
    assert_eq!(
        Timestamp::from("1969-12-31T23:59:59.5Z").parse(),
        UNIX_EPOCH.checked_sub(Duration::from_millis(500))
    );

    // Kept but not parseable.
    for bad in [
        "",
        "yesterday",
        "2030-13-01T00:00:00Z",
        "2030-02-30",
        "2030-01-02T25:00:00",
        "2030-01-02T03:04:05.Z",
        "2030-01-02T03:04:05+2",
        "2030-01-02T03:04:05 UTC",
        "2030-01-02T03:04:05Zjunk",
        "NaN",
        "inf",
        "1e999",
        "٢٠٣٠-01-02",
    ] {
        assert_eq!(secs(bad), None, "{bad:?}");
        let event = ok(&format!(
            r#"{{"type":"agent.ready","timestamp":{}}}"#,
            json!(bad)
        ));
        assert_eq!(event.timestamp, Timestamp::from(bad));
    }
}

#[test]
fn every_error_kind_is_reported() {
    let cases: Vec<(Vec<u8>, DecodeError, &str)> = vec![
        (vec![0xff, 0xfe, b'{'], DecodeError::NotUtf8, "not_utf8"),
        (
            b"this is not json {".to_vec(),
            DecodeError::NotJson("".into()),
            "not_json",
        ),
        (b"".to_vec(), DecodeError::NotJson("".into()), "not_json"),
        (
            br#"{"type":"agent.ready"} trailing"#.to_vec(),
            DecodeError::NotJson("".into()),
            "not_json",
        ),
        (b"[1,2]".to_vec(), DecodeError::NotAnObject, "not_an_object"),
        (
            br#""system.user.joined""#.to_vec(),
            DecodeError::NotAnObject,
            "not_an_object",
        ),
        (
            br#"{"timestamp":"x","foo":"bar"}"#.to_vec(),
            DecodeError::MissingType,
            "missing_type",
        ),
        (
            br#"{"type":5}"#.to_vec(),
            DecodeError::MissingType,
            "missing_type",
        ),
        (
            br#"{"type":null}"#.to_vec(),
            DecodeError::MissingType,
            "missing_type",
        ),
        (
            br#"{"type":"system.foo","bar":1}"#.to_vec(),
            DecodeError::UnknownType("system.foo".into()),
            "unknown_type",
        ),
        (
            br#"{"type":"system.llm.request","messages":5}"#.to_vec(),
            DecodeError::InvalidFields {
                event_type: "system.llm.request".into(),
                message: "messages: invalid type: integer `5`, expected a sequence".into(),
            },
            "invalid_fields",
        ),
        (
            br#"{"type":"system.init","version":"1.0","session_context":{"initial_variables":{}}}"#
                .to_vec(),
            DecodeError::InvalidFields {
                event_type: "system.init".into(),
                message: "session_context: missing field `conversation_type`".into(),
            },
            "invalid_fields",
        ),
        (
            br#"{"type":"agent.transcript.update","role":"system","content":"x"}"#.to_vec(),
            DecodeError::InvalidFields {
                event_type: "agent.transcript.update".into(),
                message: "role: unknown variant `system`, expected `user` or `assistant`".into(),
            },
            "invalid_fields",
        ),
        (
            br#"{"type":"agent.llm.response.chunk","text":null}"#.to_vec(),
            DecodeError::InvalidFields {
                event_type: "agent.llm.response.chunk".into(),
                message: "text: invalid type: null, expected a string".into(),
            },
            "invalid_fields",
        ),
        (
            br#"{"type":"agent.speak"}"#.to_vec(),
            DecodeError::InvalidFields {
                event_type: "agent.speak".into(),
                message: "missing field `text`".into(),
            },
            "invalid_fields",
        ),
        (
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
            DecodeError::TooDeep,
            "too_deep",
        ),
        (
            "{\"a\":".repeat(100_000).into_bytes(),
            DecodeError::TooDeep,
            "too_deep",
        ),
    ];
    for (bytes, expected, kind) in cases {
        let got = match decode(&bytes) {
            Ok(event) => panic!("{:?} decoded to {event:?}", String::from_utf8_lossy(&bytes)),
            Err(err) => err,
        };
        assert_eq!(got.kind().as_str(), kind, "{got}");
        if let DecodeError::NotJson(message) = &got {
            assert!(!message.is_empty(), "serde's message is kept");
        } else {
            assert_eq!(got, expected);
        }
        assert!(!got.to_string().is_empty());
    }
}

#[test]
fn depth_limit_is_exact() {
    let nested = |depth: usize| {
        let inner = format!("{}{}", "[".repeat(depth - 1), "]".repeat(depth - 1));
        format!(r#"{{"type":"agent.log","name":"n","payload":{{"deep":{inner}}}}}"#)
    };
    // The frame is level 1, `payload` level 2, so arrays fill the rest.
    assert!(decode_str(&nested(MAX_DEPTH - 1)).is_ok());
    assert_eq!(
        decode_str(&nested(MAX_DEPTH)).err(),
        Some(DecodeError::TooDeep)
    );
}

#[test]
fn error_messages_name_what_is_wrong() {
    assert_eq!(
        err(r#"{"type":"system.foo"}"#).to_string(),
        "unknown event type `system.foo`"
    );
    assert_eq!(
        err(r#"{"type":"system.llm.request","messages":5}"#).to_string(),
        "invalid `system.llm.request` event: messages: invalid type: integer `5`, expected a sequence"
    );
    // The layer says itself; serde's words are its cause's.
    assert_eq!(err("{").to_string(), "frame is not JSON");
    assert!(
        crewline_core::error_chain(&err("{")).starts_with("frame is not JSON: EOF while parsing")
    );
}

#[test]
fn null_and_missing_optional_fields_mean_the_default() {
    for text in [
        r#"{"type":"system.llm.request","timestamp":"t"}"#,
        r#"{"type":"system.llm.request","timestamp":"t","messages":null,"extra_params":null}"#,
    ] {
        assert_eq!(ok(text).body, EventBody::LlmRequest(LlmRequest::default()));
    }
    // ...and are written back as null (messages) or the default (extra_params).
    assert_eq!(
        encode_string(&ok(r#"{"type":"system.llm.request","timestamp":"t"}"#)),
        r#"{"type":"system.llm.request","timestamp":"t","messages":null,"extra_params":{}}"#
    );
    assert_eq!(
        ok(r#"{"type":"agent.error","message":"m"}"#).body,
        EventBody::AgentError(AgentError::new("m", Severity::Warning))
    );
    assert_eq!(
        ok(r#"{"type":"agent.error","message":"m","severity":null,"payload":null}"#).body,
        EventBody::AgentError(AgentError::new("m", Severity::Warning))
    );
    assert_eq!(
        ok(r#"{"type":"agent.llm.response.start"}"#).body,
        EventBody::ResponseStart { request_id: None }
    );
    let EventBody::SystemInit(init) = ok(
        r#"{"type":"system.init","version":"1","session_context":{"conversation_type":"chat"}}"#,
    )
    .body
    else {
        panic!("init");
    };
    assert_eq!(init.session_context.caller, None);
    assert!(init.session_context.initial_variables.is_empty());
    assert_eq!(init.output_agent_settings, None);
    let EventBody::SystemInit(init) = ok(
        r#"{"type":"system.init","version":"1","session_context":{"conversation_type":"chat"},"output_agent_settings":{}}"#,
    )
    .body
    else {
        panic!("init");
    };
    assert_eq!(
        init.output_agent_settings,
        Some(OutputAgentSettings::default())
    );
}

#[test]
fn unknown_extra_fields_are_ignored_and_dropped_from_echoes() {
    let chunk = ok(
        r#"{"type":"agent.llm.response.chunk","timestamp":"t","text":"Hi","pause_ms":250,"nested":{"x":[1]}}"#,
    );
    assert_eq!(chunk.body, EventBody::ResponseChunk { text: "Hi".into() });
    let stopped = ok(
        r#"{"type":"system.user.stopped_speaking","timestamp":"2030-01-02T03:04:09.009999","pause_ms":250,"some_new_field":{"x":1}}"#,
    );
    assert_eq!(
        encode_string(&stopped),
        r#"{"type":"system.user.stopped_speaking","timestamp":"2030-01-02T03:04:09.009999"}"#
    );
    // Nested models ignore unknown keys too, except where the protocol keeps them (extra).
    let transfer = ok(
        r#"{"type":"agent.transfer_call","transfer_call_number":"1","transfer_options":{"type":"warm_transfer","later":1}}"#,
    );
    let EventBody::TransferCall(transfer) = transfer.body else {
        panic!("transfer");
    };
    assert_eq!(transfer.transfer_options.kind, TransferType::WarmTransfer);
    let init = ok(
        r#"{"type":"system.init","version":"1","session_context":{"conversation_type":"webcall","caller":{"call_id":"c","sip":"x"},"new":1},"output_agent_settings":{"interruptible":false,"speed":2}}"#,
    );
    let EventBody::SystemInit(init) = init.body else {
        panic!("init");
    };
    let caller = init.session_context.caller.unwrap_or_default();
    assert_eq!(caller.call_id.as_deref(), Some("c"));
    assert_eq!(caller.extra, obj(json!({"sip": "x"})));
    let settings = init.output_agent_settings.unwrap_or_default();
    assert!(!settings.interruptible);
    assert_eq!(settings.extra, obj(json!({"speed": 2})));
}

#[test]
fn transfer_accepts_camel_case_on_input_and_writes_snake_case() {
    let event = ok(
        r#"{"type":"agent.transfer_call","timestamp":"t","transferCallNumber":"+1","transferOptions":{"type":"warm_transfer","privateHandoffOption":{"type":"prompt","prompt":"p"},"publicHandoffOption":{"type":"static","prompt":"s"}},"onHoldMusic":"uplifting_beats"}"#,
    );
    let EventBody::TransferCall(transfer) = &event.body else {
        panic!("transfer");
    };
    assert_eq!(transfer.transfer_call_number, "+1");
    assert_eq!(transfer.on_hold_music, Some(HoldMusic::UpliftingBeats));
    assert_eq!(
        transfer.transfer_options.private_handoff_option,
        Some(HandoffOption {
            kind: HandoffKind::Prompt,
            prompt: "p".into()
        })
    );
    assert_eq!(
        encode_string(&event),
        concat!(
            r#"{"type":"agent.transfer_call","timestamp":"t","transfer_call_number":"+1","#,
            r#""transfer_options":{"type":"warm_transfer","private_handoff_option":{"type":"prompt","prompt":"p"},"#,
            r#""public_handoff_option":{"type":"static","prompt":"s"}},"on_hold_music":"uplifting_beats"}"#
        )
    );
}

#[test]
fn text_and_binary_frames_decode_alike_and_key_order_does_not_matter() {
    let text = r#"{"content":"Hi","role":"user","timestamp":"t","type":"agent.transcript.update"}"#;
    assert_eq!(decode(text.as_bytes()), decode_str(text));
    assert_eq!(
        encode_string(&ok(text)),
        r#"{"type":"agent.transcript.update","timestamp":"t","role":"user","content":"Hi"}"#
    );
}

#[test]
fn interrupt_and_constructors() {
    assert!(Event::now(EventBody::Interrupt).is_interrupt());
    assert!(!Event::now(EventBody::AgentInterrupt).is_interrupt());
    assert!(!Event::now(EventBody::ResponseEnd).is_interrupt());
    let event = Event::with_timestamp(String::from("t"), EventBody::EndCall);
    assert_eq!(event.timestamp, Timestamp::Text("t".into()));
    assert_eq!(Timestamp::Unix(Number::from(5)).to_string(), "5");
    assert_eq!(Timestamp::from("x").to_string(), "x");
}

#[test]
fn messages_keep_their_content_and_key_order_in_echoes() {
    let text = r#"{"type":"system.llm.request","timestamp":"t","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"18.5"}],"extra_params":{"z":1,"a":2.5}}"#;
    assert_eq!(encode_string(&ok(text)), text);
}

#[test]
fn a_conversation_is_read_per_message_and_echoed_compact() {
    let text = r#"{"type":"system.llm.request","timestamp":"t","messages":[ {"role": "user", "content": "Hi, \"you\""}, 7, {"role":"assistant","content":"Hello"} ]}"#;
    let event = ok(text);
    let EventBody::LlmRequest(request) = &event.body else {
        panic!("not a request: {event:?}");
    };
    let messages = request.messages.as_ref().expect("messages kept");
    assert_eq!(
        messages.as_json(),
        r#"[{"role":"user","content":"Hi, \"you\""},7,{"role":"assistant","content":"Hello"}]"#
    );
    // One message that does not fit does not hide the others.
    let parsed: Vec<_> = messages
        .parse::<crewline_core::Message>()
        .expect("an array")
        .collect();
    assert_eq!(parsed.len(), 3);
    assert_eq!(
        parsed[0].as_ref().expect("user").text(),
        Some("Hi, \"you\"")
    );
    assert!(parsed[1].is_err());
    assert_eq!(parsed[2].as_ref().expect("assistant").text(), Some("Hello"));
    assert_eq!(messages.values().expect("values").len(), 3);
    assert!(
        encode_string(&event).contains(r#""messages":[{"role":"user","content":"Hi, \"you\""},7,"#)
    );
}

#[test]
fn a_conversation_must_be_an_array() {
    assert!(Messages::from_json(r#"{"role":"user"}"#).is_err());
    assert!(Messages::from_json("[").is_err());
    let messages = Messages::from_json(r#"[{"role":"user","content":"x"}]"#).expect("array");
    assert_eq!(
        Messages::from_values(&[json!({"role":"user","content":"x"})]),
        messages
    );
}
