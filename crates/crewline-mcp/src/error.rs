//! Why an MCP server or client could not start.

use crewline_tools::{ExportError, RegistryError};

/// Why serving or mounting tools over MCP failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// A tool could not be exported to MCP (its name breaks the flavour's naming rules).
    #[error(transparent)]
    Export(#[from] ExportError),
    /// The MCP session could not be set up or ended abnormally (handshake, transport); the
    /// cause is kept as the error's source.
    #[error("the MCP session could not start: {0}")]
    Session(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The MCP peer failed a request (listing tools, for instance).
    #[error("the MCP request failed: {0}")]
    Request(#[from] rmcp::ServiceError),
    /// A child process or socket could not be used.
    #[error("MCP transport I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// A remote tool could not be added to the registry.
    #[error("the MCP tool could not be mounted: {0}")]
    Register(#[from] RegistryError),
}
