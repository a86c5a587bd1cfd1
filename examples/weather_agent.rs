//! The reference SDK's weather agent in crewline: one `get_weather` tool on an agent type,
//! discovered into a registry, and the `generate_response` tool loop streaming the answer.
//! When the caller asks about several cities, the model calls the tool once per city in one
//! round and the calls run in parallel.
//!
//! Runs offline on the built-in scripted model; with `OPENAI_API_KEY` set (and optionally
//! `OPENAI_BASE_URL`, `OPENAI_MODEL`) it talks to a real OpenAI-compatible endpoint instead.
//!
//! ```sh
//! cargo run --example weather_agent -- "What's the weather in Paris and Tokyo?"
//! ```

use std::{sync::Arc, time::Duration};

use crewline::{llm::ChatRequest, prelude::*};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Temperature units the tool understands.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Celsius,
    Fahrenheit,
}

/// A weather agent: its methods marked `#[function_tool]` are the model's tools.
struct WeatherAgent {
    /// Pretend latency of the weather service.
    service_delay: Duration,
}

#[tools]
impl WeatherAgent {
    /// Get the current weather for a location.
    ///
    /// # Arguments
    /// * `location` - City and country, e.g. Paris, France
    /// * `unit` - Temperature unit; Celsius when not given
    #[function_tool]
    async fn get_weather(&self, location: String, unit: Option<Unit>) -> Result<Value, ToolError> {
        tokio::time::sleep(self.service_delay).await;
        let city = location
            .split(',')
            .next()
            .unwrap_or_default()
            .trim()
            .to_lowercase();
        let (celsius, conditions) = match city.as_str() {
            "paris" => (18.0, "cloudy"),
            "tokyo" => (24.0, "sunny"),
            "london" => (12.0, "rainy"),
            "new york" | "san francisco" => (21.0, "clear"),
            _ => {
                return Err(ToolError::new(format!(
                    "No weather data for {location}; ask the caller for a larger city nearby."
                )));
            }
        };
        let unit = unit.unwrap_or(Unit::Celsius);
        let temperature = match unit {
            Unit::Celsius => celsius,
            Unit::Fahrenheit => celsius * 9.0 / 5.0 + 32.0,
        };
        Ok(
            json!({"location": location, "temperature": temperature, "unit": unit, "conditions": conditions}),
        )
    }
}

/// The offline stand-in for a model: calls `get_weather` for each city the caller names, then
/// reads the tool results back as a spoken answer.
fn scripted_weather_model() -> ScriptedLlm {
    const CITIES: [&str; 5] = ["Paris", "Tokyo", "London", "New York", "Springfield"];
    ScriptedLlm::from_fn(|request: &ChatRequest| match request.messages.last() {
        Some(Message::Tool { .. }) => {
            let answers: Vec<String> = request
                .messages
                .iter()
                .rev()
                .take_while(|m| matches!(m, Message::Tool { .. }))
                .filter_map(|m| serde_json::from_str::<Value>(m.text()?).ok())
                .map(|v| match v.get("error") {
                    Some(error) => error["message"]
                        .as_str()
                        .unwrap_or("that failed")
                        .to_owned(),
                    None => format!(
                        "In {} it is {} degrees and {}.",
                        v["location"].as_str().unwrap_or("?"),
                        v["temperature"],
                        v["conditions"].as_str().unwrap_or("?")
                    ),
                })
                .collect();
            Reply::text(answers.into_iter().rev().collect::<Vec<_>>().join(" "))
        }
        Some(Message::User { content }) => {
            let calls: Vec<(String, Value)> = CITIES
                .iter()
                .filter(|city| content.to_lowercase().contains(&city.to_lowercase()))
                .map(|city| ("get_weather".to_owned(), json!({"location": city})))
                .collect();
            if calls.is_empty() {
                Reply::text("Hi! I can tell you the weather in any big city. Which one?")
            } else {
                Reply::tool_calls(calls).with_text("Let me check that for you.")
            }
        }
        _ => Reply::text("How can I help?"),
    })
    .with_chunk_delay(Duration::from_millis(15))
}

fn model() -> Result<Arc<dyn LlmClient>, LlmError> {
    if std::env::var_os("OPENAI_API_KEY").is_some() {
        let model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
        tracing::info!(%model, "using the OpenAI-compatible endpoint");
        Ok(Arc::new(OpenAiClient::builder().model(model).build()?))
    } else {
        tracing::info!("OPENAI_API_KEY is not set: using the built-in scripted model");
        Ok(Arc::new(scripted_weather_model()))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let question = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let question = if question.is_empty() {
        "What's the weather in Paris and Tokyo?".to_owned()
    } else {
        question
    };

    let agent = Arc::new(WeatherAgent {
        service_delay: Duration::from_millis(300),
    });
    let mut registry = ToolRegistry::new();
    registry.discover(&agent)?;
    let turn_loop = ToolLoop::new(model()?, Arc::new(registry));

    let mut context = Context::with_system(
        "You are a friendly voice assistant. Answer in one or two short spoken sentences.",
    );
    context.add(Message::user(question.clone()));

    let mut out = std::io::stdout().lock();
    use std::io::Write;
    writeln!(out, "caller: {question}")?;
    // The agent's text is printed as it streams; tool activity goes on lines of its own.
    let mut mid_line = false;
    let mut turn = turn_loop.run(&mut context);
    while let Some(event) = turn.next().await {
        match event? {
            TurnEvent::Text(chunk) => {
                if !mid_line {
                    write!(out, "agent:  ")?;
                    mid_line = true;
                }
                write!(out, "{chunk}")?;
                out.flush()?;
            }
            TurnEvent::ToolStarted(call) => {
                if std::mem::take(&mut mid_line) {
                    writeln!(out)?;
                }
                writeln!(out, "  tool> {}({})", call.name, call.arguments)?;
            }
            TurnEvent::ToolFinished(run) => {
                writeln!(
                    out,
                    "  tool< {} -> {} ({} ms)",
                    run.result.name,
                    run.result.content,
                    run.latency.as_millis()
                )?;
            }
            TurnEvent::Done(report) => {
                writeln!(
                    out,
                    "\n\n{} LLM round(s), first text after {} ms, turn took {} ms",
                    report.rounds.len(),
                    report.time_to_first_token.map_or(0, |d| d.as_millis()),
                    report.total.as_millis()
                )?;
            }
        }
    }
    Ok(())
}
