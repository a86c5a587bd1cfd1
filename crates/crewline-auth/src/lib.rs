//! The one authentication layer of every crewline HTTP surface (the crew server, MCP over HTTP,
//! the task API).
//!
//! [`Auth`] holds the accepted [`Credential`]s; [`Auth::layer`] is a tower layer (tower-http's
//! [`ValidateRequestHeaderLayer`], this crate writes only the check) that answers 401
//! `{"detail": "Unauthorized"}` with `WWW-Authenticate: Bearer` to a request without one of
//! them, and inserts a [`Principal`] naming the credential that matched into the request's
//! extensions, so that a handler can tell (and count) its callers:
//!
//! ```
//! use axum::{Extension, Router, body::Body, http::{Request, StatusCode, header}, routing::get};
//! use crewline_auth::{Auth, Credential, Principal};
//! use tower::ServiceExt; // for `oneshot`
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let auth = Auth::required([
//!     Credential::new("platform", "s3cret-one")?,
//!     Credential::new("ops", "s3cret-two")?,
//! ])
//! .open_path("/health");
//! let app: Router = Router::new()
//!     .route("/whoami", get(|Extension(who): Extension<Principal>| async move {
//!         who.name().to_owned()
//!     }))
//!     .route("/health", get(|| async { "ok" }))
//!     .layer(auth.layer());
//!
//! let ops = Request::get("/whoami").header(header::AUTHORIZATION, "Bearer s3cret-two").body(Body::empty())?;
//! let response = app.clone().oneshot(ops).await?;
//! assert_eq!(response.status(), StatusCode::OK);
//! let body = axum::body::to_bytes(response.into_body(), 1024).await?;
//! assert_eq!(&body[..], b"ops");
//!
//! let stranger = Request::get("/whoami").body(Body::empty())?;
//! let response = app.clone().oneshot(stranger).await?;
//! assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
//! assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
//!
//! let probe = Request::get("/health").body(Body::empty())?;
//! assert_eq!(app.oneshot(probe).await?.status(), StatusCode::OK);
//! # Ok(())
//! # }
//! ```
//!
//! The secret is read from `Authorization: Bearer <secret>`, from any extra header named with
//! [`Auth::header`] (the task API's `apikey`), and, only on the paths named with
//! [`Auth::query_token_on`] (the crew server's `/ws`, for platforms that cannot set headers),
//! from `?token=<secret>`. The layer removes `token` from every request's URI (on every path),
//! so no handler, span or log line downstream sees it. Secrets are compared as SHA-256 digests in constant
//! time: the comparison's timing tells neither the secret's bytes nor its length.
//!
//! A request presents at most one secret: two different ones (two `token=` values, a token and
//! an `Authorization` header, several `Authorization` headers) are answered 400 without trying
//! any, so that one request is one guess. The same secret in several places (a client that
//! sends both `Authorization` and `apikey`) is one secret.
//!
//! Refusals close their connection (`Connection: close`), so a stranger pays a new connection
//! per guess, and are logged at WARN at most once per [`REFUSAL_LOG_INTERVAL`], with their
//! count: a flood of them must not flood the log too.

use std::{
    fmt,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Uri, header},
};
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};
use tower_http::validate_request::{ValidateRequest, ValidateRequestHeaderLayer};

/// The name [`Auth::unauthenticated`] gives every caller.
pub const ANONYMOUS: &str = "anonymous";

/// The environment variable the crewline servers read their token from.
pub const TOKEN_ENV: &str = "CREWLINE_AUTH_TOKEN";

/// The least time between two WARN lines about refused requests: 10 s.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why a credential could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// The secret is empty (an empty secret would admit an empty header or `?token=`).
    #[error("the secret of credential `{name}` is empty")]
    EmptySecret {
        /// The credential's name.
        name: String,
    },
    /// The name is empty.
    #[error("a credential needs a non-empty name")]
    EmptyName,
}

/// A named shared secret a caller may present; its `Debug` shows the name only.
///
/// # Examples
///
/// ```
/// use crewline_auth::{Credential, CredentialError};
///
/// let platform = Credential::new("platform", "s3cret")?;
/// assert_eq!(platform.name(), "platform");
/// assert!(!format!("{platform:?}").contains("s3cret")); // safe to log
///
/// // An empty secret would admit an empty header: refused up front.
/// let empty = Credential::new("platform", "");
/// assert!(matches!(empty, Err(CredentialError::EmptySecret { .. })));
/// # Ok::<(), CredentialError>(())
/// ```
#[derive(Clone)]
pub struct Credential {
    name: Arc<str>,
    digest: [u8; 32],
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("name", &self.name)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl Credential {
    /// The credential `name` with `secret`; an empty name or secret is an error.
    pub fn new(name: impl Into<String>, secret: impl AsRef<[u8]>) -> Result<Self, CredentialError> {
        let name = name.into();
        if name.is_empty() {
            return Err(CredentialError::EmptyName);
        }
        let secret = secret.as_ref();
        if secret.is_empty() {
            return Err(CredentialError::EmptySecret { name });
        }
        Ok(Self {
            name: Arc::from(name),
            digest: digest(secret),
        })
    }

    /// The credential's name (what [`Principal::name`] reports).
    pub fn name(&self) -> &str {
        &self.name
    }
}

fn digest(secret: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(&Sha256::digest(secret));
    out
}

/// Who made a request: the name of the credential that matched, or [`ANONYMOUS`] where
/// authentication is off. The layer inserts it into the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    name: Arc<str>,
    anonymous: bool,
}

impl Principal {
    /// The matched credential's name ([`ANONYMOUS`] where authentication is off).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether authentication is off, so this caller presented nothing.
    pub fn is_anonymous(&self) -> bool {
        self.anonymous
    }

    fn anonymous() -> Self {
        Self {
            name: Arc::from(ANONYMOUS),
            anonymous: true,
        }
    }
}

/// A callback told the path of each refused request.
type OnUnauthorized = Arc<dyn Fn(&str) + Send + Sync>;

/// What the layer accepts; cheap to clone.
///
/// # Examples
///
/// Where a secret may come from, checked without a server ([`authenticate`](Self::authenticate)
/// is what the layer runs):
///
/// ```
/// use axum::http::{HeaderName, Request};
/// use crewline_auth::{Auth, Credential};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let auth = Auth::required([Credential::new("platform", "s3cret")?])
///     .header(HeaderName::from_static("apikey"))
///     .query_token_on("/ws");
///
/// let bearer = Request::get("/tasks").header("authorization", "Bearer s3cret").body(())?;
/// assert_eq!(auth.authenticate(&bearer).map(|p| p.name().to_owned()).as_deref(), Some("platform"));
/// let apikey = Request::get("/tasks").header("apikey", "s3cret").body(())?;
/// assert!(auth.authenticate(&apikey).is_some());
/// let query = Request::get("/ws?token=s3cret").body(())?;
/// assert!(auth.authenticate(&query).is_some());
/// // `?token=` counts only where it was allowed.
/// let query_elsewhere = Request::get("/tasks?token=s3cret").body(())?;
/// assert!(auth.authenticate(&query_elsewhere).is_none());
///
/// // With authentication off, everyone is `anonymous`.
/// let open = Auth::unauthenticated();
/// assert!(!open.is_required());
/// assert!(open.authenticate(&Request::get("/").body(())?).is_some_and(|p| p.is_anonymous()));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Auth {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    /// `None`: authentication is off.
    credentials: Option<Vec<Credential>>,
    headers: Vec<HeaderName>,
    query_paths: Vec<String>,
    open_paths: Vec<String>,
    on_unauthorized: Option<OnUnauthorized>,
    refusals: Arc<RefusalLog>,
}

/// Counts refusals and logs them at most once per [`REFUSAL_LOG_INTERVAL`].
struct RefusalLog {
    start: Instant,
    /// Milliseconds after `start` before which no line is written.
    quiet_until: AtomicU64,
    /// Refusals not yet reported.
    unreported: AtomicU64,
}

impl RefusalLog {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            quiet_until: AtomicU64::new(0),
            unreported: AtomicU64::new(0),
        }
    }

    /// Counts one refusal; the first one, and the first after each interval, writes a line
    /// with the count since the last line.
    fn refused(&self, path: &str, why: &'static str) {
        self.unreported.fetch_add(1, Ordering::Relaxed);
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let quiet_until = self.quiet_until.load(Ordering::Relaxed);
        if now < quiet_until {
            return;
        }
        let next =
            now.saturating_add(u64::try_from(REFUSAL_LOG_INTERVAL.as_millis()).unwrap_or(u64::MAX));
        // One thread wins the line; the others' refusals go into the next one.
        if self
            .quiet_until
            .compare_exchange(quiet_until, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let refused = self.unreported.swap(0, Ordering::Relaxed);
        // The path only: the query may hold a (wrong) secret.
        tracing::warn!(
            refused,
            last_path = path,
            last_reason = why,
            "refused requests without a valid credential (one line per {}s at most)",
            REFUSAL_LOG_INTERVAL.as_secs()
        );
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("credentials", &self.inner.credentials)
            .field("headers", &self.inner.headers)
            .field("query_paths", &self.inner.query_paths)
            .field("open_paths", &self.inner.open_paths)
            .finish_non_exhaustive()
    }
}

impl Auth {
    /// Requires one of `credentials` on every path but the open ones; with none, every such
    /// request is refused.
    pub fn required(credentials: impl IntoIterator<Item = Credential>) -> Self {
        Self::with(Some(credentials.into_iter().collect()))
    }

    /// Admits every request as [`ANONYMOUS`]: for a trusted network only.
    pub fn unauthenticated() -> Self {
        Self::with(None)
    }

    fn with(credentials: Option<Vec<Credential>>) -> Self {
        Self {
            inner: Arc::new(Inner {
                credentials,
                headers: Vec::new(),
                query_paths: Vec::new(),
                open_paths: Vec::new(),
                on_unauthorized: None,
                refusals: Arc::new(RefusalLog::new()),
            }),
        }
    }

    /// Whether requests need a credential (false for [`unauthenticated`](Self::unauthenticated)).
    pub fn is_required(&self) -> bool {
        self.inner.credentials.is_some()
    }

    /// Also reads the secret, as is, from the header `name` (such as the task API's `apikey`).
    pub fn header(self, name: HeaderName) -> Self {
        self.map(|inner| inner.headers.push(name))
    }

    /// Also accepts `?token=<secret>` on the path `path` (exact match), for clients that
    /// cannot set headers (`token` is removed from the URI the handler sees, on every path).
    pub fn query_token_on(self, path: impl Into<String>) -> Self {
        let path = path.into();
        self.map(|inner| inner.query_paths.push(path))
    }

    /// Lets requests to `path` (exact match) through without a credential; one that presents
    /// a valid credential still gets its [`Principal`], so the handler can tell the two apart
    /// and say less to a stranger.
    pub fn open_path(self, path: impl Into<String>) -> Self {
        let path = path.into();
        self.map(|inner| inner.open_paths.push(path))
    }

    /// Calls `callback` with the path of every refused request (to count refusals).
    pub fn on_unauthorized(self, callback: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.map(|inner| inner.on_unauthorized = Some(Arc::new(callback)))
    }

    fn map(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        change(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The tower layer that checks every request.
    pub fn layer(&self) -> AuthLayer {
        ValidateRequestHeaderLayer::custom(AuthCheck { auth: self.clone() })
    }

    /// The caller `request` authenticates as, if any (an open path does not make one; nor
    /// does a request that presents more than one secret).
    pub fn authenticate<B>(&self, request: &Request<B>) -> Option<Principal> {
        self.check(request).ok()
    }

    fn check<B>(&self, request: &Request<B>) -> Result<Principal, Refusal> {
        let Some(credentials) = &self.inner.credentials else {
            return Ok(Principal::anonymous());
        };
        let headers = request.headers();
        let query = self
            .query_allowed(request.uri())
            .then(|| request.uri().query());
        let secret = match presented(headers, &self.inner.headers, query.flatten()) {
            Presented::Nothing => return Err(Refusal::Missing),
            Presented::Several => return Err(Refusal::Several),
            Presented::One(None) => return Err(Refusal::Wrong),
            Presented::One(Some(secret)) => secret,
        };
        matching(credentials, &secret)
            .map(|credential| Principal {
                name: Arc::clone(&credential.name),
                anonymous: false,
            })
            .ok_or(Refusal::Wrong)
    }

    fn query_allowed(&self, uri: &Uri) -> bool {
        self.inner.query_paths.iter().any(|path| path == uri.path())
    }

    fn is_open(&self, uri: &Uri) -> bool {
        self.inner.open_paths.iter().any(|path| path == uri.path())
    }
}

/// The layer [`Auth::layer`] makes.
pub type AuthLayer = ValidateRequestHeaderLayer<AuthCheck>;

/// The check the layer runs on every request.
#[derive(Clone, Debug)]
pub struct AuthCheck {
    auth: Auth,
}

/// Why a request got no [`Principal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// No secret.
    Missing,
    /// A secret no credential has.
    Wrong,
    /// More than one different secret.
    Several,
}

impl Refusal {
    fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing credential",
            Self::Wrong => "wrong credential",
            Self::Several => "more than one credential",
        }
    }
}

impl<B> ValidateRequest<B> for AuthCheck {
    type ResponseBody = Body;

    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response<Body>> {
        let checked = self.auth.check(request);
        // On every path, also where the query form is not accepted: a client that sent its
        // secret there anyway must not have it logged by a handler.
        strip_token(request.uri_mut());
        match checked {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
                Ok(())
            }
            // A stranger on an open path, whatever it presented: it gets no principal.
            Err(_) if self.auth.is_open(request.uri()) => Ok(()),
            Err(refusal) => {
                // The path only: the query may hold a (wrong) secret.
                let path = request.uri().path();
                self.auth.inner.refusals.refused(path, refusal.as_str());
                if let Some(callback) = &self.auth.inner.on_unauthorized {
                    callback(path);
                }
                Err(match refusal {
                    Refusal::Several => several_credentials(),
                    Refusal::Missing | Refusal::Wrong => unauthorized(),
                })
            }
        }
    }
}

/// 401 with `WWW-Authenticate: Bearer` and `{"detail": "Unauthorized"}`, closing the
/// connection.
pub fn unauthorized() -> Response<Body> {
    let mut response = refusal(StatusCode::UNAUTHORIZED, r#"{"detail":"Unauthorized"}"#);
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// 400 for a request that presents more than one secret, closing the connection.
fn several_credentials() -> Response<Body> {
    refusal(
        StatusCode::BAD_REQUEST,
        r#"{"detail":"more than one credential: send exactly one"}"#,
    )
}

/// A JSON refusal with `Connection: close`: hyper closes the connection after it, so that
/// each further guess costs the client a new connection.
fn refusal(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The first credential whose secret is `secret`, comparing with every credential in constant
/// time.
fn matching<'a>(credentials: &'a [Credential], secret: &[u8]) -> Option<&'a Credential> {
    let given = digest(secret);
    let mut found = subtle::Choice::from(0);
    let mut index = 0u64;
    for (i, credential) in credentials.iter().enumerate() {
        let equal = credential.digest.ct_eq(&given) & !found;
        index = u64::conditional_select(&index, &(i as u64), equal);
        found |= equal;
    }
    bool::from(found)
        .then(|| usize::try_from(index).ok())
        .flatten()
        .and_then(|i| credentials.get(i))
}

/// What a request presents.
#[derive(Debug, PartialEq, Eq)]
enum Presented {
    Nothing,
    /// One secret, possibly in several places; `None` for one no credential can have (an
    /// empty one, or an `Authorization` header of another scheme).
    One(Option<Vec<u8>>),
    /// Different secrets.
    Several,
}

/// The secret the request presents, from every `Authorization` header, the extra headers and
/// the `?token=` values.
fn presented(headers: &HeaderMap, extra: &[HeaderName], query: Option<&str>) -> Presented {
    let authorization = headers.get_all(header::AUTHORIZATION).iter().map(|value| {
        let value = value.to_str().ok()?;
        let (scheme, token) = value.trim().split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim().as_bytes().to_vec())
    });
    let extra = extra
        .iter()
        .flat_map(|name| headers.get_all(name).iter())
        .map(|value| Some(value.as_bytes().to_vec()));
    let query = query
        .into_iter()
        .flat_map(|query| form_urlencoded::parse(query.as_bytes()))
        .filter(|(key, _)| key == "token")
        .map(|(_, value)| Some(value.into_owned().into_bytes()));
    let mut found = Presented::Nothing;
    for secret in authorization.chain(extra).chain(query) {
        let secret = secret.filter(|secret| !secret.is_empty());
        found = match found {
            Presented::Nothing => Presented::One(secret),
            // Two presentations of the same secret are one guess; anything else is several
            // (two unusable ones too: they are not the same credential).
            Presented::One(Some(first)) if secret.as_ref() == Some(&first) => {
                Presented::One(Some(first))
            }
            Presented::One(_) | Presented::Several => return Presented::Several,
        };
    }
    found
}

/// Removes every `token=` pair from the URI's query.
fn strip_token(uri: &mut Uri) {
    let Some(query) = uri.query() else {
        return;
    };
    let kept: Vec<&str> = query
        .split('&')
        // Compared decoded, as they are read: `%74oken=` is a token too.
        .filter(|pair| {
            form_urlencoded::parse(pair.as_bytes())
                .next()
                .is_none_or(|(key, _)| key != "token")
        })
        .collect();
    let path = uri.path();
    let path_and_query = if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    let mut parts = uri.clone().into_parts();
    match path_and_query.parse() {
        Ok(path_and_query) => parts.path_and_query = Some(path_and_query),
        // Cannot happen (a subset of a valid URI); never keep the token if it does.
        Err(_) => parts.path_and_query = None,
    }
    if let Ok(stripped) = Uri::from_parts(parts) {
        *uri = stripped;
    } else {
        *uri = Uri::from_static("/");
    }
}

/// Whether `host` (a `Host` header's value or an origin's host, with or without a port) names
/// this machine: `localhost`, `127.x.y.z` or `[::1]`. A page whose own name was rebound to
/// 127.0.0.1 (DNS rebinding) sends its own name, not one of these.
pub fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

/// Whether `addr` is reachable only from this machine (127.0.0.0/8, `::1`, or `::ffff:127.x`).
pub fn is_loopback(addr: &SocketAddr) -> bool {
    match addr.ip() {
        std::net::IpAddr::V4(ip) => ip.is_loopback(),
        std::net::IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|ip| ip.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_stripped_from_the_query_and_the_rest_kept() {
        let mut uri: Uri = "/ws?a=1&token=s3cret&b=2".parse().unwrap();
        strip_token(&mut uri);
        assert_eq!(uri.to_string(), "/ws?a=1&b=2");
        let mut uri: Uri = "/ws?%74oken=s3cret".parse().unwrap();
        strip_token(&mut uri);
        assert_eq!(uri.to_string(), "/ws");
    }

    #[test]
    fn loopback_addresses_are_recognised() {
        for addr in [
            "127.0.0.1:80",
            "127.3.2.1:80",
            "[::1]:80",
            "[::ffff:127.0.0.1]:80",
        ] {
            assert!(is_loopback(&addr.parse().unwrap()), "{addr}");
        }
        for addr in [
            "0.0.0.0:80",
            "[::]:80",
            "10.0.0.1:80",
            "[::ffff:10.0.0.1]:80",
        ] {
            assert!(!is_loopback(&addr.parse().unwrap()), "{addr}");
        }
    }

    #[test]
    fn loopback_host_names_are_recognised() {
        for ok in [
            "127.0.0.1:7000",
            "127.0.0.1",
            "localhost:7000",
            "LOCALHOST",
            "[::1]:7000",
            "127.1.2.3:80",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for refused in [
            "evil.example:7000",
            "192.168.1.2:7000",
            "localhost.evil.example",
            "[::2]:7000",
            "",
        ] {
            assert!(!is_loopback_host(refused), "{refused}");
        }
    }

    #[test]
    fn the_matching_credential_is_found_among_several() {
        let credentials = [
            Credential::new("a", "one").unwrap(),
            Credential::new("b", "two").unwrap(),
            Credential::new("c", "two").unwrap(),
        ];
        assert_eq!(
            matching(&credentials, b"one").map(Credential::name),
            Some("a")
        );
        assert_eq!(
            matching(&credentials, b"two").map(Credential::name),
            Some("b")
        );
        assert!(matching(&credentials, b"thre").is_none());
        assert!(matching(&credentials, b"").is_none());
    }
}
