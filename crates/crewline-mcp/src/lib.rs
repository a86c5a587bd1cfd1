//! crewline tools over MCP (the Model Context Protocol), with the official Rust SDK `rmcp`.
//!
//! - [`McpServer`] serves a [`ToolRegistry`](crewline_tools::ToolRegistry)'s MCP-exported
//!   tools over stdio or streamable HTTP (an [`axum::Router`] at `/mcp`, to merge into a crew
//!   server or serve alone). Every call runs through the registry's executor, so validation,
//!   hooks, guardrails, cache, timeouts and the ledger apply; a failure is a tool result with
//!   `isError: true` carrying `{"error": {"kind", "message"}}`. A tool with an object result
//!   schema lists it as `outputSchema` and answers with `structuredContent`; a request the
//!   client cancels cancels the call (for cancellable tools).
//! - [`SchemaFlavour`] picks standard JSON Schemas or the plain shape smolagents' MCP adapter
//!   understands (see [`flavour`] for the mapping table).
//! - [`McpClient`] mounts an external MCP server's tools (stdio child process or streamable
//!   HTTP) into a registry, as tools whose calls go through the executor like any other; a
//!   call given up locally (barge-in, timeout) is cancelled on the server too.

mod client;
mod error;
pub mod flavour;
mod server;

/// The MCP SDK, re-exported so that its types in this API (listed tools) can be named.
pub use rmcp;

pub use client::McpClient;
pub use error::{McpError, Refusal};
pub use flavour::SchemaFlavour;
pub use server::{
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE_TIMEOUT, MCP_PATH,
    McpServer,
};
