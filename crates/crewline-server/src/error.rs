//! The errors of the crate's public API.

use std::{io, net::SocketAddr, time::Duration};

use crewline::GraphError;

/// Any error from a crew's setup code.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

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
