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
    /// An authentication setting is invalid (an empty token, say).
    #[error("invalid `{setting}`: {source}")]
    Auth {
        /// The setting (`auth_token`).
        setting: &'static str,
        /// What is wrong with it.
        #[source]
        source: crewline_auth::CredentialError,
    },
    /// The HTTP endpoint would be reachable beyond this machine without any credential.
    #[error(
        "refusing to serve MCP on {addr} without authentication: anyone who can reach it could \
         call every exported tool. Set a token (`McpServer::auth_token`, `--token` or \
         `CREWLINE_AUTH_TOKEN`), bind a loopback address (127.0.0.1), or, on a trusted network \
         only, call `McpServer::allow_unauthenticated()` (`--allow-unauthenticated`)"
    )]
    Unauthenticated {
        /// The address that is not loopback.
        addr: String,
    },
    /// A remote tool could not be added to the registry.
    #[error("the MCP tool could not be mounted: {0}")]
    Register(#[from] RegistryError),
}
