//! OpenAI strict mode's rules for a schema, checked on the normalised (strict) view at
//! registration, so a tool that cannot be strict says why there rather than in a 400 from the
//! provider mid-call.
//!
//! The rules are those of OpenAI's Structured Outputs documentation: the root is an object
//! (not an `anyOf`); every object is closed (`additionalProperties: false`) with all its
//! properties required; every value has a type; no keyword strict mode does not support; at
//! most 10 levels of object nesting, 5000 properties and 1000 enum values in all.

use serde_json::{Map, Value};

/// How many levels of object nesting strict mode accepts.
const MAX_NESTING: usize = 10;
/// How many object properties strict mode accepts in one schema.
const MAX_PROPERTIES: usize = 5_000;
/// How many enum values strict mode accepts in one schema, all enums together.
const MAX_ENUM_VALUES: usize = 1_000;

/// Keywords strict mode rejects, with what to use instead (or why they cannot be kept).
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "patternProperties",
        "use named properties or a list of key-value pairs",
    ),
    ("propertyNames", "use named properties"),
    ("minProperties", "make the properties required instead"),
    ("maxProperties", "list the properties instead"),
    (
        "unevaluatedProperties",
        "close the object with `additionalProperties: false`",
    ),
    ("unevaluatedItems", "describe the items with `items`"),
    ("contains", "describe every item with `items`"),
    ("minContains", "describe every item with `items`"),
    ("maxContains", "describe every item with `items`"),
    (
        "uniqueItems",
        "say it in the description and check it in the tool",
    ),
    ("allOf", "merge the schemas into one"),
    ("oneOf", "use `anyOf`"),
    ("not", "say it in the description and check it in the tool"),
    ("if", "use `anyOf` of the cases"),
    ("then", "use `anyOf` of the cases"),
    ("else", "use `anyOf` of the cases"),
    ("dependentRequired", "make the properties required"),
    ("dependentSchemas", "use `anyOf` of the cases"),
    ("dependencies", "make the properties required"),
];

/// Where a schema breaks a strict-mode rule, and which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StrictViolation {
    /// The JSON pointer of the offending subschema (`""` for the root).
    pub(crate) path: String,
    /// What is wrong there, and what to do about it.
    pub(crate) rule: String,
}

/// Checks `schema` (a normalised, strict view) against strict mode's rules; the first place
/// that breaks one.
pub(crate) fn check(schema: &Value) -> Result<(), StrictViolation> {
    if let Some(node) = schema.as_object()
        && node.contains_key("anyOf")
    {
        return Err(violation(
            "",
            "is an `anyOf`; strict mode needs the arguments to be one object, so make the \
             alternatives a property of it"
                .to_owned(),
        ));
    }
    let mut walk = Walk::default();
    walk.schema(schema, &mut String::new(), 0)?;
    if walk.properties > MAX_PROPERTIES {
        return Err(violation(
            "",
            format!(
                "has {} object properties in all; strict mode accepts at most {MAX_PROPERTIES}",
                walk.properties
            ),
        ));
    }
    if walk.enum_values > MAX_ENUM_VALUES {
        return Err(violation(
            "",
            format!(
                "has {} enum values in all; strict mode accepts at most {MAX_ENUM_VALUES}",
                walk.enum_values
            ),
        ));
    }
    Ok(())
}

fn violation(path: &str, rule: String) -> StrictViolation {
    StrictViolation {
        path: path.to_owned(),
        rule,
    }
}

/// The totals strict mode limits, counted over the whole schema.
#[derive(Default)]
struct Walk {
    properties: usize,
    enum_values: usize,
}

impl Walk {
    /// Checks the subschema at `path`, `level` objects deep.
    fn schema(
        &mut self,
        schema: &Value,
        path: &mut String,
        level: usize,
    ) -> Result<(), StrictViolation> {
        let Some(node) = schema.as_object() else {
            return Err(violation(
                path,
                "accepts any JSON value (a `true` schema), which strict mode cannot express; \
                 give it a type"
                    .to_owned(),
            ));
        };
        if let Some((keyword, instead)) = UNSUPPORTED.iter().find(|(k, _)| node.contains_key(*k)) {
            return Err(violation(
                path,
                format!("uses `{keyword}`, which strict mode does not support; {instead}"),
            ));
        }
        if !["type", "anyOf", "enum"]
            .iter()
            .any(|k| node.contains_key(*k))
        {
            return Err(violation(
                path,
                "has no `type` (any JSON value, such as a `serde_json::Value` argument or the \
                 cut-off end of a recursive type), which strict mode cannot express; give it a \
                 type"
                    .to_owned(),
            ));
        }
        if let Some(Value::Array(values)) = node.get("enum") {
            self.enum_values += values.len();
        }

        let mut level = level;
        if is_object(node) {
            level += 1;
            if level > MAX_NESTING {
                return Err(violation(
                    path,
                    format!(
                        "is nested {level} objects deep; strict mode accepts at most \
                         {MAX_NESTING} levels"
                    ),
                ));
            }
            self.object(node, path)?;
        }

        if let Some(Value::Object(properties)) = node.get("properties") {
            self.properties += properties.len();
            for (name, property) in properties {
                self.child(property, path, &["properties", name], level)?;
            }
        }
        match node.get("items") {
            Some(Value::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    self.child(item, path, &["items", &index.to_string()], level)?;
                }
            }
            Some(items) => self.child(items, path, &["items"], level)?,
            None => {}
        }
        if let Some(Value::Array(branches)) = node.get("anyOf") {
            for (index, branch) in branches.iter().enumerate() {
                self.child(branch, path, &["anyOf", &index.to_string()], level)?;
            }
        }
        Ok(())
    }

    /// Checks the subschema at `path` + `segments`, leaving `path` as it was.
    fn child(
        &mut self,
        schema: &Value,
        path: &mut String,
        segments: &[&str],
        level: usize,
    ) -> Result<(), StrictViolation> {
        let len = path.len();
        for segment in segments {
            path.push('/');
            // JSON pointer escaping (RFC 6901): `~` first, then `/`.
            path.push_str(&segment.replace('~', "~0").replace('/', "~1"));
        }
        let checked = self.schema(schema, path, level);
        path.truncate(len);
        checked
    }

    /// An object must be closed and require every one of its properties.
    fn object(&self, node: &Map<String, Value>, path: &str) -> Result<(), StrictViolation> {
        let properties = node.get("properties").and_then(Value::as_object);
        match node.get("additionalProperties") {
            Some(Value::Bool(false)) => {}
            Some(Value::Object(_)) | Some(Value::Bool(true)) if properties.is_none() => {
                return Err(violation(
                    path,
                    "is a map (open `additionalProperties`), which strict mode cannot express; \
                     turn strict off for this tool or use a struct"
                        .to_owned(),
                ));
            }
            Some(_) => {
                return Err(violation(
                    path,
                    "allows properties beyond its own (`additionalProperties` is not `false`), \
                     which strict mode cannot express; turn strict off for this tool or close \
                     the object"
                        .to_owned(),
                ));
            }
            None if properties.is_none() => {
                return Err(violation(
                    path,
                    "is a free-form object (no `properties`), which strict mode cannot express; \
                     turn strict off for this tool or use a struct"
                        .to_owned(),
                ));
            }
            None => {
                return Err(violation(
                    path,
                    "does not set `additionalProperties: false`, which strict mode requires of \
                     every object"
                        .to_owned(),
                ));
            }
        }
        let required: Vec<&str> = node
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if let Some(missing) = properties
            .into_iter()
            .flat_map(|p| p.keys())
            .find(|name| !required.contains(&name.as_str()))
        {
            return Err(violation(
                path,
                format!(
                    "does not list its property `{missing}` in `required`; strict mode requires \
                     every property (make an optional one nullable instead)"
                ),
            ));
        }
        Ok(())
    }
}

/// Whether `node` describes an object (its `type` is or includes `"object"`, or it has
/// `properties`).
fn is_object(node: &Map<String, Value>) -> bool {
    let typed = match node.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => false,
    };
    typed || node.contains_key("properties")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schema::{Mode, normalize};

    fn strict(schema: Value) -> Result<(), StrictViolation> {
        check(&normalize(&schema, Mode::Strict).schema)
    }

    #[test]
    fn a_normalised_struct_with_options_lists_and_enums_is_strict() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "minimum": 1},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "stops": {"type": "array", "items": {
                    "type": "object", "properties": {"name": {"type": "string"}}
                }},
                "when": {"anyOf": [{"type": "string"}, {"type": "null"}]}
            },
            "required": ["city"]
        });
        assert_eq!(strict(schema), Ok(()));
        assert_eq!(strict(json!({})), Ok(()), "no arguments");
    }

    #[test]
    fn a_map_names_its_path() {
        let schema = json!({
            "type": "object",
            "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}},
            "required": ["tags"]
        });
        let error = strict(schema).expect_err("a map is not strict");
        assert_eq!(error.path, "/properties/tags");
        assert!(error.rule.contains("is a map"), "{}", error.rule);
    }

    #[test]
    fn unsupported_keywords_free_values_and_open_objects_are_refused() {
        let cases = [
            (
                json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
                "uniqueItems",
            ),
            (
                json!({"type": "object", "properties": {}, "patternProperties": {"^x": {}}}),
                "patternProperties",
            ),
            (json!({"description": "anything"}), "no `type`"),
        ];
        for (property, expected) in cases {
            let schema = json!({
                "type": "object", "properties": {"a/b": property}, "required": ["a/b"]
            });
            let error = strict(schema).expect_err(expected);
            assert_eq!(error.path, "/properties/a~1b", "{expected}");
            assert!(error.rule.contains(expected), "{}", error.rule);
        }
        let open = json!({
            "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
            "additionalProperties": true
        });
        let error = check(&open).expect_err("open");
        assert_eq!(error.path, "");
        assert!(
            error.rule.contains("additionalProperties"),
            "{}",
            error.rule
        );
        let half_required = json!({
            "type": "object", "properties": {"a": {"type": "string"}}, "required": [],
            "additionalProperties": false
        });
        assert!(
            check(&half_required)
                .expect_err("required")
                .rule
                .contains("`a`")
        );
    }

    #[test]
    fn the_root_may_not_be_an_any_of() {
        let schema = json!({"anyOf": [
            {"type": "object", "properties": {}, "required": [], "additionalProperties": false},
            {"type": "object", "properties": {}, "required": [], "additionalProperties": false}
        ]});
        let error = check(&schema).expect_err("root anyOf");
        assert_eq!(error.path, "");
        assert!(error.rule.contains("anyOf"));
    }

    #[test]
    fn nesting_properties_and_enum_values_are_limited() {
        let nested = |levels: usize| {
            let mut schema = json!({"type": "string"});
            for _ in 0..levels {
                schema = json!({"type": "object", "properties": {"x": schema}});
            }
            schema
        };
        assert_eq!(strict(nested(10)), Ok(()));
        let error = strict(nested(11)).expect_err("11 levels");
        assert_eq!(error.path, "/properties/x".repeat(10));
        assert!(error.rule.contains("at most 10"), "{}", error.rule);

        let many: Map<String, Value> = (0..5_001)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        let error = strict(json!({"type": "object", "properties": many})).expect_err("5001");
        assert!(error.rule.contains("5001"), "{}", error.rule);

        let values: Vec<Value> = (0..600).map(|i| json!(format!("v{i}"))).collect();
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string", "enum": values},
            "b": {"type": "string", "enum": values}
        }, "required": ["a", "b"]});
        let error = strict(schema).expect_err("1200 enum values");
        assert!(error.rule.contains("1200"), "{}", error.rule);
    }
}
