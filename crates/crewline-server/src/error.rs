//! The errors of the crate's public API.

use std::{io, net::SocketAddr, time::Duration};

use crewline::crew::GraphError;

/// Any error from a crew's setup code.
pub use crewline::session::BoxError;

/// Why the server could not run.
///
/// Each variant's `Display` says only its own layer; the cause is its
/// [`source`](std::error::Error::source). Print the whole with
/// [`error_chain`](crewline::types::error_chain).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An authentication setting is invalid (an empty token, say).
    #[error("invalid `{setting}`")]
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
    #[error("the server failed")]
    Io(#[from] io::Error),
    /// The server task panicked or was cancelled.
    #[error("the server task ended abnormally")]
    Task(#[source] tokio::task::JoinError),
}

/// Why a crew's setup code produced no usable crew (for a call or the startup dry run).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The setup code returned an error.
    #[error("crew setup failed")]
    Failed(#[source] BoxError),
    /// The setup code panicked.
    #[error("crew setup panicked: {0}")]
    Panicked(String),
    /// The setup code did not finish in time.
    #[error("crew setup did not finish within {0:?}")]
    TimedOut(Duration),
    /// The crew's graph is invalid.
    #[error("invalid crew")]
    InvalidGraph(#[from] GraphError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewline::types::error_chain;

    #[test]
    fn errors_say_their_layer_and_the_chain_says_each_cause_once() {
        let error = ServerError::Bind {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            source: io::Error::new(io::ErrorKind::AddrInUse, "address in use"),
        };
        assert_eq!(error.to_string(), "cannot listen on 127.0.0.1:8080");
        assert_eq!(
            error_chain(&error),
            "cannot listen on 127.0.0.1:8080: address in use"
        );
        let setup = SetupError::Failed("OPENAI_API_KEY is not set".into());
        assert_eq!(
            error_chain(&setup),
            "crew setup failed: OPENAI_API_KEY is not set"
        );
    }

    #[tokio::test]
    async fn a_panicked_server_task_keeps_its_join_error() {
        let joined = tokio::spawn(async { panic!("boom") }).await;
        let error = ServerError::Task(joined.expect_err("the task panicked"));
        let cause = std::error::Error::source(&error).expect("a cause");
        assert!(cause.is::<tokio::task::JoinError>(), "{cause:?}");
        assert_eq!(error_chain(&error).matches("ended abnormally").count(), 1);
    }
}
