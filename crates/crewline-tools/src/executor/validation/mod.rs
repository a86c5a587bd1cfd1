//! The validation stage: argument validation against the schema compiled at registration.
//!
//! Error kind: [`ToolErrorKind::ToolArgsInvalid`], with the JSON path of each problem.

mod stage;

pub(crate) use self::stage::Validate;

use crewline_core::ToolErrorKind;
use serde_json::Value;

use super::ToolCallError;
use crate::{catalog::Entry, schema};

/// How validation failures are reported to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidationConfig {
    /// How many schema problems one message lists.
    pub max_reported_errors: usize,
    /// How long one problem may get in a message: the validator quotes the offending value,
    /// which can be a whole paragraph the model wrote.
    pub max_error_len: usize,
}

impl Default for ValidationConfig {
    fn default() -> Self {
        Self {
            max_reported_errors: 3,
            max_error_len: 300,
        }
    }
}

/// A call's arguments read once from the model's text: the executor validates this value and
/// the tool logs print it, so the text is parsed once on a call's way.
///
/// Text that is not JSON stays a structured [`ToolErrorKind::ToolArgsInvalid`] error, which
/// the executor hands the model as the call's result (the tool never runs).
///
/// # Examples
///
/// ```
/// use crewline_tools::executor::validation::CallArguments;
/// use serde_json::json;
///
/// let read = CallArguments::parse(r#"{"location": "Oslo"}"#);
/// assert_eq!(read.logged(), json!({"location": "Oslo"}));
/// // What the model sent is not JSON: the logs print `{}`, the model reads why.
/// assert_eq!(CallArguments::parse("{nope").logged(), json!({}));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CallArguments(Result<Value, ToolCallError>);

impl CallArguments {
    /// Reads the model's argument text; empty text counts as no arguments (`{}`).
    pub fn parse(text: &str) -> Self {
        Self(parse_arguments(text))
    }

    /// The arguments as the tool logs print them: the model's object, or `{}` when the model
    /// sent anything else (as the reference).
    pub fn logged(&self) -> Value {
        match &self.0 {
            Ok(value @ Value::Object(_)) => value.clone(),
            _ => Value::Object(serde_json::Map::new()),
        }
    }

    /// The parsed value, or why the text is not JSON.
    pub fn value(&self) -> Result<&Value, &ToolCallError> {
        self.0.as_ref()
    }

    /// Takes the arguments out, leaving `null` (nothing is allocated).
    pub(crate) fn take(&mut self) -> Self {
        Self(std::mem::replace(&mut self.0, Ok(Value::Null)))
    }
}

impl ValidationConfig {
    /// Checks the model's arguments, as read, against the tool's schema.
    pub(crate) fn validate_read(
        &self,
        entry: &Entry,
        arguments: CallArguments,
    ) -> Result<Value, ToolCallError> {
        self.validate_value(entry, arguments.0?)
    }

    /// Checks an arguments value (the model's, or an approver's edit) against the schema and
    /// drops the `null`s that stand for absent optional arguments.
    pub(crate) fn validate_value(
        &self,
        entry: &Entry,
        mut arguments: Value,
    ) -> Result<Value, ToolCallError> {
        if !arguments.is_object() {
            return Err(ToolCallError::new(
                ToolErrorKind::ToolArgsInvalid,
                format!(
                    "the arguments must be a JSON object, not {}",
                    json_kind(&arguments)
                ),
            ));
        }
        if let Some(message) = self.schema_problems(&entry.validator, &arguments) {
            return Err(ToolCallError::new(ToolErrorKind::ToolArgsInvalid, message));
        }
        schema::strip_absent_nulls(&entry.lenient, &mut arguments);
        Ok(arguments)
    }

    /// The model's view of why `arguments` do not match the schema, if they do not.
    fn schema_problems(
        &self,
        validator: &jsonschema::Validator,
        arguments: &Value,
    ) -> Option<String> {
        let mut errors = validator.iter_errors(arguments);
        let first = errors.next()?;
        let mut problems = vec![self.describe(&first)];
        let mut more = 0usize;
        for error in errors {
            if problems.len() < self.max_reported_errors.max(1) {
                problems.push(self.describe(&error));
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
    fn describe(&self, error: &jsonschema::ValidationError<'_>) -> String {
        let path = error.instance_path().as_str();
        let location = if path.is_empty() { "/" } else { path };
        let mut text = error.to_string();
        if text.len() > self.max_error_len {
            let mut end = self.max_error_len;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push('…');
        }
        format!("at `{location}`: {text}")
    }
}

/// The model's arguments as a JSON value; empty text counts as no arguments.
fn parse_arguments(text: &str) -> Result<Value, ToolCallError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(text).map_err(|e| {
        ToolCallError::new(
            ToolErrorKind::ToolArgsInvalid,
            format!("the arguments are not valid JSON: {e}"),
        )
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_arguments_are_an_empty_object() {
        for text in ["", "  \n\t"] {
            assert!(matches!(parse_arguments(text), Ok(Value::Object(m)) if m.is_empty()));
        }
    }

    #[test]
    fn logged_arguments_are_the_object_or_an_empty_one() {
        let cases = [
            (r#"{"a": [1, null]}"#, serde_json::json!({"a": [1, null]})),
            ("", serde_json::json!({})),
            ("[1, 2]", serde_json::json!({})),
            ("\"text\"", serde_json::json!({})),
            ("{nope", serde_json::json!({})),
        ];
        for (text, logged) in cases {
            assert_eq!(CallArguments::parse(text).logged(), logged, "{text}");
        }
        let broken = CallArguments::parse("{nope");
        assert_eq!(
            broken.value().err().map(|e| e.kind),
            Some(ToolErrorKind::ToolArgsInvalid)
        );
    }

    #[test]
    fn bad_json_is_args_invalid() {
        let error = parse_arguments("{nope").err();
        assert_eq!(error.map(|e| e.kind), Some(ToolErrorKind::ToolArgsInvalid));
    }

    #[test]
    fn long_schema_errors_are_truncated_on_a_char_boundary() {
        let config = ValidationConfig::default();
        let validator = jsonschema::validator_for(&serde_json::json!({"type": "integer"}))
            .unwrap_or_else(|e| panic!("{e}"));
        let long = Value::String("é".repeat(1_000));
        let message = config
            .schema_problems(&validator, &long)
            .unwrap_or_default();
        assert!(message.len() < 2 * config.max_error_len, "{message}");
        assert!(message.ends_with('…'), "{message}");
    }

    #[test]
    fn problems_name_the_json_path() {
        let config = ValidationConfig::default();
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}}}
        });
        let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{e}"));
        let message = config
            .schema_problems(&validator, &serde_json::json!({"a": {"b": "x"}}))
            .unwrap_or_default();
        assert!(message.contains("`/a/b`"), "{message}");
    }
}
