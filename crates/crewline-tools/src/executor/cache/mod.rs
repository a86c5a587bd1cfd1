//! The cache stage: a cache of successful results for tools with a `cache_ttl`.
//!
//! Key: the session the call belongs to (see [`SessionScope`]), the registry, the tool's name
//! and the canonical JSON of its validated arguments (object keys sorted). A result is served
//! only to calls of the session that caused it, unless the cache is configured with
//! [`CacheSharing::PerRegistry`]. Only successful results are cached. No error kind of its own.

mod stage;

pub(crate) use self::stage::Cached;

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use serde_json::Value;
use tokio::time::Instant;

use super::{SessionScope, fingerprint::canonical};

/// Who a cached result may be served to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheSharing {
    /// Only calls of the session that caused it (the default): one caller's data is never
    /// shown to another caller, an MCP client or a remote task.
    #[default]
    PerSession,
    /// Every caller of the same registry (its clones, subsets and exports too): only for
    /// tools whose results are the same whoever asks (public data, never a caller's own).
    PerRegistry,
}

/// How many results the cache holds, and who may be served them.
///
/// Only tools whose [`ToolPolicy`](crate::ToolPolicy) sets a `cache_ttl` are cached.
///
/// # Examples
///
/// ```
/// # use async_trait::async_trait;
/// # use crewline_tools::{Tool, ToolError, ToolPolicy};
/// # use serde_json::{Value, json};
/// # use std::sync::atomic::{AtomicUsize, Ordering};
/// # static CALLS: AtomicUsize = AtomicUsize::new(0);
/// # struct T;
/// # #[async_trait]
/// # impl Tool for T {
/// #     fn name(&self) -> &str { "get_weather" }
/// #     fn description(&self) -> &str { "A tool." }
/// #     fn parameters(&self) -> Value {
/// #         json!({"type": "object", "properties": {"city": {"type": "string"}}})
/// #     }
/// #     fn policy(&self) -> ToolPolicy { ToolPolicy::new().cache_ttl(std::time::Duration::from_secs(60)) }
/// #     async fn call(&self, args: Value) -> Result<Value, ToolError> {
/// #         Ok(json!(CALLS.fetch_add(1, Ordering::SeqCst) + 1))
/// #     }
/// # }
/// use crewline_core::ToolCall;
/// use crewline_tools::executor::cache::CacheConfig;
/// use crewline_tools::{ExecuteOptions, Executor, ToolRegistry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cache = CacheConfig::with_max_entries(10_000).shared_per_registry(); // public data only
/// let mut tools = ToolRegistry::new().with_executor(Executor::builder().cache(cache).build());
/// tools.register(T)?; // counts its real calls
///
/// let call = ToolCall::new("call_1", "get_weather", r#"{"city": "Paris"}"#);
/// // Two separate runs (two callers): the second is served from the cache.
/// let first = tools.execute(&[call.clone()], ExecuteOptions::new()).await;
/// let second = tools.execute(&[call], ExecuteOptions::new()).await;
/// assert_eq!(first[0].result.value(), Some(&json!(1)));
/// assert_eq!(second[0].result.value(), Some(&json!(1)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// The most results held at once; when full, expired results are dropped first, then the
    /// one closest to expiry.
    pub max_entries: usize,
    /// Who a result is served to (default: the session that caused it).
    pub sharing: CacheSharing,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max_entries: 1024,
            sharing: CacheSharing::PerSession,
        }
    }
}

impl CacheConfig {
    /// A cache of `max_entries` results, each served only to its own session.
    pub fn with_max_entries(max_entries: usize) -> Self {
        Self {
            max_entries,
            ..Self::default()
        }
    }

    /// The same cache, serving results to every caller of the same registry (opt-in: only
    /// for tools whose results are the same whoever asks).
    pub fn shared_per_registry(mut self) -> Self {
        self.sharing = CacheSharing::PerRegistry;
        self
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

    /// The cache's settings.
    pub fn config(&self) -> CacheConfig {
        self.config
    }

    /// The key of a call of `tool` in `registry`, for `scope`: the scope is part of it
    /// unless the cache is shared per registry.
    pub(crate) fn key_for(
        &self,
        scope: &SessionScope,
        registry: u64,
        tool: &str,
        arguments: &Value,
    ) -> String {
        let partition = match self.config.sharing {
            CacheSharing::PerSession => format!("{scope}\0{registry}\0"),
            CacheSharing::PerRegistry => format!("\0{registry}\0"),
        };
        partition + &Self::key(tool, arguments)
    }

    /// The key of a call within one partition: the tool name and the canonical JSON of its
    /// arguments.
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
        let cache = ResultCache::new(CacheConfig::with_max_entries(2));
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
