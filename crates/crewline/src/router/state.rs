//! The router's state: what tools learn during the call, read by the transitions.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Map, Value};

/// The values transitions decide on, shared by the router and the tools that set them (cheap
/// to clone: every clone is the same state).
///
/// Tools hold a clone and record what they learn (`state.set("verified", true)`); after each
/// completed turn the router reads a snapshot to pick the next sub-agent. Setup code may seed it
/// from the call (a call variable, the caller's number) before the first turn.
///
/// Every transition logs the whole state to the call's timeline: keep secrets out of it.
#[derive(Clone, Default)]
pub struct RouterState {
    values: Arc<Mutex<Map<String, Value>>>,
}

impl RouterState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    fn values(&self) -> MutexGuard<'_, Map<String, Value>> {
        // The map is valid after any panic (each method is one map operation), so a poisoned
        // lock is still usable.
        self.values.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets `key` to `value`, replacing what was there.
    pub fn set(&self, key: impl Into<String>, value: impl Into<Value>) {
        self.values().insert(key.into(), value.into());
    }

    /// Sets every key of `values`, like the reference's `set_state(**kwargs)`.
    pub fn merge(&self, values: Map<String, Value>) {
        self.values().extend(values);
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.values().get(key).cloned()
    }

    /// Whether `key` is set to `true`.
    pub fn flag(&self, key: &str) -> bool {
        self.values().get(key) == Some(&Value::Bool(true))
    }

    /// Removes `key`, returning its value.
    pub fn remove(&self, key: &str) -> Option<Value> {
        self.values().shift_remove(key)
    }

    /// A copy of every value, in the order they were first set.
    pub fn snapshot(&self) -> Map<String, Value> {
        self.values().clone()
    }
}

impl std::fmt::Debug for RouterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RouterState").field(&*self.values()).finish()
    }
}

/// Ready-made transition conditions over the router's state.
///
/// Any `Fn(&Map<String, Value>) -> bool` is a condition; these name the common ones.
pub mod when {
    use serde_json::{Map, Value};

    /// `key` is set to `true`.
    pub fn flag(key: impl Into<String>) -> impl Fn(&Map<String, Value>) -> bool + Send + Sync {
        let key = key.into();
        move |state| state.get(&key) == Some(&Value::Bool(true))
    }

    /// `key` is set to anything but `null`.
    pub fn present(key: impl Into<String>) -> impl Fn(&Map<String, Value>) -> bool + Send + Sync {
        let key = key.into();
        move |state| state.get(&key).is_some_and(|v| !v.is_null())
    }

    /// `key` is set to `value`.
    pub fn equals(
        key: impl Into<String>,
        value: impl Into<Value>,
    ) -> impl Fn(&Map<String, Value>) -> bool + Send + Sync {
        let key = key.into();
        let value = value.into();
        move |state| state.get(&key) == Some(&value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn clones_share_one_state() {
        let state = RouterState::new();
        let tool_side = state.clone();
        tool_side.set("verified", true);
        tool_side.set("account_id", "12345");
        assert!(state.flag("verified"));
        assert_eq!(state.get("account_id"), Some(json!("12345")));
        assert_eq!(
            Value::Object(state.snapshot()),
            json!({"verified": true, "account_id": "12345"})
        );
        assert_eq!(state.remove("verified"), Some(json!(true)));
        assert!(!state.flag("verified"));
    }

    #[test]
    fn conditions_read_the_snapshot() {
        let state = RouterState::new();
        state.merge(
            json!({"verified": "yes", "intent": "pay", "note": null})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let snapshot = state.snapshot();
        assert!(!when::flag("verified")(&snapshot), "only `true` is a flag");
        assert!(when::equals("intent", "pay")(&snapshot));
        assert!(!when::equals("intent", "dispute")(&snapshot));
        assert!(!when::present("note")(&snapshot));
        assert!(when::present("intent")(&snapshot));
    }
}
