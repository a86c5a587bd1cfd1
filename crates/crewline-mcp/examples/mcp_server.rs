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
//! (default `smolagents`), `--ledger PATH`, `--host` (default 127.0.0.1), `--token` (or
//! `CREWLINE_AUTH_TOKEN`; clients send `Authorization: Bearer`), `--allow-unauthenticated`,
//! `--help`. Beyond loopback without a token it refuses to start.

use std::{io::Write, sync::Arc};

use crewline::{
    prelude::function_tool,
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

/// Serves two crewline tools over MCP (streamable HTTP at `/mcp`, or stdio).
#[derive(clap::Parser)]
struct Options {
    #[command(flatten)]
    serve: crewline_server::ServeArgs,
    /// Serve one session on stdin/stdout instead of HTTP (no network, no token).
    #[arg(long)]
    stdio: bool,
    /// The HTTP port (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// The schema flavour: standard or smolagents.
    #[arg(long, default_value = "smolagents", value_parser = parse_flavour)]
    flavour: SchemaFlavour,
    /// Record every call in this JSON Lines ledger.
    #[arg(long)]
    ledger: Option<String>,
}

fn parse_flavour(text: &str) -> Result<SchemaFlavour, String> {
    match text {
        "standard" => Ok(SchemaFlavour::Standard),
        "smolagents" => Ok(SchemaFlavour::Smolagents),
        other => Err(format!(
            "unknown flavour `{other}` (standard or smolagents)"
        )),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let options = <Options as clap::Parser>::parse();

    let mut executor = Executor::builder();
    if let Some(path) = &options.ledger {
        executor = executor.ledger(Arc::new(JsonlLedger::open(path)?));
    }
    let mut tools = ToolRegistry::new().with_executor(Arc::new(executor.build()));
    tools
        .register(BookTableTool)?
        .register(GetWeatherTool)?
        .register(StaffNoteTool)?;
    let mut server = McpServer::with_flavour(&tools, options.flavour)?;
    if let Some(token) = &options.serve.token {
        server = server.auth_token(token);
    }
    if options.serve.allow_unauthenticated {
        server = server.allow_unauthenticated();
    }

    if options.stdio {
        server.serve_stdio().await?;
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind(options.serve.addr(options.port)).await?;
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
