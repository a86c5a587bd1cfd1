//! The real path to a provider: HTTPS with a CA made by the test, HTTP/2 by ALPN, and
//! proxies, for both model clients.

mod h2;
mod mock_tls;
mod proxy;
mod server;
mod tls;
