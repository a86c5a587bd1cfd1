//! The result size limit: a result larger than the executor accepts becomes a `ToolError` the
//! model can read, wherever it comes from (the tool, a stored outcome, a cut-short call).

use crewline_core::ToolErrorKind;
use serde_json::Value;

use super::{Executor, ToolCallError};

impl Executor {
    /// `value`, or a `ToolError` when its content is over the result size limit.
    pub(crate) fn check_result_size(&self, value: Value) -> Result<Value, ToolCallError> {
        let Some(max) = self.max_result_bytes else {
            return Ok(value);
        };
        match result_size(&value, max) {
            Some(_) => Ok(value),
            None => Err(oversize(
                max,
                match &value {
                    Value::String(text) => format!("a string of {} bytes", text.len()),
                    _ => "a JSON value".to_owned(),
                },
            )),
        }
    }
}

/// The error for a result over the `max` bytes accepted; `what` describes it.
pub(crate) fn oversize(max: usize, what: String) -> ToolCallError {
    ToolCallError::new(
        ToolErrorKind::ToolError,
        format!(
            "the tool's result is larger than the {max} bytes this crew accepts; ask for less \
             (a narrower query, fewer items)"
        ),
    )
    .with_detail(format!("result over max_result_bytes ({max}); {what}"))
}

/// The size of `value`'s content as the model reads it (a string as is, anything else as
/// JSON), or `None` once it passes `max`: a huge result is not serialised twice.
pub(crate) fn result_size(value: &Value, max: usize) -> Option<usize> {
    if let Value::String(text) = value {
        return (text.len() <= max).then_some(text.len());
    }
    crewline_core::json_len_within(value, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_sizes_count_strings_as_is_and_other_values_as_json() {
        assert_eq!(result_size(&Value::from("héllo"), 10), Some(6));
        assert_eq!(result_size(&Value::from("héllo"), 5), None);
        assert_eq!(
            result_size(&serde_json::json!({"a": [1, 2]}), 100),
            Some(11)
        );
        assert_eq!(result_size(&serde_json::json!({"a": [1, 2]}), 10), None);
    }
}
