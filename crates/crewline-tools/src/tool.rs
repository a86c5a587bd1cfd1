use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use serde_json::Value;

use crate::Exports;

/// Something the model can call.
///
/// Implement it by hand for tools whose schema is only known at run time; otherwise use
/// `#[function_tool]`, which writes this impl from a Rust function.
///
/// # Examples
///
/// ```
/// use async_trait::async_trait;
/// use crewline_core::ToolCall;
/// use crewline_tools::{ExecuteOptions, Tool, ToolError, ToolRegistry};
/// use serde_json::{Value, json};
///
/// struct Weather;
///
/// #[async_trait]
/// impl Tool for Weather {
///     fn name(&self) -> &str {
///         "get_weather"
///     }
///     fn description(&self) -> &str {
///         "The weather in a city."
///     }
///     fn parameters(&self) -> Value {
///         json!({
///             "type": "object",
///             "properties": {"city": {"type": "string"}},
///             "required": ["city"],
///         })
///     }
///     async fn call(&self, args: Value) -> Result<Value, ToolError> {
///         // Arguments arrive already checked against `parameters`.
///         match args["city"].as_str() {
///             Some("Paris") => Ok(json!({"sky": "sunny", "celsius": 21})),
///             Some(city) => Err(ToolError::new(format!("No forecast for {city}; try Paris."))),
///             None => unreachable!("the schema requires a city"),
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), crewline_tools::RegistryError> {
/// let mut tools = ToolRegistry::new();
/// tools.register(Weather)?;
///
/// let calls = [
///     ToolCall::new("call_1", "get_weather", r#"{"city": "Paris"}"#),
///     ToolCall::new("call_2", "get_weather", r#"{"city": "Oslo"}"#),
/// ];
/// let runs = tools.execute(&calls, ExecuteOptions::new()).await;
/// assert_eq!(runs[0].result.value(), Some(&json!({"sky": "sunny", "celsius": 21})));
/// assert_eq!(
///     runs[1].result.content(),
///     r#"{"error":{"kind":"ToolError","message":"No forecast for Oslo; try Paris."}}"#,
/// );
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls the tool by (`[a-zA-Z0-9_-]{1,64}`).
    fn name(&self) -> &str;

    /// What the tool does, for the model.
    fn description(&self) -> &str;

    /// The JSON Schema of the arguments object, as written; the registry normalises it.
    fn parameters(&self) -> Value;

    /// The JSON Schema of the tool's successful result, if known (default `None`).
    ///
    /// `#[function_tool]` fills it in from the return type (the `T` of a `Result<T, E>`) when
    /// that type implements `schemars::JsonSchema`.
    fn result_schema(&self) -> Option<Value> {
        None
    }

    /// How the executor runs the tool: timeout, confirmation, caching, exports, and whether
    /// a barge-in may cancel it mid-call ([`ToolPolicy::cancellable`], the one place that says
    /// so).
    ///
    /// The default asks for nothing special ([`ToolPolicy::default`]).
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::default()
    }

    /// Runs the tool on arguments that already match [`Tool::parameters`].
    ///
    /// A returned string is the model's content as is; any other value is JSON-encoded.
    async fn call(&self, arguments: Value) -> Result<Value, ToolError>;
}

/// How the executor runs one tool.
///
/// A tool returns it from [`Tool::policy`]; `#[function_tool(timeout_ms = .., confirm,
/// cache_ttl_s = .., cancellable = false, strict)]` writes it for you.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use crewline_tools::{Exports, Target, ToolPolicy};
///
/// // A payment: ask first, never cut off half-way, give it longer than the default.
/// let payment = ToolPolicy::new()
///     .confirm(true)
///     .cancellable(false)
///     .timeout(Duration::from_secs(60));
/// assert!(payment.confirm && !payment.cancellable);
///
/// // A lookup of public data: cache it, and offer it over MCP too.
/// let lookup = ToolPolicy::new()
///     .cache_ttl(Duration::from_secs(300))
///     .exports(Exports::all());
/// assert!(lookup.exports.is_some_and(|e| e.allows(Target::Mcp)));
/// assert_eq!(ToolPolicy::default().timeout, None); // the executor's default applies
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolPolicy {
    /// The tool's own time limit (`None`: the executor's default).
    pub timeout: Option<Duration>,
    /// Whether each call needs approval first.
    pub confirm: bool,
    /// How long a successful result may be reused for the same arguments (`None`: never).
    pub cache_ttl: Option<Duration>,
    /// Whether cancelling the run (barge-in) stops the call mid-way (default `true`).
    ///
    /// `false` for tools whose effect must not be cut off half-way (a payment, a booking):
    /// the call then runs to completion in its own task even if the caller interrupts or its
    /// timeout passes (the model reads `StillRunning`); `#[function_tool(cancellable = false)]`
    /// sets it.
    pub cancellable: bool,
    /// Where the tool may be offered (crew loop, MCP, remote agents); `None`: where its
    /// registry's default says ([`ToolRegistry::with_default_exports`], the crew only unless
    /// changed).
    ///
    /// [`ToolRegistry::with_default_exports`]: crate::ToolRegistry::with_default_exports
    pub exports: Option<Exports>,
    /// Whether the model is asked to follow the schema exactly (OpenAI's strict mode:
    /// `"strict": true` is sent, and the schema is checked against its rules at
    /// registration); `None`: as its registry's default says ([`ToolRegistry::with_strict`],
    /// off unless changed). `#[function_tool(strict)]` sets it.
    ///
    /// [`ToolRegistry::with_strict`]: crate::ToolRegistry::with_strict
    pub strict: Option<bool>,
    /// Whether the tool's downstream dedupes calls by the call's
    /// [`IdempotencyKey`](crate::IdempotencyKey) (a payment API with an idempotency key):
    /// only then may a call whose outcome is unknown (its replica died mid-call) run again,
    /// under the same key (default `false`). `#[function_tool(dedupes_by_key)]` sets it.
    pub dedupes_by_key: bool,
    /// Whether a call answers "started" at once and runs on as a task of the session, its
    /// result coming back into the conversation when it lands (default `false`): for slow
    /// work the caller need not wait for (a booking, a search). Only in sessions that take
    /// tool notices ([`SessionScope::with_tool_notices`](crate::SessionScope::with_tool_notices),
    /// as a served crew's calls do); elsewhere the call runs like any other. The session's end
    /// cancels it; one call of the same arguments runs once per session.
    /// `#[function_tool(background)]` sets it.
    pub background: bool,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            timeout: None,
            confirm: false,
            cache_ttl: None,
            cancellable: true,
            exports: None,
            strict: None,
            dedupes_by_key: false,
            background: false,
        }
    }
}

impl ToolPolicy {
    /// The default policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// With this time limit.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Whether calls need approval.
    pub fn confirm(mut self, confirm: bool) -> Self {
        self.confirm = confirm;
        self
    }

    /// With results cached for `ttl`.
    pub fn cache_ttl(mut self, ttl: Duration) -> Self {
        self.cache_ttl = Some(ttl);
        self
    }

    /// Whether the tool's downstream dedupes by the call's idempotency key, so an unknown
    /// outcome may be retried under it.
    pub fn dedupes_by_key(mut self, dedupes: bool) -> Self {
        self.dedupes_by_key = dedupes;
        self
    }

    /// Whether calls run in the background of the session (see [`background`](Self::background)).
    pub fn background(mut self, background: bool) -> Self {
        self.background = background;
        self
    }

    /// Whether a cancelled run stops the call.
    pub fn cancellable(mut self, cancellable: bool) -> Self {
        self.cancellable = cancellable;
        self
    }

    /// Exported only as `exports` says.
    pub fn exports(mut self, exports: Exports) -> Self {
        self.exports = Some(exports);
        self
    }

    /// Strict (or not) whatever the registry's default.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = Some(strict);
        self
    }
}

/// A type whose methods are tools: what `#[tools]` on an impl block implements.
pub trait ToolProvider: Send + Sync + 'static {
    /// The tools of `agent`, each holding its own reference to it.
    fn tools(agent: &Arc<Self>) -> Vec<Arc<dyn Tool>>;
}

/// A provider the caller also holds: its tools share the caller's instance (state such as a
/// connection pool or a fake bank's books), not a copy.
impl<P: ToolProvider> ToolProvider for Arc<P> {
    fn tools(agent: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        P::tools(agent.as_ref())
    }
}

/// A tool's own failure.
///
/// `message` is what the model reads, so write it for the model ("No flights on that date;
/// ask for another date"). `detail` is for operators (logs, ledger) and never reaches the model.
///
/// Any `std::error::Error` converts into it with `?`; its text then becomes the message.
///
/// # Examples
///
/// ```
/// use crewline_tools::ToolError;
///
/// fn book(date: &str) -> Result<String, ToolError> {
///     if date.is_empty() {
///         // The model gave bad arguments: it is told `ToolArgsInvalid` and may retry.
///         return Err(ToolError::invalid_arguments("Give the date as YYYY-MM-DD."));
///     }
///     Err(ToolError::new("No flights on that date; ask for another date.")
///         .with_detail("upstream 503 from flights.example"))
/// }
///
/// let error = book("2026-12-24").unwrap_err();
/// assert_eq!(error.message(), "No flights on that date; ask for another date.");
/// assert_eq!(error.detail().map(|d| d.to_string()).as_deref(), Some("upstream 503 from flights.example"));
/// assert!(book("").unwrap_err().is_invalid_arguments());
///
/// // `?` turns any error into one, its text the model's message.
/// fn parse(n: &str) -> Result<u32, ToolError> {
///     Ok(n.parse::<u32>()?)
/// }
/// assert_eq!(parse("x").unwrap_err().message(), "invalid digit found in string");
/// ```
pub struct ToolError {
    message: String,
    detail: Option<Box<dyn std::error::Error + Send + Sync>>,
    invalid_arguments: bool,
    outcome_unknown: bool,
}

impl ToolError {
    /// A failure with a message for the model.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            detail: None,
            invalid_arguments: false,
            outcome_unknown: false,
        }
    }

    /// A failure caused by the model's arguments (reported as `ToolArgsInvalid`, so the model
    /// knows to correct them and retry).
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self {
            invalid_arguments: true,
            ..Self::new(message)
        }
    }

    /// Whether the model's arguments caused this failure.
    pub fn is_invalid_arguments(&self) -> bool {
        self.invalid_arguments
    }

    /// A call whose effects may or may not have happened (it was handed to a system that
    /// went quiet): reported as `OutcomeUnknown`, so the model does not run it again.
    pub fn outcome_unknown(message: impl Into<String>) -> Self {
        Self {
            outcome_unknown: true,
            ..Self::new(message)
        }
    }

    /// Whether this call's outcome is unknown (it may have run).
    pub fn is_outcome_unknown(&self) -> bool {
        self.outcome_unknown
    }

    /// Attaches the operator's detail (kept out of the model's view).
    pub fn with_detail(
        mut self,
        detail: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// What the model reads.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The model's message and the operator's detail, taken apart.
    pub(crate) fn into_parts(self) -> (String, Option<Box<dyn std::error::Error + Send + Sync>>) {
        (self.message, self.detail)
    }

    /// The operator's detail, if any.
    pub fn detail(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.detail.as_deref()
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolError")
            .field("message", &self.message)
            .field("detail", &self.detail)
            .field("invalid_arguments", &self.invalid_arguments)
            .field("outcome_unknown", &self.outcome_unknown)
            .finish()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, " ({detail})")?;
        }
        Ok(())
    }
}

// ToolError deliberately does not implement std::error::Error, so that this blanket impl (the
// one that makes `?` work on any error inside a tool) does not overlap `From<T> for T`.
impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(error: E) -> Self {
        Self {
            // The whole chain, each layer once: errors keep their causes out of `Display`,
            // and the model should read as much as it did when they did not.
            message: crewline_core::error_chain(&error),
            detail: Some(Box::new(error)),
            invalid_arguments: false,
            outcome_unknown: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_std_error_converts_with_its_text_as_the_model_message() {
        let io = std::io::Error::other("disk on fire");
        let error: ToolError = io.into();
        assert_eq!(error.message(), "disk on fire");
        assert!(error.detail().is_some());
    }

    #[test]
    fn detail_stays_apart_from_the_model_message() {
        let error = ToolError::new("Weather service unavailable, try later")
            .with_detail("upstream 503 from api.weather.example");
        assert_eq!(error.message(), "Weather service unavailable, try later");
        assert!(error.to_string().contains("upstream 503"));
    }
}
