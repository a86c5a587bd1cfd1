//! What a remote MCP server can make the client hold: its tool list is taken up to a number of
//! tools and pages, each tool's definition up to a size, and refused whole past them (a
//! server whose cursor never ends is not followed forever).

use std::{sync::Arc, time::Duration};

use crewline::tool::ToolRegistry;
use crewline_mcp::{McpClient, McpError, Refusal};
use rmcp::{
    ErrorData, RoleServer, ServerHandler, ServiceExt,
    model::{
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool as McpTool,
    },
    service::RequestContext,
};
use serde_json::json;

/// Far longer than any listing here takes; a client that follows an endless list never ends.
const WAIT: Duration = Duration::from_secs(30);

/// A server whose tool list comes in pages of `per_page` tools, `pages` of them (`None`: a
/// cursor that never ends), each tool described by `description_bytes` bytes.
#[derive(Clone)]
struct Pages {
    per_page: usize,
    pages: Option<usize>,
    description_bytes: usize,
}

impl ServerHandler for Pages {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let page: usize = request
            .and_then(|request| request.cursor)
            .and_then(|cursor| cursor.parse().ok())
            .unwrap_or(0);
        let schema = json!({"type": "object", "properties": {}});
        let schema = Arc::new(schema.as_object().cloned().unwrap_or_default());
        let tools = (0..self.per_page)
            .map(|i| {
                McpTool::new(
                    format!("tool_{page}_{i}"),
                    "d".repeat(self.description_bytes),
                    Arc::clone(&schema),
                )
            })
            .collect();
        let mut result = ListToolsResult::with_all_items(tools);
        if self.pages.is_none_or(|pages| page + 1 < pages) {
            result.next_cursor = Some((page + 1).to_string());
        }
        Ok(result)
    }
}

/// A client of `server` over an in-process duplex (what stdio carries).
async fn connect(server: Pages) -> McpClient {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    tokio::time::timeout(WAIT, McpClient::connect_io(client_io))
        .await
        .expect("connects in time")
        .expect("connects")
}

/// Mounts the client's tools into a fresh registry, within [`WAIT`].
async fn mount(client: &McpClient) -> (Result<Vec<String>, McpError>, ToolRegistry) {
    let mut registry = ToolRegistry::new();
    let mounted = tokio::time::timeout(WAIT, client.mount(&mut registry))
        .await
        .expect("the listing ends instead of following the server forever");
    (mounted, registry)
}

#[tokio::test]
async fn a_tool_list_whose_cursor_never_ends_is_refused_after_the_page_limit() {
    // Empty pages, a next cursor on each: nothing grows but the wait.
    let client = connect(Pages {
        per_page: 0,
        pages: None,
        description_bytes: 0,
    })
    .await
    .with_max_tools(50);

    let (mounted, registry) = mount(&client).await;

    let error = mounted.expect_err("an endless list is refused");
    assert!(
        matches!(
            error,
            McpError::Refused(Refusal::TooManyPages { limit: 50 })
        ),
        "{error:?}"
    );
    assert!(registry.is_empty(), "nothing of the list is mounted");
}

#[tokio::test]
async fn a_server_listing_endless_tools_is_refused_at_the_default_limit() {
    let client = connect(Pages {
        per_page: 100,
        pages: None,
        description_bytes: 10,
    })
    .await;

    let (mounted, registry) = mount(&client).await;

    let error = mounted.expect_err("an endless list is refused");
    assert!(
        matches!(
            error,
            McpError::Refused(Refusal::TooManyTools { limit: 1024 })
        ),
        "{error:?}"
    );
    assert!(registry.is_empty(), "nothing of the list is mounted");
}

#[tokio::test]
async fn a_tool_with_a_megabyte_description_is_refused_by_name() {
    let client = connect(Pages {
        per_page: 1,
        pages: Some(1),
        description_bytes: 1 << 20,
    })
    .await;

    let (mounted, registry) = mount(&client).await;

    let error = mounted.expect_err("a huge definition is refused");
    let McpError::Refused(Refusal::ToolTooLarge { name, bytes, limit }) = &error else {
        panic!("not refused as too large: {error:?}")
    };
    assert_eq!((name.as_str(), *limit), ("tool_0_0", 65536));
    assert!(*bytes > 1 << 20, "{bytes}");
    // The error names its own layer; the cause says which limit.
    let cause = std::error::Error::source(&error).map(ToString::to_string);
    assert!(
        cause.is_some_and(|cause| cause.contains("`tool_0_0`")),
        "{error:?}"
    );
    assert!(registry.is_empty());
    // The session is not broken by the refusal: a client that takes larger definitions can
    // still list the same server.
    let roomy = client.with_max_tool_bytes(2 << 20);
    assert_eq!(roomy.tools().await.expect("listed").len(), 1);
}

#[tokio::test]
async fn a_list_of_many_pages_within_the_limits_mounts_whole() {
    let client = connect(Pages {
        per_page: 7,
        pages: Some(30),
        description_bytes: 2000,
    })
    .await;

    let (mounted, registry) = mount(&client).await;

    let names = mounted.expect("mounted");
    assert_eq!(names.len(), 210);
    assert_eq!(registry.len(), 210);
    assert!(registry.get("tool_29_6").is_some());
}

// Paused time: the 10 s pass at once (the duplex wakes nothing, so the clock jumps ahead).
#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_the_handshake_is_given_up_on() {
    // The other end of the duplex is held open and never written: a server that accepted the
    // connection and went silent.
    let (client_io, _silent_server) = tokio::io::duplex(64 * 1024);

    let outcome = tokio::time::timeout(WAIT, McpClient::connect_io(client_io))
        .await
        .expect("the client gives up on its own");

    let Err(error) = outcome else {
        panic!("a handshake with a silent server succeeded")
    };
    assert!(
        matches!(
            error,
            McpError::Refused(Refusal::HandshakeTimeout { after }) if after == Duration::from_secs(10)
        ),
        "{error:?}"
    );
}

/// A server that completes the handshake and then never answers a listing.
#[derive(Clone)]
struct Silent;

impl ServerHandler for Silent {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_a_listing_is_given_up_on() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = Silent.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = McpClient::connect_io(client_io)
        .await
        .expect("connects")
        .with_list_timeout(Duration::from_millis(200));

    let mut registry = ToolRegistry::new();
    let mounted = tokio::time::timeout(WAIT, client.mount(&mut registry))
        .await
        .expect("the client gives up on its own");

    let error = mounted.expect_err("a silent listing is an error");
    assert!(
        matches!(
            error,
            McpError::Refused(Refusal::ListTimeout { after }) if after == Duration::from_millis(200)
        ),
        "{error:?}"
    );
    assert!(registry.is_empty());
}
