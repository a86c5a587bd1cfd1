//! The registry that holds and runs an agent's tools.

use std::{
    collections::HashMap,
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use crewline_core::{ToolCall, ToolDefinition, ToolErrorKind, ToolResult};
use futures::{Stream, StreamExt, stream};
use serde_json::Value;

use crate::{
    CallContext, Executor, ExportError, Exports, NameRules, RegistryError, Target, Tool,
    ToolProvider,
    schema::{self, Mode},
};

/// How many tools run at once by default in a parallel round.
pub const DEFAULT_MAX_CONCURRENCY: usize = 8;

/// The longest tool name a model API accepts.
const MAX_NAME_LEN: usize = 64;

/// One finished tool call: its result and how long it took.
#[derive(Debug, Clone)]
pub struct ToolRun {
    /// The result the model reads.
    pub result: ToolResult,
    /// Time from start to result.
    pub latency: Duration,
}

/// A registered tool with everything prepared for it at registration.
pub(crate) struct Entry {
    pub(crate) tool: Arc<dyn Tool>,
    /// What the model is shown (strict, normalised schema).
    definition: ToolDefinition,
    /// The lenient view the arguments are checked against (see [`crate::schema`]).
    pub(crate) lenient: Value,
    /// Compiled once from `lenient`, so calls do not pay for it.
    pub(crate) validator: jsonschema::Validator,
}

/// An agent's tools.
///
/// Cloning is cheap: the tools and their compiled schemas are shared.
#[derive(Clone)]
pub struct ToolRegistry {
    /// Names this registry (and its clones, subsets and exports) in the keys of what the
    /// executor keeps between calls: two registries with a tool of the same name never share.
    id: u64,
    entries: Vec<Arc<Entry>>,
    by_name: HashMap<String, usize>,
    max_concurrency: usize,
    executor: Arc<Executor>,
    /// The exports of tools whose policy sets none.
    default_exports: Exports,
}

impl Default for ToolRegistry {
    fn default() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            entries: Vec::new(),
            by_name: HashMap::new(),
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            executor: Executor::default_executor(),
            default_exports: Exports::crew_only(),
        }
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .field("max_concurrency", &self.max_concurrency)
            .field("executor", &self.executor)
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same registry, running at most `limit` tools at once in a parallel round (0 is 1).
    pub fn with_max_concurrency(mut self, limit: usize) -> Self {
        self.max_concurrency = limit.max(1);
        self
    }

    /// The same registry, running its calls through `executor` instead of the process-wide
    /// default.
    pub fn with_executor(mut self, executor: Arc<Executor>) -> Self {
        self.executor = executor;
        self
    }

    /// The same registry, exporting the tools whose policy names no targets to `exports`
    /// (default [`Exports::crew_only`]): `with_default_exports(Exports::all())` offers them
    /// over MCP and to remote agents too. A tool's own `export = ".."` always wins.
    pub fn with_default_exports(mut self, exports: Exports) -> Self {
        self.default_exports = exports;
        self
    }

    /// Whether the tool `entry` is exported to `target`.
    fn exported(&self, entry: &Entry, target: Target) -> bool {
        entry
            .tool
            .policy()
            .exports
            .unwrap_or(self.default_exports)
            .allows(target)
    }

    /// The executor the calls run through.
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// How many tools run at once at most in a parallel round.
    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    /// Adds a tool.
    pub fn register(&mut self, tool: impl Tool + 'static) -> Result<&mut Self, RegistryError> {
        self.register_arc(Arc::new(tool))
    }

    /// Adds a shared tool.
    ///
    /// The name must be valid and unused, and the schema usable; it is normalised and its
    /// validator compiled here, once. Calls are checked against the author's schema with its
    /// own `required` list (optional arguments may be left out, or sent as `null`), not against
    /// the stricter one the model is shown.
    pub fn register_arc(&mut self, tool: Arc<dyn Tool>) -> Result<&mut Self, RegistryError> {
        let entry = self.prepare(tool)?;
        self.push(entry);
        Ok(self)
    }

    /// Adds every tool of `agent` (its `#[function_tool]` methods); if one cannot be added,
    /// none is.
    pub fn discover<P: ToolProvider>(
        &mut self,
        agent: &Arc<P>,
    ) -> Result<&mut Self, RegistryError> {
        let mut prepared: Vec<Entry> = Vec::new();
        for tool in P::tools(agent) {
            let entry = self.prepare(tool)?;
            if prepared
                .iter()
                .any(|e| e.definition.name == entry.definition.name)
            {
                return Err(RegistryError::DuplicateName(entry.definition.name));
            }
            prepared.push(entry);
        }
        for entry in prepared {
            self.push(entry);
        }
        Ok(self)
    }

    /// The tools' definitions, with normalised schemas, in registration order.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.entries.iter().map(|e| e.definition.clone()).collect()
    }

    /// The OpenAI tool definitions (`{"type": "function", "function": {...}}`), in
    /// registration order.
    pub fn get_schemas(&self) -> Vec<Value> {
        self.entries
            .iter()
            .map(|e| e.definition.to_openai())
            .collect()
    }

    /// The tools' names, in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.entries
            .iter()
            .map(|e| e.definition.name.as_str())
            .collect()
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.entry(name).map(|e| &e.tool)
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A registry with only the tools `names`, in that order (for a sub-agent that may use a
    /// few of its parent's tools). Same concurrency limit.
    pub fn subset(&self, names: &[&str]) -> Result<ToolRegistry, RegistryError> {
        let mut subset = ToolRegistry::new()
            .with_max_concurrency(self.max_concurrency)
            .with_executor(Arc::clone(&self.executor))
            .with_default_exports(self.default_exports);
        subset.id = self.id;
        for name in names {
            let index = *self
                .by_name
                .get(*name)
                .ok_or_else(|| RegistryError::UnknownTool((*name).to_owned()))?;
            if subset.by_name.contains_key(*name) {
                return Err(RegistryError::DuplicateName((*name).to_owned()));
            }
            subset
                .by_name
                .insert((*name).to_owned(), subset.entries.len());
            subset.entries.push(Arc::clone(&self.entries[index]));
        }
        Ok(subset)
    }

    /// The definitions of the tools exported to `target` (see [`ToolPolicy::exports`]), in
    /// registration order. The crew's tool loop should offer `definitions_for(Target::Crew)`.
    ///
    /// [`ToolPolicy::exports`]: crate::ToolPolicy::exports
    pub fn definitions_for(&self, target: Target) -> Vec<ToolDefinition> {
        self.entries
            .iter()
            .filter(|e| self.exported(e, target))
            .map(|e| e.definition.clone())
            .collect()
    }

    /// A registry (same executor and concurrency limit) with only the tools exported to
    /// `target`, in registration order; names are checked with [`NameRules::Standard`].
    pub fn export(&self, target: Target) -> Result<ToolRegistry, ExportError> {
        self.export_with(target, NameRules::Standard)
    }

    /// Like [`export`](Self::export), checking every exported tool's name against `rules`
    /// (such as [`NameRules::Python`] for MCP consumers that turn tools into Python functions).
    ///
    /// A name the rules reject is an [`ExportError::InvalidName`] here, not at call time.
    pub fn export_with(
        &self,
        target: Target,
        rules: NameRules,
    ) -> Result<ToolRegistry, ExportError> {
        let mut exported = ToolRegistry::new()
            .with_max_concurrency(self.max_concurrency)
            .with_executor(Arc::clone(&self.executor))
            .with_default_exports(self.default_exports);
        exported.id = self.id;
        for entry in &self.entries {
            if !self.exported(entry, target) {
                continue;
            }
            let name = &entry.definition.name;
            rules
                .check(name)
                .map_err(|reason| ExportError::InvalidName {
                    tool: name.clone(),
                    target,
                    reason,
                })?;
            exported.push_shared(Arc::clone(entry));
        }
        Ok(exported)
    }

    /// Runs `calls`, returning one result per call in call order.
    ///
    /// With `parallel`, the calls run concurrently inside the caller's task (at most
    /// [`max_concurrency`](Self::max_concurrency) at once); otherwise one after the other, in
    /// order. Nothing is spawned: dropping the future cancels the tools still running (barge-in).
    ///
    /// Every call gets a result: an unknown tool, arguments that are not a JSON object or do
    /// not match the schema, a tool's error and a tool's panic all become error results the
    /// model can read (`{"error": {"kind", "message"}}`).
    ///
    /// Each call goes through the registry's [`Executor`]; the batch is one run (its limits
    /// and cancellation token are shared by these calls only): use
    /// [`execute_in`](Self::execute_in) to share a run across batches.
    pub async fn execute(&self, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
        self.execute_in(calls, parallel, &self.executor.context())
            .await
    }

    /// Like [`execute`](Self::execute), in the run of `context`.
    pub async fn execute_in(
        &self,
        calls: &[ToolCall],
        parallel: bool,
        context: &CallContext,
    ) -> Vec<ToolResult> {
        self.execute_timed_in(calls, parallel, context)
            .await
            .into_iter()
            .map(|run| run.result)
            .collect()
    }

    /// Like [`execute`](Self::execute), with each call's latency.
    pub async fn execute_timed(&self, calls: &[ToolCall], parallel: bool) -> Vec<ToolRun> {
        self.execute_timed_in(calls, parallel, &self.executor.context())
            .await
    }

    /// Like [`execute_timed`](Self::execute_timed), in the run of `context`.
    pub async fn execute_timed_in(
        &self,
        calls: &[ToolCall],
        parallel: bool,
        context: &CallContext,
    ) -> Vec<ToolRun> {
        let mut slots: Vec<Option<ToolRun>> = vec![None; calls.len()];
        let mut finished = self.execute_each_in(calls, parallel, context.clone());
        while let Some((index, run)) = finished.next().await {
            if let Some(slot) = slots.get_mut(index) {
                *slot = Some(run);
            }
        }
        slots
            .into_iter()
            .zip(calls)
            .map(|(slot, call)| {
                // `execute_each` yields every index exactly once; this only keeps the promise
                // of one result per call should that ever break.
                slot.unwrap_or_else(|| ToolRun {
                    result: ToolResult::error(
                        call,
                        ToolErrorKind::ToolError,
                        "the tool did not report a result",
                    ),
                    latency: Duration::ZERO,
                })
            })
            .collect()
    }

    /// Runs `calls` like [`execute`](Self::execute), yielding each finished call with its index
    /// in `calls` as soon as it finishes (so in completion order when `parallel`).
    ///
    /// Dropping the stream cancels the calls still running.
    pub fn execute_each<'a>(
        &'a self,
        calls: &'a [ToolCall],
        parallel: bool,
    ) -> impl Stream<Item = (usize, ToolRun)> + Send + 'a {
        self.execute_each_in(calls, parallel, self.executor.context())
    }

    /// Like [`execute_each`](Self::execute_each), in the run of `context` (whose token
    /// cancels the running calls, e.g. on barge-in).
    pub fn execute_each_in<'a>(
        &'a self,
        calls: &'a [ToolCall],
        parallel: bool,
        context: CallContext,
    ) -> impl Stream<Item = (usize, ToolRun)> + Send + 'a {
        let limit = if parallel { self.max_concurrency } else { 1 };
        stream::iter(calls.iter().enumerate())
            .map(move |(index, call)| {
                let context = context.clone();
                async move { (index, self.executor.execute(self, call, &context).await) }
            })
            .buffer_unordered(limit)
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

    /// The registry's id (shared by its clones, subsets and exports).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn entry(&self, name: &str) -> Option<&Arc<Entry>> {
        self.by_name
            .get(name)
            .and_then(|&index| self.entries.get(index))
    }

    /// Checks `tool` and prepares its entry, without adding it.
    fn prepare(&self, tool: Arc<dyn Tool>) -> Result<Entry, RegistryError> {
        let name = tool.name().to_owned();
        if !is_valid_name(&name) {
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
        let strict = schema::normalize(&raw, Mode::Strict);
        if let Some(reference) = strict.unresolved.first() {
            return Err(invalid(format!(
                "`$ref` `{reference}` cannot be resolved; only references inside the schema \
                 (`#/$defs/...`, `#/definitions/...`) are supported"
            )));
        }
        if strict.schema.get("type") != Some(&Value::String("object".to_owned())) {
            return Err(invalid(
                "the arguments must be described as one object (`\"type\": \"object\"`), \
                 which is what model APIs require"
                    .to_owned(),
            ));
        }
        let lenient = schema::normalize(&raw, Mode::Lenient).schema;
        let validator = jsonschema::validator_for(&lenient).map_err(|e| invalid(e.to_string()))?;

        Ok(Entry {
            definition: ToolDefinition {
                name,
                description: tool.description().to_owned(),
                parameters: strict.schema,
            },
            tool,
            lenient,
            validator,
        })
    }

    fn push(&mut self, entry: Entry) {
        self.push_shared(Arc::new(entry));
    }

    fn push_shared(&mut self, entry: Arc<Entry>) {
        self.by_name
            .insert(entry.definition.name.clone(), self.entries.len());
        self.entries.push(entry);
    }
}

/// Whether `name` matches `^[a-zA-Z0-9_-]{1,64}$`.
fn is_valid_name(name: &str) -> bool {
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
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "get weather", "tool.name", "naïve", &"x".repeat(65)] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }
}
