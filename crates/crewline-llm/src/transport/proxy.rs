//! The connector under TLS: straight to the server, or through the proxy that hyper-util's
//! [`Matcher`] picks for the destination (HTTP CONNECT or SOCKS), so that proxied and direct
//! requests go through one client.

use std::{
    error::Error as StdError,
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use hyper::Uri;
use hyper_util::{
    client::{
        legacy::connect::{
            HttpConnector,
            proxy::{SocksV4, SocksV5, Tunnel},
        },
        proxy::matcher::Matcher,
    },
    rt::TokioIo,
};

use super::count::{Counted, Counters};
use tokio::net::TcpStream;
use tower_service::Service;

/// Any error of a connector.
type BoxError = Box<dyn StdError + Send + Sync>;

/// Where a client's connections go: the proxy settings, read once when the client is built.
#[derive(Clone, Default)]
pub(crate) struct Proxies {
    /// `None`: every connection is direct.
    matcher: Option<Arc<Matcher>>,
}

impl fmt::Debug for Proxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the matcher's URLs: they may hold a proxy's password.
        f.debug_struct("Proxies")
            .field("configured", &self.matcher.is_some())
            .finish()
    }
}

impl Proxies {
    /// No proxy at all.
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// The proxy variables of the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
    /// `NO_PROXY`, either case, as curl reads them) and, where the OS has them, its system
    /// settings.
    pub(crate) fn from_system() -> Self {
        Self::from_matcher(Matcher::from_system())
    }

    /// Every request through `proxy` (`http://`, `socks5://`, `socks5h://`, `socks4://`,
    /// credentials in its user part), except to the hosts of `no_proxy` (`NO_PROXY`'s syntax).
    pub(crate) fn fixed(proxy: &str, no_proxy: &str) -> Self {
        Self::from_matcher(Matcher::builder().all(proxy).no(no_proxy).build())
    }

    fn from_matcher(matcher: Matcher) -> Self {
        // A matcher that intercepts nothing costs a lookup per connection for nothing.
        let any = ["http://example.com/", "https://example.com/"]
            .iter()
            .any(|probe| matcher.intercept(&Uri::from_static(probe)).is_some());
        Self {
            matcher: any.then(|| Arc::new(matcher)),
        }
    }

    /// Whether some destination goes through a proxy.
    pub(crate) fn is_configured(&self) -> bool {
        self.matcher.is_some()
    }
}

/// Connects to a destination directly or through its proxy; the answer is the TCP stream
/// the TLS layer (or plain HTTP) runs over.
#[derive(Clone, Debug)]
pub(crate) struct ProxyConnector {
    http: HttpConnector,
    proxies: Proxies,
    counters: Arc<Counters>,
}

impl ProxyConnector {
    /// Connects with `http` (its timeout and socket options hold for the proxy's connection
    /// too) as `proxies` say, counting each connection in `counters`.
    pub(crate) fn new(http: HttpConnector, proxies: Proxies, counters: Arc<Counters>) -> Self {
        Self {
            http,
            proxies,
            counters,
        }
    }
}

/// A connection through a proxy failed: names the proxy (never its credentials).
#[derive(Debug, thiserror::Error)]
#[error("through the proxy {proxy}")]
pub(crate) struct ProxyError {
    proxy: String,
    #[source]
    cause: BoxError,
}

impl Service<Uri> for ProxyConnector {
    type Response = Counted<TokioIo<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let intercept = self
            .proxies
            .matcher
            .as_deref()
            .and_then(|matcher| matcher.intercept(&dst));
        let mut http = self.http.clone();
        let counters = self.counters.clone();
        let connecting = self.connect(intercept, &mut http, dst);
        Box::pin(async move { Ok(Counted::new(connecting.await?, counters)) })
    }
}

/// A connection being made.
type Connecting = Pin<Box<dyn Future<Output = Result<TokioIo<TcpStream>, BoxError>> + Send>>;

impl ProxyConnector {
    /// Connects to `dst` with `http`, through `intercept`'s proxy when there is one.
    fn connect(
        &self,
        intercept: Option<hyper_util::client::proxy::matcher::Intercept>,
        http: &mut HttpConnector,
        dst: Uri,
    ) -> Connecting {
        let mut http = http.clone();
        let Some(intercept) = intercept else {
            return Box::pin(async move { http.call(dst).await.map_err(Into::into) });
        };
        let proxy_uri = intercept.uri().clone();
        // The proxy's host and port alone: the URI's user part may hold a password.
        let proxy = proxy_uri
            .authority()
            .map(|a| {
                let host = a.host();
                a.port()
                    .map_or_else(|| host.to_owned(), |p| format!("{host}:{p}"))
            })
            .unwrap_or_default();
        let failed = move |cause: BoxError| -> BoxError { Box::new(ProxyError { proxy, cause }) };
        let dst = with_port(dst);
        match proxy_uri.scheme_str() {
            Some(scheme @ ("socks5" | "socks5h")) => {
                // `socks5h`: the proxy resolves the name (it may see DNS the client cannot).
                let mut socks = SocksV5::new(proxy_uri.clone(), http).local_dns(scheme == "socks5");
                if let Some((user, pass)) = intercept.raw_auth() {
                    socks = socks.with_auth(user.to_owned(), pass.to_owned());
                }
                Box::pin(async move { socks.call(dst).await.map_err(|e| failed(e.into())) })
            }
            Some(scheme @ ("socks4" | "socks4a")) => {
                let mut socks = SocksV4::new(proxy_uri.clone(), http).local_dns(scheme == "socks4");
                Box::pin(async move { socks.call(dst).await.map_err(|e| failed(e.into())) })
            }
            Some("http") => {
                // A tunnel for plain `http` destinations too: one way through the proxy, and its
                // credentials go only in the CONNECT, never in a request's headers.
                let mut tunnel = Tunnel::new(proxy_uri.clone(), http);
                if let Some(auth) = intercept.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                Box::pin(async move { tunnel.call(dst).await.map_err(|e| failed(e.into())) })
            }
            other => {
                let scheme = other.unwrap_or_default().to_owned();
                Box::pin(async move {
                    Err(failed(
                        format!(
                            "proxies of scheme {scheme:?} are not supported \
                             (use http://, socks5:// or socks5h://)"
                        )
                        .into(),
                    ))
                })
            }
        }
    }
}

/// `dst` with its scheme's port spelled out: the proxy connectors assume 443 when there is
/// none, which is wrong for `http`.
fn with_port(dst: Uri) -> Uri {
    if dst.port().is_some() || dst.scheme_str() != Some("http") {
        return dst;
    }
    let Some(host) = dst.host() else {
        return dst;
    };
    let authority = format!("{host}:80");
    let mut parts = dst.clone().into_parts();
    match authority.parse() {
        Ok(authority) => {
            parts.authority = Some(authority);
            Uri::from_parts(parts).unwrap_or(dst)
        }
        Err(_) => dst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_destination_without_a_port_is_tunnelled_to_port_80() {
        let uri = with_port(Uri::from_static("http://models.internal/v1/chat"));
        assert_eq!(uri.port_u16(), Some(80));
        assert_eq!(uri.host(), Some("models.internal"));
        let https = with_port(Uri::from_static("https://api.openai.com/v1"));
        assert_eq!(https.port_u16(), None, "443 is already the default");
    }

    #[test]
    fn no_proxy_exempts_its_hosts_and_debug_hides_credentials() {
        let proxies = Proxies::fixed("http://user:hunter2@proxy.internal:3128", "localhost,.corp");
        assert!(proxies.is_configured());
        let matcher = proxies.matcher.as_deref().expect("a matcher");
        assert!(
            matcher
                .intercept(&Uri::from_static("https://api.openai.com/v1"))
                .is_some()
        );
        assert!(
            matcher
                .intercept(&Uri::from_static("https://localhost:8000/v1"))
                .is_none()
        );
        assert!(
            matcher
                .intercept(&Uri::from_static("https://llm.corp/v1"))
                .is_none()
        );
        assert!(!format!("{proxies:?}").contains("hunter2"));
        assert!(!Proxies::none().is_configured());
    }
}
