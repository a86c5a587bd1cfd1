//! JSON Schema generation and normalisation.
//!
//! Models are told a tool's arguments as a JSON Schema, and the servers that carry them accept
//! only a subset of it: OpenAI's strict mode wants every `$ref` gone, every object closed and
//! every property required; vLLM, Ollama, Groq and Gemini's OpenAI endpoint choke on `$defs`,
//! `oneOf` or integer `format`s. [`normalize_schema`] writes the one schema all of them take.
//!
//! The registry also builds a second, *lenient* view of the same schema to validate the model's
//! arguments against: references inlined the same way, but the author's own `required` list
//! kept, so a model that leaves out an optional argument (or, in strict mode, sends `null` for
//! it) is not rejected.

use serde_json::{Map, Value, json};

/// How deep subschemas may nest before the rest is replaced by a permissive `{}`.
///
/// Real argument types are a handful of levels deep; the cap only guards the stack against
/// hand-written pathological schemas.
const MAX_DEPTH: usize = 64;

/// How many times one definition may be expanded along one path of the schema.
///
/// A recursive type (a tree of nodes) cannot be inlined completely, so its self-reference is
/// unrolled this many times and then becomes a permissive `{}`.
const RECURSION_UNROLL: usize = 2;

/// How many `$ref`s one schema may expand in total, so that a schema whose definitions refer to
/// each other many times over cannot blow up exponentially.
const MAX_EXPANSIONS: usize = 1_000;

/// Marks, in the lenient view, a property the normaliser made nullable: `null` there means
/// "not given" and is removed before the tool sees the arguments.
pub(crate) const NULL_MEANS_ABSENT: &str = "x-crewline-null-means-absent";

/// The JSON Schema of `T`, as schemars writes it (JSON Schema 2020-12, default settings).
pub fn schema_for<T: schemars::JsonSchema>() -> Value {
    schemars::SchemaGenerator::default()
        .into_root_schema_for::<T>()
        .to_value()
}

/// `schema` rewritten so OpenAI strict mode and the common compatible servers accept it.
///
/// - every `$ref` (`#/$defs/..`, `#/definitions/..`, any local JSON pointer, `#`) is inlined;
///   a recursive type is unrolled twice and its deeper self-references become `{}`;
///   a reference that cannot be resolved (remote, anchors) is left as `{}`;
/// - `$defs`, `definitions`, `$schema`, `$id`, `$comment` and `title` are dropped, and so is
///   the `format` of numbers (`int32`, `uint8`, `double`...); `minimum`/`maximum` stay, since
///   strict mode supports them and they carry real bounds (`u8` is at most 255);
/// - a one-element `allOf` is merged into its parent; `oneOf` becomes `anyOf` (strict mode
///   rejects `oneOf`; schemars' enum variants are exclusive anyway); `const` becomes a
///   one-value `enum`;
/// - `default` is moved into the description (`"... Defaults to 3."`, unless it already says
///   so), because strict mode rejects `default` and every property is sent anyway;
/// - every object with `properties` gets `additionalProperties: false` and lists every property
///   in `required`; a property that was not required becomes nullable (`null` added to its
///   `type` and `enum`, or a `{"type": "null"}` branch added to its `anyOf`), unless it already
///   accepts `null` (schemars' `Option<T>`);
/// - maps (`additionalProperties` with a schema, no `properties`) and free-form objects keep
///   their open `additionalProperties`: strict mode has no way to express them, and forcing
///   `false` would make them unusable everywhere else;
/// - the top level is always `{"type": "object", ...}`: a schema for no arguments (`{}`,
///   `true`, a unit struct's `{"type": "null"}`, a bare object) becomes
///   `{"type": "object", "properties": {}, "required": [], "additionalProperties": false}`.
pub fn normalize_schema(schema: Value) -> Value {
    normalize(&schema, Mode::Strict).schema
}

/// Which view of a schema to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// What the model is shown: every property required, objects closed.
    Strict,
    /// What arguments are validated against: the author's `required`, the author's openness.
    Lenient,
}

/// A normalised schema and what could not be done.
#[derive(Debug)]
pub(crate) struct Normalized {
    /// The rewritten schema.
    pub(crate) schema: Value,
    /// `$ref`s that point nowhere (left as `{}`).
    pub(crate) unresolved: Vec<String>,
}

/// Rewrites `schema` into the `mode` view.
pub(crate) fn normalize(schema: &Value, mode: Mode) -> Normalized {
    let mut normalizer = Normalizer {
        root: schema,
        mode,
        expanding: Vec::new(),
        expansions: 0,
        unresolved: Vec::new(),
    };
    let body = normalizer.schema(schema, 0);
    Normalized {
        schema: top_level(body, mode),
        unresolved: normalizer.unresolved,
    }
}

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

/// One normalisation run over one root schema.
struct Normalizer<'r> {
    /// The document `$ref`s point into.
    root: &'r Value,
    mode: Mode,
    /// The references being expanded along the current path, innermost last.
    expanding: Vec<String>,
    /// References expanded so far, against [`MAX_EXPANSIONS`].
    expansions: usize,
    unresolved: Vec<String>,
}

impl Normalizer<'_> {
    /// The normalised form of one (sub)schema.
    fn schema(&mut self, node: &Value, depth: usize) -> Value {
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
            node.insert("required".to_owned(), Value::Array(all));
            node.insert("additionalProperties".to_owned(), Value::Bool(false));
            if !node.contains_key("type") && !node.contains_key("anyOf") {
                node.insert("type".to_owned(), json!("object"));
            }
        }
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

/// Whether `format` is one of the number formats schemars writes (`int32`, `uint8`, `double`).
fn is_numeric_format(format: &str) -> bool {
    let digits = format
        .strip_prefix("uint")
        .or_else(|| format.strip_prefix("int"));
    match digits {
        Some(rest) => rest.chars().all(|c| c.is_ascii_digit()),
        None => matches!(format, "float" | "double"),
    }
}

/// Whether the node's `type` is or includes `wanted`.
fn has_type(node: &Map<String, Value>, wanted: &str) -> bool {
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
    root.pointer(&percent_decode(fragment)?)
}

/// Decodes `%XX` escapes of a URI fragment (schemars escapes names such as `Wrapper<T>`).
fn percent_decode(text: &str) -> Option<String> {
    if !text.contains('%') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
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

/// Makes the top level the `{"type": "object", ...}` every server insists on.
fn top_level(body: Value, mode: Mode) -> Value {
    let mut node = match body {
        Value::Object(node) => node,
        // `true` (anything) or junk: a tool without arguments.
        _ => Map::new(),
    };
    let combined = ["anyOf", "oneOf", "allOf", "enum", "const", "not"]
        .iter()
        .any(|k| node.contains_key(*k));
    let object_type = match node.get("type") {
        // `()` and unit structs: no arguments.
        Some(Value::String(t)) => t == "null" || t == "object",
        // `Option<Args>`: the arguments are always an object.
        Some(Value::Array(ts)) => {
            ts.iter().any(|t| t == "object") || ts.iter().all(|t| t == "null")
        }
        Some(_) => false,
        None => !combined,
    };
    if object_type {
        node.insert("type".to_owned(), json!("object"));
        let open_map = node
            .get("additionalProperties")
            .is_some_and(|extra| extra.is_object())
            && !node.contains_key("properties");
        if !node.contains_key("properties") && !combined && !open_map {
            node.insert("properties".to_owned(), json!({}));
            if mode == Mode::Strict {
                node.insert("required".to_owned(), json!([]));
                node.insert("additionalProperties".to_owned(), Value::Bool(false));
            }
        }
    }
    Value::Object(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlines_refs_and_drops_definitions_and_noise() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Args",
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"$ref": "#/definitions/B"}},
            "required": ["a", "b"],
            "$defs": {"A": {"title": "A", "type": "integer", "format": "uint8", "minimum": 0}},
            "definitions": {"B": {"type": "string"}}
        });
        assert_eq!(
            normalize_schema(schema),
            json!({
                "type": "object",
                "properties": {"a": {"type": "integer", "minimum": 0}, "b": {"type": "string"}},
                "required": ["a", "b"],
                "additionalProperties": false
            })
        );
    }

    #[test]
    fn the_site_description_overrides_the_target_and_single_all_of_is_flattened() {
        let schema = json!({
            "type": "object",
            "properties": {
                "x": {"$ref": "#/$defs/X", "description": "site"},
                "y": {"allOf": [{"$ref": "#/$defs/X"}], "description": "wrapped"}
            },
            "required": ["x", "y"],
            "$defs": {"X": {"type": "string", "description": "target"}}
        });
        let out = normalize_schema(schema);
        assert_eq!(
            out["properties"]["x"],
            json!({"type": "string", "description": "site"})
        );
        assert_eq!(
            out["properties"]["y"],
            json!({"type": "string", "description": "wrapped"})
        );
    }

    #[test]
    fn optional_properties_become_required_and_nullable_exactly_once() {
        let schema = json!({
            "type": "object",
            "properties": {
                "plain": {"type": "string"},
                "listed": {"type": ["integer", "string"]},
                "choice": {"type": "string", "enum": ["a", "b"]},
                "option": {"type": ["string", "null"]},
                "option_ref": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "union": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "anything": {"description": "free"}
            },
            "required": []
        });
        let out = normalize_schema(schema);
        let p = &out["properties"];
        assert_eq!(p["plain"], json!({"type": ["string", "null"]}));
        assert_eq!(p["listed"], json!({"type": ["integer", "string", "null"]}));
        assert_eq!(
            p["choice"],
            json!({"type": ["string", "null"], "enum": ["a", "b", null]})
        );
        assert_eq!(p["option"], json!({"type": ["string", "null"]}));
        assert_eq!(
            p["option_ref"],
            json!({"anyOf": [{"type": "string"}, {"type": "null"}]})
        );
        assert_eq!(
            p["union"],
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})
        );
        assert_eq!(p["anything"], json!({"description": "free"}));
        let mut required: Vec<&str> = out["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        required.sort_unstable();
        assert_eq!(
            required,
            [
                "anything",
                "choice",
                "listed",
                "option",
                "option_ref",
                "plain",
                "union"
            ]
        );
    }

    #[test]
    fn recursive_refs_terminate_with_a_permissive_leaf() {
        let schema = json!({
            "type": "object",
            "properties": {"node": {"$ref": "#/$defs/Node"}},
            "required": ["node"],
            "$defs": {"Node": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/Node", "description": "the next"}},
                "required": ["next"]
            }}
        });
        let out = normalize_schema(schema);
        let twice = &out["properties"]["node"]["properties"]["next"];
        assert_eq!(twice["type"], "object");
        assert_eq!(
            twice["properties"]["next"],
            json!({"description": "the next"})
        );
    }

    #[test]
    fn a_self_reference_to_the_root_terminates() {
        let schema = json!({
            "type": "object",
            "properties": {"child": {"$ref": "#"}},
        });
        let out = normalize_schema(schema);
        assert_eq!(
            out["properties"]["child"]["type"],
            json!(["object", "null"])
        );
    }

    #[test]
    fn exponential_reference_fan_out_is_bounded() {
        // Each level refers to the next one twice: 2^30 expansions without a budget.
        let mut defs = Map::new();
        for level in 0..30 {
            defs.insert(
                format!("L{level}"),
                json!({
                    "type": "object",
                    "properties": {
                        "a": {"$ref": format!("#/$defs/L{}", level + 1)},
                        "b": {"$ref": format!("#/$defs/L{}", level + 1)}
                    }
                }),
            );
        }
        defs.insert("L30".to_owned(), json!({"type": "string"}));
        let schema = json!({"$ref": "#/$defs/L0", "$defs": defs});
        let out = normalize_schema(schema);
        assert_eq!(out["type"], "object");
    }

    #[test]
    fn deep_nesting_is_cut_rather_than_overflowing() {
        let mut schema = json!({"type": "string"});
        for _ in 0..500 {
            schema = json!({"type": "array", "items": schema});
        }
        let out = normalize(
            &json!({"type": "object", "properties": {"x": schema}}),
            Mode::Strict,
        );
        assert!(out.unresolved.is_empty());
    }

    #[test]
    fn unresolvable_refs_are_reported_and_left_permissive() {
        let out = normalize(
            &json!({"type": "object", "properties": {"x": {"$ref": "https://example.com/x"}},
                    "required": ["x"]}),
            Mode::Strict,
        );
        assert_eq!(out.unresolved, ["https://example.com/x"]);
        assert_eq!(out.schema["properties"]["x"], json!({}));
    }

    #[test]
    fn percent_encoded_refs_resolve() {
        let schema = json!({
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/W%3CT%3E"}},
            "required": ["x"],
            "$defs": {"W<T>": {"type": "boolean"}}
        });
        assert_eq!(
            normalize_schema(schema)["properties"]["x"],
            json!({"type": "boolean"})
        );
    }

    #[test]
    fn no_arguments_become_an_empty_closed_object() {
        let empty = json!({
            "type": "object", "properties": {}, "required": [], "additionalProperties": false
        });
        assert_eq!(normalize_schema(json!({})), empty);
        assert_eq!(normalize_schema(json!(true)), empty);
        assert_eq!(
            normalize_schema(json!({"type": "null", "title": "()"})),
            empty
        );
        assert_eq!(normalize_schema(json!({"type": "object"})), empty);
    }

    #[test]
    fn strict_rewrites_one_of_const_and_default() {
        let schema = json!({
            "type": "object",
            "properties": {
                "shape": {"oneOf": [
                    {"type": "object", "properties": {"kind": {"type": "string", "const": "a"}},
                     "required": ["kind"]},
                    {"type": "string", "enum": ["b"]}
                ]},
                "count": {"type": "integer", "default": 3, "description": "How many"},
                "unit": {"type": "string", "default": "c", "description": "Unit. Defaults to \"c\"."}
            },
            "required": ["shape"]
        });
        let out = normalize_schema(schema);
        let shape = &out["properties"]["shape"];
        assert!(shape.get("oneOf").is_none());
        assert_eq!(
            shape["anyOf"][0]["properties"]["kind"],
            json!({"type": "string", "enum": ["a"]})
        );
        assert_eq!(
            out["properties"]["count"],
            json!({"type": ["integer", "null"], "description": "How many. Defaults to 3."})
        );
        assert_eq!(
            out["properties"]["unit"]["description"], "Unit. Defaults to \"c\".",
            "a default the description already states is not repeated"
        );
    }

    #[test]
    fn lenient_keeps_required_and_marks_added_nulls() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": ["string", "null"]}},
            "required": ["a"]
        });
        let out = normalize(&schema, Mode::Lenient).schema;
        assert_eq!(out["required"], json!(["a"]));
        assert!(out.get("additionalProperties").is_none());
        assert_eq!(
            out["properties"]["a"],
            json!({"type": "string"}),
            "required stays as is"
        );
        assert_eq!(out["properties"]["b"], json!({"type": ["string", "null"]}));

        let mut arguments = json!({"a": "x", "b": null});
        strip_absent_nulls(&out, &mut arguments);
        assert_eq!(
            arguments,
            json!({"a": "x", "b": null}),
            "Option's null is kept"
        );
    }

    #[test]
    fn added_nulls_are_stripped_in_nested_objects_lists_and_options() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "inner": {"anyOf": [{"$ref": "#/$defs/In"}, {"type": "null"}]},
                "list": {"type": "array", "items": {"$ref": "#/$defs/In"}}
            },
            "required": ["list"],
            "$defs": {"In": {"type": "object", "properties": {"k": {"type": "string"}}}}
        });
        let lenient = normalize(&schema, Mode::Lenient).schema;
        let mut arguments = json!({"n": null, "inner": {"k": null}, "list": [{"k": null}]});
        strip_absent_nulls(&lenient, &mut arguments);
        assert_eq!(arguments, json!({"inner": {}, "list": [{}]}));
    }

    #[test]
    fn numeric_formats_are_recognised() {
        for format in [
            "int8", "int64", "uint", "uint8", "uint128", "float", "double",
        ] {
            assert!(is_numeric_format(format), "{format}");
        }
        for format in ["date-time", "uuid", "integer-ish", "email"] {
            assert!(!is_numeric_format(format), "{format}");
        }
    }
}
