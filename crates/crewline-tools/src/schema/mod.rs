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

mod lenient;
mod strict;
mod strict_rules;
mod walk;

use serde_json::{Map, Value, json};

pub(crate) use self::lenient::strip_absent_nulls;
pub(crate) use self::strict_rules::{StrictViolation, check as check_strict};
use self::walk::Normalizer;

/// How deep subschemas may nest before the rest is replaced by a permissive `{}`.
///
/// Real argument types are a handful of levels deep; the cap only guards the stack against
/// hand-written pathological schemas.
pub(super) const MAX_DEPTH: usize = 64;

/// How many times one definition may be expanded along one path of the schema.
///
/// A recursive type (a tree of nodes) cannot be inlined completely, so its self-reference is
/// unrolled this many times and then becomes a permissive `{}`.
pub(super) const RECURSION_UNROLL: usize = 2;

/// How many `$ref`s one schema may expand in total, so that a schema whose definitions refer to
/// each other many times over cannot blow up exponentially.
pub(super) const MAX_EXPANSIONS: usize = 1_000;

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
    use super::{walk::is_numeric_format, *};

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
