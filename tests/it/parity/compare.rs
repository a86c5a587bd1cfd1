//! Normalising crewline's frames the way record.py normalised the reference's, and comparing
//! JSON values with a few explicit matchers.
//!
//! Placeholders (exact strings on both sides after normalisation): `<timestamp>` for a
//! crew-generated timestamp, `<latency_ms>` for a tool latency, `<request_id>` for the turn's
//! id. Matchers (only in expected values, put there by a named rule): `<<nonempty>>`,
//! `<<starts:TEXT>>`, `<<contains:TEXT>>`.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::driver::Received;

/// A frame as compared: its connection, kind and normalised event.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub conn: usize,
    pub binary: bool,
    /// `None` for a frame that is not JSON (then `raw` is compared).
    pub event: Option<Value>,
    pub raw: String,
}

impl Frame {
    /// The event's `type` (`<not json>` for other frames).
    pub fn kind(&self) -> &str {
        self.event
            .as_ref()
            .and_then(|e| e.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("<not json>")
    }

    /// The `agent.log` name, if this is one.
    pub fn log_name(&self) -> Option<&str> {
        (self.kind() == "agent.log")
            .then(|| self.event.as_ref()?.get("name")?.as_str())
            .flatten()
    }

    /// The tool call id of a tool log.
    pub fn tool_call_id(&self) -> Option<&str> {
        self.event
            .as_ref()?
            .pointer("/payload/tool_call_id")?
            .as_str()
    }

    /// A one-line summary for failure messages.
    pub fn summary(&self) -> String {
        let detail = match (self.kind(), &self.event) {
            ("agent.llm.response.chunk", Some(e)) => format!(" {}", e["text"]),
            ("agent.log", Some(e)) => format!(
                " {} {}",
                e["name"].as_str().unwrap_or_default(),
                e.pointer("/payload/tool_call_id").unwrap_or(&Value::Null)
            ),
            ("agent.error", Some(e)) => format!(" {}", e["severity"]),
            _ => String::new(),
        };
        format!(
            "conn {} {}{}{}",
            self.conn,
            if self.binary { "" } else { "[text] " },
            self.kind(),
            detail
        )
    }
}

/// Whether `text` has the reference's generated-timestamp form,
/// `^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?$`.
pub fn is_reference_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| range.into_iter().all(|i| b[i].is_ascii_digit());
    let base = b.len() >= 19
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    base && (b.len() == 19 || (b.len() == 26 && b[19] == b'.' && digits(20..26)))
}

/// Normalises crewline's frames like record.py did the reference's, checking on the way what
/// the placeholders stand for:
///
/// - a `timestamp` equal to one the scenario sent is kept (an echo); any other must have the
///   reference's generated form and becomes `<timestamp>` (else it is kept, and differs);
/// - `agent.log` `payload.latency` must be a non-negative integer and becomes `<latency_ms>`;
/// - `agent.llm.response.start` `request_id` must be a fresh non-empty string (never seen on
///   the connection before) and becomes `<request_id>`; a tool log's `payload.turn_id` equal
///   to the current request id becomes `<request_id>` too (rule `fresh_request_id`).
pub fn normalise_actual(frames: &[Received], inbound_timestamps: &[String]) -> Vec<Frame> {
    let mut seen_ids: HashSet<String> = HashSet::new();
    let mut current: Vec<Option<String>> = Vec::new();
    frames
        .iter()
        .map(|received| {
            let mut event = received.event.clone();
            if let Some(Value::Object(map)) = &mut event {
                if current.len() <= received.conn {
                    current.resize(received.conn + 1, None);
                }
                normalise_event(
                    map,
                    inbound_timestamps,
                    &mut seen_ids,
                    &mut current[received.conn],
                );
            }
            Frame {
                conn: received.conn,
                binary: received.binary,
                event,
                raw: received.raw.clone(),
            }
        })
        .collect()
}

fn normalise_event(
    map: &mut Map<String, Value>,
    inbound_timestamps: &[String],
    seen_ids: &mut HashSet<String>,
    current: &mut Option<String>,
) {
    if let Some(Value::String(stamp)) = map.get_mut("timestamp")
        && !inbound_timestamps.iter().any(|s| s == stamp)
        && is_reference_timestamp(stamp)
    {
        *stamp = "<timestamp>".to_owned();
    }
    let kind = map
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if kind == "agent.llm.response.start"
        && let Some(Value::String(id)) = map.get_mut("request_id")
        && !id.is_empty()
        && seen_ids.insert(id.clone())
    {
        *current = Some(std::mem::replace(id, "<request_id>".to_owned()));
    }
    if kind == "agent.log"
        && let Some(Value::Object(payload)) = map.get_mut("payload")
    {
        if let Some(Value::String(turn)) = payload.get_mut("turn_id")
            && current.as_deref() == Some(turn.as_str())
        {
            *turn = "<request_id>".to_owned();
        }
        if let Some(latency) = payload.get_mut("latency")
            && latency.as_u64().is_some()
        {
            *latency = Value::from("<latency_ms>");
        }
    }
}

/// Frames of the reference fixture in the compared form.
pub fn from_fixture(frames: &[super::fixture::Frame]) -> Vec<Frame> {
    frames
        .iter()
        .map(|f| Frame {
            conn: f.conn,
            binary: f.kind == "binary",
            event: f.event.clone(),
            raw: f.raw.clone(),
        })
        .collect()
}

/// Whether `actual` matches `expected`: equal JSON, object keys in the same order when
/// `ordered`, and the matchers of `expected` honoured. `Err` names the first difference.
pub fn matches(expected: &Value, actual: &Value, ordered: bool) -> Result<(), String> {
    compare_at("$", expected, actual, ordered)
}

fn compare_at(path: &str, expected: &Value, actual: &Value, ordered: bool) -> Result<(), String> {
    match (expected, actual) {
        (Value::String(pattern), _) if pattern.starts_with("<<") && pattern.ends_with(">>") => {
            let text = actual.as_str().ok_or_else(|| {
                format!("{path}: expected a string matching {pattern}, got {actual}")
            })?;
            let inner = &pattern[2..pattern.len() - 2];
            let ok = if inner == "nonempty" {
                !text.is_empty()
            } else if let Some(prefix) = inner.strip_prefix("starts:") {
                text.starts_with(prefix)
            } else if let Some(part) = inner.strip_prefix("contains:") {
                text.contains(part)
            } else {
                return Err(format!("{path}: unknown matcher {pattern}"));
            };
            if ok {
                Ok(())
            } else {
                Err(format!("{path}: {actual} does not match {pattern}"))
            }
        }
        (Value::Object(e), Value::Object(a)) => {
            let e_keys: Vec<&String> = e.keys().collect();
            let a_keys: Vec<&String> = a.keys().collect();
            let same_keys = if ordered {
                e_keys == a_keys
            } else {
                e_keys.iter().collect::<HashSet<_>>() == a_keys.iter().collect::<HashSet<_>>()
            };
            if !same_keys {
                return Err(format!(
                    "{path}: keys differ{}: expected {e_keys:?}, got {a_keys:?}",
                    if ordered { " (in order)" } else { "" }
                ));
            }
            for (key, value) in e {
                compare_at(&format!("{path}.{key}"), value, &a[key], ordered)?;
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Err(format!(
                    "{path}: expected {} items, got {}: expected {expected}, got {actual}",
                    e.len(),
                    a.len()
                ));
            }
            for (i, (e, a)) in e.iter().zip(a).enumerate() {
                compare_at(&format!("{path}[{i}]"), e, a, ordered)?;
            }
            Ok(())
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!("{path}: expected {expected}, got {actual}")),
    }
}

/// Compares two frame sequences of one connection; `Err` describes the first difference with
/// both sequences listed.
pub fn compare_frames(expected: &[Frame], actual: &[Frame]) -> Result<(), String> {
    let listing = || {
        let list = |frames: &[Frame]| {
            frames
                .iter()
                .enumerate()
                .map(|(i, f)| format!("  {i:2} {}", f.summary()))
                .collect::<Vec<_>>()
                .join("\n")
        };
        format!("expected:\n{}\nactual:\n{}", list(expected), list(actual))
    };
    for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
        let problem = if e.conn != a.conn {
            Some(format!("connection {} instead of {}", a.conn, e.conn))
        } else if e.binary != a.binary {
            Some(format!(
                "a {} frame instead of a {} frame",
                if a.binary { "binary" } else { "text" },
                if e.binary { "binary" } else { "text" }
            ))
        } else {
            match (&e.event, &a.event) {
                (Some(e), Some(a)) => matches(e, a, true).err(),
                (None, None) if e.raw == a.raw => None,
                _ => Some(format!("expected raw {:?}, got raw {:?}", e.raw, a.raw)),
            }
        };
        if let Some(problem) = problem {
            return Err(format!(
                "frame {i} differs: {problem}\nexpected frame: {}\nactual frame:   {}\n{}",
                e.event.as_ref().map_or(e.raw.clone(), Value::to_string),
                a.raw,
                listing()
            ));
        }
    }
    if expected.len() != actual.len() {
        return Err(format!(
            "expected {} frames, got {}\n{}",
            expected.len(),
            actual.len(),
            listing()
        ));
    }
    Ok(())
}
