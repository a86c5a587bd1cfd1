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

/// The outcome of one tool call, ready to go back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub tool_call_id: String,
    /// The tool's name.
    pub name: String,
    /// The text the model reads: the tool's output, or a JSON error object.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result with `content` as the model should read it.
    pub fn ok(call: &ToolCall, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content: content.into(),
            is_error: false,
        }
    }

    /// A successful result from a value: a JSON string is the content as is, anything else
    /// is JSON-encoded.
    pub fn from_value(call: &ToolCall, value: &Value) -> Self {
        match value {
            Value::String(text) => Self::ok(call, text.clone()),
            other => Self::ok(call, other.to_string()),
        }
    }

    /// A failed result; the model reads `{"error": {"kind": ..., "message": ...}}`.
    pub fn error(call: &ToolCall, kind: ToolErrorKind, message: impl Into<String>) -> Self {
        let content = json!({"error": {"kind": kind, "message": message.into()}}).to_string();
        Self {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            is_error: true,
        }
    }

    /// The error kind of a failed result, read back from its content.
    pub fn error_kind(&self) -> Option<ToolErrorKind> {
        if !self.is_error {
            return None;
        }
        let value: Value = serde_json::from_str(&self.content).ok()?;
        serde_json::from_value(value.get("error")?.get("kind")?.clone()).ok()
    }

    /// The `role: "tool"` message that carries this result to the model.
    pub fn to_message(&self) -> Message {
        Message::tool(self.tool_call_id.clone(), self.content.clone())
    }
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
            ToolResult::from_value(&call(), &json!("sunny")).content,
            "sunny"
        );
        assert_eq!(
            ToolResult::from_value(&call(), &json!({"temp": 3})).content,
            r#"{"temp":3}"#
        );
    }

    #[test]
    fn error_results_carry_kind_and_message_for_the_model() {
        let result = ToolResult::error(&call(), ToolErrorKind::Timeout, "took longer than 5s");
        let content: Value = serde_json::from_str(&result.content).unwrap();
        assert_eq!(content["error"]["kind"], "Timeout");
        assert_eq!(content["error"]["message"], "took longer than 5s");
        assert_eq!(result.error_kind(), Some(ToolErrorKind::Timeout));
        let expected = Message::tool("call_9", result.content.clone());
        assert_eq!(result.to_message(), expected);
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
