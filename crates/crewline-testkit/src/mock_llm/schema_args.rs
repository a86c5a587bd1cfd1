//! Plausible tool arguments from a tool's JSON schema: what the mock sends when it calls the
//! crew's own tools (`crewline mock-llm --tool`), so that a call passes the crew's schema
//! validation whatever its tools are named and take.

use serde_json::{Map, Value, json};

/// How deep nested objects, arrays and `$ref`s are followed (a recursive schema ends here).
const MAX_DEPTH: usize = 8;

/// The name and arguments of a call to the first tool of an OpenAI chat request's `tools`
/// (`[{"type": "function", "function": {"name", "parameters"}}]`); `None` without tools.
pub fn first_tool_call(body: &Value) -> Option<(String, Value)> {
    let function = body.get("tools")?.as_array()?.first()?.get("function")?;
    let name = function.get("name")?.as_str()?.to_owned();
    let schema = function
        .get("parameters")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    Some((name, arguments_for_schema(&schema)))
}

/// A JSON answer for an OpenAI chat request that asks for one by a schema
/// (`response_format: {"type": "json_schema", "json_schema": {"schema": ...}}`); `None` for a
/// request that does not.
pub fn answer_for_response_format(body: &Value) -> Option<Value> {
    let format = body.get("response_format")?;
    if format.get("type")?.as_str()? != "json_schema" {
        return None;
    }
    let schema = format.get("json_schema")?.get("schema")?;
    Some(arguments_for_schema(schema))
}

/// A value that satisfies `schema`: every required property of an object, an enum's first
/// value, a plausible string for a property's name (a `city` or `location` gets "Paris").
pub fn arguments_for_schema(schema: &Value) -> Value {
    let value = value_for(schema, schema, "", 0);
    // Tool arguments are an object even when the schema says nothing.
    if value.is_object() { value } else { json!({}) }
}

fn value_for(schema: &Value, root: &Value, name: &str, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let Some(object) = schema.as_object() else {
        // `true` or a missing schema accepts anything.
        return json!("example");
    };
    if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
        return match resolve(root, reference) {
            Some(target) => value_for(target, root, name, depth + 1),
            None => Value::Null,
        };
    }
    if let Some(constant) = object.get("const") {
        return constant.clone();
    }
    if let Some(first) = object
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|values| values.iter().find(|v| !v.is_null()))
    {
        return first.clone();
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(choices) = object.get(key).and_then(Value::as_array) {
            // An `Option<T>` is `anyOf: [T, null]`: take the first branch that is not null.
            let branch = choices
                .iter()
                .find(|c| c.get("type").and_then(Value::as_str) != Some("null"))
                .or_else(|| choices.first());
            if let Some(branch) = branch {
                return value_for(branch, root, name, depth + 1);
            }
        }
    }
    if let Some(default) = object.get("default") {
        return default.clone();
    }
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        // `["string", "null"]`: the first type that is not null.
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| *k != "null")
            .unwrap_or("null"),
        _ if object.contains_key("properties") => "object",
        _ if object.contains_key("items") => "array",
        _ => "string",
    };
    match kind {
        "object" => object_for(object, root, depth),
        "array" => {
            let count = object
                .get("minItems")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .clamp(1, 4);
            let item = object.get("items").cloned().unwrap_or(Value::Bool(true));
            let singular = name.strip_suffix('s').unwrap_or(name);
            Value::Array(
                (0..count)
                    .map(|_| value_for(&item, root, singular, depth + 1))
                    .collect(),
            )
        }
        "integer" => json!(number_for(object).round() as i64),
        "number" => json!(number_for(object)),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => Value::String(string_for(object, name)),
    }
}

fn object_for(object: &Map<String, Value>, root: &Value, depth: usize) -> Value {
    let empty = Map::new();
    let properties = object
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required = object
        .get("required")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let fields = required
        .iter()
        .filter_map(Value::as_str)
        .map(|key| {
            let schema = properties.get(key).cloned().unwrap_or(Value::Bool(true));
            (key.to_owned(), value_for(&schema, root, key, depth + 1))
        })
        .collect();
    Value::Object(fields)
}

/// A number within the schema's bounds (1 when it has none).
fn number_for(object: &Map<String, Value>) -> f64 {
    let bound = |key: &str| object.get(key).and_then(Value::as_f64);
    let low = bound("minimum").or_else(|| bound("exclusiveMinimum").map(|m| m + 1.0));
    let high = bound("maximum").or_else(|| bound("exclusiveMaximum").map(|m| m - 1.0));
    match (low, high) {
        (Some(low), _) if low > 1.0 => low,
        (_, Some(high)) if high < 1.0 => high,
        _ => 1.0,
    }
}

/// A string a person might give for a property called `name`, in the schema's format.
fn string_for(object: &Map<String, Value>, name: &str) -> String {
    let format = object.get("format").and_then(Value::as_str).unwrap_or("");
    let name = name.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| name.contains(w));
    let text = match format {
        "date" => "2026-01-15",
        "date-time" => "2026-01-15T09:30:00Z",
        "time" => "09:30:00",
        "email" => "alex@example.com",
        "uri" | "url" => "https://example.com",
        "uuid" => "00000000-0000-4000-8000-000000000000",
        _ if has(&["city", "location", "place", "town", "destination"]) => "Paris",
        _ if has(&["country"]) => "France",
        _ if has(&["email"]) => "alex@example.com",
        _ if has(&["phone"]) => "+33123456789",
        _ if has(&["date", "day"]) => "2026-01-15",
        _ if has(&["time"]) => "09:30",
        _ if has(&["name"]) => "Alex",
        _ if has(&["currency"]) => "EUR",
        _ if has(&["language", "lang"]) => "en",
        _ if has(&["id", "number", "account", "reference"]) => "12345",
        _ if has(&["query", "question", "text", "search"]) => "the weather in Paris",
        _ => "example",
    };
    let mut text = text.to_owned();
    let min = object.get("minLength").and_then(Value::as_u64).unwrap_or(0);
    let min = usize::try_from(min).unwrap_or(usize::MAX).min(256);
    while text.chars().count() < min {
        text.push('x');
    }
    if let Some(max) = object
        .get("maxLength")
        .and_then(Value::as_u64)
        .and_then(|m| usize::try_from(m).ok())
    {
        text = text.chars().take(max).collect();
    }
    text
}

/// The schema a local `$ref` (`#/$defs/Name`, `#/definitions/Name`) points at.
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_city_or_a_location_is_paris_and_only_required_properties_are_sent() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "detailed": {"type": ["boolean", "null"]}
            },
            "required": ["city", "units", "days"]
        });
        assert_eq!(
            arguments_for_schema(&schema),
            json!({"city": "Paris", "units": "celsius", "days": 1})
        );
        let schema = json!({"type": "object", "properties": {"location": {"type": "string"}},
            "required": ["location"]});
        assert_eq!(arguments_for_schema(&schema), json!({"location": "Paris"}));
    }

    #[test]
    fn options_refs_arrays_and_bounds_are_followed() {
        // What schemars writes for `struct Args { stop: Stop, note: Option<String>, tags: Vec<String> }`.
        let schema = json!({
            "type": "object",
            "properties": {
                "stop": {"$ref": "#/$defs/Stop"},
                "note": {"anyOf": [{"type": "null"}, {"type": "string"}]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "amount": {"type": "number", "minimum": 10.5}
            },
            "required": ["stop", "note", "tags", "amount"],
            "$defs": {"Stop": {"type": "object", "properties": {"town": {"type": "string"}},
                "required": ["town"]}}
        });
        assert_eq!(
            arguments_for_schema(&schema),
            json!({"stop": {"town": "Paris"}, "note": "example", "tags": ["example", "example"],
                "amount": 10.5})
        );
    }

    #[test]
    fn the_first_tool_of_a_request_is_named_with_its_arguments() {
        let body = json!({"tools": [
            {"type": "function", "function": {"name": "book_table", "parameters": {
                "type": "object", "properties": {"date": {"type": "string", "format": "date"},
                "party_size": {"type": "integer"}}, "required": ["date", "party_size"]}}},
            {"type": "function", "function": {"name": "other"}}
        ]});
        assert_eq!(
            first_tool_call(&body),
            Some((
                "book_table".to_owned(),
                json!({"date": "2026-01-15", "party_size": 1})
            ))
        );
        assert_eq!(first_tool_call(&json!({"tools": []})), None);
        assert_eq!(first_tool_call(&json!({})), None);
    }

    #[test]
    fn a_recursive_schema_ends() {
        let schema = json!({"type": "object", "properties": {"next": {"$ref": "#"}},
            "required": ["next"]});
        let value = arguments_for_schema(&schema);
        assert!(value.is_object());
    }
}
