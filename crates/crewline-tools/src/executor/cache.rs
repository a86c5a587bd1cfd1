//! Stage 6: a cache of successful results for tools with a `cache_ttl`.
//!
//! Key: the tool's name and the canonical JSON of its validated arguments (object keys
//! sorted). Only successful results are cached. No error kind of its own.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use serde_json::Value;
use tokio::time::Instant;

/// How many results the cache holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// The most results held at once; when full, expired results are dropped first, then the
    /// one closest to expiry.
    pub max_entries: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self { max_entries: 1024 }
    }
}

/// Successful results by tool and arguments, each until its time to live runs out.
#[derive(Debug, Default)]
pub struct ResultCache {
    config: CacheConfig,
    entries: Mutex<HashMap<String, (Instant, Value)>>,
}

impl ResultCache {
    /// An empty cache.
    pub fn new(config: CacheConfig) -> Self {
        Self {
            config,
            entries: Mutex::default(),
        }
    }

    /// The key of a call: the tool name and the canonical JSON of its arguments.
    pub fn key(tool: &str, arguments: &Value) -> String {
        let mut key = String::with_capacity(tool.len() + 32);
        key.push_str(tool);
        key.push('\0');
        canonical(arguments, &mut key);
        key
    }

    /// The cached result under `key`, if it has not expired.
    pub fn get(&self, key: &str) -> Option<Value> {
        let mut entries = self.lock();
        match entries.get(key) {
            Some((expires, value)) if Instant::now() < *expires => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` under `key` for `ttl`.
    pub fn insert(&self, key: String, value: Value, ttl: Duration) {
        if self.config.max_entries == 0 {
            return;
        }
        let now = Instant::now();
        let mut entries = self.lock();
        if entries.len() >= self.config.max_entries && !entries.contains_key(&key) {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= self.config.max_entries
                && let Some(soonest) = entries
                    .iter()
                    .min_by_key(|(_, (expires, _))| *expires)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&soonest);
            }
        }
        entries.insert(key, (now + ttl, value));
    }

    /// How many results are held (expired ones included until touched).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no result is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Instant, Value)>> {
        // Each update is a single insert or remove, so a poisoned map is still consistent.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Writes `value` as JSON with object keys sorted (the maps keep insertion order otherwise).
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(inner) = map.get(key) {
                    canonical(inner, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_ignore_object_key_order() {
        let a = ResultCache::key(
            "t",
            &json!({"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": 0}}),
        );
        let b = ResultCache::key(
            "t",
            &json!({"a": {"x": 0, "y": [1, {"c": 3, "d": 2}]}, "b": 1}),
        );
        assert_eq!(a, b);
        assert_ne!(a, ResultCache::key("u", &json!({"b": 1})));
    }

    #[tokio::test(start_paused = true)]
    async fn entries_expire_and_the_cache_stays_bounded() {
        let cache = ResultCache::new(CacheConfig { max_entries: 2 });
        cache.insert("a".into(), json!(1), Duration::from_secs(10));
        cache.insert("b".into(), json!(2), Duration::from_secs(20));
        cache.insert("c".into(), json!(3), Duration::from_secs(30));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get("a"), None);
        tokio::time::advance(Duration::from_secs(25)).await;
        assert_eq!(cache.get("b"), None);
        assert_eq!(cache.get("c"), Some(json!(3)));
    }
}
