//! The crew playground: one page, served on loopback, that talks to a crew by voice or text and
//! draws every turn, tool call and millisecond of the call.
//!
//! The page is plain HTML, CSS and JavaScript embedded in this crate (no build step, no
//! external library). Its script is a platform client: it speaks the crew wire protocol (the
//! events of `crewline-protocol`, as the voice platform sends them) over the browser's own
//! WebSocket, passing the token as `?token=`, and speaks and listens with the browser's Web
//! Speech API where it has one. [`Playground`] serves the page; `crewline playground` and `crewline demo --playground`
//! are its command lines.
//!
//! ```no_run
//! # async fn run() -> Result<(), crewline_playground::PlaygroundError> {
//! use crewline_playground::Playground;
//!
//! let listener = crewline_playground::listen(0).await?;
//! let page = format!("http://{}/", listener.local_addr().map_err(crewline_playground::PlaygroundError::Serve)?);
//! Playground::new("ws://127.0.0.1:8080/ws")
//!     .token("s3cret")
//!     .serve(listener)
//!     .await?;
//! # let _ = page;
//! # Ok(())
//! # }
//! ```
//!
//! # What the server sends
//! Every response carries `Cache-Control: no-store`, `X-Content-Type-Options: nosniff`,
//! `Referrer-Policy: no-referrer` and the strict [`CONTENT_SECURITY_POLICY`] (scripts and
//! styles from the page's own origin only, nothing inline, no frames). `/config.json` tells the
//! page the crew URL and token the command was started with, so the token never appears in a
//! page URL. Requests whose `Host` is not a loopback name are refused (a DNS-rebinding page
//! cannot read the token), and [`Playground::serve`] refuses a listener beyond loopback.
//! [`Playground::serve`] serves on crewline's shared listener (`crewline-http`), with the crew
//! server's limits: 10 s to send a request's head (and for an idle keep-alive connection), at
//! most 1,024 connections open.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    time::Duration,
};

use axum::{
    Router,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use crewline_http::HttpSettings;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The page's default port (`crewline playground --playground-port`).
pub const DEFAULT_PORT: u16 = 7000;

/// The page itself.
pub const INDEX_HTML: &str = include_str!("../assets/index.html");
/// The page's styles.
pub const PLAYGROUND_CSS: &str = include_str!("../assets/playground.css");
/// The page's script: the platform client, the timeline, the figures, voice.
pub const PLAYGROUND_JS: &str = include_str!("../assets/playground.js");
/// The port of `crewline-speech`'s `SentenceAggregator` the page speaks replies with.
pub const SENTENCE_JS: &str = include_str!("../assets/sentence.js");

/// The `Content-Security-Policy` of every response: the page's own scripts and styles only
/// (nothing inline), WebSockets to any crew, images from the page or `data:` URLs, no frames,
/// no forms posted anywhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; connect-src ws: wss: 'self'; \
script-src 'self'; style-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'";

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const JSON: &str = "application/json";

/// Why the playground could not be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaygroundError {
    /// The port could not be bound.
    #[error("could not listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The listener is beyond loopback: the page hands out the crew's token, so it is served
    /// to this machine only.
    #[error(
        "the playground serves on loopback only (it hands the crew's token to the page), not on {0}"
    )]
    NotLoopback(SocketAddr),
    /// Serving failed.
    #[error("the playground server failed")]
    Serve(#[source] std::io::Error),
}

/// What `/config.json` tells the page: the defaults of its connect form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PageConfig {
    /// The crew's WebSocket address, e.g. `ws://127.0.0.1:8080/ws`.
    pub crew_url: String,
    /// The crew's token, if the command was given one (sent by the page as `?token=`).
    pub token: Option<String>,
}

/// The playground page for one crew: `Playground::new(crew_url).token(..).router()` or
/// [`serve`](Self::serve).
#[derive(Clone)]
pub struct Playground {
    config: PageConfig,
    http: HttpSettings,
}

impl std::fmt::Debug for Playground {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Playground")
            .field("crew_url", &self.config.crew_url)
            .field("token", &self.config.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Playground {
    /// The page for the crew at `crew_url` (its WebSocket address), without a token.
    pub fn new(crew_url: impl Into<String>) -> Self {
        Self {
            config: PageConfig {
                crew_url: crew_url.into(),
                token: None,
            },
            http: HttpSettings::default(),
        }
    }

    /// The token the page connects with by default (sent as `?token=` on the crew's `/ws`).
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.config.token = Some(token.into());
        self
    }

    /// [`token`](Self::token) when there is one.
    #[must_use]
    pub fn maybe_token(mut self, token: Option<String>) -> Self {
        self.config.token = token;
        self
    }

    /// How long a client has to send a request's head to [`serve`](Self::serve), and the
    /// longest an idle keep-alive connection is kept (default 10 s).
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.http = self.http.header_read_timeout(timeout);
        self
    }

    /// What `/config.json` answers.
    pub fn page_config(&self) -> &PageConfig {
        &self.config
    }

    /// The page's routes: `/` (the page), `/playground.css`, `/playground.js`,
    /// `/sentence.js`, `/config.json`; anything else is a 404. Every response carries the
    /// security headers (see the [crate docs](crate)); a non-loopback `Host` gets a 403.
    pub fn router(&self) -> Router {
        let config = self.config.clone();
        Router::new()
            .route("/", get(|| async { asset(HTML, INDEX_HTML) }))
            .route("/index.html", get(|| async { asset(HTML, INDEX_HTML) }))
            .route(
                "/playground.css",
                get(|| async { asset(CSS, PLAYGROUND_CSS) }),
            )
            .route("/playground.js", get(|| async { asset(JS, PLAYGROUND_JS) }))
            .route("/sentence.js", get(|| async { asset(JS, SENTENCE_JS) }))
            .route("/config.json", get(page_config))
            .fallback(not_found)
            .with_state(config)
            .layer(middleware::from_fn(loopback_host))
            .layer(middleware::map_response(security_headers))
    }

    /// Serves the page on `listener` (which must be on loopback) until the task is dropped.
    pub async fn serve(self, listener: TcpListener) -> Result<(), PlaygroundError> {
        let addr = listener.local_addr().map_err(PlaygroundError::Serve)?;
        if !addr.ip().is_loopback() {
            return Err(PlaygroundError::NotLoopback(addr));
        }
        // Never cancelled: the page is served until this future is dropped.
        let stop = CancellationToken::new();
        crewline_http::serve(listener, self.router(), stop, self.http)
            .await
            .map_err(PlaygroundError::Serve)
    }
}

/// A listener on `127.0.0.1:port` (0: a free port), for [`Playground::serve`].
pub async fn listen(port: u16) -> Result<TcpListener, PlaygroundError> {
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
    TcpListener::bind(addr)
        .await
        .map_err(|source| PlaygroundError::Bind { addr, source })
}

/// The page's address for a listener at `addr`.
pub fn page_url(addr: SocketAddr) -> String {
    format!("http://{addr}/")
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn page_config(State(config): State<PageConfig>) -> Response {
    match serde_json::to_string(&config) {
        Ok(body) => ([(header::CONTENT_TYPE, JSON)], body).into_response(),
        Err(error) => {
            tracing::warn!(%error, "could not encode the page's configuration");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "not found",
    )
        .into_response()
}

/// Refuses a request whose `Host` is not a loopback name: a page of another site whose name
/// was rebound to 127.0.0.1 must not read `/config.json` (the token).
async fn loopback_host(request: Request, next: Next) -> Response {
    if is_loopback_host(request.headers()) {
        next.run(request).await
    } else {
        (
            StatusCode::FORBIDDEN,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "the playground answers loopback addresses only (127.0.0.1, localhost, [::1])",
        )
            .into_response()
    }
}

/// Whether the `Host` header names this machine: `localhost`, `127.x.y.z` or `[::1]`, with
/// any port. A request without one (HTTP/1.0) is let through: no browser sends such.
fn is_loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST) else {
        return true;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(header::HOST, value);
        }
        headers
    }

    #[test]
    fn loopback_hosts_pass_and_other_names_do_not() {
        for ok in [
            "127.0.0.1:7000",
            "127.0.0.1",
            "localhost:7000",
            "LOCALHOST",
            "[::1]:7000",
            "127.1.2.3:80",
        ] {
            assert!(is_loopback_host(&host(ok)), "{ok}");
        }
        for refused in [
            "evil.example:7000",
            "192.168.1.2:7000",
            "localhost.evil.example",
            "[::2]:7000",
            "",
        ] {
            assert!(!is_loopback_host(&host(refused)), "{refused}");
        }
        assert!(is_loopback_host(&HeaderMap::new()));
    }
}
