//! The tool both sides of the task API tests serve.

use async_trait::async_trait;
use crewline_tools::{Tool, ToolError};
use serde_json::{Value, json};

/// A weather tool: Paris answers, an empty or missing location is bad arguments, any other
/// city is the tool's own error.
pub(crate) struct Weather;

#[async_trait]
impl Tool for Weather {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "Get the current weather for a city."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"location": {"type": "string"}},
               "required": ["location"]})
    }
    fn result_schema(&self) -> Option<Value> {
        Some(json!({"type": "object", "description": "Temperature and conditions."}))
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        match arguments["location"].as_str() {
            Some("Paris") => Ok(json!({"location": "Paris", "temperature_c": 18})),
            Some("") => Err(ToolError::invalid_arguments("location must not be empty")),
            Some(other) => Err(ToolError::new(format!("No weather data for {other}"))),
            None => Err(ToolError::invalid_arguments("location is required")),
        }
    }
}
