//! The crew: a voice agent with one tool, `get_weather`.
//!
//! The agent is a model, a prompt and tools; the server gives every call its own conversation
//! with it. Without `OPENAI_API_KEY` (or `OPENAI_BASE_URL`) it runs on [`scripted_model`], an
//! offline stand-in that calls the tool and reads its result back, so the crew runs and its
//! tests pass with no network.

use crewline::{
    agent::AgentError,
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    types::Message,
};
use serde_json::{Value, json};

/// The agent's system prompt.
pub const PROMPT: &str = "You are a friendly voice assistant on a phone line. Answer in one or \
two short spoken sentences. For weather questions use get_weather.";

/// What the caller hears while the weather is looked up.
pub const FILLER: &str = "Let me check that for you.";

/// The crew's tools: each `#[function_tool]` method is a tool the model can call.
#[derive(Debug, Clone, Default)]
pub struct WeatherService;

#[tools]
impl WeatherService {
    /// Get the current weather for a city.
    ///
    /// # Arguments
    /// * `city` - City name, e.g. Paris
    #[function_tool]
    async fn get_weather(&self, city: String) -> Result<Value, ToolError> {
        let (temperature_c, conditions) = match city.trim().to_lowercase().as_str() {
            "paris" => (18, "cloudy"),
            "tokyo" => (24, "sunny"),
            "london" => (12, "rainy"),
            _ => {
                // The model reads this message and can ask the caller again.
                return Err(ToolError::new(format!(
                    "No weather data for {city}; ask the caller for a larger city nearby."
                )));
            }
        };
        Ok(json!({"city": city, "temperature_c": temperature_c, "conditions": conditions}))
    }
}

/// The agent on `llm`: what `CrewServer::new` serves, one conversation per call.
pub fn agent(llm: impl LlmClient + 'static) -> Result<Agent, AgentError> {
    Agent::builder(llm)
        .name(env!("CARGO_PKG_NAME"))
        .prompt(PROMPT)
        .tools(WeatherService)
        // Said the moment the model asks for the weather, so the line is never silent.
        .filler(|_calls: &[ToolCall]| Some(FILLER.to_owned()))
        .build()
}

/// The cities the scripted model listens for.
const CITIES: [&str; 4] = ["Paris", "Tokyo", "London", "Atlantis"];

/// The offline stand-in for a model: looks up the city the caller names, reads the result
/// (or the tool's error) back, and otherwise says what it can do.
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
            match CITIES
                .iter()
                .find(|city| said.contains(&city.to_lowercase()))
            {
                Some(city) => Reply::tool_call("get_weather", json!({"city": city})),
                None if said.contains("bye") => Reply::text("Thanks for calling. Goodbye!"),
                None => Reply::text(
                    "Hi! I'm the offline scripted model: ask me about the weather in Paris, \
                     Tokyo or London.",
                ),
            }
        }
    })
}
