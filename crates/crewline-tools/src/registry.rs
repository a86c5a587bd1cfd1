//! The registry that holds and runs an agent's tools.

use std::{fmt, sync::Arc};

use crewline_core::{ToolCall, ToolDefinition, ToolErrorKind, ToolResult};
use futures::{Stream, StreamExt, stream};
use serde_json::Value;

use crate::{
    CallArguments, CallContext, Executor, ExportError, Exports, NameRules, RegistryError, Target,
    Tool, ToolProvider, ToolRun,
    catalog::{Catalog, Entry},
};

/// How many tools run at once by default in a parallel round.
pub const DEFAULT_MAX_CONCURRENCY: usize = 8;

/// How [`ToolRegistry::execute`] and [`ToolRegistry::execute_each`] run a batch of calls.
///
/// By default the calls run concurrently (at most the registry's
/// [`max_concurrency`](ToolRegistry::max_concurrency) at once) in a run of their own.
///
/// ```
/// use crewline_tools::{ExecuteOptions, ToolRegistry};
///
/// let tools = ToolRegistry::new();
/// // One run for several batches: its limits and cancellation token span them all.
/// let run = tools.context();
/// let options = ExecuteOptions::new().sequential().in_run(run);
/// assert!(!options.is_parallel());
/// ```
#[derive(Debug, Clone)]
pub struct ExecuteOptions {
    parallel: bool,
    context: Option<CallContext>,
    arguments: Vec<CallArguments>,
}

impl Default for ExecuteOptions {
    fn default() -> Self {
        Self {
            parallel: true,
            context: None,
            arguments: Vec::new(),
        }
    }
}

impl ExecuteOptions {
    /// Concurrent calls in a run of their own.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the calls run concurrently (`true`, the default) or one after the other.
    pub fn parallel(mut self, parallel: bool) -> Self {
        self.parallel = parallel;
        self
    }

    /// One call after the other, in call order.
    pub fn sequential(self) -> Self {
        self.parallel(false)
    }

    /// The calls belong to the run (and session) of `context`, whose limits, cancellation
    /// token and scope they share; without it, the batch is a run of its own (see
    /// [`ToolRegistry::context`]).
    pub fn in_run(mut self, context: CallContext) -> Self {
        self.context = Some(context);
        self
    }

    /// The calls' arguments, already read (one per call, in call order): the executor
    /// validates these instead of parsing the calls' text again. Calls past the end of the
    /// list are read from their text.
    pub fn read_arguments(mut self, arguments: Vec<CallArguments>) -> Self {
        self.arguments = arguments;
        self
    }

    /// Whether the calls run concurrently.
    pub fn is_parallel(&self) -> bool {
        self.parallel
    }
}

/// An agent's tools.
///
/// Cloning is cheap: the tools and their compiled schemas are shared.
///
/// # Examples
///
/// Register tools, show the model their definitions, run its calls:
///
/// ```
/// # use async_trait::async_trait;
/// # use crewline_tools::{Tool, ToolError};
/// # use serde_json::{Value, json};
/// # struct Weather;
/// # #[async_trait]
/// # impl Tool for Weather {
/// #     fn name(&self) -> &str { "get_weather" }
/// #     fn description(&self) -> &str { "The weather in a city." }
/// #     fn parameters(&self) -> Value {
/// #         json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
/// #     }
/// #     async fn call(&self, args: Value) -> Result<Value, ToolError> {
/// #         Ok(json!({"city": args["city"], "sky": "sunny"}))
/// #     }
/// # }
/// use crewline_core::{ToolCall, ToolErrorKind};
/// use crewline_tools::{ExecuteOptions, RegistryError, ToolRegistry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), RegistryError> {
/// let mut tools = ToolRegistry::new();
/// tools.register(Weather)?;
/// assert_eq!(tools.names(), ["get_weather"]);
///
/// // What goes in the model's request (schemas normalised for strict mode).
/// let definitions = tools.definitions();
/// assert_eq!(definitions[0].parameters["additionalProperties"], false);
///
/// // A name is registered once.
/// assert!(matches!(tools.register(Weather), Err(RegistryError::DuplicateName(_))));
///
/// // Every call gets exactly one result, in call order; none of them is an `Err`.
/// let calls = [
///     ToolCall::new("call_1", "get_weather", r#"{"city": "Paris"}"#),
///     ToolCall::new("call_2", "get_weather", r#"{"town": "Paris"}"#),
///     ToolCall::new("call_3", "book_flight", "{}"),
/// ];
/// let runs = tools.execute(&calls, ExecuteOptions::new()).await;
/// assert_eq!(runs[0].result.value(), Some(&json!({"city": "Paris", "sky": "sunny"})));
/// assert_eq!(runs[1].result.error_kind(), Some(ToolErrorKind::ToolArgsInvalid));
/// assert_eq!(runs[2].result.error_kind(), Some(ToolErrorKind::UnknownTool));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ToolRegistry {
    catalog: Catalog,
    max_concurrency: usize,
    executor: Arc<Executor>,
    /// The exports of tools whose policy sets none.
    default_exports: Exports,
    /// Whether tools whose policy does not say are strict.
    strict: bool,
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self {
            catalog: Catalog::default(),
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            // An executor of the registry's own: what it keeps between calls (the cache, the
            // calls still running) is shared by its clones, subsets and exports only.
            executor: Arc::new(Executor::default()),
            default_exports: Exports::crew_only(),
            strict: false,
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
    /// An empty registry with a default executor of its own ([`Executor::default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The same registry, running at most `limit` tools at once in a parallel round (0 is 1).
    pub fn with_max_concurrency(mut self, limit: usize) -> Self {
        self.max_concurrency = limit.max(1);
        self
    }

    /// The same registry, running its calls through `executor` (an `Executor` or an
    /// `Arc<Executor>` shared with other registries) instead of a default one of its own.
    pub fn with_executor(mut self, executor: impl Into<Arc<Executor>>) -> Self {
        self.executor = executor.into();
        self
    }

    /// The same registry, exporting the tools whose policy names no targets to `exports`
    /// (default [`Exports::crew_only`]): `with_default_exports(Exports::all())` offers them
    /// over MCP and to remote agents too. A tool's own `export = ".."` always wins.
    pub fn with_default_exports(mut self, exports: Exports) -> Self {
        self.default_exports = exports;
        self
    }

    /// The same registry, making the tools it registers from now on whose policy does not say
    /// ([`ToolPolicy::strict`]) strict or not (default: not): a strict tool's definition asks
    /// the model to follow its schema exactly (OpenAI's `"strict": true`), and its schema is
    /// checked against strict mode's rules at registration ([`RegistryError::NotStrict`]).
    /// A tool's own setting always wins.
    ///
    /// [`ToolPolicy::strict`]: crate::ToolPolicy::strict
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
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
        let entry = self.catalog.prepare(tool, self.strict)?;
        self.catalog.push(Arc::new(entry));
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
            let entry = self.catalog.prepare(tool, self.strict)?;
            if prepared
                .iter()
                .any(|e| e.definition.name == entry.definition.name)
            {
                return Err(RegistryError::DuplicateName(entry.definition.name));
            }
            prepared.push(entry);
        }
        for entry in prepared {
            self.catalog.push(Arc::new(entry));
        }
        Ok(self)
    }

    /// The tools' definitions, with normalised schemas, in registration order.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.catalog
            .entries()
            .iter()
            .map(|e| e.definition.clone())
            .collect()
    }

    /// The OpenAI tool definitions (`{"type": "function", "function": {...}}`), in
    /// registration order.
    pub fn get_schemas(&self) -> Vec<Value> {
        self.catalog
            .entries()
            .iter()
            .map(|e| e.definition.to_openai())
            .collect()
    }

    /// The tools' names, in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.catalog.names()
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.catalog.entry(name).map(|e| &e.tool)
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.catalog.entries().len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.catalog.entries().is_empty()
    }

    /// A registry with only the tools `names`, in that order (for a sub-agent that may use a
    /// few of its parent's tools). Same concurrency limit.
    pub fn subset(&self, names: &[&str]) -> Result<ToolRegistry, RegistryError> {
        let mut subset = self.empty_like();
        for name in names {
            let entry = self
                .catalog
                .entry(name)
                .ok_or_else(|| RegistryError::UnknownTool((*name).to_owned()))?;
            if subset.catalog.contains(name) {
                return Err(RegistryError::DuplicateName((*name).to_owned()));
            }
            subset.catalog.push(Arc::clone(entry));
        }
        Ok(subset)
    }

    /// The definitions of the tools exported to `target` (see [`ToolPolicy::exports`]), in
    /// registration order. The crew's tool loop should offer `definitions_for(Target::Crew)`.
    ///
    /// [`ToolPolicy::exports`]: crate::ToolPolicy::exports
    pub fn definitions_for(&self, target: Target) -> Vec<ToolDefinition> {
        self.catalog
            .entries()
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
        let mut exported = self.empty_like();
        for entry in self.catalog.entries() {
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
            exported.catalog.push(Arc::clone(entry));
        }
        Ok(exported)
    }

    /// Runs `calls`, returning one run (result and latency) per call, in call order.
    ///
    /// With [`ExecuteOptions::parallel`] (the default), the calls run concurrently inside the
    /// caller's task (at most [`max_concurrency`](Self::max_concurrency) at once); otherwise
    /// one after the other, in order. Nothing is spawned: dropping the future cancels the
    /// tools still running (barge-in).
    ///
    /// Every call gets a result: an unknown tool, arguments that are not a JSON object or do
    /// not match the schema, a tool's error and a tool's panic all become error results the
    /// model can read (`{"error": {"kind", "message"}}`).
    ///
    /// Each call goes through the registry's [`Executor`]; the batch is one run (its limits
    /// and cancellation token are shared by these calls only) unless
    /// [`ExecuteOptions::in_run`] names one.
    ///
    /// # Examples
    ///
    /// ```
    /// use crewline_core::ToolCall;
    /// use crewline_tools::{ExecuteOptions, ToolRegistry};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let tools = ToolRegistry::new();
    /// let calls = [ToolCall::new("call_1", "get_weather", r#"{"location":"Oslo"}"#)];
    /// let runs = tools.execute(&calls, ExecuteOptions::new()).await;
    /// // No such tool: the model reads why, and which tools there are.
    /// assert!(runs[0].result.is_error());
    /// # });
    /// ```
    pub async fn execute(&self, calls: &[ToolCall], options: ExecuteOptions) -> Vec<ToolRun> {
        let mut slots: Vec<Option<ToolRun>> = vec![None; calls.len()];
        let mut finished = self.execute_each(calls, options);
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
                    latency: std::time::Duration::ZERO,
                })
            })
            .collect()
    }

    /// Runs `calls` like [`execute`](Self::execute), yielding each finished call with its index
    /// in `calls` as soon as it finishes (so in completion order when parallel).
    ///
    /// Dropping the stream cancels the calls still running; so does the token of the run
    /// named by [`ExecuteOptions::in_run`] (a barge-in).
    ///
    /// # Examples
    ///
    /// ```
    /// # use async_trait::async_trait;
    /// # use crewline_tools::{Tool, ToolError};
    /// # use serde_json::{Value, json};
    /// # /// Answers after `ms` milliseconds.
    /// # struct Slow;
    /// # #[async_trait]
    /// # impl Tool for Slow {
    /// #     fn name(&self) -> &str { "slow" }
    /// #     fn description(&self) -> &str { "Waits, then answers." }
    /// #     fn parameters(&self) -> Value { json!({"type": "object", "properties": {"ms": {"type": "integer"}}}) }
    /// #     async fn call(&self, args: Value) -> Result<Value, ToolError> {
    /// #         let ms = args["ms"].as_u64().unwrap_or(0);
    /// #         tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    /// #         Ok(json!(ms))
    /// #     }
    /// # }
    /// use crewline_core::ToolCall;
    /// use crewline_tools::{ExecuteOptions, ToolRegistry};
    /// use futures::StreamExt;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), crewline_tools::RegistryError> {
    /// let mut tools = ToolRegistry::new();
    /// tools.register(Slow)?;
    /// let calls = [
    ///     ToolCall::new("call_1", "slow", r#"{"ms": 300}"#),
    ///     ToolCall::new("call_2", "slow", r#"{"ms": 100}"#),
    /// ];
    /// // Each result as soon as it is ready, with its place in `calls`.
    /// let order: Vec<usize> = tools
    ///     .execute_each(&calls, ExecuteOptions::new())
    ///     .map(|(index, _run)| index)
    ///     .collect()
    ///     .await;
    /// assert_eq!(order, [1, 0]);
    ///
    /// // One after the other: in call order.
    /// let sequential: Vec<usize> =
    ///     tools.execute_each(&calls, ExecuteOptions::new().sequential()).map(|(i, _)| i).collect().await;
    /// assert_eq!(sequential, [0, 1]);
    /// # Ok(()) }
    /// ```
    pub fn execute_each<'a>(
        &'a self,
        calls: &'a [ToolCall],
        options: ExecuteOptions,
    ) -> impl Stream<Item = (usize, ToolRun)> + Send + 'a {
        let limit = if options.parallel {
            self.max_concurrency
        } else {
            1
        };
        let context = options.context.unwrap_or_else(|| self.context());
        let mut read = options.arguments.into_iter();
        stream::iter(calls.iter().enumerate())
            .map(move |(index, call)| {
                let context = context.clone();
                let arguments = read
                    .next()
                    .unwrap_or_else(|| CallArguments::parse(&call.arguments));
                async move {
                    let run = self
                        .executor
                        .execute(&self.catalog, call, arguments, &context)
                        .await;
                    (index, run)
                }
            })
            .buffer_unordered(limit)
    }

    /// Runs one call in the run of `context`: what an MCP server or a remote agent does with
    /// each request. Like [`execute`](Self::execute), it never fails.
    pub async fn execute_one(&self, call: &ToolCall, context: &CallContext) -> ToolRun {
        let arguments = CallArguments::parse(&call.arguments);
        self.executor
            .execute(&self.catalog, call, arguments, context)
            .await
    }

    /// What the model reads for `call` when its caller stopped waiting before it finished (a
    /// barge-in dropped the turn): the real outcome of a non-cancellable call that has
    /// finished, `StillRunning` for one still running, what a cancellable call's tool said
    /// being cut short means ([`CutShort`](crate::CutShort): an unknown outcome once it may
    /// have run elsewhere), `Cancelled` for anything else (a cancellable call was stopped; a
    /// call that had not started never will).
    ///
    /// Synchronous, for drop guards: output guardrails and after-hooks cannot run here, so
    /// with any of them configured a finished outcome is not handed over but left for the
    /// retry (`StillRunning`), which reads it through the whole pipeline.
    pub fn interrupted(&self, call: &ToolCall, context: &CallContext) -> ToolResult {
        self.executor.interrupted(&self.catalog, call, context)
    }

    /// A context for a new run of this registry's executor (its run limits, a fresh session
    /// scope): [`Executor::context`].
    pub fn context(&self) -> CallContext {
        self.executor.context()
    }

    /// An empty registry with the same executor, settings and id (for a subset or an export).
    fn empty_like(&self) -> ToolRegistry {
        ToolRegistry {
            catalog: self.catalog.empty_like(),
            max_concurrency: self.max_concurrency,
            executor: Arc::clone(&self.executor),
            default_exports: self.default_exports,
            strict: self.strict,
        }
    }
}
