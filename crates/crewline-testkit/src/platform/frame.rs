//! The crew's frames, as the platform sees them.

use crewline::protocol::{AgentError, EventBody, TransferCall};
use serde_json::{Map, Value};
use tokio::time::Instant;

/// One frame the crew sent to the platform (echoes of platform events are not crew frames).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CrewFrame {
    /// `agent.ready`.
    Ready,
    /// `agent.llm.response.start`.
    Start {
        /// The turn's id, when the crew fills it.
        request_id: Option<String>,
    },
    /// `agent.llm.response.chunk`.
    Chunk {
        /// A piece of the answer.
        text: String,
    },
    /// `agent.llm.response.end`.
    End,
    /// `agent.log` `tool_call_start`.
    ToolStart(ToolLog),
    /// `agent.log` `tool_call_end`.
    ToolEnd(ToolLog),
    /// `agent.log` `tool_call_error`.
    ToolError(ToolLog),
    /// Any other `agent.log` entry.
    Log {
        /// The entry's name.
        name: String,
        /// Its data.
        payload: Map<String, Value>,
    },
    /// `agent.speak`: speech outside the turn's stream.
    Speak {
        /// What to say.
        text: String,
    },
    /// `agent.end_call`.
    EndCall,
    /// `agent.transfer_call`.
    Transfer(TransferCall),
    /// `agent.error`.
    Error(AgentError),
    /// `agent.control.mute_user`.
    MuteUser,
    /// `agent.control.unmute_user`.
    UnmuteUser,
    /// `agent.control.interrupt`: the crew asks the platform to stop speaking.
    AgentInterrupt,
}

/// A crew frame and when it arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedFrame {
    /// When the reader received it.
    pub at: Instant,
    /// The frame.
    pub frame: CrewFrame,
    /// Its size on the wire, in bytes.
    pub bytes: usize,
}

/// A tool event from `agent.log` (`tool_call_start`, `tool_call_end`, `tool_call_error`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolLog {
    /// The turn the call belongs to (`""` in the reference).
    pub turn_id: String,
    /// The model's id for the call.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The call's arguments.
    pub arguments: Value,
    /// What the tool returned (`tool_call_end`).
    pub response: Option<Value>,
    /// Why it failed (`tool_call_error`).
    pub error: Option<String>,
    /// The crew's own measure of the call, in ms (`tool_call_end`).
    pub latency_ms: Option<f64>,
}

impl ToolLog {
    /// Reads a tool log payload; missing fields are left empty rather than failing, since
    /// a crew's log is informational.
    pub fn from_payload(payload: &Map<String, Value>) -> Self {
        let text = |key: &str| {
            payload
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let context = payload.get("context").and_then(Value::as_object);
        let error = payload.get("error").map(|e| match e {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        Self {
            turn_id: text("turn_id"),
            call_id: text("tool_call_id"),
            name: text("function_name"),
            arguments: context
                .and_then(|c| c.get("arguments"))
                .cloned()
                .unwrap_or(Value::Null),
            response: context.and_then(|c| c.get("response")).cloned(),
            error,
            latency_ms: payload.get("latency").and_then(Value::as_f64),
        }
    }
}

impl CrewFrame {
    /// The crew frame in `body`, or `None` when `body` is a platform event (an echo).
    pub fn from_body(body: EventBody) -> Option<Self> {
        Some(match body {
            EventBody::AgentReady => Self::Ready,
            EventBody::ResponseStart { request_id } => Self::Start { request_id },
            EventBody::ResponseChunk { text } => Self::Chunk { text },
            EventBody::ResponseEnd => Self::End,
            EventBody::Log { name, payload } => match name.as_str() {
                "tool_call_start" => Self::ToolStart(ToolLog::from_payload(&payload)),
                "tool_call_end" => Self::ToolEnd(ToolLog::from_payload(&payload)),
                "tool_call_error" => Self::ToolError(ToolLog::from_payload(&payload)),
                _ => Self::Log { name, payload },
            },
            EventBody::Speak { text } => Self::Speak { text },
            EventBody::EndCall => Self::EndCall,
            EventBody::TransferCall(transfer) => Self::Transfer(transfer),
            EventBody::AgentError(error) => Self::Error(error),
            EventBody::MuteUser => Self::MuteUser,
            EventBody::UnmuteUser => Self::UnmuteUser,
            EventBody::AgentInterrupt => Self::AgentInterrupt,
            // Platform events (system.*, agent.transcript.update) coming back are echoes.
            _ => return None,
        })
    }

    /// The frame's wire type, e.g. `agent.llm.response.chunk`.
    pub fn wire_type(&self) -> &'static str {
        match self {
            Self::Ready => "agent.ready",
            Self::Start { .. } => "agent.llm.response.start",
            Self::Chunk { .. } => "agent.llm.response.chunk",
            Self::End => "agent.llm.response.end",
            Self::ToolStart(_) | Self::ToolEnd(_) | Self::ToolError(_) | Self::Log { .. } => {
                "agent.log"
            }
            Self::Speak { .. } => "agent.speak",
            Self::EndCall => "agent.end_call",
            Self::Transfer(_) => "agent.transfer_call",
            Self::Error(_) => "agent.error",
            Self::MuteUser => "agent.control.mute_user",
            Self::UnmuteUser => "agent.control.unmute_user",
            Self::AgentInterrupt => "agent.control.interrupt",
        }
    }
}
