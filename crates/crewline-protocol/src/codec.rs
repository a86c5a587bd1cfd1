//! Reading and writing events as JSON frames.

use serde::de::DeserializeOwned;
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::collections::BTreeMap;

use crewline_core::ErrorDetail;
use serde_json::{Map, Value, value::RawValue};

use crate::{
    AgentError, Event, EventBody, LlmRequest, Messages, SystemInit, Timestamp, TranscriptUpdate,
    TransferCall,
};

/// The deepest nesting of arrays and objects a frame may have (the frame itself is level 1).
///
/// Below serde_json's own limit (128), so every over-deep frame gets [`DecodeError::TooDeep`]
/// from a cheap scan before any parsing, and parsing never recurses deeper than this.
pub const MAX_DEPTH: usize = 100;

/// Why a frame could not be read as an event.
///
/// # Examples
///
/// ```
/// use crewline_protocol::{DecodeError, DecodeErrorKind, decode};
///
/// let error = decode(br#"{"type": "system.dance", "timestamp": 0}"#).unwrap_err();
/// assert_eq!(error, DecodeError::UnknownType("system.dance".into()));
/// assert_eq!(error.kind().as_str(), "unknown_type"); // a metrics label
///
/// let error = decode(br#"{"type": "agent.llm.response.chunk", "timestamp": 0}"#).unwrap_err();
/// assert_eq!(error.kind(), DecodeErrorKind::InvalidFields);
/// assert!(error.to_string().contains("text")); // names the missing field
///
/// assert_eq!(decode(b"[1, 2]").unwrap_err().kind(), DecodeErrorKind::NotAnObject);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The frame is not UTF-8.
    #[error("frame is not valid UTF-8")]
    NotUtf8,
    /// The frame is not JSON; the cause is serde's error (its words say where), kept as a
    /// detail so that a decode error stays `Clone` and comparable.
    #[error("frame is not JSON")]
    NotJson(#[source] ErrorDetail),
    /// The frame is JSON but not an object.
    #[error("frame is not a JSON object")]
    NotAnObject,
    /// The object has no `type`, or it is not a string.
    #[error("frame has no string `type`")]
    MissingType,
    /// The `type` is not one this protocol knows.
    #[error("unknown event type `{0}`")]
    UnknownType(String),
    /// A field of a known event is missing or has the wrong shape.
    #[error("invalid `{event_type}` event: {message}")]
    InvalidFields {
        /// The event's `type`.
        event_type: String,
        /// What is wrong, starting with the field's name.
        message: String,
    },
    /// The frame nests arrays or objects deeper than [`MAX_DEPTH`].
    #[error("frame nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

impl DecodeError {
    /// The error's kind, for logs and metrics labels.
    pub fn kind(&self) -> DecodeErrorKind {
        match self {
            Self::NotUtf8 => DecodeErrorKind::NotUtf8,
            Self::NotJson(_) => DecodeErrorKind::NotJson,
            Self::NotAnObject => DecodeErrorKind::NotAnObject,
            Self::MissingType => DecodeErrorKind::MissingType,
            Self::UnknownType(_) => DecodeErrorKind::UnknownType,
            Self::InvalidFields { .. } => DecodeErrorKind::InvalidFields,
            Self::TooDeep => DecodeErrorKind::TooDeep,
        }
    }
}

/// The kind of a [`DecodeError`], without its details: what logs and metrics label a dropped
/// frame with.
///
/// Not `#[non_exhaustive]` on purpose: code that maps every kind (a metrics family, say)
/// matches it exhaustively, and a new kind is a compile error there rather than a silent
/// fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeErrorKind {
    /// See [`DecodeError::NotUtf8`].
    NotUtf8,
    /// See [`DecodeError::NotJson`].
    NotJson,
    /// See [`DecodeError::NotAnObject`].
    NotAnObject,
    /// See [`DecodeError::MissingType`].
    MissingType,
    /// See [`DecodeError::UnknownType`].
    UnknownType,
    /// See [`DecodeError::InvalidFields`].
    InvalidFields,
    /// See [`DecodeError::TooDeep`].
    TooDeep,
}

impl DecodeErrorKind {
    /// A stable snake_case name, e.g. `not_json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotUtf8 => "not_utf8",
            Self::NotJson => "not_json",
            Self::NotAnObject => "not_an_object",
            Self::MissingType => "missing_type",
            Self::UnknownType => "unknown_type",
            Self::InvalidFields => "invalid_fields",
            Self::TooDeep => "too_deep",
        }
    }
}

impl std::fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads one frame (binary or text payload) as an event.
///
/// Lenient like the reference: unknown extra fields are ignored, `null` counts as absent for
/// optional and defaulted fields, and a missing timestamp is filled with now. Unlike the
/// reference, a timestamp that is not a string or a number is also replaced by now rather
/// than failing the frame, and one that cannot be parsed is kept as it is. Never panics.
pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
    let text = std::str::from_utf8(bytes).map_err(|_| DecodeError::NotUtf8)?;
    decode_str(text)
}

/// Reads one frame given as text (see [`decode`]).
pub fn decode_str(text: &str) -> Result<Event, DecodeError> {
    if nesting_exceeds(text.as_bytes(), MAX_DEPTH) {
        return Err(DecodeError::TooDeep);
    }
    // The top level only: each field stays text until its event asks for it, so a request's
    // conversation is checked once and never built into a tree of values.
    let mut map: BTreeMap<String, &RawValue> = match serde_json::from_str(text) {
        Ok(map) => map,
        Err(error) => return Err(not_an_event(text, error)),
    };
    let event_type = match map.remove("type").map(parse_value) {
        Some(Value::String(event_type)) => event_type,
        _ => return Err(DecodeError::MissingType),
    };
    let timestamp = match map.remove("timestamp").map(parse_value) {
        Some(Value::String(text)) => Timestamp::Text(text),
        Some(Value::Number(number)) => Timestamp::Unix(number),
        _ => Timestamp::now(),
    };
    let mut fields = Fields { map };
    match decode_body(&event_type, &mut fields) {
        Ok(body) => Ok(Event { timestamp, body }),
        Err(BodyError::Unknown) => Err(DecodeError::UnknownType(event_type)),
        Err(BodyError::Invalid(message)) => Err(DecodeError::InvalidFields {
            event_type,
            message,
        }),
    }
}

/// Why `text`, which is not a JSON object, is no event: not JSON at all, or another value.
fn not_an_event(text: &str, error: serde_json::Error) -> DecodeError {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(_)) => DecodeError::NotJson(ErrorDetail::from_error(error)),
        Ok(_) => DecodeError::NotAnObject,
        // Unreachable after the scan, but a recursion error must never read as "not JSON".
        Err(error) if error.to_string().starts_with("recursion limit exceeded") => {
            DecodeError::TooDeep
        }
        Err(error) => DecodeError::NotJson(ErrorDetail::from_error(error)),
    }
}

/// A field's JSON text as a value (it was checked as JSON when the frame was read).
fn parse_value(raw: &RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap_or(Value::Null)
}

/// Why a body could not be read: the type is unknown, or a field is wrong.
enum BodyError {
    Unknown,
    Invalid(String),
}

impl From<String> for BodyError {
    fn from(message: String) -> Self {
        Self::Invalid(message)
    }
}

fn decode_body(event_type: &str, f: &mut Fields) -> Result<EventBody, BodyError> {
    Ok(match event_type {
        "system.init" => EventBody::SystemInit(SystemInit {
            version: f.required("version")?,
            session_context: f.required("session_context")?,
            output_agent_settings: f.optional("output_agent_settings")?,
        }),
        "system.user.joined" => EventBody::UserJoined,
        "system.user.started_speaking" => EventBody::UserStartedSpeaking,
        "system.user.stopped_speaking" => EventBody::UserStoppedSpeaking,
        "system.llm.request" => EventBody::LlmRequest(LlmRequest {
            messages: f.optional_messages("messages")?,
            extra_params: f.object_or_default("extra_params")?,
        }),
        "system.control.interrupt" => EventBody::Interrupt,
        "system.output_agent.update_settings" => EventBody::UpdateSettings {
            settings: f.or_default("settings")?,
        },
        "agent.transcript.update" => EventBody::TranscriptUpdate(TranscriptUpdate {
            role: f.required("role")?,
            content: f.required("content")?,
        }),
        "agent.ready" => EventBody::AgentReady,
        "agent.error" => EventBody::AgentError(AgentError {
            message: f.required("message")?,
            severity: f.or_default("severity")?,
            payload: f.or_default("payload")?,
        }),
        "agent.llm.response.start" => EventBody::ResponseStart {
            request_id: f.optional("request_id")?,
        },
        "agent.llm.response.chunk" => EventBody::ResponseChunk {
            text: f.required("text")?,
        },
        "agent.llm.response.end" => EventBody::ResponseEnd,
        "agent.speak" => EventBody::Speak {
            text: f.required("text")?,
        },
        "agent.end_call" => EventBody::EndCall,
        "agent.transfer_call" => {
            // camelCase is accepted on input, as for the handoff options inside.
            f.alias("transferCallNumber", "transfer_call_number");
            f.alias("transferOptions", "transfer_options");
            f.alias("onHoldMusic", "on_hold_music");
            EventBody::TransferCall(TransferCall {
                transfer_call_number: f.required("transfer_call_number")?,
                transfer_options: f.or_default("transfer_options")?,
                on_hold_music: f.optional("on_hold_music")?,
            })
        }
        "agent.log" => EventBody::Log {
            name: f.required("name")?,
            payload: f.or_default("payload")?,
        },
        "agent.control.mute_user" => EventBody::MuteUser,
        "agent.control.unmute_user" => EventBody::UnmuteUser,
        "agent.control.interrupt" => EventBody::AgentInterrupt,
        _ => return Err(BodyError::Unknown),
    })
}

/// The remaining fields of a frame, taken out one by one so each error names its field.
struct Fields<'a> {
    map: BTreeMap<String, &'a RawValue>,
}

impl Fields<'_> {
    /// Present and not `null`.
    fn take(&mut self, name: &str) -> Option<Value> {
        self.map
            .remove(name)
            .map(parse_value)
            .filter(|value| !value.is_null())
    }

    /// Uses `alias` when `name` is absent.
    fn alias(&mut self, alias: &str, name: &str) {
        if !self.map.contains_key(name)
            && let Some(value) = self.map.remove(alias)
        {
            self.map.insert(name.to_owned(), value);
        }
    }

    fn required<T: DeserializeOwned>(&mut self, name: &str) -> Result<T, String> {
        match self.map.remove(name) {
            Some(raw) => convert(name, parse_value(raw)),
            None => Err(format!("missing field `{name}`")),
        }
    }

    fn optional<T: DeserializeOwned>(&mut self, name: &str) -> Result<Option<T>, String> {
        self.take(name)
            .map(|value| convert(name, value))
            .transpose()
    }

    fn or_default<T: DeserializeOwned + Default>(&mut self, name: &str) -> Result<T, String> {
        Ok(self.optional(name)?.unwrap_or_default())
    }

    /// The conversation of a request, kept as its JSON text; any other shape than an array
    /// gets the usual conversion error.
    fn optional_messages(&mut self, name: &str) -> Result<Option<Messages>, String> {
        let Some(raw) = self.map.remove(name) else {
            return Ok(None);
        };
        if raw.get() == "null" {
            return Ok(None);
        }
        // Kept compact like every frame this crate writes, since the request is echoed.
        let owned = match compact(raw.get()) {
            Some(text) => RawValue::from_string(text).unwrap_or_else(|_| raw.to_owned()),
            None => raw.to_owned(),
        };
        match Messages::from_raw(owned) {
            Ok(messages) => Ok(Some(messages)),
            Err(_) => convert::<Vec<Value>>(name, parse_value(raw)).map(|_| None),
        }
    }

    /// [`Self::or_default`] for a JSON object, taken as it is.
    fn object_or_default(&mut self, name: &str) -> Result<Map<String, Value>, String> {
        match self.take(name) {
            Some(Value::Object(map)) => Ok(map),
            Some(other) => convert(name, other),
            None => Ok(Map::new()),
        }
    }
}

fn convert<T: DeserializeOwned>(name: &str, value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|err| format!("{name}: {err}"))
}

/// The bytes of `json` that are outside strings, with their places: the structure (brackets,
/// separators, literals, whitespace) that the scans below look at.
///
/// A string's contents are skipped with `memchr2` to its next quote or backslash: a request's
/// conversation is nearly all string bytes, and stepping through them one by one was about 4 %
/// of a text turn's instructions.
fn outside_strings(json: &[u8]) -> OutsideStrings<'_> {
    OutsideStrings { json, at: 0 }
}

/// The iterator of [`outside_strings`].
struct OutsideStrings<'a> {
    json: &'a [u8],
    at: usize,
}

impl Iterator for OutsideStrings<'_> {
    type Item = (usize, u8);

    fn next(&mut self) -> Option<(usize, u8)> {
        loop {
            let index = self.at;
            let &byte = self.json.get(index)?;
            self.at += 1;
            if byte != b'"' {
                return Some((index, byte));
            }
            // Inside a string: jump to its closing quote, past any escaped character.
            loop {
                let rest = self.json.get(self.at..)?;
                let Some(found) = memchr::memchr2(b'"', b'\\', rest) else {
                    self.at = self.json.len();
                    return None;
                };
                let stop = self.at + found;
                if self.json[stop] == b'"' {
                    self.at = stop + 1;
                    break;
                }
                // A backslash escapes the byte after it (which may be a quote).
                self.at = stop + 2;
            }
        }
    }
}

/// `json` without the whitespace between its tokens, or `None` when it has none.
fn compact(json: &str) -> Option<String> {
    let bytes = json.as_bytes();
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    for (index, byte) in outside_strings(bytes) {
        if matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
            let out = out.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
            out.extend_from_slice(&bytes[copied..index]);
            copied = index + 1;
        }
    }
    let mut out = out?;
    out.extend_from_slice(&bytes[copied..]);
    // Only ASCII whitespace was left out, so the bytes are still UTF-8.
    String::from_utf8(out).ok()
}

/// Whether arrays and objects nest deeper than `limit`, by a scan that never recurses.
fn nesting_exceeds(bytes: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    for (_, byte) in outside_strings(bytes) {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Writes an event as the reference does: `type`, `timestamp`, then the event's fields in the
/// reference's order, optional fields as `null`. Compact JSON, non-ASCII as UTF-8.
pub fn encode(event: &Event) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    encode_into(event, &mut out);
    out
}

/// [`encode`] as a `String` (for text frames and logs).
pub fn encode_string(event: &Event) -> String {
    let mut out = Vec::with_capacity(128);
    encode_into(event, &mut out);
    // serde_json writes only valid UTF-8; the lossy path is never taken.
    String::from_utf8(out)
        .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
}

/// Appends the encoding of `event` to `out` (reuse one buffer on hot paths).
pub fn encode_into(event: &Event, out: &mut Vec<u8>) {
    let start = out.len();
    // Writing to a Vec cannot fail, and every map key is a string, so serialization cannot
    // fail either; should it ever, leave no half-written frame behind.
    if serde_json::to_writer(&mut *out, event).is_err() {
        out.truncate(start);
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Written field by field, straight to the output: no intermediate map or Value, which
        // keeps the per-chunk cost of a turn to formatting alone.
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", self.body.type_name())?;
        map.serialize_entry("timestamp", &self.timestamp)?;
        match &self.body {
            EventBody::SystemInit(init) => {
                map.serialize_entry("version", &init.version)?;
                map.serialize_entry("session_context", &init.session_context)?;
                map.serialize_entry("output_agent_settings", &init.output_agent_settings)?;
            }
            EventBody::LlmRequest(request) => {
                map.serialize_entry("messages", &request.messages)?;
                map.serialize_entry("extra_params", &request.extra_params)?;
            }
            EventBody::UpdateSettings { settings } => {
                map.serialize_entry("settings", settings)?;
            }
            EventBody::TranscriptUpdate(update) => {
                map.serialize_entry("role", &update.role)?;
                map.serialize_entry("content", &update.content)?;
            }
            EventBody::AgentError(error) => {
                map.serialize_entry("message", &error.message)?;
                map.serialize_entry("severity", &error.severity)?;
                map.serialize_entry("payload", &error.payload)?;
            }
            EventBody::ResponseStart { request_id } => {
                map.serialize_entry("request_id", request_id)?;
            }
            EventBody::ResponseChunk { text } | EventBody::Speak { text } => {
                map.serialize_entry("text", text)?;
            }
            EventBody::TransferCall(transfer) => {
                map.serialize_entry("transfer_call_number", &transfer.transfer_call_number)?;
                map.serialize_entry("transfer_options", &transfer.transfer_options)?;
                map.serialize_entry("on_hold_music", &transfer.on_hold_music)?;
            }
            EventBody::Log { name, payload } => {
                map.serialize_entry("name", name)?;
                map.serialize_entry("payload", payload)?;
            }
            EventBody::UserJoined
            | EventBody::UserStartedSpeaking
            | EventBody::UserStoppedSpeaking
            | EventBody::Interrupt
            | EventBody::AgentReady
            | EventBody::ResponseEnd
            | EventBody::EndCall
            | EventBody::MuteUser
            | EventBody::UnmuteUser
            | EventBody::AgentInterrupt => {}
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_drops_spaces_between_tokens_only() {
        assert_eq!(compact(r#"[{"a":1}]"#), None);
        assert_eq!(
            compact("[ {\"role\": \"user\",\n \"content\": \"a \\\" , b\"} ]").as_deref(),
            Some(r#"[{"role":"user","content":"a \" , b"}]"#)
        );
    }

    /// The byte-by-byte scan the fast one replaced: the reference for any input.
    fn outside_strings_bytewise(json: &[u8]) -> Vec<(usize, u8)> {
        let mut in_string = false;
        let mut escaped = false;
        let mut out = Vec::new();
        for (index, &byte) in json.iter().enumerate() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if byte == b'\\' {
                    escaped = true;
                } else if byte == b'"' {
                    in_string = false;
                }
            } else {
                in_string = byte == b'"';
                if !in_string {
                    out.push((index, byte));
                }
            }
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn the_fast_scan_sees_what_the_bytewise_scan_sees(
            json in proptest::collection::vec(
                proptest::sample::select(&b"\"\\{}[],: a1\n"[..]), 0..64)
        ) {
            let fast: Vec<(usize, u8)> = outside_strings(&json).collect();
            proptest::prop_assert_eq!(fast, outside_strings_bytewise(&json));
        }
    }

    #[test]
    fn scans_skip_string_contents_with_escapes_and_stop_at_an_unclosed_string() {
        let structure = |json: &str| -> String {
            outside_strings(json.as_bytes())
                .map(|(_, byte)| char::from(byte))
                .collect()
        };
        assert_eq!(structure(r#"{"a":"x\"y","b":[1]}"#), "{:,:[1]}");
        assert_eq!(structure(r#"["\\",2]"#), "[,2]");
        assert_eq!(structure(r#"["a\\\"b",{}]"#), "[,{}]");
        assert_eq!(structure(r#"["\u00e9 [", 3]"#), "[, 3]");
        assert_eq!(structure(r#"[1, "open"#), "[1, ");
        assert_eq!(structure(r#"["ends in a backslash \"#), "[");
        let places: Vec<usize> = outside_strings(br#"{"k":1}"#).map(|(at, _)| at).collect();
        assert_eq!(places, vec![0, 4, 5, 6]);
    }

    #[test]
    fn nesting_scan_ignores_brackets_in_strings() {
        assert!(!nesting_exceeds(br#"{"a":"[[[[[[\"[[["}"#, 2));
        assert!(nesting_exceeds(br#"{"a":[[1]]}"#, 2));
        assert!(!nesting_exceeds(br#"{"a":[[1]]}"#, 3));
        assert!(!nesting_exceeds(br#"]]]]{}"#, 1));
    }
}
