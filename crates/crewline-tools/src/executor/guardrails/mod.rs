//! The guardrails stage: guardrails on a call's input and on its output.
//!
//! Error kind: [`ToolErrorKind::GuardrailBlocked`];
//! the model reads the guardrail's reason, the operator also gets the guardrail's name.

mod stage;

pub(crate) use self::stage::Guard;

use async_trait::async_trait;
use crewline_core::{ToolCall, ToolErrorKind};
use serde_json::Value;

use super::ToolCallError;

/// A guardrail's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Let it through.
    Allow,
    /// Stop it; `reason` is written for the model.
    Block {
        /// Why, for the model.
        reason: String,
    },
}

impl Verdict {
    /// A block with a reason for the model.
    pub fn block(reason: impl Into<String>) -> Self {
        Self::Block {
            reason: reason.into(),
        }
    }
}

/// Checks a call's arguments before it runs and its output after.
///
/// # Examples
///
/// An output guardrail that keeps card numbers from reaching the model:
///
/// ```
/// # use async_trait::async_trait;
/// # use crewline_tools::{Tool, ToolError, ToolPolicy};
/// # use serde_json::{Value, json};
/// # struct T;
/// # #[async_trait]
/// # impl Tool for T {
/// #     fn name(&self) -> &str { "lookup_order" }
/// #     fn description(&self) -> &str { "A tool." }
/// #     fn parameters(&self) -> Value {
/// #         json!({"type": "object", "properties": {"city": {"type": "string"}}})
/// #     }
/// #     async fn call(&self, args: Value) -> Result<Value, ToolError> {
/// #         Ok(json!({"card": "4111 1111 1111 1111"}))
/// #     }
/// # }
/// use crewline_core::{ToolCall, ToolErrorKind};
/// use crewline_tools::executor::guardrails::{Guardrail, Verdict};
/// use crewline_tools::{ExecuteOptions, Executor, ToolRegistry};
///
/// struct NoCardNumbers;
///
/// #[async_trait]
/// impl Guardrail for NoCardNumbers {
///     fn name(&self) -> &str {
///         "no_card_numbers"
///     }
///     async fn check_output(&self, _call: &ToolCall, output: &Value) -> Verdict {
///         if output.get("card").is_some() {
///             return Verdict::block("That record holds payment details I can't read out.");
///         }
///         Verdict::Allow
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut tools = ToolRegistry::new().with_executor(Executor::builder().guardrail(NoCardNumbers).build());
/// tools.register(T)?;
/// let call = ToolCall::new("call_1", "lookup_order", "{}");
/// let result = &tools.execute(&[call], ExecuteOptions::new()).await[0].result;
/// assert_eq!(result.error_kind(), Some(ToolErrorKind::GuardrailBlocked));
/// assert!(!result.content().contains("4111"));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Guardrail: Send + Sync {
    /// The guardrail's name, for the operator.
    fn name(&self) -> &str;

    /// Checks the arguments (after hooks, before approval); allows by default.
    async fn check_input(&self, _call: &ToolCall, _arguments: &Value) -> Verdict {
        Verdict::Allow
    }

    /// Checks a successful output before the model sees it; allows by default.
    async fn check_output(&self, _call: &ToolCall, _output: &Value) -> Verdict {
        Verdict::Allow
    }
}

/// Which side of the call a guardrail blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Input,
    Output,
}

/// Runs `guardrails` in order on one side; the first block wins.
pub(crate) async fn check(
    guardrails: &[std::sync::Arc<dyn Guardrail>],
    side: Side,
    call: &ToolCall,
    value: &Value,
) -> Result<(), ToolCallError> {
    for guardrail in guardrails {
        let verdict = match side {
            Side::Input => guardrail.check_input(call, value).await,
            Side::Output => guardrail.check_output(call, value).await,
        };
        if let Verdict::Block { reason } = verdict {
            let what = match side {
                Side::Input => "call",
                Side::Output => "result",
            };
            return Err(ToolCallError::new(
                ToolErrorKind::GuardrailBlocked,
                format!("the {what} was blocked: {reason}"),
            )
            .with_detail(format!("{side:?} guardrail `{}`", guardrail.name())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    struct NoSecrets;

    #[async_trait]
    impl Guardrail for NoSecrets {
        fn name(&self) -> &str {
            "no-secrets"
        }
        async fn check_output(&self, _call: &ToolCall, output: &Value) -> Verdict {
            if output.to_string().contains("secret") {
                Verdict::block("the result held a secret")
            } else {
                Verdict::Allow
            }
        }
    }

    #[tokio::test]
    async fn the_first_block_wins_and_names_the_guardrail() {
        let rails: Vec<Arc<dyn Guardrail>> = vec![Arc::new(NoSecrets)];
        let call = ToolCall::new("c", "t", "{}");
        assert!(
            check(&rails, Side::Input, &call, &json!("secret"))
                .await
                .is_ok()
        );
        let error = check(&rails, Side::Output, &call, &json!("secret"))
            .await
            .err();
        let error = error.unwrap_or_else(|| panic!("expected a block"));
        assert_eq!(error.kind, ToolErrorKind::GuardrailBlocked);
        assert!(error.message.contains("held a secret"));
        assert!(error.detail.as_deref().unwrap_or("").contains("no-secrets"));
    }
}
