//! The HTTP transport of the model clients: how a request reaches a provider, and how its
//! answer is timed.
//!
//! One stack for the default client: hyper-util's pooled client over rustls, a pool per
//! runtime thread that runs a single-threaded runtime (see `openai/http.rs`).
//!
//! - **TLS** verifies the server with the platform's verifier (the system's roots) plus the
//!   extra CA certificates a team gives ([`TlsRoots`], `SSL_CERT_FILE`); a certificate that
//!   does not chain to one of them, or names another host, fails the connection with an
//!   [`LlmError::Connect`](crate::LlmError::Connect) naming the host. There is no switch to
//!   turn verification off.
//! - **HTTP/2** is offered by ALPN (`h2`, then `http/1.1`): a provider that speaks it carries
//!   every call's stream on one pooled connection; a stream dropped on barge-in is reset alone.
//!   Streams past the server's `SETTINGS_MAX_CONCURRENT_STREAMS` wait for a free one on that
//!   connection. A connection silent for the idle limit is pinged and closed when the ping
//!   goes unanswered as long (a connection dropped silently would stall every call after it).
//! - **Proxies** ([`proxy`]): hyper-util's matcher reads `HTTPS_PROXY`, `HTTP_PROXY`,
//!   `ALL_PROXY` and `NO_PROXY` (or the builder's proxy), and its connectors tunnel through an
//!   HTTP proxy (`CONNECT`, credentials in it alone) or a SOCKS4/5 one. The proxy's answer to
//!   a `CONNECT` is read up to 8 KiB (hyper-util's buffer), a SOCKS reply is fixed-size.
//!
//! The async-openai client sends through reqwest, the only HTTP client async-openai takes;
//! `TlsRoots::reqwest_client` (feature `async-openai`) gives it the same TLS (verifier, extra
//! roots, `SSL_CERT_FILE`).
//! Both clients' readers share the answer's time limits ([`deadline`]) and the scrubbing of
//! the API key out of error messages ([`scrub`]).

mod count;
pub(crate) mod deadline;
pub(crate) mod proxy;
pub(crate) mod scrub;
mod tls;

pub use self::count::ConnectionCounts;
pub(crate) use self::count::Counters;
pub use self::tls::TlsRoots;
pub(crate) use self::tls::client_config;

/// An error's message with its causes, each once (crewline's one printer,
/// [`crewline_core::error_chain`]): hyper, hyper-util and reqwest keep the causes out of
/// their own `Display` ("client error (Connect)" alone says nothing about a refused
/// connection), so the words an [`ErrorDetail`](crate::ErrorDetail) keeps are the chain.
pub(crate) fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    crewline_core::error_chain(error)
}
