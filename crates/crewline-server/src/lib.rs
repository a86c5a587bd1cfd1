//! crewline-server: serves a crew to the voice platform over WebSocket, wire-compatible with
//! the `smallestai.atoms.crew` reference server.
//!
//! - `GET /ws`: one WebSocket connection is one call. The first frame must be `system.init`;
//!   the crew's setup code builds the call's [`Crew`](crewline::Crew), the session answers
//!   `agent.ready` and runs until the platform hangs up.
//! - `GET /`, `/health`, `/ready`: the reference's status endpoints, with a live
//!   `active_sessions` count for the token holder (a stranger on `/health` and `/ready` gets
//!   the status only); `/ready` is 200 only after a dry run of the setup code passed.
//! - `GET /metrics`: Prometheus text (see [`Metrics`]).
//!
//! Better than the reference: malformed frames are logged, counted and dropped without ending
//! the call; a failed handshake gets `agent.error` (fatal) and a close frame with a reason;
//! one authentication layer over every route, merged ones included (see
//! [`CrewServer::auth_token`]), and a refusal to serve beyond loopback without it; browser
//! pages of other origins refused on `/ws` ([`CrewServer::allow_origin`]); frame size limits
//! both ways; a platform that floods pings or stops reading cut off with bounded memory; the
//! unfinished messages of all calls bounded together ([`CrewServer::max_pending_bytes`]);
//! the WARN lines a caller can cause on every call written once per 10 s with their count;
//! graceful drain on shutdown.
//!
//! ```no_run
//! use crewline::{Crew, SessionSetup};
//! use crewline_server::CrewServer;
//!
//! async fn setup(session: SessionSetup) -> Result<Crew, std::io::Error> {
//!     let _ = session.session_context();
//!     let crew = Crew::new();
//!     Ok(crew)
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), crewline_server::ServerError> {
//!     CrewServer::new(setup).run().await
//! }
//! ```

// Compiles the code blocks of the README and of the docs pages as doctests (and runs those not
// marked `no_run`), so they cannot rot. They live here because this is the crate that sees the
// whole stack.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/crews.md")]
struct CrewsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/router.md")]
struct RouterDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/tools.md")]
struct ToolsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/mcp.md")]
struct McpDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/remote-tools.md")]
struct RemoteToolsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/load-testing.md")]
struct LoadTestingDoctests;

#[cfg(feature = "clap")]
mod args;
mod call_logs;
mod connection;
mod error;
mod from_env;
mod http;
mod limits;
#[cfg(feature = "otel")]
mod logs;
mod metrics;
mod origin;
mod server;
mod state;

#[cfg(feature = "clap")]
pub mod model;

#[cfg(feature = "clap")]
pub use args::{
    AfterTextPolicy, CrewArgs, DEFAULT_P95_HEDGE_FLOOR, DEFAULT_PORT, LlmClientKind, ModelArgs,
    PricesError, ServeArgs,
};
pub use crewline_auth::{Credential, CredentialError, Principal, TOKEN_ENV};
pub use error::{BoxError, ServerError, SetupError};
pub use from_env::{REDIS_URL_VARIABLE, call_store_from_env, shared_breakers_from_env};
#[cfg(feature = "otel")]
pub use logs::{Logs, init_logs};
pub use metrics::{ErrorKind, FrameDrop, HandshakeFailure, METRICS_CONTENT_TYPE, Metrics};
pub use server::{
    CrewServer, DEFAULT_BIND, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_FRAME_BYTES, DEFAULT_SETUP_TIMEOUT, ServerHandle, shutdown_signal,
};
pub use server::{
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_PENDING_BYTES,
    DEFAULT_MAX_SESSIONS, DEFAULT_PING_INTERVAL, DEFAULT_WRITE_TIMEOUT,
};
