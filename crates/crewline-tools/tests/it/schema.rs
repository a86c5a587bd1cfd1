//! Schema normalisation on what schemars really writes for argument types.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;

use crewline_tools::{normalize_schema, schema_for};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

/// A temperature unit.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Celsius,
    Fahrenheit,
}

/// A postal address.
#[derive(Serialize, JsonSchema)]
struct Address {
    /// Street and number.
    street: String,
    zip: Option<String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Shape {
    Circle { radius: f64 },
    Square { side: f64 },
}

#[derive(Serialize, JsonSchema)]
enum Payment {
    Cash,
    Card { number: String },
    Voucher(u32),
}

/// A tree of categories.
#[derive(Serialize, JsonSchema)]
struct Category {
    name: String,
    children: Vec<Category>,
}

/// Books a delivery.
#[derive(Serialize, JsonSchema)]
struct Args {
    /// Where to deliver.
    address: Address,
    /// Optional second address.
    billing: Option<Address>,
    stops: Vec<Address>,
    /// The unit for temperatures.
    unit: Option<Unit>,
    fallback_unit: Unit,
    shape: Shape,
    payment: Payment,
    tags: HashMap<String, u32>,
    small: u8,
    big: i64,
    ratio: f64,
    #[serde(default)]
    retries: u32,
    note: Option<String>,
    categories: Category,
}

fn sample() -> Args {
    let leaf = |name: &str| Category {
        name: name.to_owned(),
        children: vec![],
    };
    Args {
        address: Address {
            street: "1 Main St".into(),
            zip: None,
        },
        billing: None,
        stops: vec![Address {
            street: "2 Side St".into(),
            zip: Some("12345".into()),
        }],
        unit: Some(Unit::Celsius),
        fallback_unit: Unit::Fahrenheit,
        shape: Shape::Circle { radius: 1.5 },
        payment: Payment::Card {
            number: "4242".into(),
        },
        tags: HashMap::from([("fragile".to_owned(), 1)]),
        small: 255,
        big: -5,
        ratio: 0.25,
        retries: 0,
        note: None,
        categories: Category {
            name: "root".into(),
            children: vec![Category {
                name: "a".into(),
                children: vec![leaf("a1"), leaf("a2")],
            }],
        },
    }
}

fn normalized() -> Value {
    normalize_schema(schema_for::<Args>())
}

/// Every subschema of `schema`, with the JSON path it sits at.
fn walk<'a>(schema: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    out.push((path.clone(), schema));
    let Some(node) = schema.as_object() else {
        return;
    };
    for (keyword, value) in node {
        match keyword.as_str() {
            "properties" => {
                for (name, sub) in value.as_object().into_iter().flatten() {
                    walk(sub, format!("{path}.{name}"), out);
                }
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                for (i, sub) in value.as_array().into_iter().flatten().enumerate() {
                    walk(sub, format!("{path}.{keyword}[{i}]"), out);
                }
            }
            "items" | "additionalProperties" | "not" => {
                walk(value, format!("{path}.{keyword}"), out)
            }
            _ => {}
        }
    }
}

fn sorted(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

fn types(schema: &Value) -> Vec<String> {
    match &schema["type"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap().to_owned()).collect(),
        _ => vec![],
    }
}

#[test]
fn the_result_follows_the_strict_mode_rules_everywhere() {
    let schema = normalized();
    let text = schema.to_string();
    for banned in [
        "$ref",
        "$defs",
        "definitions",
        "$schema",
        "\"title\"",
        "oneOf",
    ] {
        assert!(!text.contains(banned), "{banned} left in {text}");
    }
    let mut nodes = Vec::new();
    walk(&schema, "$".into(), &mut nodes);
    for (path, node) in nodes {
        if let Some(format) = node.get("format") {
            panic!("number format {format} left at {path}");
        }
        if let Some(properties) = node.get("properties").and_then(Value::as_object) {
            assert_eq!(
                node["additionalProperties"],
                json!(false),
                "open object at {path}"
            );
            let mut keys: Vec<String> = properties.keys().cloned().collect();
            keys.sort();
            assert_eq!(
                sorted(&node["required"]),
                keys,
                "not all required at {path}"
            );
        }
        if let Some(default) = node.get("default") {
            panic!("default {default} left at {path}");
        }
    }
    assert_eq!(schema["type"], "object");
}

#[test]
fn a_value_serde_writes_matches_the_strict_schema() {
    // Strict mode makes the model send every property; serde does the same (None as null).
    let schema = normalized();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let instance = serde_json::to_value(sample()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn doc_comments_become_descriptions() {
    let schema = normalized();
    assert_eq!(schema["description"], "Books a delivery.");
    let p = &schema["properties"];
    assert_eq!(p["address"]["description"], "Where to deliver.");
    assert_eq!(
        p["address"]["properties"]["street"]["description"],
        "Street and number."
    );
    assert_eq!(p["unit"]["description"], "The unit for temperatures.");
    assert_eq!(p["fallback_unit"]["description"], "A temperature unit.");
}

#[test]
fn unit_enums_become_string_enums_and_options_get_one_null() {
    let p = &normalized()["properties"];
    assert_eq!(p["fallback_unit"]["type"], "string");
    assert_eq!(p["fallback_unit"]["enum"], json!(["celsius", "fahrenheit"]));

    // Option<Unit>: schemars' own null branch, not a second one.
    let branches = p["unit"]["anyOf"].as_array().unwrap();
    let nulls = branches.iter().filter(|b| b["type"] == "null").count();
    assert_eq!(nulls, 1, "{branches:?}");
    assert!(
        branches
            .iter()
            .any(|b| b["enum"] == json!(["celsius", "fahrenheit"]))
    );

    // Option<String>: already `["string", "null"]`.
    assert_eq!(p["note"]["type"], json!(["string", "null"]));
}

#[test]
fn tagged_enums_become_any_of_closed_objects() {
    let p = &normalized()["properties"];
    let shapes = p["shape"]["anyOf"].as_array().unwrap();
    assert_eq!(shapes.len(), 2);
    for shape in shapes {
        assert_eq!(shape["type"], "object");
        assert_eq!(shape["additionalProperties"], json!(false));
    }
    assert_eq!(shapes[0]["properties"]["kind"]["enum"], json!(["circle"]));

    // Externally tagged: a unit variant as a string, the others as one-key objects.
    let payments = p["payment"]["anyOf"].as_array().unwrap();
    assert_eq!(payments.len(), 3);
    assert!(payments.iter().any(|b| b["enum"] == json!(["Cash"])));
    assert!(
        payments
            .iter()
            .any(|b| b["properties"]["Card"]["properties"]["number"]["type"] == "string")
    );
}

#[test]
fn nested_structs_and_lists_of_structs_are_inlined() {
    let p = &normalized()["properties"];
    assert_eq!(p["address"]["type"], "object");
    assert_eq!(
        p["address"]["properties"]["zip"]["type"],
        json!(["string", "null"])
    );
    assert_eq!(p["stops"]["type"], "array");
    assert_eq!(
        p["stops"]["items"]["properties"]["street"]["type"],
        "string"
    );
    let billing = p["billing"]["anyOf"].as_array().unwrap();
    assert_eq!(billing[0]["properties"]["street"]["type"], "string");
    assert_eq!(billing[1], json!({"type": "null"}));
}

#[test]
fn maps_keep_their_value_schema() {
    // Strict mode cannot express a map; closing it would make it useless everywhere else.
    let tags = &normalized()["properties"]["tags"];
    assert_eq!(tags["type"], "object");
    assert_eq!(
        tags["additionalProperties"],
        json!({"type": "integer", "minimum": 0})
    );
    assert!(tags.get("properties").is_none());
}

#[test]
fn numbers_lose_their_format_but_keep_their_bounds() {
    let p = &normalized()["properties"];
    assert_eq!(
        p["small"],
        json!({"type": "integer", "minimum": 0, "maximum": 255})
    );
    assert_eq!(p["big"], json!({"type": "integer"}));
    assert_eq!(p["ratio"], json!({"type": "number"}));
}

#[test]
fn a_serde_default_field_is_required_nullable_and_describes_its_default() {
    let retries = &normalized()["properties"]["retries"];
    assert_eq!(types(retries), ["integer", "null"]);
    assert_eq!(retries["description"], "Defaults to 0.");
}

#[test]
fn a_recursive_type_is_unrolled_and_ends_in_a_permissive_schema() {
    let categories = &normalized()["properties"]["categories"];
    assert_eq!(categories["description"], "A tree of categories.");
    let inner = &categories["properties"]["children"]["items"];
    assert_eq!(inner["properties"]["name"]["type"], "string");
    assert_eq!(inner["properties"]["children"]["items"], json!({}));
}

#[test]
fn tools_without_arguments_get_an_empty_closed_object() {
    #[derive(JsonSchema)]
    struct NoArgs {}
    #[derive(JsonSchema)]
    struct UnitArgs;
    let empty = json!({
        "type": "object", "properties": {}, "required": [], "additionalProperties": false
    });
    assert_eq!(normalize_schema(schema_for::<NoArgs>()), empty);
    assert_eq!(normalize_schema(schema_for::<UnitArgs>()), empty);
    assert_eq!(normalize_schema(schema_for::<()>()), empty);
}

#[test]
fn normalising_twice_changes_nothing() {
    let once = normalized();
    assert_eq!(normalize_schema(once.clone()), once);
}
