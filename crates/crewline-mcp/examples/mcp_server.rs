//! A crewline tool registry served over MCP, for MCP clients such as smolagents.
//!
//! Two tools are served: `book_table` (required and optional arguments; a party larger than 12
//! is a `ToolArgsInvalid` error the model can correct) and `get_weather` (an optional enum
//! argument, a typed result). Both return objects with a JSON Schema, so both list an MCP
//! `outputSchema` and answer with `structuredContent` as well as text. A third, `staff_note`,
//! is exported to the crew only and is not listed. Every call is recorded in a JSON Lines
//! ledger when `--ledger PATH` is given.
//!
//! ```sh
//! # streamable HTTP on a free port; the first stdout line is `MCP_URL=http://127.0.0.1:PORT/mcp`
//! cargo run -p crewline-mcp --example mcp_server -- --flavour smolagents --ledger /tmp/ledger.jsonl
//! # stdio (stdout carries MCP only; logs go to stderr)
//! cargo run -p crewline-mcp --example mcp_server -- --stdio
//! ```
//!
//! Options: `--stdio`, `--port N` (default 0: any free port), `--flavour standard|smolagents`
//! (default `smolagents`), `--ledger PATH`.

use std::{io::Write, sync::Arc};

use crewline::{
    function_tool,
    tool::{Executor, ToolError, ToolRegistry, executor::ledger::JsonlLedger},
};
use crewline_mcp::{McpServer, SchemaFlavour};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A temperature unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Celsius,
    Fahrenheit,
}

/// A confirmed booking.
#[derive(Debug, Serialize, JsonSchema)]
struct Booking {
    restaurant: String,
    party_size: u8,
    time: String,
    notes: Option<String>,
    confirmation: String,
}

/// The weather in a city.
#[derive(Debug, Serialize, JsonSchema)]
struct Weather {
    city: String,
    temperature: f64,
    unit: Unit,
}

/// Book a table at a restaurant.
///
/// # Arguments
/// * `restaurant` - The restaurant's name
/// * `party_size` - How many people (1 to 12)
/// * `time` - When, e.g. 19:30 (default: the next free slot)
/// * `notes` - Anything the restaurant should know
#[function_tool(export = "crew,mcp")]
async fn book_table(
    restaurant: String,
    party_size: u8,
    time: Option<String>,
    notes: Option<String>,
) -> Result<Booking, ToolError> {
    if !(1..=12).contains(&party_size) {
        return Err(ToolError::invalid_arguments(format!(
            "party_size must be between 1 and 12, not {party_size}; split larger groups"
        )));
    }
    let time = time.unwrap_or_else(|| "19:00".to_owned());
    let confirmation = format!(
        "{}-{party_size}-{}",
        restaurant.len(),
        time.replace(':', "")
    );
    Ok(Booking {
        restaurant,
        party_size,
        time,
        notes,
        confirmation,
    })
}

/// Get the current weather in a city.
///
/// # Arguments
/// * `city` - The city, e.g. Oslo
/// * `unit` - Temperature unit (default celsius)
#[function_tool(export = "crew,mcp")]
async fn get_weather(city: String, unit: Option<Unit>) -> Weather {
    let unit = unit.unwrap_or(Unit::Celsius);
    let temperature = if unit == Unit::Celsius { 21.5 } else { 70.7 };
    Weather {
        city,
        temperature,
        unit,
    }
}

/// Leave a note for the restaurant staff (crew only: not offered over MCP).
///
/// # Arguments
/// * `note` - The note
#[function_tool(export = "crew")]
fn staff_note(note: String) -> String {
    format!("noted: {note}")
}

/// The command line.
struct Options {
    stdio: bool,
    port: u16,
    flavour: SchemaFlavour,
    ledger: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        stdio: false,
        port: 0,
        flavour: SchemaFlavour::Smolagents,
        ledger: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--stdio" => options.stdio = true,
            "--port" => {
                let value = args.next().ok_or("--port needs a number")?;
                options.port = value.parse().map_err(|_| format!("bad port `{value}`"))?;
            }
            "--flavour" => {
                options.flavour = match args.next().as_deref() {
                    Some("standard") => SchemaFlavour::Standard,
                    Some("smolagents") => SchemaFlavour::Smolagents,
                    other => return Err(format!("unknown flavour {other:?}")),
                };
            }
            "--ledger" => options.ledger = Some(args.next().ok_or("--ledger needs a path")?),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = options()?;

    let mut executor = Executor::builder();
    if let Some(path) = &options.ledger {
        executor = executor.ledger(Arc::new(JsonlLedger::open(path)?));
    }
    let mut tools = ToolRegistry::new().with_executor(Arc::new(executor.build()));
    tools
        .register(BookTableTool)?
        .register(GetWeatherTool)?
        .register(StaffNoteTool)?;
    let server = McpServer::with_flavour(&tools, options.flavour)?;

    if options.stdio {
        server.serve_stdio().await?;
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", options.port)).await?;
    let addr = listener.local_addr()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "MCP_URL=http://{addr}/mcp")?;
        out.flush()?;
    }
    server
        .serve_http_with_shutdown(listener, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
