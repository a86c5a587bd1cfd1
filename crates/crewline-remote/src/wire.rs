//! The JSON shapes of the task API, shared by the client and the server.
//!
//! They follow Smooth's documented API (`docs.smooth.sh/api-reference`): responses are wrapped
//! in `{"r": ...}`, tasks carry `custom_tools` (`name`, `description`, `inputs` JSON Schema,
//! `output` description), polls return `events` (`id`, `name`, `payload`, `timestamp` in ms)
//! and a tool call is answered with `{"name": "tool_call", "id", "payload": {"code", "output"}}`.
//! Unknown fields are kept (`extra`), so a client reading a richer server loses nothing.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The event name of a tool call (from the agent) and of its answer (from the client).
pub const TOOL_CALL: &str = "tool_call";

/// The `{"r": ...}` envelope every successful response is wrapped in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// The response itself.
    pub r: T,
}

/// The body of an error response: `{"detail": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, in words a client author can act on.
    pub detail: String,
}

/// A tool whose code runs on the client's side, as registered with `POST /task`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomTool {
    /// The name the agent calls the tool by.
    pub name: String,
    /// What the tool does and when to use it.
    pub description: String,
    /// The JSON Schema of the arguments object (the server also takes smooth-py's map of
    /// parameter name to schema, and keeps it as the equivalent JSON Schema).
    pub inputs: Value,
    /// What the tool returns, in words.
    pub output: String,
    /// crewline extension: how long the agent waits for the client's answer, in ms (the
    /// server's default when absent). Smooth ignores unknown fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The body of `POST /task`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TaskRequest {
    /// What the agent should do (`null` opens a session that waits for actions).
    #[serde(default)]
    pub task: Option<String>,
    /// The client's tools.
    #[serde(default)]
    pub custom_tools: Vec<CustomTool>,
    /// Any other field (Smooth's `url`, `max_steps`, ...), passed through as is.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Created; nothing runs it yet (in crewline: no call has attached it).
    Waiting,
    /// Running; tool calls may come.
    Running,
    /// Finished normally.
    Done,
    /// Finished with a failure.
    Failed,
    /// Cancelled by the client.
    Cancelled,
}

impl TaskStatus {
    /// Whether the task has finished (no more tool calls will come).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Done | Self::Failed | Self::Cancelled)
    }

    /// The status as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task as `POST /task` and `GET /task/{id}` describe it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResponse {
    /// The task's id.
    pub id: String,
    /// Its status.
    pub status: TaskStatus,
    /// Its result, once done.
    #[serde(default)]
    pub output: Option<Value>,
    /// The events after the poll's `event_t`, oldest first.
    #[serde(default)]
    pub events: Vec<TaskEvent>,
    /// Any other field (`live_url`, `credits_used`, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One event of a task, e.g. a `tool_call` from the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEvent {
    /// The event's id; the answer to a tool call carries it.
    pub id: String,
    /// The event type (`tool_call`, `browser_action`, ...).
    pub name: String,
    /// The event's data; for `tool_call`, a [`ToolCallPayload`].
    #[serde(default)]
    pub payload: Value,
    /// When it happened, in ms since the Unix epoch; the next poll's `event_t`.
    #[serde(default)]
    pub timestamp: Option<u64>,
}

/// The payload of a `tool_call` event: which tool, with which input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallPayload {
    /// The tool's name.
    pub name: String,
    /// The arguments object.
    #[serde(default)]
    pub input: Value,
}

/// The body of `POST /task/{id}/event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRequest {
    /// The event type; an answer to a tool call is `tool_call`.
    pub name: String,
    /// For a tool answer, a [`ToolAnswer`].
    pub payload: Value,
    /// The id of the event answered.
    #[serde(default)]
    pub id: Option<String>,
    /// When it was sent, in ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
}

/// The answer to a tool call: `code` 200 (success), 400 (an error the agent can correct) or
/// 500 (a failure), and the output (the result, or the error).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolAnswer {
    /// 200, 400 or 500.
    pub code: u16,
    /// The tool's result, or its error.
    #[serde(default)]
    pub output: Value,
}

impl ToolAnswer {
    /// A successful answer.
    pub fn ok(output: Value) -> Self {
        Self { code: 200, output }
    }

    /// An error the agent can correct (bad arguments, a tool's own error).
    pub fn tool_error(output: Value) -> Self {
        Self { code: 400, output }
    }

    /// A failure that is not the agent's doing (panic, timeout, internal error).
    pub fn failure(output: Value) -> Self {
        Self { code: 500, output }
    }

    /// The event that carries this answer to the tool call `event_id`.
    pub fn to_event(&self, event_id: &str) -> EventRequest {
        EventRequest {
            name: TOOL_CALL.to_owned(),
            payload: serde_json::json!({"code": self.code, "output": self.output}),
            id: Some(event_id.to_owned()),
            timestamp: Some(now_ms()),
        }
    }

    /// The message of an error answer: `output.error.message`, `output.error`, a string
    /// output, or the output as JSON text.
    pub fn error_message(&self) -> String {
        match &self.output {
            Value::String(text) => text.clone(),
            Value::Object(map) => match map.get("error") {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Object(error)) => error
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| Value::Object(error.clone()).to_string(), str::to_owned),
                _ => self.output.to_string(),
            },
            Value::Null => String::from("the tool reported an error without a message"),
            other => other.to_string(),
        }
    }

    /// The error kind in `output.error.kind`, if the client sent one (crewline clients do).
    pub fn error_kind(&self) -> Option<&str> {
        self.output.get("error")?.get("kind")?.as_str()
    }
}

/// The answer to `POST /task/{id}/event`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventAck {
    /// The event's id.
    pub id: String,
}

/// Now, in ms since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_documented_poll_response_parses_with_its_extra_fields_kept() {
        let body = json!({"r": {
            "id": "task_abc123", "status": "running", "live_url": "https://live/v/1",
            "events": [{"id": "evt_001", "name": "tool_call",
                        "payload": {"name": "get_weather", "input": {"city": "Paris"}},
                        "timestamp": 1_699_999_990_000_u64}]
        }});
        let parsed: Envelope<TaskResponse> = serde_json::from_value(body).unwrap();
        assert_eq!(parsed.r.status, TaskStatus::Running);
        assert_eq!(parsed.r.extra["live_url"], "https://live/v/1");
        let payload: ToolCallPayload =
            serde_json::from_value(parsed.r.events[0].payload.clone()).unwrap();
        assert_eq!(payload.name, "get_weather");
        assert_eq!(payload.input["city"], "Paris");
    }

    #[test]
    fn answers_have_the_documented_shape() {
        let event = ToolAnswer::tool_error(json!({"error": {"kind": "ToolArgsInvalid",
            "message": "city is required"}}))
        .to_event("evt_1");
        let wire = serde_json::to_value(&event).unwrap();
        assert_eq!(wire["name"], "tool_call");
        assert_eq!(wire["id"], "evt_1");
        assert_eq!(wire["payload"]["code"], 400);
        assert_eq!(
            wire["payload"]["output"]["error"]["message"],
            "city is required"
        );
    }

    #[test]
    fn error_messages_are_read_from_the_common_shapes() {
        let structured = ToolAnswer::tool_error(json!({"error": {"kind": "ToolError",
            "message": "no such city"}}));
        assert_eq!(structured.error_message(), "no such city");
        assert_eq!(structured.error_kind(), Some("ToolError"));
        assert_eq!(
            ToolAnswer::tool_error(json!("plain text")).error_message(),
            "plain text"
        );
        assert_eq!(
            ToolAnswer::failure(json!({"error": "boom"})).error_message(),
            "boom"
        );
    }
}
