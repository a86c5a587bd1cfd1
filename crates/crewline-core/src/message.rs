use std::borrow::Cow;

use serde::{
    Deserialize, Deserializer, Serialize,
    de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor},
};

use crate::{CoreError, ToolCall};

/// Who wrote a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model (`developer` reads as this).
    #[serde(alias = "developer")]
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
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions for the model.
    System {
        /// The instructions.
        content: String,
    },
    /// What the caller said.
    User {
        /// The caller's words.
        content: String,
    },
    /// What the model said, and the tools it asked for.
    Assistant {
        /// The spoken text; `None` when the model only called tools.
        content: Option<String>,
        /// The tool calls of this turn, in the order the model made them.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result, answering the assistant's call with the same id.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The result text (JSON for structured results and errors).
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

    /// A 64-bit digest of the whole message (role, text, tool calls), the same for equal
    /// messages within a process: to recognise a message again without keeping a copy.
    pub fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
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

// Read in one pass: serde's derive for a tag-keyed enum (and an untagged content) first
// buffers each message into a tree of owned values, which was 4 % of a text turn's
// instructions with a platform conversation of twenty messages.
impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a chat message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let mut role: Option<Role> = None;
        // `Some(None)`: present and `null`.
        let mut content: Option<Option<String>> = None;
        let mut tool_calls: Vec<ToolCall> = Vec::new();
        let mut tool_call_id: Option<String> = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "role" => role = Some(map.next_value()?),
                "content" => content = Some(map.next_value::<Content>()?.0),
                "tool_calls" => {
                    tool_calls = map.next_value::<Option<_>>()?.unwrap_or_default();
                }
                "tool_call_id" => tool_call_id = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let role = role.ok_or_else(|| de::Error::missing_field("role"))?;
        let required = |content: Option<Option<String>>| {
            content
                .map(Option::unwrap_or_default)
                .ok_or_else(|| de::Error::missing_field("content"))
        };
        Ok(match role {
            Role::System => Message::System {
                content: required(content)?,
            },
            Role::User => Message::User {
                content: required(content)?,
            },
            Role::Assistant => Message::Assistant {
                content: content.flatten(),
                tool_calls,
            },
            Role::Tool => Message::Tool {
                tool_call_id: tool_call_id
                    .ok_or_else(|| de::Error::missing_field("tool_call_id"))?,
                content: required(content)?,
            },
        })
    }
}

/// Content as OpenAI sends it: a string, `null`, or an array of parts whose texts are joined.
struct Content(Option<String>);

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ContentVisitor).map(Content)
    }
}

struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string, null, or an array of content parts")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Some(text.to_owned()))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
        Ok(Some(text))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut parts: A) -> Result<Self::Value, A::Error> {
        let mut text = String::new();
        while let Some(part) = parts.next_element::<Part>()? {
            if let Some(part) = part.text {
                text.push_str(&part);
            }
        }
        Ok(Some(text))
    }
}

/// One content part; only its text is kept.
#[derive(Deserialize)]
struct Part<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_every_role_leniently_and_refuses_what_no_role_can_be() {
        let read = |value: serde_json::Value| {
            Message::from_json(value).map_err(|e| crate::error_chain(&e))
        };
        assert_eq!(
            read(json!({"content": "hi", "name": "x", "role": "user", "extra": {"a": [1]}})),
            Ok(Message::user("hi"))
        );
        assert_eq!(
            read(json!({"role": "system", "content": null})),
            Ok(Message::system(""))
        );
        assert_eq!(
            read(json!({"role": "assistant", "content": null, "tool_calls": null})),
            Ok(Message::assistant_with_tools("", Vec::new()))
        );
        assert_eq!(
            read(json!({"role": "assistant"})),
            Ok(Message::assistant_with_tools("", Vec::new()))
        );
        assert_eq!(
            read(json!({"role": "tool", "tool_call_id": "c1", "content": [{"text": "{}"}]})),
            Ok(Message::tool("c1", "{}"))
        );
        let error = read(json!({"role": "critic", "content": "x"})).unwrap_err();
        assert!(error.contains("unknown variant `critic`"), "{error}");
        let error = read(json!({"role": "user"})).unwrap_err();
        assert!(error.contains("missing field `content`"), "{error}");
        let error = read(json!({"content": "x"})).unwrap_err();
        assert!(error.contains("missing field `role`"), "{error}");
        let error = read(json!({"role": "tool", "content": "x"})).unwrap_err();
        assert!(error.contains("missing field `tool_call_id`"), "{error}");
        let error = read(json!({"role": "user", "content": 5})).unwrap_err();
        assert!(error.contains("a string, null, or an array"), "{error}");
        // Escaped text (an owned string from the reader) reads the same as plain text.
        let escaped: Message = serde_json::from_str(r#"{"role":"user","content":"a\nb \u00e9"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(escaped, Message::user("a\nb é"));
    }

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
        assert!(crate::error_chain(&err).contains("narrator"), "{err}");
    }
}
