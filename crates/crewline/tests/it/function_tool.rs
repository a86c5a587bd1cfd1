//! `#[function_tool]` and `#[tools]`, used as a crew author would: through `crewline` alone
//! (plus serde/schemars derives for the author's own argument and result types).

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
    mpsc,
};
use std::time::Duration;

use crewline::prelude::*;
use crewline::{
    tool::{ExecuteOptions, Tool, ToolProvider, ToolRegistry},
    types::{ToolErrorKind, ToolResult},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The results of `calls` run by `registry`, in call order (`parallel`: concurrently).
async fn results(registry: &ToolRegistry, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
    registry
        .execute(calls, ExecuteOptions::new().parallel(parallel))
        .await
        .into_iter()
        .map(|run| run.result)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Free functions
// ---------------------------------------------------------------------------------------------

/// A temperature unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Celsius,
    Fahrenheit,
}

#[derive(Debug, Serialize)]
struct Weather {
    location: String,
    temperature: f64,
    unit: Unit,
}

/// Get the current weather for a location.
///
/// Works for any city
/// on Earth.
///
/// # Arguments
/// * `location` - City and state, e.g. San Francisco, CA
/// * `unit` - Temperature unit
///
/// # Errors
/// When the location is unknown.
#[function_tool]
async fn get_weather(location: String, unit: Option<Unit>) -> Result<Weather, ToolError> {
    tokio::task::yield_now().await;
    if location.is_empty() {
        return Err(ToolError::new(
            "Unknown location; ask the caller for a city",
        ));
    }
    let unit = unit.unwrap_or(Unit::Celsius);
    let temperature = if unit == Unit::Celsius { 21.5 } else { 70.7 };
    Ok(Weather {
        location,
        temperature,
        unit,
    })
}

/// Greet someone.
///
/// # Arguments
/// - `name`: Who to greet
#[function_tool]
fn greet(mut name: String) -> String {
    name.insert_str(0, "Hello, ");
    name.push('!');
    name
}

/// Say nothing.
#[function_tool]
fn do_nothing() {}

/// Blow up.
#[function_tool]
fn explode() -> String {
    panic!("the tool body panicked on purpose")
}

/// Read a number from a config file that does not exist.
#[function_tool]
fn read_missing_file() -> Result<u32, std::io::Error> {
    Err(std::io::Error::other("config file is missing"))
}

/// Get a 5-day forecast.
///
/// # Arguments
/// * city - The city
/// * `days` - How many days
///   ahead to forecast
/// * `unit` - The unit
#[function_tool]
fn forecast(
    city: String,
    #[arg(default = 3)] days: u8,
    #[arg(default = Unit::Fahrenheit)] unit: Unit,
    #[arg(default = "metric", description = "The unit system")] system: String,
    #[arg(default)] verbose: bool,
) -> Value {
    json!({"city": city, "days": days, "unit": unit, "system": system, "verbose": verbose})
}

/// A page size that can only be read, not written back (no `Serialize`).
#[derive(Debug, Deserialize, JsonSchema)]
struct PageSize(u16);

impl Default for PageSize {
    fn default() -> Self {
        Self(20)
    }
}

/// List items.
///
/// # Arguments
/// * `page_size` - Items per page
#[function_tool]
async fn list_items(#[arg(default)] page_size: PageSize) -> u16 {
    page_size.0
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Passenger {
    /// Full name
    name: String,
    age: u8,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Trip {
    from: String,
    to: String,
    passengers: Vec<Passenger>,
}

#[derive(Debug, Serialize)]
struct Booking {
    reference: String,
    seats: usize,
}

/// Book a trip.
///
/// # Arguments
/// * `trip` - Where and who
/// * `type` - The fare type
#[function_tool]
async fn book_trip(trip: Trip, r#type: String) -> Booking {
    Booking {
        reference: format!("{}-{}-{}", trip.from, trip.to, r#type),
        seats: trip
            .passengers
            .iter()
            .filter(|passenger| !passenger.name.is_empty() && passenger.age > 0)
            .count(),
    }
}

/// Internal docs that the model should not see.
#[function_tool(name = "lookup_weather", description = "Looks up the weather.")]
async fn weather_lookup_v2(city: String) -> String {
    city
}

mod renamed_crate {
    //! The generated code's path to crewline can be overridden (for re-exporting crates).
    use crewline as cl;

    /// Shout the text.
    #[cl::function_tool(crate = cl)]
    pub(crate) fn shout(text: String) -> String {
        text.to_uppercase()
    }

    pub(crate) struct Echo;

    #[cl::tools(crate = cl)]
    impl Echo {
        /// Echo the text.
        #[cl::function_tool]
        fn echo(&self, text: String) -> String {
            text
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A blocking tool that proves it is off the runtime thread.
// ---------------------------------------------------------------------------------------------

static SIGNAL: Mutex<Option<mpsc::Receiver<()>>> = Mutex::new(None);

/// Block until the test's async task sends a signal.
#[function_tool]
fn wait_for_signal() -> Result<String, ToolError> {
    let receiver = SIGNAL
        .lock()
        .map_err(|_| ToolError::new("poisoned"))?
        .take()
        .ok_or_else(|| ToolError::new("no receiver installed"))?;
    let in_runtime = tokio::runtime::Handle::try_current().is_ok();
    match receiver.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => Ok(format!("signalled; in runtime context: {in_runtime}")),
        Err(_) => Err(ToolError::new(
            "never signalled: the body blocked the runtime",
        )),
    }
}

pub mod documented {
    //! Generated items are documented, so a crate denying `missing_docs` compiles.
    #![deny(missing_docs)]

    use crewline::prelude::*;

    /// Echo the text.
    #[function_tool]
    pub fn echo(text: String) -> String {
        text
    }
}

// ---------------------------------------------------------------------------------------------
// #[tools] on an impl block
// ---------------------------------------------------------------------------------------------

struct Counter {
    label: String,
    count: AtomicUsize,
}

#[tools]
impl Counter {
    const DEFAULT_STEP: usize = 1;

    fn new(label: &str) -> Self {
        Self {
            label: label.to_owned(),
            count: AtomicUsize::new(0),
        }
    }

    /// Add to the counter.
    ///
    /// # Arguments
    /// * `by` - How much to add
    #[function_tool]
    async fn increment(&self, #[arg(default = Self::DEFAULT_STEP)] by: usize) -> usize {
        self.count.fetch_add(by, Ordering::SeqCst) + by
    }

    /// Read the counter.
    #[function_tool]
    fn current(&self) -> String {
        format!("{}={}", self.label, self.count.load(Ordering::SeqCst))
    }

    /// Reset the counter to zero.
    #[function_tool(name = "reset_counter")]
    async fn reset(&self, confirm: bool) -> Result<&'static str, ToolError> {
        if !confirm {
            return Err(ToolError::new("Not reset: confirm must be true"));
        }
        self.count.store(0, Ordering::SeqCst);
        Ok("reset")
    }

    /// Compare two counters' labels.
    #[function_tool]
    fn same_label(&self, other: Option<String>) -> bool {
        other.as_deref() == Some(self.label.as_str())
    }

    /// Say which counters exist (an associated function: no `self`).
    #[function_tool]
    fn list_counters() -> Vec<&'static str> {
        vec!["main"]
    }

    fn helper(&self) -> usize {
        self.count.load(Ordering::SeqCst) * 2
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn property<'a>(schema: &'a Value, name: &str) -> &'a Value {
    &schema["properties"][name]
}

fn required(schema: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    names.sort_unstable();
    names
}

fn tool_named<'a>(tools: &'a [Arc<dyn Tool>], name: &str) -> &'a Arc<dyn Tool> {
    tools
        .iter()
        .find(|tool| tool.name() == name)
        .unwrap_or_else(|| panic!("no tool named {name}"))
}

// ---------------------------------------------------------------------------------------------
// Schemas and metadata
// ---------------------------------------------------------------------------------------------

#[test]
fn name_and_description_come_from_the_function_and_its_docs() {
    assert_eq!(GetWeatherTool.name(), "get_weather");
    assert_eq!(
        GetWeatherTool.description(),
        "Get the current weather for a location.\n\nWorks for any city on Earth."
    );
    assert_eq!(GreetTool.description(), "Greet someone.");
}

#[test]
fn argument_descriptions_come_from_the_arguments_section() {
    let schema = GetWeatherTool.parameters();
    assert_eq!(schema["type"], "object");
    assert_eq!(
        property(&schema, "location")["description"],
        "City and state, e.g. San Francisco, CA"
    );
    assert_eq!(property(&schema, "unit")["description"], "Temperature unit");
    assert_eq!(
        property(&GreetTool.parameters(), "name")["description"],
        "Who to greet"
    );
    let forecast = ForecastTool.parameters();
    assert_eq!(property(&forecast, "city")["description"], "The city");
    assert_eq!(
        property(&forecast, "days")["description"],
        "How many days ahead to forecast. Defaults to 3."
    );
}

#[test]
fn option_arguments_are_not_required_in_the_raw_schema() {
    assert_eq!(required(&GetWeatherTool.parameters()), ["location"]);
}

#[test]
fn enum_arguments_list_their_values() {
    let schema = GetWeatherTool.parameters();
    let text = schema.to_string();
    assert!(
        text.contains("\"celsius\"") && text.contains("\"fahrenheit\""),
        "{schema:#}"
    );
    // And through the registry's normalisation, inline and nullable.
    let normalized = crewline::tool::normalize_schema(schema);
    let unit = property(&normalized, "unit");
    assert!(unit.to_string().contains("\"celsius\""), "{normalized:#}");
    assert!(!normalized.to_string().contains("$ref"), "{normalized:#}");
}

#[test]
fn nested_struct_arguments_have_their_full_schema() {
    let schema = BookTripTool.parameters();
    assert_eq!(required(&schema), ["trip", "type"]);
    assert_eq!(property(&schema, "type")["description"], "The fare type");
    let normalized = crewline::tool::normalize_schema(schema);
    let trip = property(&normalized, "trip");
    assert_eq!(required(trip), ["from", "passengers", "to"]);
    let passenger = &trip["properties"]["passengers"]["items"];
    assert_eq!(passenger["properties"]["name"]["description"], "Full name");
    assert_eq!(required(passenger), ["age", "name"]);
}

#[test]
fn arguments_with_defaults_are_optional_and_describe_their_default() {
    let schema = ForecastTool.parameters();
    assert_eq!(required(&schema), ["city"]);
    assert_eq!(
        property(&schema, "unit")["description"],
        "The unit. Defaults to \"fahrenheit\"."
    );
    assert_eq!(
        property(&schema, "system")["description"],
        "The unit system. Defaults to \"metric\"."
    );
    assert_eq!(
        property(&schema, "verbose")["description"],
        "Defaults to false."
    );
}

#[tokio::test]
async fn a_default_that_is_not_serialize_is_applied_but_not_described() {
    let schema = ListItemsTool.parameters();
    assert_eq!(
        property(&schema, "page_size")["description"],
        "Items per page"
    );
    assert!(required(&schema).is_empty());
    assert_eq!(ListItemsTool.call(json!({})).await.unwrap(), json!(20));
    assert_eq!(
        ListItemsTool.call(json!({"page_size": 5})).await.unwrap(),
        json!(5)
    );
}

#[test]
fn name_and_description_can_be_overridden() {
    assert_eq!(WeatherLookupV2Tool.name(), "lookup_weather");
    assert_eq!(WeatherLookupV2Tool.description(), "Looks up the weather.");
}

#[test]
fn tool_structs_are_plain_values() {
    let tool = GetWeatherTool;
    let copy = tool;
    let _clone = Clone::clone(&copy);
    let default: GetWeatherTool = Default::default();
    assert_eq!(format!("{default:?}"), "GetWeatherTool");
    assert_eq!(documented::EchoTool.name(), "echo");
}

#[test]
fn parameters_are_computed_once_and_stay_equal() {
    assert_eq!(ForecastTool.parameters(), ForecastTool.parameters());
}

#[tokio::test]
async fn the_crate_path_can_be_overridden() {
    use renamed_crate::{Echo, ShoutTool};
    assert_eq!(
        ShoutTool.call(json!({"text": "hi"})).await.unwrap(),
        json!("HI")
    );
    let tools = Echo::tools(&Arc::new(Echo));
    assert_eq!(tools[0].name(), "echo");
    assert_eq!(
        tools[0].call(json!({"text": "hi"})).await.unwrap(),
        json!("hi")
    );
}

#[test]
fn the_function_is_still_callable_directly() {
    assert_eq!(greet("Ada".into()), "Hello, Ada!");
}

// ---------------------------------------------------------------------------------------------
// Calling
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_async_tool_is_awaited_and_its_ok_value_is_json() {
    let output = GetWeatherTool
        .call(json!({"location": "Paris", "unit": "fahrenheit"}))
        .await
        .unwrap();
    assert_eq!(
        output,
        json!({"location": "Paris", "temperature": 70.7, "unit": "fahrenheit"})
    );
    let output = GetWeatherTool
        .call(json!({"location": "Paris", "unit": null}))
        .await
        .unwrap();
    assert_eq!(output["unit"], "celsius");
}

#[tokio::test]
async fn an_err_becomes_a_tool_error_with_its_message() {
    let error = GetWeatherTool
        .call(json!({"location": ""}))
        .await
        .unwrap_err();
    assert_eq!(
        error.message(),
        "Unknown location; ask the caller for a city"
    );
    assert!(!error.is_invalid_arguments());

    let error = ReadMissingFileTool.call(json!({})).await.unwrap_err();
    assert_eq!(error.message(), "config file is missing");
}

#[tokio::test]
async fn a_string_result_is_the_content_as_is_and_unit_is_null() {
    assert_eq!(
        GreetTool.call(json!({"name": "Ada"})).await.unwrap(),
        Value::String("Hello, Ada!".into())
    );
    assert_eq!(DoNothingTool.call(json!({})).await.unwrap(), Value::Null);
    assert_eq!(DoNothingTool.call(Value::Null).await.unwrap(), Value::Null);
}

#[tokio::test]
async fn a_struct_result_is_json_and_nested_arguments_deserialize() {
    let output = BookTripTool
        .call(json!({
            "trip": {
                "from": "AMS",
                "to": "LIS",
                "passengers": [{"name": "Ada", "age": 36}, {"name": "Alan", "age": 41}]
            },
            "type": "flex"
        }))
        .await
        .unwrap();
    assert_eq!(output, json!({"reference": "AMS-LIS-flex", "seats": 2}));
}

#[tokio::test]
async fn defaults_apply_when_an_argument_is_missing_or_null() {
    let output = ForecastTool.call(json!({"city": "Oslo"})).await.unwrap();
    assert_eq!(
        output,
        json!({"city": "Oslo", "days": 3, "unit": "fahrenheit", "system": "metric", "verbose": false})
    );
    let output = ForecastTool
        .call(json!({"city": "Oslo", "days": null, "unit": "celsius", "verbose": true}))
        .await
        .unwrap();
    assert_eq!(output["days"], 3);
    assert_eq!(output["unit"], "celsius");
    assert_eq!(output["verbose"], true);
}

#[tokio::test]
async fn bad_arguments_are_an_invalid_arguments_error_naming_the_problem() {
    let error = GetWeatherTool.call(json!({})).await.unwrap_err();
    assert!(error.is_invalid_arguments());
    assert_eq!(error.message(), "missing field `location`");

    let error = ForecastTool
        .call(json!({"city": "Oslo", "days": "many"}))
        .await
        .unwrap_err();
    assert!(error.is_invalid_arguments());
    assert!(error.message().contains("invalid type"), "{error}");

    let error = GetWeatherTool
        .call(json!({"location": "Paris", "unit": "kelvin"}))
        .await
        .unwrap_err();
    assert!(error.is_invalid_arguments());
    assert!(error.message().contains("kelvin"), "{error}");
}

#[tokio::test]
async fn a_panicking_sync_tool_is_a_tool_error_not_a_crash() {
    let error = ExplodeTool.call(json!({})).await.unwrap_err();
    assert_eq!(error.message(), "The tool `explode` failed unexpectedly.");
    assert!(!error.is_invalid_arguments());
    assert!(error.to_string().contains("panicked on purpose"), "{error}");
}

/// On a single-threaded runtime, the sync tool blocks until a task *on that runtime* signals
/// it: this only finishes if the body runs on another (blocking-pool) thread. If it ever ran
/// on the runtime thread, the body would time out and return an error rather than hang.
#[tokio::test(flavor = "current_thread")]
async fn a_sync_tool_runs_on_the_blocking_pool_without_stalling_the_runtime() {
    let (sender, receiver) = mpsc::channel();
    *SIGNAL.lock().unwrap() = Some(receiver);
    let ticks = Arc::new(AtomicUsize::new(0));
    let ticker = {
        let ticks = Arc::clone(&ticks);
        async move {
            // Tick a few times while the tool blocks, then release it.
            for _ in 0..3 {
                tokio::task::yield_now().await;
                ticks.fetch_add(1, Ordering::SeqCst);
            }
            sender.send(()).unwrap();
        }
    };
    let (output, ()) = tokio::join!(WaitForSignalTool.call(json!({})), ticker);
    assert_eq!(
        output.unwrap(),
        Value::String("signalled; in runtime context: true".into())
    );
    assert_eq!(ticks.load(Ordering::SeqCst), 3);
}

// ---------------------------------------------------------------------------------------------
// #[tools]
// ---------------------------------------------------------------------------------------------

#[test]
fn tool_provider_lists_the_marked_methods_in_order() {
    let agent = Arc::new(Counter::new("main"));
    let tools = Counter::tools(&agent);
    let names: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
    assert_eq!(
        names,
        [
            "increment",
            "current",
            "reset_counter",
            "same_label",
            "list_counters"
        ]
    );
    assert_eq!(tools[0].description(), "Add to the counter.");
    let schema = tools[0].parameters();
    assert_eq!(
        property(&schema, "by")["description"],
        "How much to add. Defaults to 1."
    );
    assert!(required(&schema).is_empty());
    assert_eq!(required(&tools[2].parameters()), ["confirm"]);
}

#[tokio::test]
async fn method_tools_share_the_agents_state() {
    let agent = Arc::new(Counter::new("main"));
    let tools = Counter::tools(&agent);
    let increment = tool_named(&tools, "increment");
    assert_eq!(increment.call(json!({})).await.unwrap(), json!(1));
    assert_eq!(increment.call(json!({"by": 5})).await.unwrap(), json!(6));
    // A sync method, run on the blocking pool with its own Arc of the agent.
    assert_eq!(
        tool_named(&tools, "current").call(json!({})).await.unwrap(),
        json!("main=6")
    );
    assert_eq!(agent.count.load(Ordering::SeqCst), 6);
    assert_eq!(agent.helper(), 12);

    let reset = tool_named(&tools, "reset_counter");
    let error = reset.call(json!({"confirm": false})).await.unwrap_err();
    assert_eq!(error.message(), "Not reset: confirm must be true");
    assert_eq!(
        reset.call(json!({"confirm": true})).await.unwrap(),
        json!("reset")
    );
    assert_eq!(agent.count.load(Ordering::SeqCst), 0);

    assert_eq!(
        tool_named(&tools, "same_label")
            .call(json!({"other": "main"}))
            .await
            .unwrap(),
        json!(true)
    );
    assert_eq!(
        tool_named(&tools, "list_counters")
            .call(json!({}))
            .await
            .unwrap(),
        json!(["main"])
    );
}

#[tokio::test]
async fn methods_stay_ordinary_methods() {
    let counter = Counter::new("plain");
    assert_eq!(counter.increment(2).await, 2);
    assert_eq!(counter.current(), "plain=2");
}

#[tokio::test]
async fn tools_keep_the_agent_alive() {
    let agent = Arc::new(Counter::new("kept"));
    let tools = Counter::tools(&agent);
    drop(agent);
    assert_eq!(
        tool_named(&tools, "current").call(json!({})).await.unwrap(),
        json!("kept=0")
    );
}

// ---------------------------------------------------------------------------------------------
// With the registry, end to end
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn registry_discovers_registers_describes_and_executes() {
    let agent = Arc::new(Counter::new("main"));
    let mut registry = ToolRegistry::new();
    registry
        .discover(&agent)
        .unwrap()
        .register(GetWeatherTool)
        .unwrap()
        .register(ForecastTool)
        .unwrap();

    let schemas = registry.get_schemas();
    let names: Vec<&str> = schemas
        .iter()
        .filter_map(|schema| schema["function"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "increment",
            "current",
            "reset_counter",
            "same_label",
            "list_counters",
            "get_weather",
            "forecast"
        ]
    );
    let weather = &schemas[5];
    assert_eq!(weather["type"], "function");
    assert_eq!(
        weather["function"]["description"],
        "Get the current weather for a location.\n\nWorks for any city on Earth."
    );
    assert_eq!(
        weather["function"]["parameters"]["properties"]["location"]["description"],
        "City and state, e.g. San Francisco, CA"
    );

    let calls = [
        ToolCall::new("1", "increment", r#"{"by": 2}"#),
        ToolCall::new("2", "get_weather", r#"{"location": "Paris", "unit": null}"#),
        ToolCall::new("3", "forecast", r#"{"city": "Oslo", "days": null}"#),
        ToolCall::new("4", "get_weather", r#"{"location": ""}"#),
        ToolCall::new("5", "get_weather", r#"{"unit": "celsius"}"#),
    ];
    let results = results(&registry, &calls, true).await;
    assert_eq!(results.len(), 5);
    assert_eq!(results[0].content(), "2");
    assert!(!results[1].is_error());
    let weather: Value = serde_json::from_str(&results[1].content()).unwrap();
    assert_eq!(weather["unit"], "celsius");
    let forecast: Value = serde_json::from_str(&results[2].content()).unwrap();
    assert_eq!(forecast["days"], 3);
    assert!(results[3].is_error());
    assert!(
        results[3].content().contains("Unknown location"),
        "{}",
        results[3].content()
    );
    assert_eq!(results[3].error_kind(), Some(ToolErrorKind::ToolError));
    assert!(results[4].is_error());
    assert_eq!(
        results[4].error_kind(),
        Some(ToolErrorKind::ToolArgsInvalid)
    );
    assert_eq!(agent.count.load(Ordering::SeqCst), 2);
}

// ---------------------------------------------------------------------------------------------
// Executor policies
// ---------------------------------------------------------------------------------------------

/// Charge the caller's card.
#[function_tool(timeout_ms = 1500, confirm, cache_ttl_s = 60, cancellable = false)]
async fn charge(amount: u32) -> u32 {
    amount
}

/// Look up a fare.
#[function_tool(confirm = false, cache_ttl_s = 5)]
fn fare() -> u32 {
    7
}

#[test]
fn policy_options_become_the_tools_policy() {
    use crewline::tool::ToolPolicy;
    assert_eq!(
        ChargeTool.policy(),
        ToolPolicy::new()
            .timeout(Duration::from_millis(1500))
            .confirm(true)
            .cache_ttl(Duration::from_secs(60))
            .cancellable(false)
    );
    assert_eq!(
        FareTool.policy(),
        ToolPolicy::new().cache_ttl(Duration::from_secs(5))
    );
    // Without policy options the trait's default applies.
    assert_eq!(GreetTool.policy(), ToolPolicy::new());
}

// ---------------------------------------------------------------------------------------------
// Result schemas and export targets
// ---------------------------------------------------------------------------------------------

/// A seat on a flight.
#[derive(Debug, Serialize, JsonSchema)]
struct Seat {
    /// The seat's row.
    row: u8,
    letter: String,
    window: Option<bool>,
}

/// Pick a seat.
#[function_tool]
fn pick_seat() -> Seat {
    Seat {
        row: 12,
        letter: "A".to_owned(),
        window: Some(true),
    }
}

/// Reserve a seat.
#[function_tool]
async fn reserve_seat(row: u8) -> Result<Seat, ToolError> {
    Ok(Seat {
        row,
        letter: "C".to_owned(),
        window: None,
    })
}

/// Check in (a `Result` whose success is `()`).
#[function_tool]
fn check_in() -> Result<(), ToolError> {
    Ok(())
}

/// Only for MCP clients.
#[function_tool(export = "mcp")]
fn mcp_status() -> String {
    "ok".to_owned()
}

/// A name Python cannot take.
#[function_tool(name = "def", export = " crew , mcp ")]
fn define() -> u8 {
    1
}

#[test]
fn the_result_schema_comes_from_a_json_schema_return_type() {
    let schema = PickSeatTool.result_schema().unwrap();
    assert_eq!(schema["type"], "object");
    assert_eq!(property(&schema, "row")["description"], "The seat's row.");
    assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
    // As schemars writes it: `window` is optional, not strict-mode required.
    assert_eq!(required(&schema), ["letter", "row"]);
}

#[test]
fn the_result_schema_of_a_result_is_that_of_its_success_type() {
    assert_eq!(
        ReserveSeatTool.result_schema(),
        PickSeatTool.result_schema()
    );
    // `u32` implements JsonSchema too.
    assert_eq!(
        ReadMissingFileTool.result_schema().unwrap()["type"],
        "integer"
    );
}

#[test]
fn there_is_no_result_schema_without_json_schema_or_for_unit() {
    // `Weather` is `Serialize` but not `JsonSchema`.
    assert_eq!(GetWeatherTool.result_schema(), None);
    assert_eq!(DoNothingTool.result_schema(), None);
    assert_eq!(CheckInTool.result_schema(), None);
}

#[test]
fn export_option_limits_where_the_tool_is_offered() {
    use crewline::tool::{Exports, Target, ToolPolicy};
    assert_eq!(
        McpStatusTool.policy(),
        ToolPolicy::new().exports(Exports::only(&[Target::Mcp]))
    );
    assert_eq!(
        DefineTool.policy().exports,
        Some(Exports::only(&[Target::Crew, Target::Mcp]))
    );

    let mut registry = ToolRegistry::new();
    registry
        .register(PickSeatTool)
        .unwrap()
        .register(McpStatusTool)
        .unwrap()
        .register(DefineTool)
        .unwrap();
    let crew = registry.export(Target::Crew).unwrap();
    assert_eq!(crew.names(), ["pick_seat", "def"]);
    assert!(crew.get("mcp_status").is_none());
    // `pick_seat` names no targets: the crew only, by default.
    let mcp = registry.export(Target::Mcp).unwrap();
    assert_eq!(mcp.names(), ["mcp_status", "def"]);
    // Opted in per registry, it is exported, its result schema with it.
    let opted_in = registry
        .clone()
        .with_default_exports(crewline::tool::Exports::all());
    let mcp = opted_in.export(Target::Mcp).unwrap();
    assert_eq!(mcp.names(), ["pick_seat", "mcp_status", "def"]);
    assert!(mcp.get("pick_seat").unwrap().result_schema().is_some());
}

#[test]
fn a_python_keyword_tool_name_is_rejected_by_the_python_rules() {
    use crewline::tool::{ExportError, Exports, NameRules, Target};
    let mut registry = ToolRegistry::new().with_default_exports(Exports::all());
    registry
        .register(PickSeatTool)
        .unwrap()
        .register(DefineTool)
        .unwrap();
    let error = registry
        .export_with(Target::Mcp, NameRules::Python)
        .unwrap_err();
    assert!(
        matches!(&error, ExportError::InvalidName { tool, target: Target::Mcp, reason }
            if tool == "def" && reason.contains("keyword")),
        "{error:?}"
    );
    // Remote is not covered by its export list, so nothing there to reject.
    assert_eq!(
        registry
            .export_with(Target::Remote, NameRules::Python)
            .unwrap()
            .names(),
        ["pick_seat"]
    );
}

/// An agent whose method tools have result schemas.
struct SeatMap;

#[tools]
impl SeatMap {
    /// The first free seat.
    #[function_tool(export = "remote")]
    async fn first_free(&self) -> Result<Seat, ToolError> {
        Ok(pick_seat())
    }
}

#[test]
fn method_tools_have_result_schemas_and_exports_too() {
    use crewline::tool::Target;
    let mut registry = ToolRegistry::new();
    registry.discover(&Arc::new(SeatMap)).unwrap();
    let tool = registry.get("first_free").unwrap();
    assert_eq!(tool.result_schema(), PickSeatTool.result_schema());
    assert!(registry.export(Target::Crew).unwrap().is_empty());
    assert!(registry.definitions_for(Target::Crew).is_empty());
    assert_eq!(registry.export(Target::Remote).unwrap().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Strict mode
// ---------------------------------------------------------------------------------------------

/// Book a table.
#[function_tool(strict)]
async fn book_table(guests: u8, note: Option<String>) -> String {
    format!("{guests} {note:?}")
}

/// Tag a record.
#[function_tool(strict)]
fn lookup(tags: std::collections::HashMap<String, String>) -> usize {
    tags.len()
}

/// Tag a record, without strict mode whatever the registry says.
#[function_tool(strict = false)]
fn tag(tags: std::collections::HashMap<String, String>) -> usize {
    tags.len()
}

#[test]
fn the_strict_option_sets_the_policy_and_the_definition_says_strict() {
    use crewline::tool::ToolPolicy;
    assert_eq!(BookTableTool.policy(), ToolPolicy::new().strict(true));
    assert_eq!(TagTool.policy(), ToolPolicy::new().strict(false));

    let mut registry = ToolRegistry::new();
    registry.register(BookTableTool).unwrap();
    let definition = &registry.definitions()[0];
    assert!(definition.strict);
    assert_eq!(definition.to_openai()["function"]["strict"], json!(true));
}

#[test]
fn a_strict_map_argument_is_refused_at_registration_with_its_path() {
    let mut registry = ToolRegistry::new();
    let error = registry.register(LookupTool).unwrap_err().to_string();
    assert!(
        error.starts_with("tool `lookup`: `/properties/tags` is a map"),
        "{error}"
    );
    assert!(error.contains("turn strict off for this tool"), "{error}");

    // Its own `strict = false` wins over a strict registry.
    let mut strict_by_default = ToolRegistry::new().with_strict(true);
    strict_by_default.register(TagTool).unwrap();
    assert!(!strict_by_default.definitions()[0].strict);
}

// ---------------------------------------------------------------------------------------------
// Run once
// ---------------------------------------------------------------------------------------------

/// Send money through a bank that dedupes transfers by idempotency key.
#[function_tool(cancellable = false, dedupes_by_key)]
async fn pay_bank(amount: u32) -> String {
    format!("{amount}")
}

#[test]
fn the_dedupes_by_key_option_sets_the_policy() {
    use crewline::tool::ToolPolicy;
    assert_eq!(
        PayBankTool.policy(),
        ToolPolicy::new().cancellable(false).dedupes_by_key(true)
    );
}

/// Book a table.
///
/// # Arguments
/// * `guests` - How many people
/// * `note` - Anything the restaurant should know
#[function_tool]
async fn book_table_doc(guests: u8, note: Option<String>) -> String {
    format!("{guests} {note:?}")
}

#[test]
fn the_schema_docs_protocol_shows_is_the_one_the_model_is_sent() {
    // The macro's own schema leaves an `Option<T>` out of `required`...
    assert_eq!(required(&BookTableDocTool.parameters()), ["guests"]);
    // ...and the registry's, the one the model is sent, lists every property, an `Option<T>`
    // nullable (OpenAI's strict-mode shape, for every tool).
    let mut registry = ToolRegistry::new();
    registry.register(BookTableDocTool).unwrap();
    assert_eq!(
        registry.definitions()[0].parameters,
        json!({
            "type": "object",
            "properties": {
                "guests": {"type": "integer", "description": "How many people", "minimum": 0, "maximum": 255},
                "note": {"type": ["string", "null"], "description": "Anything the restaurant should know"}
            },
            "required": ["guests", "note"],
            "additionalProperties": false
        })
    );
}

// ---------------------------------------------------------------------------------------------
// An agent's tools
// ---------------------------------------------------------------------------------------------

#[test]
fn a_registry_given_to_an_agent_keeps_the_tools_added_before_it() {
    use crewline::{agent::AgentError, llm::ScriptedLlm, tool::RegistryError};

    let mut registry = ToolRegistry::new().with_max_concurrency(3);
    registry.register(GreetTool).unwrap();
    let agent = Agent::builder(ScriptedLlm::new([]))
        .tool(DoNothingTool)
        .registry(registry)
        .tool(ExplodeTool)
        .build()
        .unwrap();
    let tools = agent.tool_loop().tools();
    let mut names = tools.names();
    names.sort_unstable();
    assert_eq!(names, ["do_nothing", "explode", "greet"]);
    // The registry's own settings are the agent's.
    assert_eq!(tools.max_concurrency(), 3);

    // A name in both is reported by `build`, as with `tools`.
    let mut registry = ToolRegistry::new();
    registry.register(GreetTool).unwrap();
    let twice = Agent::builder(ScriptedLlm::new([]))
        .tool(GreetTool)
        .registry(registry)
        .build();
    assert!(
        matches!(twice, Err(AgentError::Tools(RegistryError::DuplicateName(ref name))) if name == "greet"),
        "{twice:?}"
    );
}
