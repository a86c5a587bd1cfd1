//! JSON Schema generation and normalisation.
// SKELETON: the helper owning this file replaces the bodies.

use serde_json::Value;

/// The JSON Schema of `T`, as schemars writes it.
pub fn schema_for<T: schemars::JsonSchema>() -> Value {
    todo!()
}

/// `schema` rewritten so OpenAI strict mode and the common compatible servers accept it.
pub fn normalize_schema(_schema: Value) -> Value {
    todo!()
}
