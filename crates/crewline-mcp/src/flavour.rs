//! How a tool's argument schema is written into an MCP tool listing.
//!
//! [`SchemaFlavour::Standard`] lists the registry's own JSON Schema, the one the crew's model
//! sees. [`SchemaFlavour::Smolagents`] writes the shape smolagents' MCP adapter (`mcpadapt`)
//! can use: it keeps only `inputSchema.properties` (dropping `required`) and checks each
//! argument against a plain `type`, with `nullable: true` marking the ones that may be left
//! out. Each property is therefore rewritten as:
//!
//! | JSON Schema of the property                          | smolagents input                       |
//! |------------------------------------------------------|----------------------------------------|
//! | `{"type": "string"}` (also `integer`, `number`, `boolean`, `array`, `object`) | `{"type": "string"}` |
//! | not in the tool's `required` list                    | `nullable: true` added                 |
//! | `{"type": ["string", "null"]}` (`Option<T>`)          | `{"type": "string", "nullable": true}` |
//! | `{"anyOf": [{"type": "string"}, {"type": "null"}]}` (`Option<T>`) | `{"type": "string", "nullable": true}` |
//! | `{"type": ["string", "integer"]}` (a union)          | `{"type": ["string", "integer"]}`      |
//! | `{"anyOf": [{"type": "string"}, {"type": "integer"}]}` (a union) | `{"type": ["string", "integer"]}` |
//! | `{"type": "null"}` alone                             | `{"type": "null", "nullable": true}`   |
//! | anything else (`{}`, `enum` without `type`, a union with an untyped branch, unknown types) | `{"type": "any"}` |
//! | `description`                                        | kept (`""` when there is none)         |
//! | `enum` (`{"type": "string", "enum": ["a", "b"]}`)     | kept, without `null`: `{"type": "string", "enum": ["a", "b"]}` |
//!
//! The tool's output type (in the listing's `_meta`, key [`OUTPUT_TYPE_META_KEY`]) comes from
//! [`Tool::result_schema`](crewline_tools::Tool::result_schema) by the same rules, except that
//! a union is `any` (smolagents takes one output type); no result schema is `any`.

use serde_json::{Map, Value, json};

/// The `_meta` key of a listed tool that carries its smolagents output type.
pub const OUTPUT_TYPE_META_KEY: &str = "crewline/outputType";

/// The JSON types smolagents accepts as an input type (besides `any` and `null`).
const PLAIN_TYPES: [&str; 6] = ["string", "boolean", "integer", "number", "array", "object"];

/// How the MCP server writes its tools' argument schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SchemaFlavour {
    /// Standard JSON Schema: the registry's normalised schema, as the crew's model sees it
    /// (references inlined, objects closed), except that the top-level `required` list is the
    /// tool author's, so optional arguments may be left out.
    #[default]
    Standard,
    /// The plain shape smolagents' MCP adapter understands (see the [module docs](self)).
    Smolagents,
}

/// The smolagents inputs of a tool: one entry per property of `schema` (the normalised
/// argument schema), optional unless named in `required` of `authored` (the author's schema).
pub fn smolagents_inputs(schema: &Value, authored: &Value) -> Map<String, Value> {
    let required: Vec<&str> = authored
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Map::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let optional = !required.contains(&name.as_str());
            (name.clone(), smolagents_input(property, optional))
        })
        .collect()
}

/// One smolagents input from a property's schema; `optional` if the tool may be called
/// without it.
pub fn smolagents_input(property: &Value, optional: bool) -> Value {
    let types = json_types(property);
    let accepts_null = types
        .as_ref()
        .is_some_and(|types| types.iter().any(|t| t == "null"));
    let description = property
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut input = json!({"type": smolagents_type_of(types, true), "description": description});
    if let Some(Value::Array(values)) = property.get("enum") {
        let values: Vec<&Value> = values.iter().filter(|v| !v.is_null()).collect();
        input["enum"] = json!(values);
    }
    if optional || accepts_null {
        input["nullable"] = Value::Bool(true);
    }
    input
}

/// The smolagents output type of a tool whose result has `schema` (`any` if unknown).
pub fn smolagents_output_type(schema: Option<&Value>) -> &'static str {
    let Some(schema) = schema else {
        return "any";
    };
    match smolagents_type_of(json_types(schema), false) {
        Value::String(name) => PLAIN_TYPES
            .iter()
            .chain(&["null"])
            .find(|t| **t == name)
            .copied()
            .unwrap_or("any"),
        _ => "any",
    }
}

/// The smolagents `type` for a schema with JSON `types` (`None`: not expressible as types).
///
/// `null` is dropped when other types remain (`Option<T>` is `T`); unions stay a list only if
/// `allow_union`; anything unknown is `any`.
fn smolagents_type_of(types: Option<Vec<String>>, allow_union: bool) -> Value {
    let Some(types) = types else {
        return Value::from("any");
    };
    if types
        .iter()
        .any(|t| !PLAIN_TYPES.contains(&t.as_str()) && t != "null")
    {
        return Value::from("any");
    }
    let mut plain: Vec<String> = types.into_iter().filter(|t| t != "null").collect();
    match plain.len() {
        // Only `null` was left (the types were non-empty: `json_types` never returns empty).
        0 => Value::from("null"),
        1 => Value::from(plain.remove(0)),
        _ if allow_union => Value::from(plain),
        _ => Value::from("any"),
    }
}

/// The JSON types a schema accepts, from its `type` or its `anyOf`/`oneOf` branches;
/// `None` when that cannot be told.
fn json_types(schema: &Value) -> Option<Vec<String>> {
    let mut types: Vec<String> = Vec::new();
    match schema.get("type") {
        Some(Value::String(name)) => types.push(name.clone()),
        Some(Value::Array(names)) => {
            for name in names {
                types.push(name.as_str()?.to_owned());
            }
        }
        Some(_) => return None,
        None => {
            let branches = schema
                .get("anyOf")
                .or_else(|| schema.get("oneOf"))?
                .as_array()?;
            for branch in branches {
                types.extend(json_types(branch)?);
            }
        }
    }
    let mut unique: Vec<String> = Vec::with_capacity(types.len());
    for name in types {
        if !unique.contains(&name) {
            unique.push(name);
        }
    }
    (!unique.is_empty()).then_some(unique)
}

/// The MCP `inputSchema` of a tool in `flavour`: `schema` is the registry's normalised
/// schema, `authored` the tool's own.
pub(crate) fn input_schema(flavour: SchemaFlavour, schema: &Value, authored: &Value) -> Value {
    match flavour {
        SchemaFlavour::Standard => standard_schema(schema, authored),
        SchemaFlavour::Smolagents => json!({
            "type": "object",
            "properties": smolagents_inputs(schema, authored),
        }),
    }
}

/// The normalised `schema` with the author's top-level `required` list, so that MCP clients
/// (which, unlike OpenAI strict mode, need not send every property) may leave optional
/// arguments out. A schema whose author's view has no `properties` (a `$ref` root) keeps
/// the normalised list.
fn standard_schema(schema: &Value, authored: &Value) -> Value {
    let mut schema = schema.clone();
    if authored.get("properties").is_some()
        && let Some(properties) = schema.get("properties").and_then(Value::as_object)
    {
        let required: Vec<Value> = authored
            .get("required")
            .and_then(Value::as_array)
            .map(|names| {
                names
                    .iter()
                    .filter(|name| name.as_str().is_some_and(|n| properties.contains_key(n)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        schema["required"] = Value::Array(required);
    }
    schema
}
