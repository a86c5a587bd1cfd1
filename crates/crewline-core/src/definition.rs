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
}

impl ToolDefinition {
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
}
