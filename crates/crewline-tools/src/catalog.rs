//! The prepared tools of a registry: each tool with its normalised definition and compiled
//! validator, found by name.
//!
//! The [`Executor`](crate::Executor) reads calls' tools from here and the
//! [`ToolRegistry`](crate::ToolRegistry) holds one next to its executor, so neither of the
//! two needs the other to run a call.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use crewline_core::ToolDefinition;
use serde_json::Value;

use crate::{
    RegistryError, Tool,
    schema::{self, Mode, StrictViolation},
};

/// The longest tool name a model API accepts.
const MAX_NAME_LEN: usize = 64;

/// A registered tool with everything prepared for it at registration.
pub(crate) struct Entry {
    pub(crate) tool: Arc<dyn Tool>,
    /// What the model is shown (strict, normalised schema).
    pub(crate) definition: ToolDefinition,
    /// The lenient view the arguments are checked against (see [`crate::schema`]).
    pub(crate) lenient: Value,
    /// Compiled once from `lenient`, so calls do not pay for it.
    pub(crate) validator: jsonschema::Validator,
}

/// Tools by name, in registration order.
#[derive(Clone)]
pub(crate) struct Catalog {
    /// Names this catalog (and the subsets and exports made from it) in the keys of what the
    /// executor keeps between calls: two registries with a tool of the same name never share.
    id: u64,
    entries: Vec<Arc<Entry>>,
    by_name: HashMap<String, usize>,
}

impl Default for Catalog {
    fn default() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            entries: Vec::new(),
            by_name: HashMap::new(),
        }
    }
}

impl Catalog {
    /// An empty catalog with the id of `self` (for a subset or an export of it).
    pub(crate) fn empty_like(&self) -> Self {
        Self {
            id: self.id,
            entries: Vec::new(),
            by_name: HashMap::new(),
        }
    }

    /// The catalog's id (shared by its clones, subsets and exports).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn entries(&self) -> &[Arc<Entry>] {
        &self.entries
    }

    pub(crate) fn entry(&self, name: &str) -> Option<&Arc<Entry>> {
        self.by_name
            .get(name)
            .and_then(|&index| self.entries.get(index))
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The tools' names, in registration order.
    pub(crate) fn names(&self) -> Vec<&str> {
        self.entries
            .iter()
            .map(|e| e.definition.name.as_str())
            .collect()
    }

    /// What the model reads after calling a tool that does not exist: the tools that do.
    pub(crate) fn unknown_tool_message(&self, name: &str) -> String {
        if self.entries.is_empty() {
            return format!("there is no tool named `{name}`; no tools are available");
        }
        format!(
            "there is no tool named `{name}`; available tools: {}",
            self.names().join(", ")
        )
    }

    /// Checks `tool` and prepares its entry, without adding it; `strict_default` is whether a
    /// tool whose policy does not say is strict.
    pub(crate) fn prepare(
        &self,
        tool: Arc<dyn Tool>,
        strict_default: bool,
    ) -> Result<Entry, RegistryError> {
        let name = tool.name().to_owned();
        if !is_valid_tool_name(&name) {
            return Err(RegistryError::InvalidName(name));
        }
        if self.by_name.contains_key(&name) {
            return Err(RegistryError::DuplicateName(name));
        }
        let invalid = |reason: String| RegistryError::InvalidSchema {
            name: name.clone(),
            reason,
        };

        let raw = tool.parameters();
        let shown = schema::normalize(&raw, Mode::Strict);
        if let Some(reference) = shown.unresolved.first() {
            return Err(invalid(format!(
                "`$ref` `{reference}` cannot be resolved; only references inside the schema \
                 (`#/$defs/...`, `#/definitions/...`) are supported"
            )));
        }
        if shown.schema.get("type") != Some(&Value::String("object".to_owned())) {
            return Err(invalid(
                "the arguments must be described as one object (`\"type\": \"object\"`), \
                 which is what model APIs require"
                    .to_owned(),
            ));
        }
        let strict = tool.policy().strict.unwrap_or(strict_default);
        if strict {
            schema::check_strict(&shown.schema).map_err(|StrictViolation { path, rule }| {
                RegistryError::NotStrict {
                    name: name.clone(),
                    path,
                    rule,
                }
            })?;
        }
        let lenient = schema::normalize(&raw, Mode::Lenient).schema;
        let validator = jsonschema::validator_for(&lenient).map_err(|e| invalid(e.to_string()))?;

        Ok(Entry {
            definition: ToolDefinition::new(name, tool.description(), shown.schema)
                .with_strict(strict),
            tool,
            lenient,
            validator,
        })
    }

    pub(crate) fn push(&mut self, entry: Arc<Entry>) {
        self.by_name
            .insert(entry.definition.name.clone(), self.entries.len());
        self.entries.push(entry);
    }
}

/// Whether `name` could be a registered tool's: it matches `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_model_api_rule() {
        for ok in ["a", "get_weather", "get-weather", "A1", &"x".repeat(64)] {
            assert!(is_valid_tool_name(ok), "{ok}");
        }
        for bad in ["", "get weather", "tool.name", "naïve", &"x".repeat(65)] {
            assert!(!is_valid_tool_name(bad), "{bad}");
        }
    }
}
