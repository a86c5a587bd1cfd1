//! The MCP server: a registry's MCP-exported tools, each call run by the registry's executor.

mod screen;
mod sessions;

use std::{
    borrow::Cow, collections::HashMap, future::Future, net::SocketAddr, sync::Arc, time::Duration,
};

use axum::{
    extract::Request,
    http::{HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use crewline_auth::{Auth, Credential, CredentialError};
use crewline_core::{ToolCall, ToolErrorKind};
use crewline_http::HttpSettings;
use crewline_tools::{CallContext, NameRules, SessionScope, Target, ToolRegistry};
use rmcp::{
    ErrorData, RoleServer, ServerHandler, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
        JsonObject, ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities,
        ServerConfig, Tool as McpTool,
    },
    service::{RequestContext, ServerInitializeError},
    transport::{
        IntoTransport,
        streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService},
    },
};
use serde_json::Value;
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpListener,
};
use tokio_util::sync::CancellationToken;

use self::sessions::{CappedSessions, SessionCount};
use crate::{
    McpError,
    flavour::{self, OUTPUT_TYPE_META_KEY, SchemaFlavour},
};

/// The path the HTTP router serves MCP on.
pub const MCP_PATH: &str = "/mcp";

/// The default most HTTP sessions open at once: 1,000.
///
/// An MCP server serves a few agents, each with a session or a handful; a session costs about
/// 55 KiB, so the cap holds them to some 55 MiB. A client past it gets a 503.
pub const DEFAULT_MAX_SESSIONS: usize = 1_000;

/// The default time an HTTP session may go without a request before it is closed: 5 minutes.
pub const DEFAULT_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The default most bytes of one HTTP request's body: 1 MiB.
///
/// A tool call's arguments are a few kilobytes; rmcp's own default (4 MiB) times every open
/// connection would let clients hold gigabytes of bodies being read.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// How long a client refused at the session cap is told to wait (`Retry-After`, seconds).
const RETRY_AFTER_SECONDS: &str = "5";

/// Serves a [`ToolRegistry`] over MCP.
///
/// Only the tools exported to [`Target::Mcp`] are listed and callable. Every call goes through
/// the registry's [`Executor`](crewline_tools::Executor) (validation, hooks, guardrails,
/// approval, limits, cache, timeouts, ledger). A failed call is a tool result with
/// `isError: true` whose text is the JSON the crew's model would read,
/// `{"error": {"kind", "message"}}`, so a client that ignores `isError` still shows it.
///
/// Each MCP session (a stdio connection, an HTTP session) is one executor run: the
/// executor's run limits count that session's calls.
///
/// **Cancellation.** A call the client cancels (`notifications/cancelled`), or whose session
/// ends (the client closed it or went away), is cancelled in the executor like a barge-in:
/// a cancellable tool's future is dropped and the ledger records a `Cancelled` error; a tool
/// with `cancellable = false` runs on to completion in its own task (and is recorded as it
/// ends). The session's other calls are not affected. When the transport closes, rmcp first
/// waits a few seconds for running calls to answer, then cancels them. Over HTTP, a session
/// ends when its client closes it (`DELETE`) or after
/// [`session_idle_timeout`](Self::session_idle_timeout) without a request (default 5 minutes);
/// a dropped connection alone does not cancel a call, since the client may resume the stream,
/// so the tool's timeout bounds it.
///
/// **Limits (HTTP).** At most [`max_sessions`](Self::max_sessions) sessions are open at once
/// (default 1,000; a new session past it is answered 503 with `Retry-After`), counted by
/// [`open_sessions`](Self::open_sessions). [`serve_http`](Self::serve_http) serves on
/// crewline's shared listener (`crewline-http`), with the crew server's limits: a client has
/// [`header_read_timeout`](Self::header_read_timeout) to send a request's head (default 10 s),
/// at most [`max_connections`](Self::max_connections) connections are open (default 1,024),
/// and a shutdown waits a bounded time for open connections. A request's body is capped at
/// [`max_request_bytes`](Self::max_request_bytes) (default 1 MiB; past it, 413).
///
/// **What a client can write into the logs.** rmcp logs a client's notifications and
/// handshake whole at INFO, and the id and error of a request it fails at WARN; so every
/// message a client sends is screened first, on every transport: a notification over 4 KiB
/// is dropped (answered 202 over HTTP), and a request other than `tools/call` over 4 KiB, or
/// any request whose id is over 256 bytes, is answered with a JSON-RPC "invalid request"
/// (400 over HTTP). The session goes on. A `tools/call` is bounded by the transport only
/// (`max_request_bytes` over HTTP): its arguments are never logged whole. Over HTTP, a
/// request whose `Host`, `Origin`, `MCP-Protocol-Version`, `Mcp-Session-Id` or
/// `Last-Event-ID` is over 1 KiB (headers rmcp logs whole when it refuses them) is answered
/// 400.
///
/// **Structured results.** A tool whose [`result_schema`](crewline_tools::Tool::result_schema)
/// is an object schema (`"type": "object"`, as MCP requires) is listed with it as its
/// `outputSchema`, and its successful results carry `structuredContent` (the result object)
/// as well as the same JSON as text, for clients that predate structured output. A result
/// that does not match the declared schema (changed by an after-hook, say) is an `isError`
/// result of kind `ToolError` rather than structured content a client would reject. Tools
/// whose result schema is not an object schema (a string, a number, an array) declare no
/// `outputSchema` and answer with text only. Errors are always `isError` with the
/// `{"error": {"kind", "message"}}` text and no structured content.
///
/// **Authentication (HTTP).** [`serve_http`](Self::serve_http) and
/// [`serve_http_with_shutdown`](Self::serve_http_with_shutdown) refuse a listener beyond
/// loopback unless a token is set ([`auth_token`](Self::auth_token), sent as
/// `Authorization: Bearer`) or [`allow_unauthenticated`](Self::allow_unauthenticated) is
/// called. [`router`](Self::router) merged into a `CrewServer` is covered by the crew server's
/// own auth layer (its token); a token set here is checked as well. The `Host` allowlist
/// ([`allowed_hosts`](Self::allowed_hosts)) is no authentication: the client writes that header.
///
/// # Examples
///
/// Serve a registry's MCP tools, and call them from another process's registry (here both
/// ends in one process, over an in-memory pipe; [`serve_stdio`](Self::serve_stdio) and
/// [`serve_http`](Self::serve_http) are the real transports):
///
/// ```
/// use crewline::tool::{ExecuteOptions, ToolRegistry};
/// use crewline::types::{ToolCall, ToolErrorKind};
/// use crewline_mcp::{McpClient, McpServer};
///
/// # use crewline::{prelude::function_tool, tool::ToolError};
/// /// The weather in a city.
/// ///
/// /// # Arguments
/// /// * `city` - The city
/// #[function_tool(export = "crew,mcp")]
/// async fn get_weather(city: String) -> Result<String, ToolError> {
///     match city.as_str() {
///         "Paris" => Ok("Sunny, 21 °C".into()),
///         _ => Err(ToolError::new(format!("No forecast for {city}."))),
///     }
/// }
///
/// /// Refunds an order (for the crew only: no `export`).
/// #[function_tool]
/// async fn refund(order: String) -> String {
///     order
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut tools = ToolRegistry::new();
/// tools.register(GetWeatherTool)?;
/// tools.register(RefundTool)?;
/// let server = McpServer::new(&tools)?.named("weather-desk", "1.0.0");
/// assert_eq!(server.tools().len(), 1); // `refund` is not exported to MCP
///
/// let (server_end, client_end) = tokio::io::duplex(64 * 1024);
/// tokio::spawn(async move { server.serve_io(server_end).await });
///
/// // The other side: mount the server's tools into a registry of its own.
/// let client = McpClient::connect_io(client_end).await?;
/// let mut remote = ToolRegistry::new();
/// assert_eq!(client.mount(&mut remote).await?, ["get_weather"]);
///
/// let calls = [
///     ToolCall::new("call_1", "get_weather", r#"{"city": "Paris"}"#),
///     ToolCall::new("call_2", "get_weather", r#"{"city": "Oslo"}"#),
/// ];
/// let runs = remote.execute(&calls, ExecuteOptions::new()).await;
/// assert_eq!(runs[0].result.content(), "Sunny, 21 °C");
/// assert_eq!(runs[1].result.error_kind(), Some(ToolErrorKind::ToolError));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
}

/// What every session of a server shares.
struct Shared {
    tools: ToolRegistry,
    listing: Vec<McpTool>,
    /// The validators of the declared output schemas, by tool name.
    outputs: HashMap<String, Arc<jsonschema::Validator>>,
    info: Implementation,
    allowed_hosts: Option<Vec<String>>,
    credentials: Vec<Credential>,
    /// The first invalid credential, reported when serving starts.
    auth_error: Option<CredentialError>,
    allow_unauthenticated: bool,
    /// No `Mcp-Session-Id` sessions: every HTTP request stands alone.
    stateless: bool,
    /// The listener's settings for [`McpServer::serve_http`].
    http: HttpSettings,
    max_sessions: usize,
    session_idle_timeout: Duration,
    max_request_bytes: usize,
    /// The sessions open across every router of this server (shared by its clones).
    sessions: Arc<SessionCount>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("tools", &self.shared.tools.names())
            .field("info", &self.shared.info)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Serves the MCP-exported tools of `tools` with standard JSON Schemas.
    pub fn new(tools: &ToolRegistry) -> Result<Self, McpError> {
        Self::with_flavour(tools, SchemaFlavour::Standard)
    }

    /// Serves the MCP-exported tools of `tools`, their schemas written in `flavour`.
    ///
    /// With [`SchemaFlavour::Smolagents`], every exported name must also be a Python
    /// identifier that is not a keyword ([`NameRules::Python`]), since smolagents turns each
    /// tool into a Python function; a name that is not is an [`McpError::Export`] here.
    pub fn with_flavour(tools: &ToolRegistry, flavour: SchemaFlavour) -> Result<Self, McpError> {
        let rules = match flavour {
            SchemaFlavour::Standard => NameRules::Standard,
            SchemaFlavour::Smolagents => NameRules::Python,
        };
        let tools = tools.export_with(Target::Mcp, rules)?;
        let (listing, outputs) = listing(&tools, flavour);
        Ok(Self {
            shared: Arc::new(Shared {
                tools,
                listing,
                outputs,
                info: Implementation::new("crewline", env!("CARGO_PKG_VERSION")),
                allowed_hosts: None,
                credentials: Vec::new(),
                auth_error: None,
                allow_unauthenticated: false,
                stateless: false,
                http: HttpSettings::default(),
                max_sessions: DEFAULT_MAX_SESSIONS,
                session_idle_timeout: DEFAULT_SESSION_IDLE_TIMEOUT,
                max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
                sessions: Arc::default(),
            }),
        })
    }

    /// The same server, reporting `name` and `version` to clients (default `crewline` and
    /// this crate's version).
    pub fn named(self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.map_shared(|shared| shared.info = Implementation::new(name, version))
    }

    /// The same server, answering HTTP requests whose `Host` is one of `hosts` (names or
    /// `host:port`).
    ///
    /// By default only loopback hosts (`localhost`, `127.0.0.1`, `::1`) are accepted. This is
    /// a defence against DNS rebinding (a web page in a local browser reaching a local server),
    /// not access control: any other client writes its own `Host` header. A server reached by
    /// another name lists it here *and* sets a token ([`auth_token`](Self::auth_token)). An
    /// empty list accepts any host.
    pub fn allowed_hosts(self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let hosts: Vec<String> = hosts.into_iter().map(Into::into).collect();
        self.map_shared(|shared| shared.allowed_hosts = Some(hosts))
    }

    /// The same server, requiring `Authorization: Bearer <token>` on its HTTP endpoint (the
    /// credential is named `default`); an empty token is an [`McpError::Auth`] when serving
    /// starts. Not used by stdio.
    pub fn auth_token(self, token: impl AsRef<[u8]>) -> Self {
        match Credential::new("default", token) {
            Ok(credential) => self.credential(credential),
            Err(error) => self.map_shared(|shared| {
                shared.auth_error.get_or_insert(error);
            }),
        }
    }

    /// The same server, also accepting `credential` on its HTTP endpoint (the handler's
    /// `Principal` names it).
    pub fn credential(self, credential: Credential) -> Self {
        self.map_shared(|shared| shared.credentials.push(credential))
    }

    /// The same server, serving HTTP without credentials even beyond loopback: for a trusted
    /// network only (anyone who reaches the port can call every exported tool).
    pub fn allow_unauthenticated(self) -> Self {
        self.map_shared(|shared| shared.allow_unauthenticated = true)
    }

    /// The same server, stateless over HTTP: no `Mcp-Session-Id` sessions, every request
    /// answered on its own, so replicas behind a load balancer need no sticky routing (each
    /// request gets a session scope of its own: nothing cached for one request serves
    /// another). Clients of MCP `2026-07-28` and later are served statelessly anyway; this
    /// also serves the older protocol versions (smolagents' `mcp<2`) that way.
    pub fn stateless(self) -> Self {
        self.map_shared(|shared| shared.stateless = true)
    }

    /// The same server, with at most `sessions` HTTP sessions open at once (default
    /// [`DEFAULT_MAX_SESSIONS`]); a client that opens one past it is answered 503 with
    /// `Retry-After`, and the sessions already open go on.
    pub fn max_sessions(self, sessions: usize) -> Self {
        self.map_shared(|shared| shared.max_sessions = sessions)
    }

    /// The same server, closing an HTTP session after `timeout` without a request (default
    /// [`DEFAULT_SESSION_IDLE_TIMEOUT`]); its client then gets a 404 and starts a new one.
    pub fn session_idle_timeout(self, timeout: Duration) -> Self {
        self.map_shared(|shared| shared.session_idle_timeout = timeout)
    }

    /// The same server, reading at most `bytes` of one HTTP request's body (default
    /// [`DEFAULT_MAX_REQUEST_BYTES`]); a longer body is answered 413 and not read further.
    pub fn max_request_bytes(self, bytes: usize) -> Self {
        self.map_shared(|shared| shared.max_request_bytes = bytes)
    }

    /// The same server, giving a client `timeout` to send a request's head on
    /// [`serve_http`](Self::serve_http), which is also the longest an idle keep-alive
    /// connection is kept (default 10 s, as the crew server).
    pub fn header_read_timeout(self, timeout: Duration) -> Self {
        self.map_shared(|shared| shared.http = shared.http.header_read_timeout(timeout))
    }

    /// The same server, with at most `connections` open at once on
    /// [`serve_http`](Self::serve_http) (default 1,024); past it new connections wait in the
    /// kernel's backlog until one closes.
    pub fn max_connections(self, connections: usize) -> Self {
        self.map_shared(|shared| shared.http = shared.http.max_connections(connections))
    }

    /// HTTP sessions open now, across every router of this server: the gauge to export
    /// (a crew server's `Metrics::gauge`, say).
    pub fn open_sessions(&self) -> usize {
        self.shared.sessions.open()
    }

    /// HTTP sessions refused at [`max_sessions`](Self::max_sessions) since the start.
    pub fn refused_sessions(&self) -> u64 {
        self.shared.sessions.refused()
    }

    /// The tools as MCP lists them.
    pub fn tools(&self) -> &[McpTool] {
        &self.shared.listing
    }

    /// The registry the calls run in (only the MCP-exported tools).
    pub fn registry(&self) -> &ToolRegistry {
        &self.shared.tools
    }

    /// Serves one MCP session on `transport` (stdio, a socket, an in-process duplex) until
    /// the client disconnects.
    pub async fn serve_io<T>(&self, transport: T) -> Result<(), McpError>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        self.run_session(transport).await
    }

    /// Serves one MCP session on this process's stdin and stdout until the client
    /// disconnects (stdout then carries only MCP messages: log to stderr).
    pub async fn serve_stdio(&self) -> Result<(), McpError> {
        self.run_session(rmcp::transport::stdio()).await
    }

    /// Runs one session on any transport rmcp accepts (a duplex stream, or a reader and
    /// writer pair such as stdio) until the client disconnects.
    async fn run_session<T, E, A>(&self, transport: T) -> Result<(), McpError>
    where
        T: IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let transport = screen::Screened::new(transport.into_transport());
        let running = self
            .session()
            .serve(transport)
            .await
            .map_err(|error| match error {
                // Its text is the whole first message (up to rmcp's 16 MiB line), and the caller
                // may log it: only its kind is kept.
                ServerInitializeError::ExpectedInitializeRequest(_) => {
                    McpError::Session(Box::new(NotInitialize))
                }
                error => McpError::Session(Box::new(error)),
            })?;
        running
            .waiting()
            .await
            .map_err(|error| McpError::Session(Box::new(error)))?;
        Ok(())
    }

    /// The streamable-HTTP endpoint as an [`axum::Router`] serving [`MCP_PATH`] (`/mcp`), to
    /// merge into another app (such as `CrewServer::merge`, whose auth layer then covers it).
    ///
    /// With a token set here, the router checks it too; with an invalid one it refuses every
    /// request. Without one it checks nothing: served on its own, use
    /// [`serve_http`](Self::serve_http), which refuses to serve beyond loopback unauthenticated.
    ///
    /// Its sessions end when their clients leave; an open event stream holds a graceful
    /// shutdown of the app until then (or its drain timeout): use
    /// [`router_until`](Self::router_until) to end them on shutdown.
    pub fn router(&self) -> axum::Router {
        self.router_until(CancellationToken::new())
    }

    /// Serves the streamable-HTTP endpoint (at `/mcp`) on `listener` until the task is
    /// dropped.
    pub async fn serve_http(&self, listener: TcpListener) -> Result<(), McpError> {
        self.serve_http_with_shutdown(listener, std::future::pending())
            .await
    }

    /// Serves the streamable-HTTP endpoint (at `/mcp`) on `listener`; when `signal`
    /// completes, open sessions are closed and this returns.
    pub async fn serve_http_with_shutdown<S>(
        &self,
        listener: TcpListener,
        signal: S,
    ) -> Result<(), McpError>
    where
        S: Future<Output = ()> + Send + 'static,
    {
        self.check_auth(listener.local_addr().ok())?;
        let stop = CancellationToken::new();
        let router = self.router_until(stop.clone());
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, path = MCP_PATH, "MCP server listening");
        }
        let mut serving = std::pin::pin!(crewline_http::serve(
            listener,
            router,
            stop.clone(),
            self.shared.http
        ));
        tokio::select! {
            served = serving.as_mut() => return Ok(served?),
            () = signal => {}
        }
        // Ends the sessions (their event streams) and the listener, which gives the open
        // connections a bounded time to finish.
        stop.cancel();
        serving.await?;
        Ok(())
    }

    /// Like [`router`](Self::router); cancelling `stop` ends every session and refuses new
    /// requests.
    pub fn router_until(&self, stop: CancellationToken) -> axum::Router {
        let mut config = StreamableHttpServerConfig::default()
            .with_cancellation_token(stop)
            .with_legacy_session_mode(!self.shared.stateless)
            .with_max_request_body_bytes(self.shared.max_request_bytes);
        if let Some(hosts) = &self.shared.allowed_hosts {
            config = config.with_allowed_hosts(hosts.iter().cloned());
        }
        let server = self.clone();
        let shared = &self.shared;
        let sessions = CappedSessions::new(
            shared.max_sessions,
            shared.session_idle_timeout,
            Arc::clone(&shared.sessions),
        );
        let service =
            StreamableHttpService::new(move || Ok(server.session()), Arc::new(sessions), config);
        let count = Arc::clone(&shared.sessions);
        let limit = shared.max_request_bytes;
        let router = axum::Router::new()
            .nest_service(MCP_PATH, service)
            .layer(middleware::from_fn(move |request, next| {
                full_is_503(Arc::clone(&count), request, next)
            }))
            .layer(middleware::from_fn(move |request, next| {
                screen::screen_http(limit, request, next)
            }));
        match self.auth() {
            Some(auth) => router.layer(auth.layer()),
            None => router,
        }
    }

    /// The auth layer's settings; `None` when no credential is set (nothing to check).
    fn auth(&self) -> Option<Auth> {
        let shared = &self.shared;
        if let Some(error) = &shared.auth_error {
            tracing::error!(error = %crewline_core::ErrorChain(error), "invalid MCP credential: every request is refused");
            return Some(Auth::required([]));
        }
        (!shared.credentials.is_empty()).then(|| Auth::required(shared.credentials.clone()))
    }

    /// Refuses to serve on `addr` (`None`: unknown) with an invalid credential, or beyond
    /// loopback with none unless allowed.
    fn check_auth(&self, addr: Option<SocketAddr>) -> Result<(), McpError> {
        let shared = &self.shared;
        if let Some(error) = &shared.auth_error {
            return Err(McpError::Auth {
                setting: "auth_token",
                source: error.clone(),
            });
        }
        let exposed = addr.is_none_or(|addr| !crewline_auth::is_loopback(&addr));
        if exposed && shared.credentials.is_empty() && !shared.allow_unauthenticated {
            let error = McpError::Unauthenticated {
                addr: addr.map_or_else(|| "an unknown address".to_owned(), |a| a.to_string()),
            };
            // Logged as well: a binary that returns the error from `main` prints its Debug.
            tracing::error!("{error}");
            return Err(error);
        }
        Ok(())
    }

    /// A handler for one session, with its own executor run and its own session scope: what
    /// the executor keeps (cached results, approvals, running non-cancellable calls) is never
    /// shared with another MCP session or with the crew's calls.
    fn session(&self) -> Session {
        Session {
            context: self.shared.tools.context().with_scope(SessionScope::new()),
            shared: Arc::clone(&self.shared),
        }
    }

    fn map_shared(self, change: impl FnOnce(&mut Shared)) -> Self {
        let mut shared = Shared {
            tools: self.shared.tools.clone(),
            listing: self.shared.listing.clone(),
            outputs: self.shared.outputs.clone(),
            info: self.shared.info.clone(),
            allowed_hosts: self.shared.allowed_hosts.clone(),
            credentials: self.shared.credentials.clone(),
            auth_error: self.shared.auth_error.clone(),
            allow_unauthenticated: self.shared.allow_unauthenticated,
            stateless: self.shared.stateless,
            http: self.shared.http,
            max_sessions: self.shared.max_sessions,
            session_idle_timeout: self.shared.session_idle_timeout,
            max_request_bytes: self.shared.max_request_bytes,
            sessions: Arc::clone(&self.shared.sessions),
        };
        change(&mut shared);
        Self {
            shared: Arc::new(shared),
        }
    }
}

/// A stdio or socket client whose first message was not `initialize`.
#[derive(Debug, thiserror::Error)]
#[error("the MCP client's first message was not an initialize request")]
struct NotInitialize;

/// Answers a request refused at the session cap with a 503 that says so, rather than the 500
/// rmcp makes of any failure to create a session.
async fn full_is_503(count: Arc<SessionCount>, request: Request, next: Next) -> Response {
    let refused = count.refused();
    let response = next.run(request).await;
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR || count.refused() == refused {
        return response;
    }
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        "too many MCP sessions open: close one (DELETE) or retry later",
    )
        .into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}

/// The MCP listing of every tool in `tools`, and the validators of the output schemas it
/// declares.
fn listing(
    tools: &ToolRegistry,
    flavour: SchemaFlavour,
) -> (Vec<McpTool>, HashMap<String, Arc<jsonschema::Validator>>) {
    let mut outputs = HashMap::new();
    let listing = tools
        .definitions()
        .into_iter()
        .filter_map(|definition| {
            let tool = tools.get(&definition.name)?;
            let schema = flavour::input_schema(flavour, &definition.parameters, &tool.parameters());
            let input_schema = match schema {
                Value::Object(map) => map,
                _ => JsonObject::new(),
            };
            let result_schema = tool.result_schema();
            let mut meta = JsonObject::new();
            meta.insert(
                OUTPUT_TYPE_META_KEY.to_owned(),
                Value::from(flavour::smolagents_output_type(result_schema.as_ref())),
            );
            let mut listed = McpTool::new(definition.name, definition.description, input_schema)
                .with_meta(MetaObject(meta));
            if let Some((schema, validator)) =
                result_schema.and_then(|schema| output_schema(&listed.name, schema))
            {
                listed.output_schema = Some(Arc::new(schema));
                outputs.insert(listed.name.to_string(), Arc::new(validator));
            }
            Some(listed)
        })
        .collect();
    (listing, outputs)
}

/// The `outputSchema` of a tool whose result schema is an object schema, with its validator;
/// `None` (no structured output) for any other schema, or one that does not compile.
fn output_schema(tool: &str, schema: Value) -> Option<(JsonObject, jsonschema::Validator)> {
    // MCP requires `outputSchema` to be an object schema: `structuredContent` is an object.
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    let validator = match jsonschema::validator_for(&schema) {
        Ok(validator) => validator,
        Err(error) => {
            tracing::warn!(tool, error = %crewline_core::ErrorChain(&error), "the result schema does not compile; no outputSchema");
            return None;
        }
    };
    match schema {
        Value::Object(map) => Some((map, validator)),
        _ => None,
    }
}

/// One MCP session's handler.
#[derive(Clone)]
struct Session {
    shared: Arc<Shared>,
    context: CallContext,
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(self.shared.info.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.shared.listing.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<McpTool> {
        self.shared
            .listing
            .iter()
            .find(|tool| tool.name == name)
            .cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request
            .arguments
            .map_or_else(|| "{}".to_owned(), |map| Value::Object(map).to_string());
        // An empty id: the executor gives the call a fresh one, which the ledger records.
        let call = ToolCall::new(String::new(), Cow::into_owned(request.name), arguments);
        let tools = &self.shared.tools;
        // rmcp cancels `context.ct` when the client cancels this request or the session ends;
        // it cancels only this call, not the session's run.
        let for_call = self.context.clone().with_call_token(context.ct);
        let run = tools.execute_one(&call, &for_call).await;
        let result = run.result;
        if let (Some(validator), Some(_)) = (self.shared.outputs.get(&call.name), result.value()) {
            let value = result.outcome.unwrap_or_default();
            return Ok(structured_result(&call.name, value, validator).into());
        }
        // The model's text, made once here from the structured result.
        let content = vec![ContentBlock::text(result.content())];
        if result.is_error() {
            return Ok(CallToolResult::error(content).into());
        }
        Ok(CallToolResult::success(content).into())
    }
}

/// A successful result of a tool with an `outputSchema`: the object as `structuredContent`
/// and as text; or, if it does not match the schema, a `ToolError` result.
fn structured_result(
    tool: &str,
    value: Value,
    validator: &jsonschema::Validator,
) -> CallToolResult {
    // A tool that returns its object as JSON text (a proxied tool) is read as that object.
    let value = match value {
        Value::String(text) => serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)),
        value => value,
    };
    match value {
        value if validator.is_valid(&value) => CallToolResult::structured(value),
        value => {
            // The result may be large (and the caller's data): only an excerpt is logged.
            let content = value.to_string();
            tracing::warn!(
                tool,
                content = %crewline_core::excerpt(&content),
                "the result does not match the tool's declared output schema"
            );
            let error = serde_json::json!({"error": {
                "kind": ToolErrorKind::ToolError,
                "message": "the tool's result did not have the declared shape",
            }});
            CallToolResult::error(vec![ContentBlock::text(error.to_string())])
        }
    }
}
