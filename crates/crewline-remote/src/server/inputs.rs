//! A custom tool's `inputs` as a JSON Schema: Smooth's API documents a JSON Schema, while its
//! Python SDK documents (and its users write) a map of parameter name to that parameter's
//! schema (`{"city": {"type": "string", "description": "..."}}`). Both are accepted.

use serde_json::{Map, Value, json};

/// The keywords a JSON Schema's root may carry; a map with only these (and `properties`) is a
/// schema, not a map of parameters that happen to be called `required` or `description`.
const ROOT_KEYWORDS: [&str; 10] = [
    "$schema",
    "$defs",
    "definitions",
    "title",
    "description",
    "properties",
    "required",
    "additionalProperties",
    "examples",
    "$id",
];

/// The JSON types a parameter may be written as in short (`{"city": "string"}`).
const TYPE_NAMES: [&str; 7] = [
    "string", "number", "integer", "boolean", "object", "array", "null",
];

/// `inputs` as the JSON Schema of the arguments object, or why it is neither form.
///
/// - A JSON Schema (its `type` is a string or a list, or it has `properties` and only schema
///   keywords) is kept as is.
/// - `null` or `{}` is a tool without arguments.
/// - Otherwise it is a map of parameter name to schema (or to a type name, `"string"`): every
///   parameter is required unless its schema is `nullable` or has a `default`, since the
///   client's function takes each one as an argument and fails without it.
pub(crate) fn input_schema(inputs: &Value) -> Result<Value, String> {
    let map = match inputs {
        Value::Null => return Ok(json!({"type": "object", "properties": {}})),
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "`inputs` must be a JSON Schema ({{\"type\": \"object\", \"properties\": ...}}) \
                 or a map of parameter name to its schema ({{\"city\": {{\"type\": \"string\"}}}}), \
                 not {}",
                kind(other)
            ));
        }
    };
    if map.is_empty() {
        return Ok(json!({"type": "object", "properties": {}}));
    }
    let typed = match map.get("type") {
        Some(Value::String(_)) => true,
        Some(Value::Array(types)) => types.iter().all(Value::is_string),
        _ => false,
    };
    // `properties` whose values are all schemas, beside schema keywords only: a schema (a lone
    // parameter called `properties` would have `type` and `description` inside instead).
    let schema_keys_only = map
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|properties| properties.values().all(|p| p.is_object() || p.is_boolean()))
        && map.keys().all(|key| ROOT_KEYWORDS.contains(&key.as_str()));
    if typed || schema_keys_only {
        return Ok(inputs.clone());
    }
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, parameter) in map {
        let schema = match parameter {
            Value::Object(schema) => schema.clone(),
            Value::String(type_name) if TYPE_NAMES.contains(&type_name.as_str()) => {
                let mut schema = Map::new();
                schema.insert("type".to_owned(), parameter.clone());
                schema
            }
            other => {
                return Err(format!(
                    "`inputs.{name}` must be the parameter's schema ({{\"type\": \"string\", \
                     \"description\": ...}}) or a JSON type name, not {}",
                    kind(other)
                ));
            }
        };
        let optional =
            schema.get("nullable") == Some(&Value::Bool(true)) || schema.contains_key("default");
        if !optional {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name.clone(), Value::Object(schema));
    }
    Ok(json!({"type": "object", "properties": properties, "required": required}))
}

/// A value's JSON kind, for errors.
fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_schema_is_kept_as_is() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]});
        assert_eq!(input_schema(&schema).unwrap(), schema);
        let untyped = json!({"properties": {"city": {"type": "string"}}, "required": ["city"]});
        assert_eq!(input_schema(&untyped).unwrap(), untyped);
    }

    #[test]
    fn the_sdks_parameter_map_becomes_a_schema_with_every_plain_parameter_required() {
        let map = json!({
            "location": {"type": "string", "description": "The city"},
            "units": {"type": "string", "default": "celsius"},
            "note": {"type": "string", "nullable": true},
            "days": "integer",
        });
        assert_eq!(
            input_schema(&map).unwrap(),
            json!({"type": "object", "properties": {
                "location": {"type": "string", "description": "The city"},
                "units": {"type": "string", "default": "celsius"},
                "note": {"type": "string", "nullable": true},
                "days": {"type": "integer"},
            }, "required": ["location", "days"]})
        );
    }

    #[test]
    fn parameters_named_like_schema_keywords_are_parameters() {
        // `type` here is a parameter (its value is a schema), so this is a parameter map.
        let map = json!({"type": {"type": "string"}, "required": {"type": "boolean"}});
        let schema = input_schema(&map).unwrap();
        assert_eq!(schema["properties"]["type"], json!({"type": "string"}));
        assert_eq!(schema["required"], json!(["type", "required"]));
        let lone = input_schema(&json!({"properties": {"type": "string"}})).unwrap();
        assert_eq!(lone["properties"]["properties"], json!({"type": "string"}));
    }

    #[test]
    fn no_inputs_is_a_tool_without_arguments() {
        let empty = json!({"type": "object", "properties": {}});
        assert_eq!(input_schema(&Value::Null).unwrap(), empty);
        assert_eq!(input_schema(&json!({})).unwrap(), empty);
    }

    #[test]
    fn other_shapes_are_refused_by_name() {
        let error = input_schema(&json!(["city"])).unwrap_err();
        assert!(error.contains("an array"), "{error}");
        let error = input_schema(&json!({"city": 5})).unwrap_err();
        assert!(
            error.contains("`inputs.city`") && error.contains("the number 5"),
            "{error}"
        );
        let error = input_schema(&json!({"city": "text"})).unwrap_err();
        assert!(error.contains("the string \"text\""), "{error}");
    }
}
