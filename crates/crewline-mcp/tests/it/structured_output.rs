//! Tools with an object result schema are listed with an MCP `outputSchema` and answer with
//! `structuredContent` (and the same JSON as text); other tools, and every error, answer with
//! text only.

use crate::common;

use async_trait::async_trait;
use crewline::{
    prelude::function_tool,
    tool::{Exports, Tool, ToolError, ToolRegistry},
    types::ToolErrorKind,
};
use crewline_mcp::{McpClient, McpServer};
use rmcp::{RoleClient, model::CallToolResult, service::RunningService};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use common::call_tool as call;

/// A forecast.
#[derive(Debug, Serialize, JsonSchema)]
struct Forecast {
    city: String,
    celsius: f64,
    summary: Option<String>,
}

/// The forecast for a city.
///
/// # Arguments
/// * `city` - The city
#[function_tool(export = "crew,mcp")]
async fn forecast(city: String) -> Result<Forecast, ToolError> {
    if city == "Atlantis" {
        return Err(ToolError::new("no forecast for Atlantis"));
    }
    Ok(Forecast {
        city,
        celsius: 21.5,
        summary: None,
    })
}

/// Greets someone.
///
/// # Arguments
/// * `name` - Who
#[function_tool(export = "crew,mcp")]
fn greet(name: String) -> String {
    format!("hello {name}")
}

/// Temperatures, as a list (an array result schema).
#[function_tool(export = "crew,mcp")]
fn temperatures() -> Vec<f64> {
    vec![20.0, 21.5]
}

/// Declares an object result but returns something else.
struct Liar;

#[async_trait]
impl Tool for Liar {
    fn name(&self) -> &str {
        "liar"
    }
    fn description(&self) -> &str {
        "Says it returns a forecast."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn result_schema(&self) -> Option<Value> {
        json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        })
        .into()
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        Ok(json!({"town": "Paris"}))
    }
}

fn server() -> McpServer {
    // The hand-written `Liar` has no `export` of its own: the registry opts its tools in.
    let mut tools = ToolRegistry::new().with_default_exports(Exports::all());
    tools
        .register(ForecastTool)
        .expect("forecast registers")
        .register(GreetTool)
        .expect("greet registers")
        .register(TemperaturesTool)
        .expect("temperatures registers")
        .register(Liar)
        .expect("liar registers");
    McpServer::new(&tools).expect("the tools export to MCP")
}

async fn connect(server: &McpServer) -> RunningService<RoleClient, ()> {
    common::rmcp_client(server.clone()).await
}

fn text(result: &CallToolResult) -> Value {
    assert_eq!(result.content.len(), 1, "{result:?}");
    let text = &result.content[0].as_text().expect("text content").text;
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
}

#[tokio::test]
async fn only_object_result_schemas_are_listed_as_output_schemas() {
    let server = server();
    let listed = |name: &str| {
        server
            .tools()
            .iter()
            .find(|tool| tool.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is listed"))
    };
    let schema = listed("forecast")
        .output_schema
        .expect("forecast has an outputSchema");
    assert_eq!(schema["type"], "object");
    assert!(schema["properties"]["celsius"].is_object(), "{schema:?}");
    assert!(listed("liar").output_schema.is_some());
    assert_eq!(listed("greet").output_schema, None);
    assert_eq!(listed("temperatures").output_schema, None);

    // What a client sees over the wire.
    let client = connect(&server).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let forecast = tools
        .iter()
        .find(|tool| tool.name == "forecast")
        .expect("forecast is listed");
    assert_eq!(forecast.output_schema.as_deref(), Some(&*schema));
}

#[tokio::test]
async fn a_tool_with_an_output_schema_answers_with_structured_content_and_text() {
    let client = connect(&server()).await;
    let result = call(&client, "forecast", json!({"city": "Oslo"})).await;
    assert_eq!(result.is_error, Some(false));
    let expected = json!({"city": "Oslo", "celsius": 21.5, "summary": null});
    assert_eq!(result.structured_content, Some(expected.clone()));
    assert_eq!(text(&result), expected, "the text carries the same JSON");
}

#[tokio::test]
async fn tools_without_an_object_schema_answer_with_text_only() {
    let client = connect(&server()).await;
    let greeting = call(&client, "greet", json!({"name": "Ada"})).await;
    assert_eq!(greeting.structured_content, None);
    assert_eq!(text(&greeting), json!("hello Ada"));
    let list = call(&client, "temperatures", json!({})).await;
    assert_eq!(list.structured_content, None);
    assert_eq!(text(&list), json!([20.0, 21.5]));
}

#[tokio::test]
async fn errors_of_a_tool_with_an_output_schema_stay_text_errors() {
    let client = connect(&server()).await;
    let failed = call(&client, "forecast", json!({"city": "Atlantis"})).await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(failed.structured_content, None);
    assert_eq!(
        text(&failed),
        json!({"error": {"kind": "ToolError", "message": "no forecast for Atlantis"}})
    );
    let invalid = call(&client, "forecast", json!({"town": "Oslo"})).await;
    assert_eq!(invalid.is_error, Some(true));
    assert_eq!(invalid.structured_content, None);
    assert_eq!(text(&invalid)["error"]["kind"], "ToolArgsInvalid");
}

#[tokio::test]
async fn a_result_that_breaks_its_declared_schema_is_an_error_not_bad_structured_content() {
    let client = connect(&server()).await;
    let result = call(&client, "liar", json!({})).await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(result.structured_content, None);
    assert_eq!(text(&result)["error"]["kind"], "ToolError");
}

#[tokio::test]
async fn a_mounted_tool_keeps_its_result_schema_and_returns_the_structured_value() {
    let server = server();
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let serving = server.clone();
    tokio::spawn(async move { serving.serve_io(server_io).await });
    let client = McpClient::connect_io(client_io)
        .await
        .expect("the client connects");
    let mut registry = ToolRegistry::new();
    client.mount(&mut registry).await.expect("the tools mount");
    let mounted = registry.get("forecast").expect("forecast is mounted");
    assert_eq!(
        mounted.result_schema().expect("a result schema")["type"],
        "object"
    );
    let results: Vec<_> = registry
        .execute(
            &[crewline::types::ToolCall::new(
                "c1",
                "forecast",
                r#"{"city":"Oslo"}"#,
            )],
            crewline::tool::ExecuteOptions::new().sequential(),
        )
        .await
        .into_iter()
        .map(|run| run.result)
        .collect();
    assert!(!results[0].is_error(), "{}", results[0].content());
    let value: Value = serde_json::from_str(&results[0].content()).expect("JSON");
    assert_eq!(
        value,
        json!({"city": "Oslo", "celsius": 21.5, "summary": null})
    );
    assert_eq!(results[0].error_kind(), None::<ToolErrorKind>);
    drop(registry);
    client.close().await;
}
