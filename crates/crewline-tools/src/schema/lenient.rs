//! The lenient view's side: arguments are validated against the author's own `required` list,
//! and the `null`s a model sends for optional arguments (which the strict view made nullable)
//! are taken out again before the tool sees them.

use serde_json::Value;

/// Marks, in the lenient view, a property made nullable by the normaliser (not by its author).
pub(crate) const NULL_MEANS_ABSENT: &str = "x-crewline-null-means-absent";

/// Removes, in place, every `null` the model sent for a property that only the normaliser made
/// nullable, so a field with a serde default gets its default rather than a type error.
///
/// `schema` is the lenient view. Branches of `anyOf`/`oneOf` are followed only when exactly one
/// of them can hold the value (`Option<Struct>`), to avoid guessing between enum variants.
pub(crate) fn strip_absent_nulls(schema: &Value, instance: &mut Value) {
    let Value::Object(schema) = schema else {
        return;
    };
    match instance {
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            if let Some(properties) = properties {
                fields.retain(|name, value| {
                    !(value.is_null()
                        && properties
                            .get(name)
                            .is_some_and(|p| p.get(NULL_MEANS_ABSENT) == Some(&Value::Bool(true))))
                });
            }
            let additional = schema.get("additionalProperties");
            for (name, value) in fields.iter_mut() {
                match properties.and_then(|p| p.get(name)) {
                    Some(property) => strip_absent_nulls(property, value),
                    None => {
                        if let Some(additional) = additional {
                            strip_absent_nulls(additional, value);
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items.iter_mut() {
                    strip_absent_nulls(item_schema, item);
                }
            }
        }
        _ => return,
    }
    let kind = if instance.is_object() {
        "object"
    } else {
        "array"
    };
    for keyword in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(keyword) {
            let mut fitting = branches.iter().filter(|b| may_be(b, kind));
            if let (Some(only), None) = (fitting.next(), fitting.next()) {
                strip_absent_nulls(only, instance);
            }
        }
    }
}

/// Whether `schema` is meant for values of JSON type `kind` (`"object"` or `"array"`).
fn may_be(schema: &Value, kind: &str) -> bool {
    let Value::Object(schema) = schema else {
        return false;
    };
    match schema.get("type") {
        Some(Value::String(t)) => t == kind,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == kind),
        _ => match kind {
            "object" => schema.contains_key("properties"),
            _ => schema.contains_key("items"),
        },
    }
}
