//! The MCP client: an external MCP server's tools, mounted into a [`ToolRegistry`].

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use crewline_core::ToolErrorKind;
use crewline_tools::{Tool, ToolError, ToolPolicy, ToolRegistry};
use rmcp::{
    Peer, RoleClient, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ContentBlock, JsonRpcMessage,
        PaginatedRequestParams, ServerResult, Tool as McpTool,
    },
    service::{ClientCacheConfig, RunningService, RxJsonRpcMessage, TxJsonRpcMessage},
    transport::{
        IntoTransport, StreamableHttpClientTransport, TokioChildProcess, Transport,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{McpError, Refusal};

/// A connection to an MCP server whose tools a crew can use.
///
/// [`tools`](Self::tools) turns each remote tool into a [`Tool`]; [`mount`](Self::mount) adds
/// them to a registry. Their calls then go through the registry's executor like any other:
/// the arguments are validated against the remote schema, hooks, guardrails and the ledger
/// see them, and the tool's timeout applies (an unanswered call is a `Timeout` the model
/// reads). A remote failure (`isError`, a broken connection) is a tool error the model reads;
/// a remote `{"error": {"kind": "ToolArgsInvalid", ..}}` (a crewline server) stays
/// `ToolArgsInvalid`. A remote `structuredContent` is the call's result value.
///
/// # Examples
///
/// Mount the tools of an MCP server reached over streamable HTTP (here a crewline one on a
/// free local port, with a token):
///
/// ```
/// use std::time::Duration;
///
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
/// # let mut tools = ToolRegistry::new();
/// # tools.register(GetWeatherTool)?;
/// # let server = McpServer::new(&tools)?.auth_token("s3cret");
/// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let url = format!("http://{}/mcp", listener.local_addr()?);
/// # tokio::spawn(async move { server.serve_http(listener).await });
/// // `url` is e.g. "http://127.0.0.1:8080/mcp".
/// assert!(McpClient::connect_http(&url).await.is_err()); // no token: refused
///
/// let client = McpClient::connect_http_with_bearer(&url, "s3cret")
///     .await?
///     .with_timeout(Duration::from_secs(5)); // each remote call's limit
/// let mut registry = ToolRegistry::new();
/// client.mount(&mut registry).await?;
///
/// let call = ToolCall::new("call_1", "get_weather", r#"{"town": "Paris"}"#);
/// let result = &registry.execute(&[call], ExecuteOptions::new()).await[0].result;
/// // Checked locally against the server's schema before anything is sent.
/// assert_eq!(result.error_kind(), Some(ToolErrorKind::ToolArgsInvalid));
/// # Ok(()) }
/// ```
///
/// A call given up locally (a barge-in cancelling the run, the tool's timeout) drops the
/// request, and rmcp then sends the server `notifications/cancelled` for it, so a crewline
/// server stops the call too.
///
/// The connection stays open while the client or any of its tools is alive.
///
/// The server answers the handshake within 10 s, and each page of its tool list within
/// [`with_list_timeout`](Self::with_list_timeout) (10 s), or the client gives up
/// ([`McpError::Refused`]). What the server sends is bounded: rmcp reads at most 16 MiB per
/// JSON body, SSE event or stdio line and 64 KiB of an HTTP error body; the tool list is taken
/// up to [`with_max_tools`](Self::with_max_tools) tools (1,024) over as many pages at most,
/// each tool's definition up to [`with_max_tool_bytes`](Self::with_max_tool_bytes) (64 KiB),
/// and rmcp's cache of list answers is off (it would keep up to 512 of them). What the server
/// sends unasked (notifications, requests), which rmcp logs whole at INFO or WARN, reaches it
/// only up to 4 KiB a message (larger ones are dropped; the client uses none of them), and the
/// `instructions` of its handshake answer are cut to 4 KiB.
#[derive(Clone)]
pub struct McpClient {
    connection: Arc<Connection>,
    policy: ToolPolicy,
    limits: ListLimits,
}

/// The default [`McpClient::with_max_tools`]: 1,024 tools, several times what any real MCP
/// server offers (and a model is given at most 128 per request by most providers).
const DEFAULT_MAX_TOOLS: usize = 1024;
/// The default [`McpClient::with_max_tool_bytes`]: 64 KiB for one tool's name, description
/// and schemas as JSON. Real definitions are a few KiB, and each is sent with every model
/// request of every call.
const DEFAULT_MAX_TOOL_BYTES: usize = 64 << 10;

/// How much of a server's tool list the client takes.
#[derive(Debug, Clone, Copy)]
struct ListLimits {
    max_tools: usize,
    max_tool_bytes: usize,
    /// How long one page of the list may take.
    page_timeout: Duration,
}

impl Default for ListLimits {
    fn default() -> Self {
        Self {
            max_tools: DEFAULT_MAX_TOOLS,
            max_tool_bytes: DEFAULT_MAX_TOOL_BYTES,
            page_timeout: ANSWER_TIMEOUT,
        }
    }
}

/// How long the server may take to answer the handshake, or one page of its tool list: a
/// server that accepts the connection and never answers would otherwise hold the crew's
/// setup (and its `/ready`) forever.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The running session, closed when the last holder drops it.
struct Connection {
    service: RunningService<RoleClient, ()>,
    label: String,
}

impl fmt::Debug for McpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpClient")
            .field("server", &self.connection.label)
            .field("policy", &self.policy)
            .field("max_tools", &self.limits.max_tools)
            .field("max_tool_bytes", &self.limits.max_tool_bytes)
            .field("list_timeout", &self.limits.page_timeout)
            .finish()
    }
}

impl McpClient {
    /// Connects to the streamable-HTTP MCP endpoint at `url` (e.g.
    /// `http://127.0.0.1:8080/mcp`).
    pub async fn connect_http(url: &str) -> Result<Self, McpError> {
        Self::connect_http_config(StreamableHttpClientTransportConfig::with_uri(
            url.to_owned(),
        ))
        .await
    }

    /// Like [`connect_http`](Self::connect_http), sending `Authorization: Bearer <token>`
    /// with every request.
    pub async fn connect_http_with_bearer(url: &str, token: &str) -> Result<Self, McpError> {
        Self::connect_http_config(
            StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token),
        )
        .await
    }

    async fn connect_http_config(
        config: StreamableHttpClientTransportConfig,
    ) -> Result<Self, McpError> {
        let url = config.uri.to_string();
        let transport = StreamableHttpClientTransport::from_config(config);
        let service = handshake(transport).await?;
        Ok(Self::from_service(service, url))
    }

    /// Starts `command` and speaks MCP with it over its stdin and stdout (its stderr is
    /// inherited); the child is stopped when the connection closes.
    pub async fn spawn(command: tokio::process::Command) -> Result<Self, McpError> {
        let label = format!("{:?}", command.as_std().get_program());
        let transport = TokioChildProcess::new(command)?;
        let service = handshake(transport).await?;
        Ok(Self::from_service(service, label))
    }

    /// Speaks MCP over `transport` (a socket, an in-process duplex).
    pub async fn connect_io<T>(transport: T) -> Result<Self, McpError>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let service = handshake(transport).await?;
        Ok(Self::from_service(service, "io".to_owned()))
    }

    fn from_service(service: RunningService<RoleClient, ()>, label: String) -> Self {
        Self {
            connection: Arc::new(Connection { service, label }),
            policy: ToolPolicy::default(),
            limits: ListLimits::default(),
        }
    }

    /// The same client, giving its tools `policy` (a timeout, confirmation, exports...).
    pub fn with_policy(mut self, policy: ToolPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The same client, its tools limited to `timeout` per call.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.policy = self.policy.timeout(timeout);
        self
    }

    /// The same client, taking at most `max` tools from the server (default 1,024), over at
    /// most as many pages; a longer list is refused whole.
    pub fn with_max_tools(mut self, max: usize) -> Self {
        self.limits.max_tools = max.max(1);
        self
    }

    /// The same client, taking tools whose definition (name, description, schemas as JSON)
    /// is at most `bytes` (default 64 KiB); a list with a larger one is refused whole.
    pub fn with_max_tool_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_tool_bytes = bytes;
        self
    }

    /// The same client, waiting at most `timeout` for each page of the server's tool list
    /// (default 10 s).
    pub fn with_list_timeout(mut self, timeout: Duration) -> Self {
        self.limits.page_timeout = timeout;
        self
    }

    /// The server's tools, each a [`Tool`] that calls it.
    ///
    /// A list over [`with_max_tools`](Self::with_max_tools) tools or pages, or with a tool
    /// over [`with_max_tool_bytes`](Self::with_max_tool_bytes), is refused with
    /// [`McpError::Refused`] saying which limit ([`Refusal`]); nothing of it is kept.
    pub async fn tools(&self) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        let listed = self.list_tools().await?;
        Ok(listed
            .into_iter()
            .map(|remote| {
                Arc::new(RemoteTool {
                    connection: Arc::clone(&self.connection),
                    peer: self.connection.service.peer().clone(),
                    parameters: Value::Object((*remote.input_schema).clone()),
                    result_schema: remote
                        .output_schema
                        .as_ref()
                        .map(|schema| Value::Object((**schema).clone())),
                    description: remote.description.as_deref().unwrap_or_default().to_owned(),
                    policy: self.policy,
                    remote,
                }) as Arc<dyn Tool>
            })
            .collect())
    }

    /// Every tool the server lists, page after page, within the limits.
    async fn list_tools(&self) -> Result<Vec<McpTool>, McpError> {
        let ListLimits {
            max_tools,
            max_tool_bytes,
            page_timeout,
        } = self.limits;
        let peer = self.connection.service.peer();
        let mut tools = Vec::new();
        let mut cursor = None;
        // A page may hold no tool at all: the pages are bounded apart from the tools, so a
        // cursor that never ends is refused too (not followed forever).
        for _ in 0..max_tools {
            let params = PaginatedRequestParams::default().with_cursor(cursor);
            let page = tokio::time::timeout(page_timeout, peer.list_tools(Some(params)))
                .await
                .map_err(|_| {
                    McpError::Refused(Refusal::ListTimeout {
                        after: page_timeout,
                    })
                })??;
            for tool in page.tools {
                if tools.len() == max_tools {
                    return Err(McpError::Refused(Refusal::TooManyTools {
                        limit: max_tools,
                    }));
                }
                let bytes = crewline_core::json_len(&tool);
                if bytes > max_tool_bytes {
                    return Err(McpError::Refused(Refusal::ToolTooLarge {
                        name: tool.name.chars().take(64).collect(),
                        bytes,
                        limit: max_tool_bytes,
                    }));
                }
                tools.push(tool);
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(McpError::Refused(Refusal::TooManyPages {
            limit: max_tools,
        }))
    }

    /// Adds every tool of the server to `registry` and returns their names; if one cannot
    /// be added (a name clash, an unusable schema), none is.
    pub async fn mount(&self, registry: &mut ToolRegistry) -> Result<Vec<String>, McpError> {
        let tools = self.tools().await?;
        let mut staged = registry.clone();
        let mut names = Vec::with_capacity(tools.len());
        for tool in tools {
            names.push(tool.name().to_owned());
            staged.register_arc(tool)?;
        }
        *registry = staged;
        Ok(names)
    }

    /// Closes the connection now if no tool of this client is still alive (a registered
    /// tool keeps it open); otherwise it closes when the last of them is dropped.
    pub async fn close(self) {
        if let Ok(connection) = Arc::try_unwrap(self.connection)
            && let Err(error) = connection.service.cancel().await
        {
            tracing::warn!(error = %crewline_core::ErrorChain(&error), "the MCP session did not close cleanly");
        }
    }
}

/// One tool of an MCP server.
struct RemoteTool {
    /// Keeps the session open while the tool is registered.
    connection: Arc<Connection>,
    peer: Peer<RoleClient>,
    remote: McpTool,
    description: String,
    parameters: Value,
    result_schema: Option<Value>,
    policy: ToolPolicy,
}

#[async_trait]
impl Tool for RemoteTool {
    fn name(&self) -> &str {
        &self.remote.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn result_schema(&self) -> Option<Value> {
        self.result_schema.clone()
    }

    fn policy(&self) -> ToolPolicy {
        self.policy
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let mut params = CallToolRequestParams::new(self.remote.name.clone());
        if let Value::Object(map) = arguments {
            params = params.with_arguments(map);
        }
        let result = self.peer.call_tool(params).await.map_err(|error| {
            ToolError::new(format!(
                "the tool `{}` could not be reached; try again later",
                self.remote.name
            ))
            .with_detail(format!("MCP server {}: {error}", self.connection.label))
        })?;
        result_value(result)
    }
}

/// What the model reads from a remote result, or the tool error it carries.
pub(crate) fn result_value(result: CallToolResult) -> Result<Value, ToolError> {
    let text = content_text(&result.content);
    if result.is_error == Some(true) {
        return Err(remote_error(&text, result.structured_content.as_ref()));
    }
    if let Some(value) = result.structured_content {
        return Ok(value);
    }
    Ok(text.map_or_else(|| json!(result.content), Value::String))
}

/// The text of `content`, if it is all text (joined by newlines).
fn content_text(content: &[ContentBlock]) -> Option<String> {
    let texts: Option<Vec<&str>> = content
        .iter()
        .map(|block| block.as_text().map(|text| text.text.as_str()))
        .collect();
    texts.map(|texts| texts.join("\n"))
}

/// The tool error of a remote `isError` result: a crewline-shaped
/// `{"error": {"kind", "message"}}` keeps its message (and `ToolArgsInvalid` its kind, so the
/// model knows to fix its arguments); any other text is the message as is.
fn remote_error(text: &Option<String>, structured: Option<&Value>) -> ToolError {
    let parsed = text
        .as_deref()
        .and_then(|text| serde_json::from_str::<Value>(text).ok());
    let error = parsed
        .as_ref()
        .or(structured)
        .and_then(|value| value.get("error"));
    if let Some(error) = error
        && let Some(message) = error.get("message").and_then(Value::as_str)
    {
        let kind = error
            .get("kind")
            .and_then(|kind| serde_json::from_value::<ToolErrorKind>(kind.clone()).ok());
        return match kind {
            Some(ToolErrorKind::ToolArgsInvalid) => ToolError::invalid_arguments(message),
            Some(kind) => ToolError::new(message).with_detail(format!("remote error kind {kind}")),
            None => ToolError::new(message),
        };
    }
    match text {
        Some(text) if !text.is_empty() => ToolError::new(text.clone()),
        _ => ToolError::new("the remote tool failed without saying why"),
    }
}

/// The most bytes of a message the server sends unasked (a notification, a request) that
/// reach rmcp, which logs each of them whole at INFO or WARN ("received notification",
/// "rejected peer request"): a server could otherwise write megabytes into the crew's logs
/// with every message. Larger ones are dropped; the client uses none of them.
const MAX_UNASKED_BYTES: usize = 4 << 10;
/// The most bytes of the server's `instructions` kept from its answer to the handshake, which
/// rmcp logs whole at INFO ("Service initialized as client"); the client does not use them.
const MAX_INSTRUCTIONS_BYTES: usize = 4 << 10;

/// A transport whose incoming messages are screened before rmcp sees them (see
/// [`MAX_UNASKED_BYTES`], [`MAX_INSTRUCTIONS_BYTES`]).
struct Screened<T> {
    inner: T,
}

impl<T> Transport<RoleClient> for Screened<T>
where
    T: Transport<RoleClient>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            if let Some(message) = screen(self.inner.receive().await?) {
                return Some(message);
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// `message`, or `None` when it is dropped; the handshake's answer loses what is past
/// [`MAX_INSTRUCTIONS_BYTES`] of its instructions.
fn screen(message: RxJsonRpcMessage<RoleClient>) -> Option<RxJsonRpcMessage<RoleClient>> {
    match message {
        JsonRpcMessage::Notification(notification) => {
            let bytes = crewline_core::json_len(&notification);
            if bytes > MAX_UNASKED_BYTES {
                tracing::debug!(
                    bytes,
                    "an oversized notification from the MCP server dropped"
                );
                return None;
            }
            Some(JsonRpcMessage::Notification(notification))
        }
        JsonRpcMessage::Request(request) => {
            let bytes = crewline_core::json_len(&request);
            if bytes > MAX_UNASKED_BYTES {
                tracing::debug!(bytes, "an oversized request from the MCP server dropped");
                return None;
            }
            Some(JsonRpcMessage::Request(request))
        }
        JsonRpcMessage::Response(mut response) => {
            if let ServerResult::InitializeResult(result) = &mut response.result
                && let Some(instructions) = &mut result.instructions
                && instructions.len() > MAX_INSTRUCTIONS_BYTES
            {
                let end = crewline_core::prefix(instructions, MAX_INSTRUCTIONS_BYTES).len();
                instructions.truncate(end);
            }
            Some(JsonRpcMessage::Response(response))
        }
        other => Some(other),
    }
}

/// Runs the MCP client handshake over any transport rmcp accepts (HTTP, a child process, a
/// duplex), its incoming messages screened; every constructor goes through it so they fail
/// alike.
async fn handshake<T, E, A>(transport: T) -> Result<RunningService<RoleClient, ()>, McpError>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let transport = Screened {
        inner: transport.into_transport(),
    };
    let service = tokio::time::timeout(ANSWER_TIMEOUT, ().serve(transport))
        .await
        .map_err(|_| {
            McpError::Refused(Refusal::HandshakeTimeout {
                after: ANSWER_TIMEOUT,
            })
        })?
        .map_err(|error| McpError::Session(Box::new(error)))?;
    // rmcp keeps list answers (up to 512 of them, each up to 16 MiB) for reuse; the client
    // lists once per `tools()` and keeps what it took, so the server could only fill it.
    service
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    Ok(service)
}
