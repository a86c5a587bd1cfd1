//! The strict view's rewrites: what OpenAI's strict mode (and the servers that copy it)
//! insists on, on top of the shared walk: no `oneOf`, no `const`, no `default`, every object
//! closed with every property required.

use serde_json::{Map, Value, json};

/// Rewrites the keywords strict mode rejects into ones it takes, with the same meaning.
pub(super) fn rewrite_keywords(node: &mut Map<String, Value>) {
    // Strict mode rejects `oneOf`; when a node has both, keep `oneOf` rather than lose
    // either (schemars never writes both).
    if !node.contains_key("anyOf")
        && let Some(one_of) = node.remove("oneOf")
    {
        node.insert("anyOf".to_owned(), one_of);
    }
    flatten_nested_any_of(node);
    if let Some(constant) = node.remove("const") {
        node.insert("enum".to_owned(), Value::Array(vec![constant]));
    }
    if let Some(default) = node.remove("default") {
        let text = node
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let description = describe_default(text, &default);
        node.insert("description".to_owned(), Value::String(description));
    }
}

/// Closes an object node: every one of its properties (`all`) required, no others allowed.
pub(super) fn close_object(node: &mut Map<String, Value>, all: Vec<Value>) {
    node.insert("required".to_owned(), Value::Array(all));
    node.insert("additionalProperties".to_owned(), Value::Bool(false));
    if !node.contains_key("type") && !node.contains_key("anyOf") {
        node.insert("type".to_owned(), json!("object"));
    }
}

/// `description` with the default appended (`"Unit. Defaults to \"celsius\"."`), in the
/// words `#[function_tool]` uses, unless the description already states it.
fn describe_default(description: &str, default: &Value) -> String {
    let description = description.trim_end();
    let encoded = default.to_string();
    if description.to_lowercase().contains("default") && description.contains(&encoded) {
        return description.to_owned();
    }
    let separator = match description.chars().last() {
        None => "",
        Some('.' | '!' | '?' | ':' | ';') => " ",
        Some(_) => ". ",
    };
    format!("{description}{separator}Defaults to {encoded}.")
}

/// `{"anyOf": [{"anyOf": [a, b]}, c]}` → `{"anyOf": [a, b, c]}` when the inner schema is only
/// an `anyOf` (what `Option<Enum>` becomes once `oneOf` is renamed): fewer levels, same meaning.
fn flatten_nested_any_of(node: &mut Map<String, Value>) {
    let Some(Value::Array(branches)) = node.get_mut("anyOf") else {
        return;
    };
    let pure_any_of = |b: &Value| {
        b.as_object().is_some_and(|m| {
            m.get("anyOf").is_some_and(Value::is_array)
                && m.keys().all(|k| k == "anyOf" || k == "description")
        })
    };
    if !branches.iter().any(pure_any_of) {
        return;
    }
    let mut flat = Vec::with_capacity(branches.len());
    for branch in std::mem::take(branches) {
        if pure_any_of(&branch) {
            if let Value::Object(mut inner) = branch
                && let Some(Value::Array(nested)) = inner.remove("anyOf")
            {
                flat.extend(nested);
            }
        } else {
            flat.push(branch);
        }
    }
    *branches = flat;
}
