//! The HTTP transport of the model clients: how a request reaches a provider.
//!
//! One stack: hyper-util's pooled client over rustls. TLS verifies the server with the
//! platform's verifier (the system's roots) plus the extra CA certificates a team gives
//! ([`TlsRoots`], `SSL_CERT_FILE`); a certificate that does not chain to one of them, or
//! that names another host, fails the connection with an [`LlmError::Connect`](crate::LlmError::Connect)
//! naming the host.
pub(crate) mod deadline;
pub(crate) mod proxy;
pub(crate) mod scrub;
mod tls;

pub use self::tls::TlsRoots;
pub(crate) use self::tls::client_config;
