//! The registry that holds and runs an agent's tools.

use std::{
    any::Any,
    collections::HashMap,
    fmt,
    panic::AssertUnwindSafe,
    sync::Arc,
    time::{Duration, Instant},
};

use crewline_core::{ToolCall, ToolDefinition, ToolErrorKind, ToolResult};
use futures::{FutureExt, Stream, StreamExt, stream};
use serde_json::Value;
use tracing::Instrument;

use crate::{
    RegistryError, Tool, ToolProvider,
    schema::{self, Mode},
};

/// How many tools run at once by default in a parallel round.
pub const DEFAULT_MAX_CONCURRENCY: usize = 8;

/// The longest tool name a model API accepts.
const MAX_NAME_LEN: usize = 64;

/// How many schema problems one `ToolArgsInvalid` message lists.
const MAX_REPORTED_SCHEMA_ERRORS: usize = 3;

/// How long one schema problem may get in a message: the validator quotes the offending value,
/// which can be a whole paragraph the model wrote.
const MAX_SCHEMA_ERROR_LEN: usize = 300;

/// What the model reads when a tool panics; the payload itself goes to the logs only.
const PANIC_MESSAGE: &str = "the tool failed unexpectedly";

/// One finished tool call: its result and how long it took.
#[derive(Debug, Clone)]
pub struct ToolRun {
    /// The result the model reads.
    pub result: ToolResult,
    /// Time from start to result.
    pub latency: Duration,
}

/// A registered tool with everything prepared for it at registration.
struct Entry {
    tool: Arc<dyn Tool>,
    /// What the model is shown (strict, normalised schema).
    definition: ToolDefinition,
    /// The lenient view the arguments are checked against (see [`crate::schema`]).
    lenient: Value,
    /// Compiled once from `lenient`, so calls do not pay for it.
    validator: jsonschema::Validator,
}

/// An agent's tools.
///
/// Cloning is cheap: the tools and their compiled schemas are shared.
#[derive(Clone)]
pub struct ToolRegistry {
    entries: Vec<Arc<Entry>>,
    by_name: HashMap<String, usize>,
    max_concurrency: usize,
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            by_name: HashMap::new(),
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
        }
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .field("max_concurrency", &self.max_concurrency)
            .finish()
    }
}

/// Why one call failed: the kind and the message the model reads.
struct Failure {
    kind: ToolErrorKind,
    message: String,
}

impl Failure {
    fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
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
        let mut subset = ToolRegistry::new().with_max_concurrency(self.max_concurrency);
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
    /// This is the plain runner; the executor of issue #4 (timeouts, approvals, result cache,
    /// run limits) is to wrap it, not to replace it.
    pub async fn execute(&self, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
        self.execute_timed(calls, parallel)
            .await
            .into_iter()
            .map(|run| run.result)
            .collect()
    }

    /// Like [`execute`](Self::execute), with each call's latency.
    pub async fn execute_timed(&self, calls: &[ToolCall], parallel: bool) -> Vec<ToolRun> {
        let mut slots: Vec<Option<ToolRun>> = vec![None; calls.len()];
        let mut finished = self.execute_each(calls, parallel);
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
        let limit = if parallel { self.max_concurrency } else { 1 };
        stream::iter(calls.iter().enumerate())
            .map(move |(index, call)| async move { (index, self.run(call).await) })
            .buffer_unordered(limit)
    }

    /// Runs one call, timed and traced.
    async fn run(&self, call: &ToolCall) -> ToolRun {
        let span = tracing::info_span!("tool.call", tool = %call.name, call_id = %call.id);
        async {
            let started = Instant::now();
            let outcome = self.dispatch(call).await;
            let latency = started.elapsed();
            let result = match outcome {
                Ok(value) => {
                    tracing::debug!(?latency, outcome = "ok", "tool call finished");
                    ToolResult::from_value(call, &value)
                }
                Err(failure) => {
                    tracing::debug!(?latency, outcome = %failure.kind, "tool call finished");
                    ToolResult::error(call, failure.kind, failure.message)
                }
            };
            ToolRun { result, latency }
        }
        .instrument(span)
        .await
    }

    /// Checks one call's tool and arguments, then runs the tool.
    async fn dispatch(&self, call: &ToolCall) -> Result<Value, Failure> {
        let Some(entry) = self.entry(&call.name) else {
            tracing::warn!("the model called an unknown tool");
            return Err(Failure::new(
                ToolErrorKind::UnknownTool,
                self.unknown_tool_message(&call.name),
            ));
        };

        let mut arguments = parse_arguments(&call.arguments).inspect_err(|failure| {
            tracing::warn!(reason = %failure.message, "invalid tool arguments");
        })?;
        if let Some(message) = schema_problems(&entry.validator, &arguments) {
            tracing::warn!(reason = %message, "tool arguments do not match the schema");
            return Err(Failure::new(ToolErrorKind::ToolArgsInvalid, message));
        }
        schema::strip_absent_nulls(&entry.lenient, &mut arguments);

        let tool = Arc::clone(&entry.tool);
        // The future is created inside the guarded block too, so a hand-written `call` that
        // panics before returning its future is caught as well.
        let guarded = AssertUnwindSafe(async move { tool.call(arguments).await }).catch_unwind();
        let outcome = if entry.tool.cancel_on_interrupt() {
            guarded.await
        } else {
            // A tool that must not be cut off half-way (a payment, a booking) runs as a task
            // of its own: dropping this future (barge-in) stops waiting for it, not the tool.
            let name = call.name.clone();
            let task = tokio::spawn(guarded.instrument(tracing::Span::current()));
            let mut finished = CompletionGuard { name, done: false };
            let joined = task.await;
            finished.done = true;
            match joined {
                Ok(outcome) => outcome,
                Err(error) => Err(Box::new(error.to_string()) as Box<dyn std::any::Any + Send>),
            }
        };
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                let kind = if error.is_invalid_arguments() {
                    ToolErrorKind::ToolArgsInvalid
                } else {
                    ToolErrorKind::ToolError
                };
                tracing::warn!(
                    %kind,
                    message = %error.message(),
                    detail = error.detail().map(tracing::field::display),
                    "tool returned an error"
                );
                Err(Failure::new(kind, error.message()))
            }
            Err(payload) => {
                tracing::warn!(panic = %panic_text(payload.as_ref()), "tool panicked");
                Err(Failure::new(ToolErrorKind::ToolError, PANIC_MESSAGE))
            }
        }
    }

    /// What the model reads after calling a tool that does not exist: the tools that do.
    fn unknown_tool_message(&self, name: &str) -> String {
        if self.entries.is_empty() {
            return format!("there is no tool named `{name}`; no tools are available");
        }
        format!(
            "there is no tool named `{name}`; available tools: {}",
            self.names().join(", ")
        )
    }

    fn entry(&self, name: &str) -> Option<&Arc<Entry>> {
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
        self.by_name
            .insert(entry.definition.name.clone(), self.entries.len());
        self.entries.push(Arc::new(entry));
    }
}

/// Whether `name` matches `^[a-zA-Z0-9_-]{1,64}$`.
fn is_valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The model's arguments as a JSON object; empty text counts as no arguments.
fn parse_arguments(text: &str) -> Result<Value, Failure> {
    if text.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| {
        Failure::new(
            ToolErrorKind::ToolArgsInvalid,
            format!("the arguments are not valid JSON: {e}"),
        )
    })?;
    if !value.is_object() {
        return Err(Failure::new(
            ToolErrorKind::ToolArgsInvalid,
            format!(
                "the arguments must be a JSON object, not {}",
                json_kind(&value)
            ),
        ));
    }
    Ok(value)
}

/// The model's view of why `arguments` do not match the schema, if they do not.
fn schema_problems(validator: &jsonschema::Validator, arguments: &Value) -> Option<String> {
    let mut errors = validator.iter_errors(arguments);
    let first = errors.next()?;
    let mut problems = vec![describe(&first)];
    let mut more = 0usize;
    for error in errors {
        if problems.len() < MAX_REPORTED_SCHEMA_ERRORS {
            problems.push(describe(&error));
        } else {
            more += 1;
        }
    }
    let mut message = format!(
        "the arguments do not match the tool's schema: {}",
        problems.join("; ")
    );
    if more > 0 {
        message.push_str(&format!(" (and {more} more)"));
    }
    Some(message)
}

/// One schema problem: where (a JSON pointer into the arguments) and what was expected.
fn describe(error: &jsonschema::ValidationError<'_>) -> String {
    let path = error.instance_path().as_str();
    let location = if path.is_empty() { "/" } else { path };
    let mut text = error.to_string();
    if text.len() > MAX_SCHEMA_ERROR_LEN {
        let mut end = MAX_SCHEMA_ERROR_LEN;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    format!("at `{location}`: {text}")
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A panic's message, for the logs.
fn panic_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic without a message)")
}

/// Notes a non-cancellable tool that is left running because its caller stopped waiting.
struct CompletionGuard {
    name: String,
    done: bool,
}

impl Drop for CompletionGuard {
    fn drop(&mut self) {
        if !self.done {
            tracing::info!(tool = %self.name, "turn interrupted; the tool runs on to completion");
        }
    }
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

    #[test]
    fn empty_arguments_are_an_empty_object() {
        for text in ["", "  \n\t"] {
            assert!(matches!(parse_arguments(text), Ok(Value::Object(m)) if m.is_empty()));
        }
    }

    #[test]
    fn long_schema_errors_are_truncated_on_a_char_boundary() {
        let validator = jsonschema::validator_for(&serde_json::json!({"type": "integer"}))
            .unwrap_or_else(|e| panic!("{e}"));
        let long = Value::String("é".repeat(1_000));
        let message = schema_problems(&validator, &long).unwrap_or_default();
        assert!(message.len() < 2 * MAX_SCHEMA_ERROR_LEN, "{message}");
        assert!(message.ends_with('…'), "{message}");
    }
}
