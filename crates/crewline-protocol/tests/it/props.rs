//! Property tests: `decode` never panics, and `decode(encode(e)) == e`.

use crewline_protocol::{
    AgentError, Caller, ConversationType, Event, EventBody, HandoffKind, HandoffOption, HoldMusic,
    LlmRequest, Messages, OutputAgentSettings, SessionContext, Severity, SystemInit, Timestamp,
    TranscriptRole, TranscriptUpdate, TransferCall, TransferOptions, TransferType, decode,
    decode_str, encode,
};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Number, Value};

fn finite_f64() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
}

fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        finite_f64().prop_filter_map("finite", Number::from_f64),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number().prop_map(Value::Number),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            map_of(inner, "").prop_map(Value::Object),
        ]
    })
}

/// A map whose keys start with `prefix` (so they cannot collide with named fields).
fn map_of(
    values: impl Strategy<Value = Value>,
    prefix: &'static str,
) -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((any::<String>(), values), 0..4).prop_map(move |entries| {
        entries
            .into_iter()
            .map(|(key, value)| (format!("{prefix}{key}"), value))
            .collect()
    })
}

fn map() -> impl Strategy<Value = Map<String, Value>> {
    map_of(value(), "")
}

fn text() -> impl Strategy<Value = String> {
    any::<String>()
}

fn timestamp() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        text().prop_map(Timestamp::Text),
        Just(Timestamp::now()),
        number().prop_map(Timestamp::Unix),
    ]
}

fn handoff() -> impl Strategy<Value = Option<HandoffOption>> {
    prop::option::of(
        (
            select(vec![HandoffKind::Prompt, HandoffKind::Static]),
            text(),
        )
            .prop_map(|(kind, prompt)| HandoffOption { kind, prompt }),
    )
}

fn system_init() -> impl Strategy<Value = EventBody> {
    let caller = (
        prop::option::of(text()),
        prop::option::of(text()),
        prop::option::of(text()),
        prop::option::of(text()),
        map_of(value(), "x_"),
    )
        .prop_map(
            |(user_number, agent_number, direction, call_id, extra)| Caller {
                user_number,
                agent_number,
                direction,
                call_id,
                extra,
            },
        );
    let settings = (any::<bool>(), map_of(value(), "x_")).prop_map(|(interruptible, extra)| {
        OutputAgentSettings {
            interruptible,
            extra,
        }
    });
    let kind = select(vec![
        ConversationType::TelephonyInbound,
        ConversationType::TelephonyOutbound,
        ConversationType::Chat,
        ConversationType::Webcall,
        ConversationType::SupervisorAgent,
    ]);
    (
        text(),
        map(),
        kind,
        prop::option::of(caller),
        prop::option::of(settings),
    )
        .prop_map(
            |(version, initial_variables, conversation_type, caller, output_agent_settings)| {
                EventBody::SystemInit(SystemInit {
                    version,
                    session_context: SessionContext {
                        initial_variables,
                        conversation_type,
                        caller,
                    },
                    output_agent_settings,
                })
            },
        )
}

fn body() -> impl Strategy<Value = EventBody> {
    let unit = select(vec![
        EventBody::UserJoined,
        EventBody::UserStartedSpeaking,
        EventBody::UserStoppedSpeaking,
        EventBody::Interrupt,
        EventBody::AgentReady,
        EventBody::ResponseEnd,
        EventBody::EndCall,
        EventBody::MuteUser,
        EventBody::UnmuteUser,
        EventBody::AgentInterrupt,
    ]);
    let transfer = (
        text(),
        select(vec![TransferType::ColdTransfer, TransferType::WarmTransfer]),
        handoff(),
        handoff(),
        prop::option::of(select(vec![
            HoldMusic::Ringtone,
            HoldMusic::RelaxingSound,
            HoldMusic::UpliftingBeats,
            HoldMusic::None,
        ])),
    )
        .prop_map(|(number, kind, private, public, music)| {
            EventBody::TransferCall(TransferCall {
                transfer_call_number: number,
                transfer_options: TransferOptions {
                    kind,
                    private_handoff_option: private,
                    public_handoff_option: public,
                },
                on_hold_music: music,
            })
        });
    prop_oneof![
        unit,
        system_init(),
        (
            prop::option::of(prop::collection::vec(value(), 0..4)),
            map()
        )
            .prop_map(
                |(messages, extra_params)| EventBody::LlmRequest(LlmRequest {
                    messages: messages.map(|m: Vec<serde_json::Value>| Messages::from_values(&m)),
                    extra_params
                })
            ),
        map().prop_map(|settings| EventBody::UpdateSettings { settings }),
        (
            select(vec![TranscriptRole::User, TranscriptRole::Assistant]),
            text()
        )
            .prop_map(
                |(role, content)| EventBody::TranscriptUpdate(TranscriptUpdate { role, content })
            ),
        (
            text(),
            select(vec![Severity::Warning, Severity::Fatal]),
            map()
        )
            .prop_map(
                |(message, severity, payload)| EventBody::AgentError(AgentError {
                    message,
                    severity,
                    payload
                })
            ),
        prop::option::of(text()).prop_map(|request_id| EventBody::ResponseStart { request_id }),
        text().prop_map(|text| EventBody::ResponseChunk { text }),
        text().prop_map(|text| EventBody::Speak { text }),
        transfer,
        (text(), map()).prop_map(|(name, payload)| EventBody::Log { name, payload }),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    (timestamp(), body()).prop_map(|(timestamp, body)| Event { timestamp, body })
}

/// JSON-ish text made of the protocol's own tokens, to reach past the first checks.
fn jsonish() -> impl Strategy<Value = String> {
    let token = select(vec![
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        "\"type\"",
        "\"timestamp\"",
        "\"system.init\"",
        "\"system.llm.request\"",
        "\"agent.transfer_call\"",
        "\"agent.log\"",
        "\"messages\"",
        "\"session_context\"",
        "\"conversation_type\"",
        "\"chat\"",
        "\"text\"",
        "\"payload\"",
        "\"transfer_options\"",
        "\"privateHandoffOption\"",
        "null",
        "true",
        "1",
        "-1.5e3",
        "\"\\u00b0\"",
        "\"\\ud800\"",
        "\"",
        "\\",
    ]);
    prop::collection::vec(token, 0..40).prop_map(|tokens| tokens.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn decode_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn decode_never_panics_on_jsonish_text(text in jsonish()) {
        let _ = decode_str(&text);
    }

    #[test]
    fn decode_never_panics_on_mutated_frames(
        event in event(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode(&event);
        for (index, byte) in edits {
            let at = index.index(bytes.len());
            bytes[at] = byte;
        }
        let _ = decode(&bytes);
    }

    #[test]
    fn encode_then_decode_is_the_identity(event in event()) {
        let bytes = encode(&event);
        let back = decode(&bytes);
        prop_assert_eq!(back.as_ref().ok(), Some(&event), "{:?}", String::from_utf8_lossy(&bytes));
        // And encoding is stable.
        if let Ok(back) = back {
            prop_assert_eq!(encode(&back), bytes);
        }
    }
}
