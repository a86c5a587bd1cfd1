//! The errors of the crate's public API.

use std::{io, net::SocketAddr, time::Duration};

use crewline::GraphError;

/// Any error from a crew's setup code.
pub use crewline::BoxError;

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An authentication setting is invalid (an empty token, say).
    #[error("invalid `{setting}`: {source}")]
    Auth {
        /// The setting (`auth_token`).
        setting: &'static str,
        /// What is wrong with it.
        #[source]
        source: crewline_auth::CredentialError,
    },
    /// The server would be reachable beyond this machine without any credential.
    #[error(
        "refusing to serve on {addr} without authentication: anyone who can reach it could \
         make calls and run the crew's tools. Set a token (`CrewServer::auth_token`, `--token` \
         or `CREWLINE_AUTH_TOKEN`), bind a loopback address (127.0.0.1), or, on a trusted \
         network only, call `CrewServer::allow_unauthenticated()` (`--allow-unauthenticated`)"
    )]
    Unauthenticated {
        /// The address that is not loopback.
        addr: String,
    },
    /// Serving failed.
    #[error("the server failed: {0}")]
    Io(#[from] io::Error),
    /// The server task panicked or was cancelled.
    #[error("the server task ended abnormally: {0}")]
    Task(String),
}

/// Why a crew's setup code produced no usable crew (for a call or the startup dry run).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The setup code returned an error.
    #[error("crew setup failed: {0}")]
    Failed(#[source] BoxError),
    /// The setup code panicked.
    #[error("crew setup panicked: {0}")]
    Panicked(String),
    /// The setup code did not finish in time.
    #[error("crew setup did not finish within {0:?}")]
    TimedOut(Duration),
    /// The crew's graph is invalid.
    #[error("invalid crew: {0}")]
    InvalidGraph(#[from] GraphError),
}
