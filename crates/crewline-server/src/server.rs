//! [`CrewServer`]: the builder, serving, and graceful drain.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use crewline::{SessionSetup, session::CrewSetup};
use crewline_auth::{Auth, Credential, CredentialError};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    Metrics, ServerError,
    state::{Config, Readiness, Service, SetupFn, State},
};

mod limits;
mod serve;

pub(crate) use crate::limits::Limits;
pub use crate::limits::{
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_PENDING_BYTES,
    DEFAULT_MAX_SESSIONS, DEFAULT_PING_INTERVAL, DEFAULT_WRITE_TIMEOUT,
};
pub use serve::shutdown_signal;
use serve::{HttpSettings, drain, join_result, serve_http, serve_on_workers};

/// The default address: loopback, port 8080. A pod the platform reaches binds `0.0.0.0:8080`
/// and sets a token ([`CrewServer::auth_token`]): beyond loopback the server refuses to start
/// without one.
pub const DEFAULT_BIND: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
/// The default largest inbound WebSocket frame or message: 1 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 1 << 20;
/// The default time the platform has to send `system.init`: 10 s, like the reference.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time live calls get to finish after a shutdown signal: 30 s.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// The default time the crew's setup code gets, per call and for the dry run: 30 s.
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a closing handshake may take before the socket is dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves a crew over the platform's WebSocket protocol, one session per connection.
///
/// Its settings come in groups: where and for whom ([`bind`](Self::bind),
/// [`auth_token`](Self::auth_token), [`credential`](Self::credential),
/// [`allow_unauthenticated`](Self::allow_unauthenticated)), what else it serves
/// ([`merge`](Self::merge)), its limits ([`max_frame_bytes`](Self::max_frame_bytes),
/// [`handshake_timeout`](Self::handshake_timeout), [`setup_timeout`](Self::setup_timeout),
/// [`drain_timeout`](Self::drain_timeout)) and its threads
/// ([`worker_runtimes`](Self::worker_runtimes)); then one of [`run`](Self::run),
/// [`serve`](Self::serve) or [`serve_with_shutdown`](Self::serve_with_shutdown).
///
/// # Examples
///
/// A crew built per call from the call's handshake, served on a free port and called the way
/// the platform calls it (here with the testkit's [`PlatformClient`]):
///
/// [`PlatformClient`]: https://docs.rs/crewline-testkit
///
/// ```
/// use std::sync::Arc;
///
/// use crewline::{Crew, agent::LoopAgent, crew::OutputNode, SessionSetup, ToolLoop};
/// use crewline::{llm::{Reply, ScriptedLlm}, tool::ToolRegistry};
/// use crewline_server::CrewServer;
/// # use crewline_testkit::{PlatformClient, PlatformConfig};
///
/// // Any error type that converts into a boxed error will do.
/// async fn setup(session: SessionSetup) -> Result<Crew, std::io::Error> {
///     let name = session.initial_variables().get("name").and_then(|v| v.as_str()).unwrap_or("there");
///     let llm = ScriptedLlm::new([Reply::text(format!("Hello {name}, how can I help?"))]);
///     let agent = LoopAgent::new(
///         "You are a friendly receptionist.",
///         ToolLoop::new(Arc::new(llm), Arc::new(ToolRegistry::new())),
///     );
///     let mut crew = Crew::new();
///     crew.add_node(OutputNode::new("receptionist", agent));
///     Ok(crew)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // In production: `CrewServer::new(setup).bind(..).auth_token(..).run().await`.
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let url = format!("ws://{}/ws", listener.local_addr()?);
/// let server = CrewServer::new(setup);
/// let handle = server.handle();
/// let serving = tokio::spawn(server.serve(listener));
///
/// let mut config = PlatformConfig::new(url);
/// config.initial_variables.insert("name".into(), "Ada".into());
/// let mut platform = PlatformClient::connect(config).await?; // `system.init` → `agent.ready`
/// assert_eq!(handle.active_sessions(), 1);
/// let turn = platform.user_turn("Hi")?.finish().await?;
/// assert_eq!(turn.text, "Hello Ada, how can I help?");
///
/// platform.close().await?;
/// handle.shutdown(); // drains, then `serve` returns
/// serving.await??;
/// # Ok(()) }
/// ```
pub struct CrewServer {
    config: Config,
    setup: Arc<SetupFn>,
    state: Arc<State>,
    extra_routes: Vec<axum::Router>,
    auth: AuthSettings,
}

/// Who may call: the credentials, the first invalid one, the opt-out.
#[derive(Default)]
struct AuthSettings {
    credentials: Vec<Credential>,
    /// The setting and the error of the first invalid credential, reported when serving starts.
    error: Option<(&'static str, CredentialError)>,
    allow_unauthenticated: bool,
}

impl std::fmt::Debug for CrewServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrewServer")
            .field("bind", &self.config.bind)
            .field("credentials", &self.auth.credentials)
            .field("allow_unauthenticated", &self.auth.allow_unauthenticated)
            .field("max_frame_bytes", &self.config.max_frame_bytes)
            .finish_non_exhaustive()
    }
}

impl CrewServer {
    /// A server whose calls each get the crew that `setup` builds from the call's handshake:
    /// an [`Agent`](crewline::Agent), or a function of the call's [`SessionSetup`] returning a
    /// [`Crew`](crewline::Crew), a `Result<Crew, E>` or a future of either (see [`CrewSetup`]).
    pub fn new<M>(setup: impl CrewSetup<M>) -> Self {
        let setup: Arc<SetupFn> = Arc::new(move |session: SessionSetup| setup.setup(session));
        Self {
            config: Config {
                bind: DEFAULT_BIND,
                max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
                handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
                drain_timeout: DEFAULT_DRAIN_TIMEOUT,
                setup_timeout: DEFAULT_SETUP_TIMEOUT,
                close_timeout: CLOSE_TIMEOUT,
                worker_runtimes: None,
                limits: Limits::default(),
                origins: crate::origin::Origins::default(),
                call_store: None,
                call_key: None,
            },
            setup,
            state: Arc::new(State::new()),
            extra_routes: Vec::new(),
            auth: AuthSettings::default(),
        }
    }

    /// Checkpoints every call to `store` at each turn boundary and resumes a call from it when
    /// the platform reconnects with the same call id, on this replica or any other sharing the
    /// store (`crewline_redis::RedisCheckpoints` for several replicas); the store also fences
    /// the older connection of a call taken over elsewhere. Without one, a reconnect to this
    /// process still closes the older connection and shares its run-once state.
    pub fn call_store(mut self, store: impl crewline::session_store::CallStore) -> Self {
        self.config.call_store = Some(Arc::new(store));
        self
    }

    /// Names a call whose handshake has no call id (`session_context.caller.call_id`) by the
    /// key `key` returns, e.g. a variable the platform sets: reconnects with one key are one
    /// call. Only keys the platform gives belong here: two callers with one key are one call.
    pub fn call_key(
        mut self,
        key: impl Fn(&crewline::protocol::SystemInit) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.config.call_key = Some(Arc::new(key));
        self
    }

    /// Serves `routes` beside the crew's own (`/ws`, `/health`, ...), e.g. an MCP endpoint
    /// or a task API; a route that clashes with one already served panics at start-up.
    ///
    /// The merged routes sit behind the same authentication as the crew's own.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use crewline::{Crew, agent::LoopAgent, crew::OutputNode, SessionSetup, ToolLoop};
    /// # use crewline::{llm::{Reply, ScriptedLlm}, tool::ToolRegistry};
    /// # async fn setup(_session: SessionSetup) -> Result<Crew, std::io::Error> {
    /// #     let llm = ScriptedLlm::new([Reply::text("Hello!")]);
    /// #     let agent = LoopAgent::new("Be brief.", ToolLoop::new(Arc::new(llm), Arc::new(ToolRegistry::new())));
    /// #     let mut crew = Crew::new();
    /// #     crew.add_node(OutputNode::new("assistant", agent));
    /// #     Ok(crew)
    /// # }
    /// # async fn http_get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> std::io::Result<String> {
    /// #     use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// #     let mut stream = tokio::net::TcpStream::connect(addr).await?;
    /// #     let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    /// #     let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
    /// #     stream.write_all(request.as_bytes()).await?;
    /// #     let mut response = String::new();
    /// #     stream.read_to_string(&mut response).await?;
    /// #     Ok(response)
    /// # }
    /// use axum::{Router, routing::get};
    /// use crewline_server::CrewServer;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let status = Router::new().route("/version", get(|| async { "crew 1.4.2" }));
    /// let server = CrewServer::new(setup).merge(status).auth_token("s3cret");
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let addr = listener.local_addr()?;
    /// # let handle = server.handle();
    /// # let serving = tokio::spawn(server.serve(listener));
    ///
    /// let denied = http_get(addr, "/version", None).await?;
    /// assert!(denied.starts_with("HTTP/1.1 401"));
    /// let allowed = http_get(addr, "/version", Some("s3cret")).await?;
    /// assert!(allowed.starts_with("HTTP/1.1 200") && allowed.ends_with("crew 1.4.2"));
    /// // `/health` stays open for the orchestrator's probes.
    /// assert!(http_get(addr, "/health", None).await?.starts_with("HTTP/1.1 200"));
    /// # handle.shutdown();
    /// # serving.await??;
    /// # Ok(()) }
    /// ```
    pub fn merge(mut self, routes: axum::Router) -> Self {
        self.extra_routes.push(routes);
        self
    }

    /// The address [`run`](Self::run) listens on (default `127.0.0.1:8080`; a non-loopback
    /// address needs a credential or [`allow_unauthenticated`](Self::allow_unauthenticated)).
    pub fn bind(mut self, addr: impl Into<SocketAddr>) -> Self {
        self.config.bind = addr.into();
        self
    }

    /// Requires this shared secret on every route (merged ones included) as
    /// `Authorization: Bearer <token>`, or on `/ws` also as `?token=<token>` for platforms that
    /// cannot set headers; the credential is named `default` (see [`Principal`]).
    ///
    /// `/health` and `/ready` stay open, and answer a caller without the token with their
    /// status only (the token holder also sees `active_sessions`).
    /// An empty token is an [`ServerError::Auth`] when serving starts (the routes of
    /// [`router`](Self::router) then refuse everyone).
    ///
    /// [`Principal`]: crewline_auth::Principal
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use crewline::{Crew, agent::LoopAgent, crew::OutputNode, SessionSetup, ToolLoop};
    /// # use crewline::{llm::{Reply, ScriptedLlm}, tool::ToolRegistry};
    /// # async fn setup(_session: SessionSetup) -> Result<Crew, std::io::Error> {
    /// #     let llm = ScriptedLlm::new([Reply::text("Hello!")]);
    /// #     let agent = LoopAgent::new("Be brief.", ToolLoop::new(Arc::new(llm), Arc::new(ToolRegistry::new())));
    /// #     let mut crew = Crew::new();
    /// #     crew.add_node(OutputNode::new("assistant", agent));
    /// #     Ok(crew)
    /// # }
    /// use crewline_auth::Credential;
    /// use crewline_server::{CrewServer, ServerError};
    /// # use crewline_testkit::{PlatformClient, PlatformConfig, PlatformError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // The platform's token, and a second credential for an operator's dashboard.
    /// let server = CrewServer::new(setup)
    ///     .auth_token("platform-s3cret")
    ///     .credential(Credential::new("ops", "ops-s3cret")?);
    /// assert!(server.has_credentials());
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let url = format!("ws://{}/ws", listener.local_addr()?);
    /// # let handle = server.handle();
    /// # let serving = tokio::spawn(server.serve(listener));
    ///
    /// let anonymous = PlatformClient::connect(PlatformConfig::new(url.clone())).await;
    /// assert!(matches!(anonymous, Err(PlatformError::Refused { status: 401 })));
    /// let mut config = PlatformConfig::new(url);
    /// config.token = Some("platform-s3cret".into()); // sent as `Authorization: Bearer ..`
    /// PlatformClient::connect(config).await?.close().await?;
    /// # handle.shutdown();
    /// # serving.await??;
    ///
    /// // Beyond loopback, a server without a credential refuses to start.
    /// let open = CrewServer::new(setup).bind(([0, 0, 0, 0], 0)).run().await;
    /// assert!(matches!(open, Err(ServerError::Unauthenticated { .. })));
    /// # Ok(()) }
    /// ```
    pub fn auth_token(self, token: impl AsRef<[u8]>) -> Self {
        self.add_credential("auth_token", Credential::new("default", token))
    }

    /// Also accepts `credential`, as [`auth_token`](Self::auth_token) accepts its token: a
    /// handler reads which one a request carried from its `Extension<Principal>`.
    pub fn credential(mut self, credential: Credential) -> Self {
        self.auth.credentials.push(credential);
        self
    }

    fn add_credential(
        mut self,
        setting: &'static str,
        credential: Result<Credential, CredentialError>,
    ) -> Self {
        match credential {
            Ok(credential) => self.auth.credentials.push(credential),
            Err(error) => {
                self.auth.error.get_or_insert((setting, error));
            }
        }
        self
    }

    /// Serves without credentials even on a non-loopback address: for a trusted network only
    /// (anyone who reaches the port can make calls and run the crew's tools).
    pub fn allow_unauthenticated(mut self) -> Self {
        self.auth.allow_unauthenticated = true;
        self
    }

    /// Also lets web pages of `origin` (`https://console.example.com`; `*` for any) open calls
    /// from a browser.
    ///
    /// A browser sends its page's `Origin` with the upgrade; `/ws` answers 403 to an origin that
    /// is not the crew's own, a page on this machine (`localhost`, `127.x.y.z`, `[::1]`, where
    /// the playground runs), or one allowed here: otherwise any page open in a developer's
    /// browser could drive calls, tools and model spend on a local crew. Platforms send no
    /// `Origin` and are not concerned.
    ///
    /// Also: a server on loopback without a credential answers only requests whose `Host` is a
    /// loopback name (a page whose own name was rebound to 127.0.0.1 is refused), unless
    /// [`allow_unauthenticated`](Self::allow_unauthenticated) says the network is trusted
    /// (behind a local proxy that forwards the public `Host`, say).
    pub fn allow_origin(mut self, origin: impl AsRef<str>) -> Self {
        self.config.origins.allow(origin.as_ref());
        self
    }

    /// Whether a credential is set.
    pub fn has_credentials(&self) -> bool {
        !self.auth.credentials.is_empty()
    }

    /// The largest inbound frame and message, in bytes (default 1 MiB).
    pub fn max_frame_bytes(mut self, bytes: usize) -> Self {
        self.config.max_frame_bytes = bytes.max(1);
        self
    }

    /// How long the platform has to send `system.init` after connecting (default 10 s).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.config.handshake_timeout = timeout;
        self
    }

    /// How long live calls may go on after the shutdown signal (default 30 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.config.drain_timeout = timeout;
        self
    }

    /// How long the crew's setup code may take, per call and for the dry run (default 30 s).
    ///
    /// # Examples
    ///
    /// The limits, together; a setup that takes too long leaves the server not ready:
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use crewline::{Crew, SessionSetup};
    /// use crewline_server::CrewServer;
    /// # use crewline_testkit::{PlatformClient, PlatformConfig, PlatformError};
    ///
    /// async fn slow_setup(_session: SessionSetup) -> Result<Crew, std::io::Error> {
    ///     tokio::time::sleep(Duration::from_secs(60)).await; // a stuck database, say
    ///     Ok(Crew::new())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = CrewServer::new(slow_setup)
    ///     .max_frame_bytes(256 * 1024)
    ///     .handshake_timeout(Duration::from_secs(5))
    ///     .setup_timeout(Duration::from_millis(50))
    ///     .drain_timeout(Duration::from_secs(10));
    /// let handle = server.handle();
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let url = format!("ws://{}/ws", listener.local_addr()?);
    /// let serving = tokio::spawn(server.serve(listener));
    ///
    /// // The call is told why at once, instead of hanging on its handshake.
    /// let call = PlatformClient::connect(PlatformConfig::new(url)).await;
    /// assert!(matches!(call, Err(PlatformError::Rejected { message }) if message.contains("did not finish")));
    /// assert!(!handle.is_ready()); // and `/ready` answers 503: the dry run failed too
    /// # handle.shutdown();
    /// # serving.await??;
    /// # Ok(()) }
    /// ```
    pub fn setup_timeout(mut self, timeout: Duration) -> Self {
        self.config.setup_timeout = timeout;
        self
    }

    /// Serves calls on `threads` single-threaded runtimes (one thread each) instead of on the
    /// runtime that calls `serve`; each runtime accepts calls from the same socket, and a call
    /// stays on the thread that accepted it.
    ///
    /// A call's tasks (socket, session, model stream, tools) then wake each other on one
    /// thread: at a call's pace this cuts the CPU per turn by about a third (BENCHMARKS.md),
    /// because a multi-threaded runtime wakes a second thread for nearly every chunk. The
    /// price is that calls on a thread share its stalls: code that blocks the thread (a tool
    /// doing blocking I/O outside `spawn_blocking`) delays every call on it, where the
    /// default runtime would move them to another thread. `threads` of 0 counts as 1.
    ///
    /// ```no_run
    /// # use crewline_server::CrewServer;
    /// # async fn setup(_: crewline::SessionSetup) -> Result<crewline::Crew, std::io::Error> { Ok(crewline::Crew::new()) }
    /// # async fn run() -> Result<(), crewline_server::ServerError> {
    /// let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    /// CrewServer::new(setup).worker_runtimes(cores).run().await
    /// # }
    /// ```
    pub fn worker_runtimes(mut self, threads: usize) -> Self {
        self.config.worker_runtimes = Some(threads.max(1));
        self
    }

    /// A handle to watch and stop the server, valid before and after it starts serving.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            state: Arc::clone(&self.state),
        }
    }

    fn service(&self) -> Arc<Service> {
        Arc::new(Service {
            config: self.config.clone(),
            setup: Arc::clone(&self.setup),
            state: Arc::clone(&self.state),
            message_budget: self
                .state
                .message_budget(self.config.limits.max_pending_bytes),
        })
    }

    /// The routes, to mount in an app or serve yourself; starts the dry run (inside a Tokio
    /// runtime; otherwise at the first request).
    ///
    /// Draining needs [`serve_with_shutdown`](Self::serve_with_shutdown) or
    /// [`ServerHandle::shutdown`] with one of the `serve` methods.
    pub fn router(&self) -> axum::Router {
        let service = self.service();
        service.start_dry_run();
        self.app(service, Some(self.config.bind))
    }

    /// The crew's routes with the merged extra ones, all behind the auth layer, served on
    /// `addr` (`None`: unknown).
    fn app(&self, service: Arc<Service>, addr: Option<SocketAddr>) -> axum::Router {
        let auth = self.auth_layer(&service);
        let app = self
            .extra_routes
            .iter()
            .cloned()
            .fold(crate::http::router(service), axum::Router::merge)
            .layer(auth.layer());
        if self.answers_loopback_names_only(addr) {
            app.layer(axum::middleware::from_fn(crate::origin::loopback_host))
        } else {
            app
        }
    }

    /// Whether requests must name a loopback host: on loopback without a credential (and
    /// without the trusted-network opt-out), where a DNS-rebound page could otherwise call.
    fn answers_loopback_names_only(&self, addr: Option<SocketAddr>) -> bool {
        self.auth.credentials.is_empty()
            && self.auth.error.is_none()
            && !self.auth.allow_unauthenticated
            && addr.is_some_and(|addr| crewline_auth::is_loopback(&addr))
    }

    /// The auth layer's settings: an invalid credential refuses everyone (fail closed, for
    /// [`router`](Self::router), which cannot report it); none admits everyone.
    fn auth_layer(&self, service: &Service) -> Auth {
        let auth = if let Some((setting, error)) = &self.auth.error {
            tracing::error!(setting, error = %crewline::types::ErrorChain(error), "invalid credential: every request is refused");
            Auth::required([])
        } else if self.auth.credentials.is_empty() {
            Auth::unauthenticated()
        } else {
            Auth::required(self.auth.credentials.iter().cloned())
        };
        let state = Arc::clone(&service.state);
        auth.query_token_on(crate::http::WS_PATH)
            .open_path("/health")
            .open_path("/ready")
            // Counted here; the layer logs refusals, one line per interval with their count
            // (one line each let a stranger write 195 MiB of log in 10 s, issue 30).
            .on_unauthorized(move |path| {
                if path == crate::http::WS_PATH {
                    state
                        .metrics
                        .handshake_failed(crate::HandshakeFailure::Unauthorized);
                }
            })
    }

    /// Refuses to serve on `addr` (`None`: unknown) with an invalid credential, or beyond
    /// loopback with none unless allowed.
    fn check_auth(&self, addr: Option<SocketAddr>) -> Result<(), ServerError> {
        if let Some((setting, error)) = &self.auth.error {
            return Err(ServerError::Auth {
                setting,
                source: error.clone(),
            });
        }
        let exposed = addr.is_none_or(|addr| !crewline_auth::is_loopback(&addr));
        if exposed && self.auth.credentials.is_empty() && !self.auth.allow_unauthenticated {
            let error = ServerError::Unauthenticated {
                addr: addr.map_or_else(|| "an unknown address".to_owned(), |a| a.to_string()),
            };
            // Logged as well: a binary that returns the error from `main` prints its Debug.
            tracing::error!("{error}");
            return Err(error);
        }
        Ok(())
    }

    /// Says once, when serving starts, who can call a server without a credential: anyone who
    /// reaches the port, or only this machine.
    fn log_open_access(&self, addr: Option<SocketAddr>) {
        if !self.auth.credentials.is_empty() {
            return;
        }
        match addr {
            Some(addr) if crewline_auth::is_loopback(&addr) => {
                tracing::info!(%addr, "serving on loopback without authentication");
            }
            _ => tracing::warn!(
                "serving without authentication: anyone who reaches the port can call"
            ),
        }
    }

    /// Serves on `listener` until [`ServerHandle::shutdown`] is called.
    pub async fn serve(self, listener: TcpListener) -> Result<(), ServerError> {
        self.serve_with_shutdown(listener, std::future::pending())
            .await
    }

    /// Serves on `listener`; when `signal` completes, drains and returns.
    ///
    /// Draining: new calls get 503 and `/ready` turns 503 (`draining`) while the port stays
    /// open; live calls go on until they end or the drain timeout passes, when they are
    /// closed with 1001 `server shutting down` and their sessions shut down.
    pub async fn serve_with_shutdown<S>(
        self,
        listener: TcpListener,
        signal: S,
    ) -> Result<(), ServerError>
    where
        S: Future<Output = ()> + Send + 'static,
    {
        self.check_auth(listener.local_addr().ok())?;
        self.log_open_access(listener.local_addr().ok());
        let service = self.service();
        service.start_dry_run();
        match listener.local_addr() {
            Ok(addr) => tracing::info!(%addr, "crew server listening"),
            Err(error) => {
                tracing::warn!(error = %crewline::types::ErrorChain(&error), "crew server listening on an unknown address")
            }
        }
        let app = self.app(Arc::clone(&service), listener.local_addr().ok());
        let stop_http = CancellationToken::new();
        let http = HttpSettings::new(&self.config);
        let mut server = match self.config.worker_runtimes {
            None => tokio::spawn(serve_http(listener, app, stop_http.clone(), http)),
            Some(threads) => serve_on_workers(listener, app, threads, stop_http.clone(), http)
                .map_err(ServerError::Io)?,
        };
        let state = Arc::clone(&service.state);
        tokio::select! {
            result = &mut server => return join_result(result),
            () = signal => tracing::info!("shutdown signal received"),
            () = state.shutdown_requested.cancelled() => tracing::info!("shutdown requested"),
        }
        drain(&service).await;
        stop_http.cancel();
        join_result(server.await)
    }

    /// Binds the configured address and serves until SIGTERM or SIGINT, then drains.
    pub async fn run(self) -> Result<(), ServerError> {
        let addr = self.config.bind;
        self.check_auth(Some(addr))?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        self.serve_with_shutdown(listener, shutdown_signal()).await
    }
}

/// Watches and stops a [`CrewServer`]; cheap to clone.
///
/// # Examples
///
/// ```
/// # use std::sync::Arc;
/// # use crewline::{Crew, agent::LoopAgent, crew::OutputNode, SessionSetup, ToolLoop};
/// # use crewline::{llm::{Reply, ScriptedLlm}, tool::ToolRegistry};
/// # async fn setup(_session: SessionSetup) -> Result<Crew, std::io::Error> {
/// #     let llm = ScriptedLlm::new([Reply::text("Hello!")]);
/// #     let agent = LoopAgent::new("Be brief.", ToolLoop::new(Arc::new(llm), Arc::new(ToolRegistry::new())));
/// #     let mut crew = Crew::new();
/// #     crew.add_node(OutputNode::new("assistant", agent));
/// #     Ok(crew)
/// # }
/// use std::time::Duration;
///
/// use crewline_server::CrewServer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = CrewServer::new(setup);
/// let handle = server.handle(); // valid before serving starts
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let serving = tokio::spawn(server.serve(listener));
///
/// // Ready once the dry run of `setup` has passed.
/// while !handle.is_ready() {
///     tokio::time::sleep(Duration::from_millis(5)).await;
/// }
/// assert_eq!(handle.active_sessions(), 0);
///
/// handle.shutdown(); // what SIGTERM does under `run`
/// serving.await??; // drained: no call was live
/// assert!(handle.is_draining() && !handle.is_ready());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ServerHandle {
    state: Arc<State>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("active_sessions", &self.active_sessions())
            .field("ready", &self.is_ready())
            .field("draining", &self.is_draining())
            .finish()
    }
}

impl ServerHandle {
    /// Calls in progress now.
    pub fn active_sessions(&self) -> usize {
        self.state.metrics.active_sessions()
    }

    /// The bytes of unfinished inbound messages held now beyond each call's first 64 KiB:
    /// what counts against [`CrewServer::max_pending_bytes`].
    pub fn pending_message_bytes(&self) -> usize {
        self.state.pending_message_bytes()
    }

    /// The server's measurements (also served as `GET /metrics`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.state.metrics
    }

    /// Whether the dry run succeeded and the server is not draining.
    pub fn is_ready(&self) -> bool {
        self.state.readiness() == Readiness::Ready && !self.state.is_draining()
    }

    /// Whether the server is refusing new calls because it is shutting down.
    pub fn is_draining(&self) -> bool {
        self.state.is_draining()
    }

    /// Starts a graceful shutdown, as the shutdown signal does: from this call on, new calls
    /// are refused and `/ready` answers 503, so a balancer stops sending calls at once.
    pub fn shutdown(&self) {
        self.state.start_draining();
        self.state.shutdown_requested.cancel();
    }
}

#[cfg(test)]
mod handle_tests {
    use super::*;
    use crewline::Crew;

    #[test]
    fn shutdown_is_seen_at_once_not_when_the_serve_task_gets_to_it() {
        let server = CrewServer::new(|_call: SessionSetup| Crew::new());
        let handle = server.handle();
        assert!(!handle.is_draining());
        handle.shutdown();
        // Nothing is serving: only the handle itself can have marked the server draining.
        assert!(handle.is_draining());
        assert!(!handle.is_ready());
    }
}

#[cfg(test)]
mod auth_tests {
    use super::*;
    use crewline::Crew;

    async fn setup(_: SessionSetup) -> Result<Crew, std::io::Error> {
        Ok(Crew::new())
    }

    #[test]
    fn beyond_loopback_a_credential_or_the_explicit_opt_out_is_needed() {
        let open: SocketAddr = ([0, 0, 0, 0], 8080).into();
        let local: SocketAddr = ([127, 0, 0, 1], 8080).into();
        assert!(CrewServer::new(setup).check_auth(Some(open)).is_err());
        assert!(CrewServer::new(setup).check_auth(None).is_err());
        assert!(CrewServer::new(setup).check_auth(Some(local)).is_ok());
        let allowed = CrewServer::new(setup).allow_unauthenticated();
        assert!(allowed.check_auth(Some(open)).is_ok());
        let with_token = CrewServer::new(setup).auth_token("t0ken");
        assert!(with_token.check_auth(Some(open)).is_ok());
        // An empty token is an error even where no token is needed.
        let empty = CrewServer::new(setup).auth_token("");
        assert!(matches!(
            empty.check_auth(Some(local)),
            Err(ServerError::Auth { .. })
        ));
    }
}
