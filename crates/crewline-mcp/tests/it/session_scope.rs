//! Each MCP session has a session scope of its own: a cached result one MCP client caused is
//! never served to another client, nor to the crew's calls over the same registry.

use crate::common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline::{
    tool::{Exports, SessionScope, Tool, ToolError, ToolPolicy, ToolRegistry},
    types::ToolCall,
};
use crewline_mcp::McpServer;
use serde_json::{Value, json};

use common::call_tool;

/// The caller's account summary: cached for a minute, counting its runs.
struct Summary(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Summary {
    fn name(&self) -> &str {
        "account_summary"
    }
    fn description(&self) -> &str {
        "The caller's account summary."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new()
            .cache_ttl(Duration::from_secs(60))
            .exports(Exports::all())
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        Ok(json!({"run": self.0.fetch_add(1, Ordering::SeqCst) + 1}))
    }
}

fn run_of(result: &rmcp::model::CallToolResult) -> Value {
    let text = &result.content[0].as_text().expect("text content").text;
    serde_json::from_str::<Value>(text).expect("JSON output")["run"].clone()
}

#[tokio::test]
async fn mcp_sessions_and_crew_calls_never_share_cached_results() {
    let runs = Arc::new(AtomicUsize::new(0));
    // The process-wide default executor, which every registry gets unless told otherwise.
    let mut tools = ToolRegistry::new();
    tools
        .register(Summary(Arc::clone(&runs)))
        .expect("registers");
    let server = McpServer::new(&tools).expect("exports to MCP");

    // A crew call caches its result first, in its own session.
    let crew_call = ToolCall::new("call_0", "account_summary", "{}");
    let context = tools.context().with_scope(SessionScope::new());
    let crew = tools.execute_one(&crew_call, &context).await;
    assert_eq!(crew.result.content(), r#"{"run":1}"#);

    let first = common::rmcp_client(server.clone()).await;
    let second = common::rmcp_client(server).await;
    assert_eq!(
        run_of(&call_tool(&first, "account_summary", json!({})).await),
        2
    );
    assert_eq!(
        run_of(&call_tool(&second, "account_summary", json!({})).await),
        3
    );
    // Each session is still served its own cached result.
    assert_eq!(
        run_of(&call_tool(&first, "account_summary", json!({})).await),
        2
    );
    let crew = tools.execute_one(&crew_call, &context).await;
    assert_eq!(crew.result.content(), r#"{"run":1}"#);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}
