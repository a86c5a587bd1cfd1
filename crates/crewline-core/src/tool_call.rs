use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};

use crate::{Message, ToolErrorKind};

/// A tool call requested by the model.
///
/// `arguments` is the JSON text exactly as the model produced it; it is parsed (and may be
/// invalid) only when the tool runs. On the wire it has the OpenAI shape
/// `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolCall {
    /// The call's id, echoed by the tool message that answers it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as a JSON string.
    pub arguments: String,
}

impl ToolCall {
    /// A tool call from its parts.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The canonical OpenAI tool-call object.
    pub fn to_openai(&self) -> Value {
        json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }

    /// The arguments parsed as JSON.
    pub fn parse_arguments(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.arguments)
    }
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            id: &'a str,
            r#type: &'static str,
            function: WireFunction<'a>,
        }
        #[derive(Serialize)]
        struct WireFunction<'a> {
            name: &'a str,
            arguments: &'a str,
        }
        Wire {
            id: &self.id,
            r#type: "function",
            function: WireFunction {
                name: &self.name,
                arguments: &self.arguments,
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            id: String,
            function: WireFunction,
        }
        #[derive(Deserialize)]
        struct WireFunction {
            name: String,
            // Some servers send the arguments as an object rather than a JSON string.
            #[serde(default)]
            arguments: Value,
        }
        let wire = Wire::deserialize(d)?;
        let arguments = match wire.function.arguments {
            Value::String(text) => text,
            Value::Null => String::from("{}"),
            other => other.to_string(),
        };
        Ok(Self {
            id: wire.id,
            name: wire.function.name,
            arguments,
        })
    }
}

/// Why a tool call failed, as the model is told: a kind and a message written for it.
///
/// The operator's detail (an error chain, a panic payload) is never part of it: it goes to the
/// logs and the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFailure {
    /// What kind of failure it was.
    pub kind: ToolErrorKind,
    /// The message the model reads.
    pub message: String,
}

impl ToolFailure {
    /// A failure of `kind` with a message for the model.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// The outcome of one tool call: the tool's value or a failure.
///
/// It stays structured on its way through the runtime (the tool logs read the value and the
/// failure's kind from it) and becomes text once, when it becomes the model's message
/// ([`content`](Self::content), [`into_message`](Self::into_message)).
///
/// ```
/// use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
/// use serde_json::json;
///
/// let call = ToolCall::new("call_1", "get_weather", r#"{"location":"Oslo"}"#);
/// let sunny = ToolResult::from_value(&call, json!({"temp": 3}));
/// assert_eq!(sunny.content(), r#"{"temp":3}"#);
/// let late = ToolResult::error(&call, ToolErrorKind::Timeout, "took longer than 5s");
/// assert_eq!(late.error_kind(), Some(ToolErrorKind::Timeout));
/// assert_eq!(late.content(), r#"{"error":{"kind":"Timeout","message":"took longer than 5s"}}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub tool_call_id: String,
    /// The tool's name.
    pub name: String,
    /// The tool's value, or why the call failed.
    pub outcome: Result<Value, ToolFailure>,
}

impl ToolResult {
    /// A result of `call` with this outcome.
    pub fn new(call: &ToolCall, outcome: Result<Value, ToolFailure>) -> Self {
        Self {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            outcome,
        }
    }

    /// A successful result whose content is `content` as is.
    pub fn ok(call: &ToolCall, content: impl Into<String>) -> Self {
        Self::new(call, Ok(Value::String(content.into())))
    }

    /// A successful result from a value: the model reads a JSON string as is, anything else
    /// JSON-encoded.
    pub fn from_value(call: &ToolCall, value: Value) -> Self {
        Self::new(call, Ok(value))
    }

    /// A failed result; the model reads `{"error": {"kind": ..., "message": ...}}`.
    pub fn error(call: &ToolCall, kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self::new(call, Err(ToolFailure::new(kind, message)))
    }

    /// Whether the call failed.
    pub fn is_error(&self) -> bool {
        self.outcome.is_err()
    }

    /// The tool's value, when the call succeeded.
    pub fn value(&self) -> Option<&Value> {
        self.outcome.as_ref().ok()
    }

    /// Why the call failed, when it did.
    pub fn failure(&self) -> Option<&ToolFailure> {
        self.outcome.as_ref().err()
    }

    /// The error kind of a failed result.
    pub fn error_kind(&self) -> Option<ToolErrorKind> {
        self.failure().map(|failure| failure.kind)
    }

    /// The text the model reads: a string value as is, any other value as JSON, a failure as
    /// `{"error": {"kind", "message"}}`.
    pub fn content(&self) -> String {
        match &self.outcome {
            Ok(Value::String(text)) => text.clone(),
            Ok(other) => other.to_string(),
            Err(failure) => error_content(failure),
        }
    }

    /// The `role: "tool"` message that carries this result to the model.
    pub fn to_message(&self) -> Message {
        Message::tool(self.tool_call_id.clone(), self.content())
    }

    /// Like [`to_message`](Self::to_message), without copying the id or a string value.
    pub fn into_message(self) -> Message {
        let content = match self.outcome {
            Ok(Value::String(text)) => text,
            Ok(other) => other.to_string(),
            Err(failure) => error_content(&failure),
        };
        Message::tool(self.tool_call_id, content)
    }
}

/// `{"error": {"kind": .., "message": ..}}` as the model reads it.
fn error_content(failure: &ToolFailure) -> String {
    #[derive(Serialize)]
    struct Wire<'a> {
        error: &'a ToolFailure,
    }
    // A struct of strings always serialises; the empty fallback is never taken.
    serde_json::to_string(&Wire { error: failure }).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> ToolCall {
        ToolCall::new("call_9", "get_weather", r#"{"location":"Oslo"}"#)
    }

    #[test]
    fn string_values_are_content_as_is_and_others_are_json() {
        assert_eq!(
            ToolResult::from_value(&call(), json!("sunny")).content(),
            "sunny"
        );
        assert_eq!(
            ToolResult::from_value(&call(), json!({"temp": 3})).content(),
            r#"{"temp":3}"#
        );
    }

    #[test]
    fn error_results_carry_kind_and_message_for_the_model() {
        let result = ToolResult::error(&call(), ToolErrorKind::Timeout, "took longer than 5s");
        let content: Value = serde_json::from_str(&result.content()).unwrap();
        assert_eq!(content["error"]["kind"], "Timeout");
        assert_eq!(content["error"]["message"], "took longer than 5s");
        assert_eq!(result.error_kind(), Some(ToolErrorKind::Timeout));
        let expected = Message::tool("call_9", result.content());
        assert_eq!(result.to_message(), expected);
        assert_eq!(result.into_message(), expected);
    }

    #[test]
    fn object_arguments_from_lenient_servers_become_a_json_string() {
        let call: ToolCall = serde_json::from_value(json!({
            "id": "c", "function": {"name": "f", "arguments": {"a": 1}}
        }))
        .unwrap();
        assert_eq!(call.arguments, r#"{"a":1}"#);
    }
}
