use serde::{Deserialize, Deserializer, Serialize};

use crate::{CoreError, ToolCall};

/// Who wrote a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The caller.
    User,
    /// The model (the agent).
    Assistant,
    /// A tool's answer to one of the assistant's tool calls.
    Tool,
}

/// One chat message in the OpenAI chat-completions shape.
///
/// Reading is lenient where real platforms differ: `developer` is read as `system`, `content`
/// may be a string, `null`, or an array of content parts (their text is joined), and unknown
/// fields are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions for the model.
    #[serde(alias = "developer")]
    System {
        /// The instructions.
        #[serde(deserialize_with = "text_content")]
        content: String,
    },
    /// What the caller said.
    User {
        /// The caller's words.
        #[serde(deserialize_with = "text_content")]
        content: String,
    },
    /// What the model said, and the tools it asked for.
    Assistant {
        /// The spoken text; `None` when the model only called tools.
        #[serde(default, deserialize_with = "optional_text_content")]
        content: Option<String>,
        /// The tool calls of this turn, in the order the model made them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result, answering the assistant's call with the same id.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The result text (JSON for structured results and errors).
        #[serde(deserialize_with = "text_content")]
        content: String,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: Some(content.into()),
            tool_calls: Vec::new(),
        }
    }

    /// An assistant message carrying tool calls; empty text is sent as `null`.
    pub fn assistant_with_tools(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        let content = content.into();
        Self::Assistant {
            content: (!content.is_empty()).then_some(content),
            tool_calls,
        }
    }

    /// A tool message answering the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
        }
    }

    /// Reads one message from an OpenAI chat message object.
    pub fn from_json(value: serde_json::Value) -> Result<Self, CoreError> {
        Ok(serde_json::from_value(value)?)
    }

    /// The message as an OpenAI chat message object.
    pub fn to_openai(&self) -> serde_json::Value {
        // Serialising these plain types cannot fail: no maps with non-string keys, no floats.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Who wrote the message.
    pub fn role(&self) -> Role {
        match self {
            Self::System { .. } => Role::System,
            Self::User { .. } => Role::User,
            Self::Assistant { .. } => Role::Assistant,
            Self::Tool { .. } => Role::Tool,
        }
    }

    /// The message's text, if it has any.
    pub fn text(&self) -> Option<&str> {
        match self {
            Self::System { content } | Self::User { content } | Self::Tool { content, .. } => {
                Some(content)
            }
            Self::Assistant { content, .. } => content.as_deref(),
        }
    }

    /// The tool calls of an assistant message (empty for other roles).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Self::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

/// Content as OpenAI sends it: a string, `null`, or an array of parts.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawContent {
    Text(String),
    Parts(Vec<RawPart>),
}

#[derive(Deserialize)]
struct RawPart {
    #[serde(default)]
    text: Option<String>,
}

impl RawContent {
    fn into_text(self) -> String {
        match self {
            Self::Text(text) => text,
            Self::Parts(parts) => parts.into_iter().filter_map(|part| part.text).collect(),
        }
    }
}

fn optional_text_content<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<RawContent>::deserialize(d)?.map(RawContent::into_text))
}

fn text_content<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(optional_text_content(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_developer_as_system_and_joins_content_parts() {
        let m = Message::from_json(json!({"role": "developer", "content": [
            {"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}
        ]}))
        .unwrap();
        assert_eq!(m, Message::system("Be brief."));
    }

    #[test]
    fn assistant_tool_call_message_round_trips_in_openai_shape() {
        let call = ToolCall::new("call_1", "get_weather", r#"{"location":"Paris"}"#);
        let m = Message::assistant_with_tools("", vec![call]);
        let wire = m.to_openai();
        assert_eq!(
            wire,
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}
            }]})
        );
        assert_eq!(Message::from_json(wire).unwrap(), m);
    }

    #[test]
    fn null_content_and_unknown_fields_are_accepted() {
        let m = Message::from_json(json!({"role": "user", "content": null, "pause_ms": 3}));
        assert_eq!(m.unwrap(), Message::user(""));
    }

    #[test]
    fn unknown_role_is_a_clear_error() {
        let err = Message::from_json(json!({"role": "narrator", "content": "x"})).unwrap_err();
        assert!(err.to_string().contains("narrator"), "{err}");
    }
}
