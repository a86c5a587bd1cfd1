//! The hooks stage: hooks before and after the call.
//!
//! A before-hook sees the validated arguments and may rewrite them or answer the call itself;
//! an after-hook sees (and may rewrite) the outcome. Hooks are trusted code: arguments they
//! rewrite are not validated again. Hooks add no error kind of their own.

mod stage;

pub(crate) use self::stage::Hooks;

use async_trait::async_trait;
use crewline_core::ToolCall;
use serde_json::Value;

use super::ToolCallError;

/// What a before-hook decides.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HookAction {
    /// Go on with the (possibly rewritten) arguments.
    Continue,
    /// Skip the tool: this value is the call's successful result.
    Respond(Value),
}

/// Runs before every call, after validation.
///
/// # Examples
///
/// A hook that answers from a fixture instead of calling the tool (in a demo, say):
///
/// ```
/// # use async_trait::async_trait;
/// # use crewline_tools::{Tool, ToolError, ToolPolicy};
/// # use serde_json::{Value, json};
/// # struct T;
/// # #[async_trait]
/// # impl Tool for T {
/// #     fn name(&self) -> &str { "get_weather" }
/// #     fn description(&self) -> &str { "A tool." }
/// #     fn parameters(&self) -> Value {
/// #         json!({"type": "object", "properties": {"city": {"type": "string"}}})
/// #     }
/// #     async fn call(&self, args: Value) -> Result<Value, ToolError> {
/// #         unreachable!("the hook answers first")
/// #     }
/// # }
/// use crewline_core::{ToolCall, ToolErrorKind};
/// use crewline_tools::executor::hooks::{BeforeHook, HookAction};
/// use crewline_tools::{ExecuteOptions, Executor, ToolRegistry};
///
/// struct Fixture;
///
/// #[async_trait]
/// impl BeforeHook for Fixture {
///     async fn before(&self, call: &ToolCall, _args: &mut Value) -> HookAction {
///         match call.name.as_str() {
///             "get_weather" => HookAction::Respond(json!({"sky": "cloudy"})),
///             _ => HookAction::Continue,
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut tools = ToolRegistry::new().with_executor(Executor::builder().before_hook(Fixture).build());
/// tools.register(T)?;
/// let call = ToolCall::new("call_1", "get_weather", r#"{"city": "Oslo"}"#);
/// let runs = tools.execute(&[call], ExecuteOptions::new()).await;
/// assert_eq!(runs[0].result.value(), Some(&json!({"sky": "cloudy"})));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait BeforeHook: Send + Sync {
    /// Observes the call; may rewrite `arguments` in place or answer with a result.
    async fn before(&self, call: &ToolCall, arguments: &mut Value) -> HookAction;
}

/// Runs after every call that reached the tool (or the cache), after output guardrails.
///
/// # Examples
///
/// A closure hook ([`FnAfterHook`]) that gives the model a gentler message for timeouts:
///
/// ```
/// # use async_trait::async_trait;
/// # use crewline_tools::{Tool, ToolError, ToolPolicy};
/// # use serde_json::{Value, json};
/// # struct T;
/// # #[async_trait]
/// # impl Tool for T {
/// #     fn name(&self) -> &str { "get_weather" }
/// #     fn description(&self) -> &str { "A tool." }
/// #     fn parameters(&self) -> Value {
/// #         json!({"type": "object", "properties": {"city": {"type": "string"}}})
/// #     }
/// #     async fn call(&self, args: Value) -> Result<Value, ToolError> {
/// #         tokio::time::sleep(std::time::Duration::from_secs(60)).await; Ok(json!(null))
/// #     }
/// # }
/// use std::time::Duration;
///
/// use crewline_core::{ToolCall, ToolErrorKind};
/// use crewline_tools::executor::hooks::FnAfterHook;
/// use crewline_tools::{ExecuteOptions, Executor, ToolCallError, ToolRegistry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let executor = Executor::builder()
///     .default_timeout(Duration::from_millis(10))
///     .after_hook(FnAfterHook(|_call: &ToolCall, outcome: &mut Result<Value, ToolCallError>| {
///         if let Err(error) = outcome {
///             if error.kind == ToolErrorKind::Timeout {
///                 error.message = "The weather service is slow today; say so.".into();
///             }
///         }
///     }))
///     .build();
/// let mut tools = ToolRegistry::new().with_executor(executor);
/// tools.register(T)?;
/// let call = ToolCall::new("call_1", "get_weather", r#"{"city": "Oslo"}"#);
/// let result = &tools.execute(&[call], ExecuteOptions::new()).await[0].result;
/// assert_eq!(result.error_kind(), Some(ToolErrorKind::Timeout));
/// assert_eq!(result.failure().map(|f| f.message.as_str()), Some("The weather service is slow today; say so."));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait AfterHook: Send + Sync {
    /// Observes the outcome; may rewrite it.
    async fn after(&self, call: &ToolCall, outcome: &mut Result<Value, ToolCallError>);
}

/// A before-hook from a synchronous closure.
pub struct FnBeforeHook<F>(pub F);

#[async_trait]
impl<F> BeforeHook for FnBeforeHook<F>
where
    F: Fn(&ToolCall, &mut Value) -> HookAction + Send + Sync,
{
    async fn before(&self, call: &ToolCall, arguments: &mut Value) -> HookAction {
        (self.0)(call, arguments)
    }
}

/// An after-hook from a synchronous closure.
pub struct FnAfterHook<F>(pub F);

#[async_trait]
impl<F> AfterHook for FnAfterHook<F>
where
    F: Fn(&ToolCall, &mut Result<Value, ToolCallError>) + Send + Sync,
{
    async fn after(&self, call: &ToolCall, outcome: &mut Result<Value, ToolCallError>) {
        (self.0)(call, outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn closure_hooks_rewrite_and_respond() {
        let rewrite = FnBeforeHook(|_: &ToolCall, args: &mut Value| {
            args["city"] = json!("Oslo");
            HookAction::Continue
        });
        let call = ToolCall::new("c", "t", "{}");
        let mut args = json!({"city": "Paris"});
        assert_eq!(rewrite.before(&call, &mut args).await, HookAction::Continue);
        assert_eq!(args, json!({"city": "Oslo"}));

        let after = FnAfterHook(|_: &ToolCall, outcome: &mut Result<Value, ToolCallError>| {
            *outcome = Ok(json!("redacted"));
        });
        let mut outcome = Ok(json!("secret"));
        after.after(&call, &mut outcome).await;
        assert_eq!(outcome.ok(), Some(json!("redacted")));
    }
}
