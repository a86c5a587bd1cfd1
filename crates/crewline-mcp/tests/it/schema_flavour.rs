//! The smolagents schema flavour: one test per row of the mapping table, and the listings a
//! server gives in each flavour.

use crate::common;

use std::sync::Arc;

use crewline::{prelude::function_tool, tool::ToolRegistry, tool::executor::ledger::MemoryLedger};
use crewline_mcp::{
    McpError, McpServer, SchemaFlavour,
    flavour::{OUTPUT_TYPE_META_KEY, smolagents_input, smolagents_inputs, smolagents_output_type},
};
use serde_json::{Value, json};

#[test]
fn plain_types_stay_plain() {
    for ty in ["string", "integer", "number", "boolean", "array", "object"] {
        let input = smolagents_input(&json!({"type": ty, "description": "d"}), false);
        assert_eq!(input, json!({"type": ty, "description": "d"}), "{ty}");
    }
}

#[test]
fn optional_inputs_are_nullable_and_required_ones_are_not() {
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    });
    let inputs = smolagents_inputs(&schema, &schema);
    assert_eq!(inputs["city"].get("nullable"), None);
    assert_eq!(inputs["days"]["nullable"], true);
    assert_eq!(inputs["days"]["type"], "integer");
}

#[test]
fn a_nullable_type_list_is_the_type_and_nullable() {
    let input = smolagents_input(&json!({"type": ["string", "null"]}), true);
    assert_eq!(input["type"], "string");
    assert_eq!(input["nullable"], true);
    // Accepting null makes it nullable even when the author listed it as required.
    assert_eq!(
        smolagents_input(&json!({"type": ["null", "integer"]}), false)["nullable"],
        true
    );
}

#[test]
fn an_option_any_of_is_the_inner_type() {
    let input = smolagents_input(
        &json!({"anyOf": [{"type": "number"}, {"type": "null"}], "description": "d"}),
        true,
    );
    assert_eq!(
        input,
        json!({"type": "number", "description": "d", "nullable": true})
    );
}

#[test]
fn a_type_list_union_is_a_list_of_types() {
    let input = smolagents_input(&json!({"type": ["string", "integer"]}), false);
    assert_eq!(input["type"], json!(["string", "integer"]));
}

#[test]
fn an_any_of_union_is_a_list_of_types() {
    let input = smolagents_input(
        &json!({"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}),
        true,
    );
    assert_eq!(input["type"], json!(["string", "integer"]));
    assert_eq!(input["nullable"], true);
}

#[test]
fn a_lone_null_type_stays_null() {
    let input = smolagents_input(&json!({"type": "null"}), false);
    assert_eq!(input["type"], "null");
    assert_eq!(input["nullable"], true);
}

#[test]
fn anything_else_is_any() {
    for schema in [
        json!({}),
        json!({"enum": ["a", "b"]}),
        json!({"anyOf": [{"type": "string"}, {"properties": {}}]}),
        json!({"type": "date"}),
        json!({"type": 3}),
    ] {
        assert_eq!(smolagents_input(&schema, false)["type"], "any", "{schema}");
    }
}

#[test]
fn the_description_is_kept_or_empty() {
    assert_eq!(
        smolagents_input(&json!({"type": "string", "description": "The city"}), false)["description"],
        "The city"
    );
    assert_eq!(
        smolagents_input(&json!({"type": "string"}), false)["description"],
        ""
    );
}

#[test]
fn enum_values_are_kept_without_null() {
    let input = smolagents_input(
        &json!({"type": ["string", "null"], "enum": ["c", "f", null]}),
        true,
    );
    assert_eq!(input["type"], "string");
    assert_eq!(input["enum"], json!(["c", "f"]));
}

#[test]
fn the_output_type_comes_from_the_result_schema() {
    assert_eq!(smolagents_output_type(None), "any");
    assert_eq!(
        smolagents_output_type(Some(&json!({"type": "object"}))),
        "object"
    );
    assert_eq!(
        smolagents_output_type(Some(&json!({"type": ["integer", "null"]}))),
        "integer"
    );
    assert_eq!(
        smolagents_output_type(Some(
            &json!({"anyOf": [{"type": "string"}, {"type": "null"}]})
        )),
        "string"
    );
    // smolagents takes one output type: a union is `any`, and so is anything unknown.
    assert_eq!(
        smolagents_output_type(Some(&json!({"type": ["string", "integer"]}))),
        "any"
    );
    assert_eq!(
        smolagents_output_type(Some(&json!({"$ref": "#/$defs/X"}))),
        "any"
    );
}

fn listed(server: &McpServer, name: &str) -> (Value, Value) {
    let tool = server
        .tools()
        .iter()
        .find(|tool| tool.name == name)
        .expect("the tool is listed");
    let schema = Value::Object((*tool.input_schema).clone());
    let meta = tool
        .meta
        .as_ref()
        .map_or(Value::Null, |meta| Value::Object(meta.0.clone()));
    (schema, meta)
}

#[test]
fn the_smolagents_listing_has_plain_inputs_and_no_required() {
    let server = common::server(&Arc::new(MemoryLedger::new()), SchemaFlavour::Smolagents);
    let (schema, meta) = listed(&server, "book_table");
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "properties": {
                "restaurant": {"type": "string", "description": "The restaurant's name"},
                "party_size": {"type": "integer", "description": "How many people (1 to 12)"},
                "time": {"type": "string", "description": "When, e.g. 19:30", "nullable": true},
            },
        })
    );
    // `Result<Value, _>`: a result schema that says nothing about the type.
    assert_eq!(meta[OUTPUT_TYPE_META_KEY], "any");
    let (_, meta) = listed(&server, "slow_echo");
    assert_eq!(meta[OUTPUT_TYPE_META_KEY], "string");
}

#[test]
fn the_standard_listing_is_the_crew_schema_with_the_authors_required_list() {
    let ledger = Arc::new(MemoryLedger::new());
    let server = common::server(&ledger, SchemaFlavour::Standard);
    let registry = common::registry(&ledger);
    let crew_view = registry
        .definitions()
        .into_iter()
        .find(|d| d.name == "book_table")
        .expect("book_table");
    let (schema, _) = listed(&server, "book_table");
    // The crew's model must send every argument (strict mode); MCP clients may leave the
    // optional ones out. Everything else is the same schema.
    assert_eq!(
        crew_view.parameters["required"],
        json!(["restaurant", "party_size", "time"])
    );
    assert_eq!(schema["required"], json!(["restaurant", "party_size"]));
    let mut crew_view = crew_view.parameters;
    crew_view["required"] = json!(["restaurant", "party_size"]);
    assert_eq!(schema, crew_view);
}

#[test]
fn only_tools_exported_to_mcp_are_listed() {
    let server = common::server(&Arc::new(MemoryLedger::new()), SchemaFlavour::Standard);
    let names: Vec<&str> = server.tools().iter().map(|tool| &*tool.name).collect();
    assert_eq!(names, ["book_table", "slow_echo"]);
    assert!(server.registry().get("staff_note").is_none());
}

/// Look something up.
#[function_tool(name = "look-up", export = "crew,mcp")]
fn look_up() -> String {
    String::new()
}

#[test]
fn the_smolagents_flavour_refuses_names_python_cannot_call() {
    let mut tools = ToolRegistry::new();
    tools.register(LookUpTool).expect("a valid registry name");
    assert!(McpServer::new(&tools).is_ok());
    let error = McpServer::with_flavour(&tools, SchemaFlavour::Smolagents)
        .expect_err("`look-up` is not a Python identifier");
    assert!(matches!(error, McpError::Export(_)), "{error}");
    assert!(error.to_string().contains("look-up"), "{error}");
}
