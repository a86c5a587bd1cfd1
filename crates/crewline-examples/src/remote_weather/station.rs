//! The client side of the remote weather example: a weather station whose `get_weather` runs
//! in the client's process, registered as a custom tool with the crew server's task API and
//! answered over HTTP with crewline-remote's `TaskClient`.
//!
//! The example binary runs it with `--client`; tests/remote_weather.rs runs that binary.

use crewline::tool::ToolRegistry;
use crewline::{prelude::*, tool::RegistryError};
use crewline_remote::{ClientConfig, ClientError, TaskClient, TaskOutcome, wire::TaskRequest};
use serde_json::{Value, json};

/// The client's weather station; its `#[function_tool]` methods are the remote tools.
#[derive(Debug, Clone, Default)]
pub struct WeatherStation;

#[tools]
impl WeatherStation {
    /// Get the current weather for a location from the caller's weather station.
    ///
    /// # Arguments
    /// * `location` - City name, e.g. Paris
    #[function_tool(export = "remote")]
    async fn get_weather(&self, location: String) -> Result<Value, ToolError> {
        let (temperature_c, conditions) = match location.trim().to_lowercase().as_str() {
            "paris" => (18, "cloudy"),
            "tokyo" => (24, "sunny"),
            "london" => (12, "rainy"),
            "oslo" => (4, "snowing"),
            _ => {
                return Err(ToolError::new(format!(
                    "The station has no data for {location}; ask for a larger city nearby."
                )));
            }
        };
        Ok(json!({"location": location, "temperature_c": temperature_c,
                  "conditions": conditions, "source": "client weather station"}))
    }
}

/// The station's tools.
pub fn registry() -> Result<ToolRegistry, RegistryError> {
    let mut registry = ToolRegistry::new();
    registry.discover(&std::sync::Arc::new(WeatherStation))?;
    Ok(registry)
}

/// Why the station client stopped.
#[derive(Debug, thiserror::Error)]
pub enum StationError {
    /// The tools could not be set up.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The task API failed.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Registers the station's tools as a new task, tells `on_task` the task's id (to give to
/// the call), and answers the crew's tool calls until the call ends.
pub async fn run(
    config: ClientConfig,
    on_task: impl FnOnce(&str),
) -> Result<TaskOutcome, StationError> {
    let registry = registry()?;
    let client = TaskClient::new(config)?;
    let request = TaskRequest {
        custom_tools: TaskClient::custom_tools(&registry)?,
        ..TaskRequest::default()
    };
    let task = client.create_task(&request).await?;
    on_task(&task.id);
    Ok(client.serve(&task.id, &registry).await?)
}
