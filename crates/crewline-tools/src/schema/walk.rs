//! The walk over a schema shared by both views: `$ref`s inlined (recursion unrolled, a budget
//! of expansions, a depth cut), subschemas rewritten in place, and properties that are not
//! required made nullable. What differs between the views is in [`super::strict`] and
//! [`super::lenient`].

use serde_json::{Map, Value, json};

use super::{
    MAX_DEPTH, MAX_EXPANSIONS, Mode, RECURSION_UNROLL, lenient::NULL_MEANS_ABSENT, strict,
};

/// One normalisation run over one root schema.
pub(super) struct Normalizer<'r> {
    /// The document `$ref`s point into.
    pub(super) root: &'r Value,
    pub(super) mode: Mode,
    /// The references being expanded along the current path, innermost last.
    pub(super) expanding: Vec<String>,
    /// References expanded so far, against [`MAX_EXPANSIONS`].
    pub(super) expansions: usize,
    pub(super) unresolved: Vec<String>,
}

impl Normalizer<'_> {
    /// The normalised form of one (sub)schema.
    pub(super) fn schema(&mut self, node: &Value, depth: usize) -> Value {
        let Value::Object(source) = node else {
            // Boolean schemas are already as simple as it gets; anything else is not a schema
            // and is left for the validator to reject.
            return node.clone();
        };
        if depth > MAX_DEPTH {
            return permissive(source);
        }

        // The referenced (or single `allOf`) schema is the base; the node's own keywords, such
        // as the description schemars attaches next to a `$ref`, override it.
        let mut out = Map::new();
        if let Some(Value::String(reference)) = source.get("$ref")
            && let Value::Object(target) = self.reference(reference, depth)
        {
            out = target;
        }
        let single_all_of = match source.get("allOf") {
            Some(Value::Array(all)) if all.len() == 1 => all.first(),
            _ => None,
        };
        if let Some(only) = single_all_of
            && let Value::Object(inner) = self.schema(only, depth + 1)
        {
            out.extend(inner);
        }

        for (keyword, value) in source {
            let rewritten = match keyword.as_str() {
                "$ref" | "$schema" | "$id" | "$comment" | "$defs" | "definitions" | "title" => {
                    continue;
                }
                "allOf" if single_all_of.is_some() => continue,
                "properties" | "patternProperties" | "dependentSchemas" => {
                    self.schema_map(value, depth)
                }
                "anyOf" | "oneOf" | "allOf" | "prefixItems" => self.schema_list(value, depth),
                "items" if value.is_array() => self.schema_list(value, depth),
                "items"
                | "additionalProperties"
                | "additionalItems"
                | "not"
                | "if"
                | "then"
                | "else"
                | "contains"
                | "propertyNames"
                | "unevaluatedProperties"
                | "unevaluatedItems"
                | "contentSchema" => self.schema(value, depth + 1),
                _ => value.clone(),
            };
            out.insert(keyword.clone(), rewritten);
        }

        self.finish(&mut out);
        Value::Object(out)
    }

    /// A map of property name → schema.
    fn schema_map(&mut self, value: &Value, depth: usize) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(name, schema)| (name.clone(), self.schema(schema, depth + 1)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// A list of schemas.
    fn schema_list(&mut self, value: &Value, depth: usize) -> Value {
        match value {
            Value::Array(list) => Value::Array(
                list.iter()
                    .map(|schema| self.schema(schema, depth + 1))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// The normalised target of `reference`, or `{}` when it is recursive past the unroll
    /// limit, over the expansion budget, or cannot be resolved.
    fn reference(&mut self, reference: &str, depth: usize) -> Value {
        let repeats = self.expanding.iter().filter(|r| *r == reference).count();
        if repeats >= RECURSION_UNROLL || self.expansions >= MAX_EXPANSIONS {
            return json!({});
        }
        let Some(target) = resolve(self.root, reference) else {
            self.unresolved.push(reference.to_owned());
            return json!({});
        };
        self.expansions += 1;
        self.expanding.push(reference.to_owned());
        let expanded = self.schema(target, depth + 1);
        self.expanding.pop();
        expanded
    }

    /// The rewrites that look at a node as a whole, once its subschemas are normalised.
    ///
    /// Every step is idempotent, since a node built on a `$ref` target passes through twice.
    fn finish(&self, node: &mut Map<String, Value>) {
        let numeric =
            (has_type(node, "integer") || has_type(node, "number")) && !has_type(node, "string");
        let noisy_format = node
            .get("format")
            .and_then(Value::as_str)
            .is_some_and(|format| numeric || is_numeric_format(format));
        if noisy_format {
            node.remove("format");
        }

        if self.mode == Mode::Strict {
            strict::rewrite_keywords(node);
        }

        let required = node_required(node).unwrap_or_default();
        let Some(Value::Object(properties)) = node.get_mut("properties") else {
            return;
        };
        for (name, property) in properties.iter_mut() {
            if !required.contains(name) {
                let taken = std::mem::take(property);
                *property = make_nullable(taken, self.mode);
            }
        }
        if self.mode == Mode::Strict {
            let all: Vec<Value> = properties.keys().cloned().map(Value::String).collect();
            strict::close_object(node, all);
        }
    }
}

/// The `required` list of an object schema, if it has one.
fn node_required(node: &Map<String, Value>) -> Option<Vec<String>> {
    let list = node.get("required")?.as_array()?;
    Some(
        list.iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
    )
}

/// Whether `format` is one of the number formats schemars writes (`int32`, `uint8`, `double`).
pub(super) fn is_numeric_format(format: &str) -> bool {
    let digits = format
        .strip_prefix("uint")
        .or_else(|| format.strip_prefix("int"));
    match digits {
        Some(rest) => rest.chars().all(|c| c.is_ascii_digit()),
        None => matches!(format, "float" | "double"),
    }
}

/// Whether the node's `type` is or includes `wanted`.
pub(super) fn has_type(node: &Map<String, Value>, wanted: &str) -> bool {
    match node.get("type") {
        Some(Value::String(t)) => t == wanted,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == wanted),
        _ => false,
    }
}

/// What a subschema is replaced by when it cannot be expanded: it accepts anything, and keeps
/// the description so the model still knows what goes there.
fn permissive(source: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    if let Some(description) = source.get("description") {
        out.insert("description".to_owned(), description.clone());
    }
    Value::Object(out)
}

/// The schema `reference` points to in `root`: `#` or a local JSON pointer (`#/$defs/Name`).
fn resolve<'r>(root: &'r Value, reference: &str) -> Option<&'r Value> {
    let fragment = reference.strip_prefix('#')?;
    if fragment.is_empty() {
        return Some(root);
    }
    if !fragment.starts_with('/') {
        // A named anchor (`#foo`); schemars never writes them.
        return None;
    }
    // The fragment is percent-encoded (schemars escapes names such as `Wrapper<T>`).
    let pointer = percent_encoding::percent_decode_str(fragment)
        .decode_utf8()
        .ok()?;
    root.pointer(&pointer)
}

/// Whether `schema` already accepts `null`.
fn is_nullable(schema: &Value) -> bool {
    let Value::Object(node) = schema else {
        return schema == &Value::Bool(true);
    };
    let branch_nullable = |keyword: &str| match node.get(keyword) {
        Some(Value::Array(branches)) => Some(branches.iter().any(is_nullable)),
        _ => None,
    };
    if node.get("type").is_some() && !has_type(node, "null") {
        return false;
    }
    if let Some(Value::Array(values)) = node.get("enum")
        && !values.iter().any(Value::is_null)
    {
        return false;
    }
    if node.get("const").is_some_and(|c| !c.is_null()) {
        return false;
    }
    if branch_nullable("anyOf") == Some(false) || branch_nullable("oneOf") == Some(false) {
        return false;
    }
    if let Some(Value::Array(all)) = node.get("allOf")
        && !all.iter().all(is_nullable)
    {
        return false;
    }
    // `not` and conditionals could reject null; treat them as not nullable, which at worst
    // wraps an already nullable schema once more.
    !node.contains_key("not") && !node.contains_key("if")
}

/// `schema` made to accept `null` as well, for a property that was not required.
///
/// In the lenient view the result is marked with [`NULL_MEANS_ABSENT`], so the `null` can be
/// taken out again before the tool sees it.
fn make_nullable(schema: Value, mode: Mode) -> Value {
    if is_nullable(&schema) {
        return schema;
    }
    let Value::Object(mut node) = schema else {
        // `false`: the property may never appear; leave it so.
        return schema;
    };
    let wrap = node.contains_key("allOf") || node.contains_key("not") || node.contains_key("if");
    if wrap {
        let description = node.remove("description");
        let mut wrapper = Map::new();
        if let Some(description) = description {
            wrapper.insert("description".to_owned(), description);
        }
        wrapper.insert(
            "anyOf".to_owned(),
            json!([Value::Object(node), {"type": "null"}]),
        );
        node = wrapper;
    } else {
        match node.get_mut("type") {
            Some(Value::String(t)) => {
                let single = std::mem::take(t);
                node.insert("type".to_owned(), json!([single, "null"]));
            }
            Some(Value::Array(types)) if !types.iter().any(|t| t == "null") => {
                types.push(json!("null"));
            }
            _ => {}
        }
        if let Some(constant) = node.remove("const") {
            node.insert("enum".to_owned(), Value::Array(vec![constant]));
        }
        if let Some(Value::Array(values)) = node.get_mut("enum")
            && !values.iter().any(Value::is_null)
        {
            values.push(Value::Null);
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = node.get_mut(keyword)
                && !branches.iter().any(is_nullable)
            {
                branches.push(json!({"type": "null"}));
            }
        }
    }
    if mode == Mode::Lenient {
        node.insert(NULL_MEANS_ABSENT.to_owned(), Value::Bool(true));
    }
    Value::Object(node)
}
