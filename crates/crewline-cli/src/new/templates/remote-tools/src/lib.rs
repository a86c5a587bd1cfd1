//! The crew: a voice agent whose one tool, `get_weather`, runs in another
//! process. The crew server serves the task API beside `/ws`; a client ([`station`], this
//! binary with `--client`) registers its tools as a task and answers the crew's tool calls
//! over HTTP. A call that carries the task's id in its `task_id` variable gets the client's
//! tools; when the model calls one, the call waits for the client's answer (at most
//! [`TOOL_TIMEOUT`]). When the call ends, the task is done with the agent's last reply as its
//! output.
//!
//! Without `OPENAI_API_KEY` (or `OPENAI_BASE_URL`) the crew runs on [`scripted_model`], an
//! offline stand-in that calls the tool and reads its result back.

use std::time::Duration;

use crewline::{
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    tool::ToolRegistry,
    types::Message,
};
use crewline_remote::TaskApi;
use serde_json::{Value, json};

/// The agent's system prompt.
pub const PROMPT: &str = "You are a friendly voice assistant on a phone line. Answer in one or \
two short spoken sentences. For weather questions use get_weather.";

/// How long a call waits for the client's answer to one tool call.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call's crew could not be built: an unknown task, or tools that cannot be registered.
pub type CrewError = Box<dyn std::error::Error + Send + Sync>;

/// The task API the crew serves (tasks kept in this process's memory).
pub fn task_api() -> TaskApi {
    TaskApi::new().tool_timeout(TOOL_TIMEOUT)
}

/// The crew for one call: the agent on `llm`, with the tools of the task the call's `task_id`
/// variable names (none without one).
pub async fn crew(
    setup: &SessionSetup,
    llm: std::sync::Arc<dyn LlmClient>,
    tasks: &TaskApi,
) -> Result<Crew, CrewError> {
    let mut registry = ToolRegistry::new();
    let mut builder = Agent::builder(llm)
        .name(env!("CARGO_PKG_NAME"))
        .prompt(PROMPT);
    let call_id = setup.caller().and_then(|caller| caller.call_id.as_deref());
    if let Some(remote) = tasks
        .attach_call_for(setup.initial_variables(), call_id)
        .await?
    {
        // The registry owns the remote tools: when the call ends, the task is done.
        remote.register_into(&mut registry)?;
        let output = remote.output();
        builder = builder.on_call_end(move |context| output.record_last_reply(context));
    }
    Ok(builder.registry(registry).build()?.crew_for(setup))
}

/// The offline stand-in for a model: calls `get_weather` for the city the caller names, then
/// reads the result (or the error) back; to anything else it says what it can do.
pub fn scripted_model() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| match request.messages.last() {
        Some(Message::Tool { .. }) => {
            let said: Vec<String> = ScriptedLlm::last_tool_results(request)
                .into_iter()
                .map(|result| {
                    let result: Value = serde_json::from_str(result).unwrap_or(Value::Null);
                    match result.pointer("/error/message").and_then(Value::as_str) {
                        Some(message) => message.to_owned(),
                        None => format!(
                            "In {} it is {} degrees and {}.",
                            result["city"].as_str().unwrap_or("that city"),
                            result["temperature_c"],
                            result["conditions"].as_str().unwrap_or("unknown")
                        ),
                    }
                })
                .collect();
            Reply::text(said.join(" "))
        }
        _ => {
            let said = ScriptedLlm::last_user_text(request)
                .unwrap_or_default()
                .to_lowercase();
            match ["Paris", "Oslo", "Atlantis"]
                .iter()
                .find(|city| said.contains(&city.to_lowercase()))
            {
                Some(city) => Reply::tool_call("get_weather", json!({"city": city}))
                    .with_text("Let me check that for you. "),
                None => Reply::text(
                    "Hi! I'm the offline scripted model: ask me about the weather in Paris or \
                     Oslo.",
                ),
            }
        }
    })
}

/// The client side: a weather station whose `get_weather` runs in the client's process,
/// registered with the crew server's task API and answered over HTTP (`--client`).
pub mod station {
    use crewline::{
        prelude::*,
        tool::{RegistryError, ToolRegistry},
    };
    use crewline_remote::{ClientConfig, TaskClient, TaskOutcome, wire::TaskRequest};
    use serde_json::{Value, json};

    /// The station; its `#[function_tool]` methods are the remote tools.
    #[derive(Debug, Clone, Default)]
    pub struct WeatherStation;

    #[tools]
    impl WeatherStation {
        /// Get the current weather for a city from the caller's weather station.
        ///
        /// # Arguments
        /// * `city` - City name, e.g. Paris
        #[function_tool(export = "remote")]
        async fn get_weather(&self, city: String) -> Result<Value, ToolError> {
            let (temperature_c, conditions) = match city.trim().to_lowercase().as_str() {
                "paris" => (18, "cloudy"),
                "oslo" => (4, "snowing"),
                _ => {
                    return Err(ToolError::new(format!(
                        "The station has no data for {city}; ask for a larger city nearby."
                    )));
                }
            };
            Ok(json!({"city": city, "temperature_c": temperature_c, "conditions": conditions}))
        }
    }

    /// The station's tools.
    pub fn registry() -> Result<ToolRegistry, RegistryError> {
        let mut registry = ToolRegistry::new();
        registry.discover(&std::sync::Arc::new(WeatherStation))?;
        Ok(registry)
    }

    /// Registers the station's tools as a new task, tells `on_task` the task's id (to give
    /// to the call), and answers the crew's tool calls until the call ends.
    pub async fn run(
        config: ClientConfig,
        on_task: impl FnOnce(&str),
    ) -> Result<TaskOutcome, super::CrewError> {
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
}
