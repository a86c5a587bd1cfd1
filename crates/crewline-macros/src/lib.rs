//! Procedural macros for crewline. Use them through the `crewline` crate, whose docs show them
//! in context; generated code reaches its support through `::crewline::__private`.
//!
//! - `attr`: the macros' own attributes (`#[function_tool(..)]`, `#[tools(..)]`, `#[arg(..)]`);
//! - `docs`: descriptions read from doc comments (`# Arguments`);
//! - `spec`: the checks and the tool model shared by both macros;
//! - `codegen`: the arguments struct and the `Tool` impl shared by both macros;
//! - `free_fn`: `#[function_tool]` on a free function;
//! - `impl_block`: `#[tools]` on an impl block.

mod attr;
mod codegen;
mod docs;
mod free_fn;
mod impl_block;
mod spec;

use proc_macro::TokenStream;

/// Turns a function into a tool the model can call.
///
/// On a free `fn` or `async fn`, it keeps the function as is and adds a unit struct named after
/// it (`get_weather` → `GetWeatherTool`, same visibility) that implements `Tool`, `Default`,
/// `Clone`, `Copy` and `Debug`: `registry.register(GetWeatherTool)?`.
///
/// On a method, it needs `#[tools]` on the impl block (see [`tools`]).
///
/// # Examples
///
/// ```
/// use crewline::prelude::function_tool;
/// use crewline::tool::{ExecuteOptions, Tool, ToolError, ToolRegistry};
/// use crewline::types::ToolCall;
/// use serde::{Deserialize, Serialize};
/// use serde_json::json;
///
/// #[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
/// #[serde(rename_all = "lowercase")]
/// enum Unit {
///     Celsius,
///     Fahrenheit,
/// }
///
/// #[derive(Serialize, schemars::JsonSchema)]
/// struct Weather {
///     location: String,
///     temperature: f64,
/// }
///
/// /// Get the current weather for a location.
/// ///
/// /// # Arguments
/// /// * `location` - City and state, e.g. San Francisco, CA
/// /// * `unit` - Temperature unit
/// #[function_tool(timeout_ms = 5000)]
/// async fn get_weather(
///     location: String,
///     #[arg(default = Unit::Celsius)] unit: Unit,
///     days: Option<u8>,
/// ) -> Result<Weather, ToolError> {
///     let _ = days;
///     let temperature = match unit {
///         Unit::Celsius => 21.0,
///         Unit::Fahrenheit => 69.8,
///     };
///     Ok(Weather { location, temperature })
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // What the model is told.
/// assert_eq!(GetWeatherTool.description(), "Get the current weather for a location.");
/// let schema = GetWeatherTool.parameters();
/// assert_eq!(schema["properties"]["location"]["description"], "City and state, e.g. San Francisco, CA");
/// assert_eq!(schema["required"], json!(["location"])); // `unit` has a default, `days` is an Option
/// assert!(GetWeatherTool.result_schema().is_some()); // `Weather` is `JsonSchema`
/// assert_eq!(GetWeatherTool.policy().timeout, Some(std::time::Duration::from_secs(5)));
///
/// let mut tools = ToolRegistry::new();
/// tools.register(GetWeatherTool)?;
/// let call = ToolCall::new("call_1", "get_weather", r#"{"location": "Paris", "unit": "fahrenheit"}"#);
/// let result = &tools.execute(&[call], ExecuteOptions::new()).await[0].result;
/// assert_eq!(result.value(), Some(&json!({"location": "Paris", "temperature": 69.8})));
///
/// // The function itself stays an ordinary function.
/// let oslo = get_weather("Oslo".into(), Unit::Celsius, None).await;
/// assert!(matches!(oslo, Ok(Weather { temperature: 21.0, .. })));
/// # Ok(()) }
/// ```
///
/// - The description is the doc comment before its first heading; each argument's description
///   comes from the `# Arguments` list (`* \`name\` - text`, `- \`name\`: text` or
///   `* name - text`), or from `#[arg(description = "..")]`.
/// - `Option<T>` arguments are optional; `#[arg(default = expr)]` (or `#[arg(default)]` for
///   `Default::default()`) makes any other argument optional, with that default.
/// - The function returns `Result<T, E>` with `T: Serialize` and `E: Into<ToolError>`, or any
///   `T: Serialize` (`()` is `null`; a `String` is the model's content as is).
/// - An `async fn` is awaited; a plain `fn` runs on Tokio's blocking pool, so it may block, and
///   a panic in it becomes a `ToolError`.
/// - `Tool::result_schema` is the JSON Schema of `T` (of the `T` of `Result<T, E>`) when it
///   implements `schemars::JsonSchema`, and `None` otherwise (and for `()`).
/// - Options: `#[function_tool(name = "..", description = "..", crate = path)]`, the policy's
///   `timeout_ms = N`, `confirm`, `cache_ttl_s = N`, `cancellable = false`,
///   `export = "crew,mcp,remote"` (the targets the tool is offered to; default: its registry's
///   default, the crew only: MCP and remote exports are opt-in), and `strict` (or
///   `strict = false`: OpenAI strict mode, checked at registration; default: its registry's),
///   and `dedupes_by_key` (its downstream dedupes by `IdempotencyKey::current()`, so a call
///   whose outcome is unknown may run again under the same key), and `background` (the call
///   answers "started" at once and its result comes back into the conversation when it
///   lands; see `crewline_tools::progress`).
#[proc_macro_attribute]
pub fn function_tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    free_fn::expand(attr.into(), item.into()).into()
}

/// On an impl block: makes its `#[function_tool]` methods tools of the type, found by
/// `registry.discover(&Arc::new(agent))`.
///
/// # Examples
///
/// ```
/// use std::{collections::HashMap, sync::Arc};
///
/// use crewline::tool::{ExecuteOptions, ToolError, ToolRegistry};
/// use crewline::types::ToolCall;
/// use crewline::prelude::{function_tool, tools};
///
/// struct WeatherAgent {
///     forecasts: HashMap<String, String>,
/// }
///
/// #[tools]
/// impl WeatherAgent {
///     /// Get the weather for a city.
///     #[function_tool]
///     async fn get_weather(&self, location: String) -> Result<String, ToolError> {
///         self.forecast(&location)
///             .ok_or_else(|| ToolError::new(format!("No forecast for {location}.")))
///     }
///
///     /// The cities with a forecast.
///     #[function_tool]
///     fn list_cities(&self) -> Vec<String> {
///         self.forecasts.keys().cloned().collect()
///     }
///
///     fn forecast(&self, location: &str) -> Option<String> {
///         self.forecasts.get(location).cloned() // not a tool
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = WeatherAgent { forecasts: [("Paris".into(), "Sunny".into())].into() };
/// let mut registry = ToolRegistry::new();
/// registry.discover(&Arc::new(agent))?;
/// assert_eq!(registry.names(), ["get_weather", "list_cities"]); // in method order
///
/// let calls = [
///     ToolCall::new("call_1", "get_weather", r#"{"location": "Paris"}"#),
///     ToolCall::new("call_2", "list_cities", "{}"),
/// ];
/// let runs = registry.execute(&calls, ExecuteOptions::new()).await;
/// assert_eq!(runs[0].result.content(), "Sunny"); // a `String` is the content as is
/// assert_eq!(runs[1].result.value(), Some(&serde_json::json!(["Paris"])));
/// # Ok(()) }
/// ```
///
/// Tool methods take `&self` (or no receiver); the type must be `Send + Sync + 'static` and
/// the impl block not generic. Each tool holds an `Arc` of the agent; the type implements
/// `ToolProvider`, listing its tools in method order. The methods stay ordinary methods.
/// Option: `#[tools(crate = path)]`.
#[proc_macro_attribute]
pub fn tools(attr: TokenStream, item: TokenStream) -> TokenStream {
    impl_block::expand(attr.into(), item.into()).into()
}
