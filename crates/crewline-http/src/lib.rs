//! The HTTP/1 listener every crewline server uses (the crew server, the standalone MCP server,
//! the playground): an [`axum::Router`] served on a [`TcpListener`] with
//!
//! - a **header-read timeout**: a client that has not sent a whole request head within
//!   [`HttpSettings::header_read_timeout`] is disconnected; the same bound applies to an idle
//!   keep-alive connection waiting for its next request;
//! - a **cap on a request's head** ([`HttpSettings::max_header_bytes`]): past it the client
//!   gets a 431 and the connection closes, instead of hyper's default read buffer of about
//!   400 KiB per connection, every byte of which a stranger could fill before any
//!   authentication;
//! - a **cap on open connections** ([`HttpSettings::max_connections`]): past it the listener
//!   stops accepting (new connections wait in the kernel's backlog) until one closes, so a
//!   flood of sockets cannot take every file descriptor of the process;
//! - a **bounded graceful shutdown**: when `stop` fires the port closes, requests in flight get
//!   [`HttpSettings::shutdown_grace`] to finish, and connections still open are dropped;
//! - **accept-error backoff**: an `accept` error that is not one connection's fault (out of
//!   file descriptors) waits a second instead of spinning;
//! - **a count of each connection's reads** ([`ConnectionReads`], a request extension): a
//!   WebSocket handler arms it with a server-wide [`MessageBudget`], which then bounds the
//!   bytes of unfinished messages across all connections, not only per connection (see
//!   [`budget`]).
//!
//! Hand-written over hyper's HTTP/1 connections rather than `axum::serve`, which sets no timer
//! (so no header-read timeout takes effect: a stranger sending half a request line held its
//! socket for over a minute), caps nothing, and waits for every open connection at shutdown
//! with no bound (an endless event stream would hold it forever).
//!
//! ```no_run
//! use crewline_http::HttpSettings;
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn run() -> std::io::Result<()> {
//! let app = axum::Router::new().route("/", axum::routing::get(|| async { "hi" }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let stop = CancellationToken::new();
//! crewline_http::serve(listener, app, stop, HttpSettings::default()).await
//! # }
//! ```

use std::{sync::Arc, time::Duration};

use tokio::{net::TcpListener, sync::Semaphore};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub mod budget;

pub use budget::{ArmedReads, ConnectionReads, MessageBudget, OverBudget};

/// The default time a client has to send a request's head (also the longest an idle
/// keep-alive connection is kept): 10 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The default time connections still open at shutdown get to finish: 2 s.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The default most bytes of a request's head (request line and headers): 64 KiB.
///
/// Eight times nginx's usual 8 KiB header buffer, room for a browser's cookies on
/// `localhost`; hyper's own bound is its read buffer, about 400 KiB.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;

/// The least [`HttpSettings::max_header_bytes`] (hyper's smallest read buffer).
const MIN_HEADER_BYTES: usize = 8 * 1024;

/// The default most connections open at once: 1,024.
///
/// Far more than the few agents an MCP server or a playground page serve, and under the usual
/// soft limit of 1,024 file descriptors less the process's own. The crew server sets its own,
/// above its `max_sessions`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1_024;

/// The least time between two log lines saying the connection cap is reached.
const FULL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// How long the listener waits after an `accept` error that is not one connection's fault.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// How the HTTP connections are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpSettings {
    /// How long a client has to send a request's head, and the longest an idle keep-alive
    /// connection is kept.
    pub header_read_timeout: Duration,
    /// How long connections still open when `stop` fires get before they are dropped.
    pub shutdown_grace: Duration,
    /// The most connections open at once; past it the listener stops accepting until one
    /// closes. `usize::MAX` sets no cap.
    pub max_connections: usize,
    /// The most bytes of a request's head; past it the client gets a 431 and the connection
    /// closes.
    pub max_header_bytes: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
        }
    }
}

impl HttpSettings {
    /// The same settings with `timeout` as the header-read timeout.
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// The same settings with `grace` as the shutdown grace.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// The same settings with at most `bytes` of a request's head (at least 8 KiB).
    #[must_use]
    pub fn max_header_bytes(mut self, bytes: usize) -> Self {
        self.max_header_bytes = bytes.max(MIN_HEADER_BYTES);
        self
    }

    /// The same settings with at most `connections` open at once (at least 1).
    #[must_use]
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.max(1);
        self
    }
}

/// Serves `app` on `listener` until `stop` fires, then closes the port, gives the open
/// connections [`HttpSettings::shutdown_grace`] to finish and drops those that did not.
///
/// WebSocket upgrades are served (hyper's `with_upgrades`); an upgraded connection still
/// counts against [`HttpSettings::max_connections`] until it closes. Every request carries
/// its connection's [`ConnectionReads`] as an extension. Returns an error only if
/// the listener cannot be used at all; one connection's failure is logged at `debug`.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    stop: CancellationToken,
    settings: HttpSettings,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .max_header_size(settings.max_header_bytes.max(MIN_HEADER_BYTES));
    // `Semaphore::MAX_PERMITS` is the most a semaphore holds: "no cap" in practice.
    let slots = Arc::new(Semaphore::new(
        settings.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let connections = TaskTracker::new();
    // When the cap was last logged: at most once a minute, so that a flood does not flood the log.
    let mut full_logged: Option<tokio::time::Instant> = None;
    loop {
        // A free slot first, so that a connection past the cap waits in the kernel's backlog
        // rather than holding a descriptor here.
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if full_logged.is_none_or(|at| at.elapsed() >= FULL_LOG_INTERVAL) {
                    tracing::warn!(
                        max_connections = settings.max_connections,
                        "connection cap reached: new connections wait until one closes"
                    );
                    full_logged = Some(tokio::time::Instant::now());
                }
                tokio::select! {
                    () = stop.cancelled() => break,
                    slot = Arc::clone(&slots).acquire_owned() => match slot {
                        Ok(slot) => slot,
                        // Never closed: the semaphore lives as long as this loop.
                        Err(_) => break,
                    },
                }
            }
        };
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(error) => {
                accept_failed(error).await;
                continue;
            }
        };
        // Without TCP_NODELAY, every small frame after the first of a burst (the chunks after
        // `start`) waits for the peer's delayed ACK: about 40 ms added to the first chunk.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY on a connection");
        }
        // Counted below hyper, so that an upgraded connection (hyper's `Upgraded` holds this
        // IO) is counted too once its handler arms the count.
        let (tcp, reads) = budget::CountedIo::new(tcp);
        let service = budget::WithReads {
            inner: hyper_util::service::TowerToHyperService::new(app.clone()),
            reads,
        };
        let connection = http
            .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
            .with_upgrades();
        let stop = stop.clone();
        connections.spawn(async move {
            // Held until the connection ends (an upgraded one included).
            let _slot = slot;
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(error) = served {
                        tracing::debug!(%error, "HTTP connection ended with an error");
                    }
                    return;
                }
                () = stop.cancelled() => {}
            }
            // Finishes the request in flight, then closes; bounded, because a response may
            // never end (an event stream).
            connection.as_mut().graceful_shutdown();
            if tokio::time::timeout(settings.shutdown_grace, connection)
                .await
                .is_err()
            {
                tracing::debug!("an HTTP connection did not finish in time: dropping it");
            }
        });
    }
    // The listener closes here: the port stops accepting while the last connections finish.
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Waits after an `accept` error that is not one connection's fault (out of file
/// descriptors, say), so that the loop does not spin; as `axum::serve` does.
pub async fn accept_failed(error: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "accept failed; retrying in 1 s");
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}
