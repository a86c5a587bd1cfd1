//! Why an MCP server or client could not start.

use std::time::Duration;

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
    #[error("the MCP session could not start or ended abnormally")]
    Session(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The client refused what the MCP server sent, or gave up waiting for it (see
    /// [`Refusal`] for which limit); nothing of the refused answer is kept.
    #[error("the MCP client refused the server's answer")]
    Refused(#[source] Refusal),
    /// The MCP peer failed a request (listing tools, for instance).
    #[error("the MCP request failed")]
    Request(#[from] rmcp::ServiceError),
    /// A child process or socket could not be used.
    #[error("MCP transport I/O failed")]
    Io(#[from] std::io::Error),
    /// An authentication setting is invalid (an empty token, say).
    #[error("invalid `{setting}`")]
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
    #[error("the MCP tool could not be mounted")]
    Register(#[from] RegistryError),
}

/// Which of the client's limits a server went past
/// ([`McpClient`](crate::McpClient)'s `with_max_tools`, `with_max_tool_bytes`,
/// `with_list_timeout`, and the 10 s handshake).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The server did not answer the handshake in time.
    #[error("the MCP server did not answer the handshake within {after:?}")]
    HandshakeTimeout {
        /// How long the client waited.
        after: Duration,
    },
    /// The server did not answer a page of its tool list in time.
    #[error("the MCP server did not answer a page of its tool list within {after:?}")]
    ListTimeout {
        /// How long the client waited for the page.
        after: Duration,
    },
    /// The server lists more tools than the client takes.
    #[error("the MCP server lists more than {limit} tools, the most this client takes")]
    TooManyTools {
        /// The most tools the client takes.
        limit: usize,
    },
    /// The server's tool list runs past the pages the client reads (a cursor that never
    /// ends).
    #[error("the MCP server's tool list runs past {limit} pages, the most this client reads")]
    TooManyPages {
        /// The most pages the client reads.
        limit: usize,
    },
    /// One tool's definition is larger than the client takes.
    #[error(
        "the MCP server's tool `{name}` has a definition of {bytes} bytes, over the {limit} \
         bytes this client takes for one tool"
    )]
    ToolTooLarge {
        /// The tool's name (its first 64 characters).
        name: String,
        /// The size of its definition as JSON.
        bytes: usize,
        /// The most the client takes for one tool.
        limit: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_error_says_its_layer_and_the_chain_each_cause_once() {
        let error = McpError::Refused(Refusal::TooManyTools { limit: 3 });
        assert_eq!(
            error.to_string(),
            "the MCP client refused the server's answer"
        );
        assert_eq!(
            crewline_core::error_chain(&error),
            "the MCP client refused the server's answer: the MCP server lists more than 3 \
             tools, the most this client takes"
        );
        let io = McpError::from(std::io::Error::other("broken pipe"));
        assert_eq!(
            crewline_core::error_chain(&io),
            "MCP transport I/O failed: broken pipe"
        );
    }
}
