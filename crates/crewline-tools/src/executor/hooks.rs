//! Stages 2 and 8: hooks before and after the call.
//!
//! A before-hook sees the validated arguments and may rewrite them or answer the call itself;
//! an after-hook sees (and may rewrite) the outcome. Hooks are trusted code: arguments they
//! rewrite are not validated again. Hooks add no error kind of their own.

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
#[async_trait]
pub trait BeforeHook: Send + Sync {
    /// Observes the call; may rewrite `arguments` in place or answer with a result.
    async fn before(&self, call: &ToolCall, arguments: &mut Value) -> HookAction;
}

/// Runs after every call that reached the tool (or the cache), after output guardrails.
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
