use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the model is told about one tool: its name, what it does, and its arguments' schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The name the model calls the tool by.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The JSON Schema of the arguments object.
    pub parameters: Value,
    /// Whether the model is asked to follow `parameters` exactly (OpenAI's strict mode).
    ///
    /// Serialized only when set, so a definition that is not strict reads as it always did.
    #[serde(default, skip_serializing_if = "is_false")]
    pub strict: bool,
}

impl ToolDefinition {
    /// A definition that is not strict.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            strict: false,
        }
    }

    /// The same definition, strict or not (see [`ToolDefinition::strict`]).
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// The OpenAI tool definition: `{"type": "function", "function": {...}}`.
    pub fn to_openai(&self) -> Value {
        // Plain strings and a Value always serialize; the fallback is never taken.
        serde_json::to_value(self.openai()).unwrap_or(Value::Null)
    }

    /// The OpenAI tool definition, serialized straight from this one (no `Value` built).
    pub fn openai(&self) -> OpenAiTool<'_> {
        OpenAiTool {
            r#type: "function",
            function: OpenAiFunction {
                name: &self.name,
                description: &self.description,
                parameters: &self.parameters,
                strict: self.strict,
            },
        }
    }
}

/// A [`ToolDefinition`] in OpenAI's shape, borrowing it (see [`ToolDefinition::openai`]).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct OpenAiTool<'a> {
    r#type: &'static str,
    function: OpenAiFunction<'a>,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct OpenAiFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
    /// `"strict": true` only when set: providers that do not know the field never see it.
    #[serde(skip_serializing_if = "is_false")]
    strict: bool,
}

// serde's `skip_serializing_if` takes a function of `&T`.
fn is_false(value: &bool) -> bool {
    !*value
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn strict_is_sent_only_when_set() {
        let schema = json!({"type": "object", "properties": {}});
        let plain = ToolDefinition::new("ping", "Pings.", schema.clone());
        assert_eq!(
            plain.to_openai(),
            json!({"type": "function", "function": {
                "name": "ping", "description": "Pings.", "parameters": schema
            }})
        );
        assert_eq!(
            serde_json::to_value(&plain).ok(),
            Some(json!({"name": "ping", "description": "Pings.", "parameters": schema}))
        );
        let strict = plain.with_strict(true);
        assert_eq!(strict.to_openai()["function"]["strict"], json!(true));
        let encoded = serde_json::to_value(&strict).expect("encodes");
        assert_eq!(encoded["strict"], json!(true));
        let back: ToolDefinition = serde_json::from_value(encoded).expect("decodes");
        assert_eq!(back, strict);
    }
}
