//! Typed payloads the crew sends: the `agent.log` entries of a tool call
//! (`tool_call_start`, `tool_call_end`, `tool_call_error`) and the `agent.error` of a failed
//! node method.
//!
//! The runtime fills these in from typed values (the call, its structured outcome) and the
//! wire shape (names, key order, which keys a frame carries) is written here once, in the
//! reference's order. The JSON bytes are what the reference parity suite pins.
//!
//! ```
//! use crewline_protocol::{EventBody, ToolCallEnd, encode_string, Event};
//! use serde_json::json;
//!
//! let body = ToolCallEnd {
//!     turn_id: "t1",
//!     tool_call_id: "call_1",
//!     function_name: "get_weather",
//!     arguments: json!({"location": "Oslo"}),
//!     response: json!({"temp": 3}),
//!     latency_ms: 12,
//! }
//! .into_body();
//! let frame = encode_string(&Event::with_timestamp("2030-01-02T03:04:05", body));
//! assert_eq!(
//!     frame,
//!     r#"{"type":"agent.log","timestamp":"2030-01-02T03:04:05","name":"tool_call_end","payload":{"turn_id":"t1","tool_call_id":"call_1","function_name":"get_weather","context":{"arguments":{"location":"Oslo"},"response":{"temp":3}},"latency":12,"success":true}}"#
//! );
//! ```

use crewline_core::ToolErrorKind;
use serde_json::{Map, Value};

use crate::{AgentError, EventBody, Severity};

/// The `tool_call_start` log: a call is about to run.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallStart<'a> {
    /// The turn's id (the `request_id` of its `agent.llm.response.start`).
    pub turn_id: &'a str,
    /// The model's id of the call.
    pub tool_call_id: &'a str,
    /// The tool's name.
    pub function_name: &'a str,
    /// The call's arguments (`{}` when the model's were not a JSON object, as the reference).
    pub arguments: Value,
}

/// The `tool_call_end` log: a call succeeded.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallEnd<'a> {
    /// The turn's id.
    pub turn_id: &'a str,
    /// The model's id of the call.
    pub tool_call_id: &'a str,
    /// The tool's name.
    pub function_name: &'a str,
    /// The arguments as logged at the call's start.
    pub arguments: Value,
    /// The tool's return value.
    pub response: Value,
    /// How long the call took, in milliseconds.
    pub latency_ms: u64,
}

/// The `tool_call_error` log: a call failed.
///
/// # Examples
///
/// ```
/// use crewline_core::ToolErrorKind;
/// use crewline_protocol::{EventBody, ToolCallError};
/// use serde_json::json;
///
/// let body = ToolCallError {
///     turn_id: "t1",
///     tool_call_id: "call_1",
///     function_name: "get_weather",
///     arguments: json!({"location": "Atlantis"}),
///     error: "No forecast for Atlantis.",
///     error_kind: ToolErrorKind::ToolError,
///     latency_ms: 4,
/// }
/// .into_body();
/// let EventBody::Log { name, payload } = body else { panic!("not a log") };
/// assert_eq!(name, "tool_call_error");
/// assert_eq!(payload["success"], false);
/// assert_eq!(payload["error"], "No forecast for Atlantis.");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallError<'a> {
    /// The turn's id.
    pub turn_id: &'a str,
    /// The model's id of the call.
    pub tool_call_id: &'a str,
    /// The tool's name.
    pub function_name: &'a str,
    /// The arguments as logged at the call's start.
    pub arguments: Value,
    /// The message the model read (never the operator's detail).
    pub error: &'a str,
    /// What kind of failure it was.
    pub error_kind: ToolErrorKind,
    /// How long the call took, in milliseconds.
    pub latency_ms: u64,
}

/// The start of a tool log's payload: the keys every tool log begins with, then `context`.
fn header(
    turn_id: &str,
    tool_call_id: &str,
    function_name: &str,
    context: Value,
) -> Map<String, Value> {
    let mut payload = Map::with_capacity(8);
    payload.insert("turn_id".to_owned(), Value::from(turn_id));
    payload.insert("tool_call_id".to_owned(), Value::from(tool_call_id));
    payload.insert("function_name".to_owned(), Value::from(function_name));
    payload.insert("context".to_owned(), context);
    payload
}

/// `{"arguments": ..}`, then `response` when there is one.
fn context(arguments: Value, response: Option<Value>) -> Value {
    let mut context = Map::with_capacity(2);
    context.insert("arguments".to_owned(), arguments);
    if let Some(response) = response {
        context.insert("response".to_owned(), response);
    }
    Value::Object(context)
}

/// An `agent.log` body.
fn log(name: &str, payload: Map<String, Value>) -> EventBody {
    EventBody::Log {
        name: name.to_owned(),
        payload,
    }
}

impl ToolCallStart<'_> {
    /// The `agent.log` event body.
    pub fn into_body(self) -> EventBody {
        let payload = header(
            self.turn_id,
            self.tool_call_id,
            self.function_name,
            context(self.arguments, None),
        );
        log("tool_call_start", payload)
    }
}

impl ToolCallEnd<'_> {
    /// The `agent.log` event body.
    pub fn into_body(self) -> EventBody {
        let mut payload = header(
            self.turn_id,
            self.tool_call_id,
            self.function_name,
            context(self.arguments, Some(self.response)),
        );
        payload.insert("latency".to_owned(), Value::from(self.latency_ms));
        payload.insert("success".to_owned(), Value::Bool(true));
        log("tool_call_end", payload)
    }
}

impl ToolCallError<'_> {
    /// The `agent.log` event body.
    pub fn into_body(self) -> EventBody {
        let mut payload = header(
            self.turn_id,
            self.tool_call_id,
            self.function_name,
            context(self.arguments, None),
        );
        payload.insert("error".to_owned(), Value::from(self.error));
        payload.insert(
            "error_kind".to_owned(),
            Value::from(self.error_kind.as_str()),
        );
        payload.insert("latency".to_owned(), Value::from(self.latency_ms));
        payload.insert("success".to_owned(), Value::Bool(false));
        log("tool_call_error", payload)
    }
}

/// A failure of node code (a hook that returned an error or panicked), reported as
/// `agent.error` with the reference's payload (`node_name`, `error_class`, `traceback`).
///
/// # Examples
///
/// ```
/// use crewline_protocol::{NodeFailure, Severity};
///
/// let error = NodeFailure {
///     node: "sentiment",
///     method: "process_event",
///     class: "LlmError",
///     message: "the LLM server did not answer within 10s",
///     traceback: "LlmError: timeout",
/// }
/// .into_error(Severity::Warning);
/// assert_eq!(error.message, "LlmError in sentiment.process_event: the LLM server did not answer within 10s");
/// assert_eq!(error.payload["node_name"], "sentiment");
/// assert_eq!(error.severity, Severity::Warning); // the call goes on
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFailure<'a> {
    /// The node's name.
    pub node: &'a str,
    /// The method that failed (`generate_response`, `process_event`, ...).
    pub method: &'a str,
    /// The error's class (its type name, as Python's exception class).
    pub class: &'a str,
    /// What went wrong.
    pub message: &'a str,
    /// Where (a backtrace or the error's chain).
    pub traceback: &'a str,
}

impl NodeFailure<'_> {
    /// The `agent.error`: `"{class} in {node}.{method}: {message}"` with the payload.
    pub fn into_error(self, severity: Severity) -> AgentError {
        let mut payload = Map::with_capacity(3);
        payload.insert("node_name".to_owned(), Value::from(self.node));
        payload.insert("error_class".to_owned(), Value::from(self.class));
        payload.insert("traceback".to_owned(), Value::from(self.traceback));
        AgentError {
            message: format!(
                "{} in {}.{}: {}",
                self.class, self.node, self.method, self.message
            ),
            severity,
            payload,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{Event, encode_string};

    fn frame(body: EventBody) -> String {
        encode_string(&Event::with_timestamp("2030-01-02T03:04:05", body))
    }

    #[test]
    fn a_start_log_has_the_references_keys_in_order() {
        let body = ToolCallStart {
            turn_id: "t",
            tool_call_id: "c",
            function_name: "f",
            arguments: json!({"a": 1}),
        }
        .into_body();
        assert_eq!(
            frame(body),
            r#"{"type":"agent.log","timestamp":"2030-01-02T03:04:05","name":"tool_call_start","payload":{"turn_id":"t","tool_call_id":"c","function_name":"f","context":{"arguments":{"a":1}}}}"#
        );
    }

    #[test]
    fn an_error_log_carries_the_models_message_kind_and_latency() {
        let body = ToolCallError {
            turn_id: "t",
            tool_call_id: "c",
            function_name: "f",
            arguments: json!({}),
            error: "took longer than 5s",
            error_kind: ToolErrorKind::Timeout,
            latency_ms: 5000,
        }
        .into_body();
        assert_eq!(
            frame(body),
            r#"{"type":"agent.log","timestamp":"2030-01-02T03:04:05","name":"tool_call_error","payload":{"turn_id":"t","tool_call_id":"c","function_name":"f","context":{"arguments":{}},"error":"took longer than 5s","error_kind":"Timeout","latency":5000,"success":false}}"#
        );
    }

    #[test]
    fn a_node_failure_names_the_node_method_and_class() {
        let error = NodeFailure {
            node: "agent",
            method: "on_event",
            class: "RuntimeError",
            message: "boom",
            traceback: "at line 1",
        }
        .into_error(Severity::Warning);
        assert_eq!(
            frame(EventBody::AgentError(error)),
            r#"{"type":"agent.error","timestamp":"2030-01-02T03:04:05","message":"RuntimeError in agent.on_event: boom","severity":"warning","payload":{"node_name":"agent","error_class":"RuntimeError","traceback":"at line 1"}}"#
        );
    }
}
