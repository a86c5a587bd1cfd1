//! Matching JSON values (tool arguments) and text (replies) against a scenario's matchers.

use serde_json::Value;

pub(crate) use crate::pattern::compile;
use crate::{
    record::ToolCallRecord,
    scenario::{ArgMatcher, ToolExpect},
};

/// Whether `actual` equals `expected`, numbers compared by value (`3` equals `3.0`).
pub(crate) fn json_equal(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, a)| b.get(key).is_some_and(|b| json_equal(a, b)))
        }
        _ => expected == actual,
    }
}

/// Whether `actual` contains `expected`: an object has each expected key with a value that
/// contains the expected one; an array has, for each expected element, one that contains it;
/// anything else is equal.
pub(crate) fn json_subset(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(expected), Value::Object(actual)) => expected
            .iter()
            .all(|(key, e)| actual.get(key).is_some_and(|a| json_subset(e, a))),
        (Value::Array(expected), Value::Array(actual)) => expected
            .iter()
            .all(|e| actual.iter().any(|a| json_subset(e, a))),
        _ => json_equal(expected, actual),
    }
}

/// A tool call's arguments as an object: crews log the model's object, but a string of
/// JSON (the raw wire form) is read too.
pub(crate) fn arguments_value(arguments: &Value) -> Value {
    match arguments {
        Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| arguments.clone()),
        other => other.clone(),
    }
}

/// The value at `key` in `arguments`: a JSON Pointer when `key` starts with `/`, else a
/// top-level argument.
fn argument<'a>(arguments: &'a Value, key: &str) -> Option<&'a Value> {
    if key.starts_with('/') {
        arguments.pointer(key)
    } else {
        arguments.get(key)
    }
}

/// A number, or a string holding one.
fn as_number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

impl ArgMatcher {
    /// Whether `value` (the argument, if present) satisfies every part of the matcher.
    fn matches(&self, value: Option<&Value>) -> bool {
        let Some(value) = value else {
            return false;
        };
        if let Some(expected) = &self.equals
            && !json_equal(expected, value)
        {
            return false;
        }
        if let Some(expected) = &self.subset
            && !json_subset(expected, value)
        {
            return false;
        }
        if let Some(pattern) = &self.regex {
            let text = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            // Checked when the scenario was loaded; a failure here matches nothing.
            if !compile(pattern).is_ok_and(|regex| regex.is_match(&text)) {
                return false;
            }
        }
        if self.min.is_some() || self.max.is_some() {
            let Some(number) = as_number(value) else {
                return false;
            };
            if self.min.is_some_and(|min| number < min) || self.max.is_some_and(|max| number > max)
            {
                return false;
            }
        }
        true
    }

    /// The matcher in words, e.g. `= "Paris"` or `in 1..=100`.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(expected) = &self.equals {
            parts.push(format!("= {expected}"));
        }
        if let Some(expected) = &self.subset {
            parts.push(format!("contains {expected}"));
        }
        if let Some(pattern) = &self.regex {
            parts.push(format!("~ /{pattern}/"));
        }
        match (self.min, self.max) {
            (Some(min), Some(max)) => parts.push(format!("in {min}..={max}")),
            (Some(min), None) => parts.push(format!(">= {min}")),
            (None, Some(max)) => parts.push(format!("<= {max}")),
            (None, None) => {}
        }
        parts.join(" and ")
    }
}

impl ToolExpect {
    /// Whether a logged call is one this expectation counts.
    pub(crate) fn matches_call(&self, call: &ToolCallRecord) -> bool {
        if call.name != self.name {
            return false;
        }
        if let Some(succeeded) = self.succeeded
            && call.outcome.as_ref().map(Result::is_ok) != Some(succeeded)
        {
            return false;
        }
        let arguments = arguments_value(&call.arguments);
        self.args
            .iter()
            .all(|(key, matcher)| matcher.matches(argument(&arguments, key)))
            && self
                .args_subset
                .as_ref()
                .is_none_or(|expected| json_subset(expected, &arguments))
    }

    /// The call this expects, in words, e.g. `get_weather(location = "Paris")`.
    pub(crate) fn describe_call(&self) -> String {
        let mut parts: Vec<String> = self
            .args
            .iter()
            .map(|(key, matcher)| format!("{key} {}", matcher.describe()))
            .collect();
        if let Some(subset) = &self.args_subset {
            parts.push(format!("args contain {subset}"));
        }
        let outcome = match self.succeeded {
            Some(true) => " that succeeded",
            Some(false) => " that failed",
            None => "",
        };
        format!("{}({}){outcome}", self.name, parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(args: Value) -> ToolExpect {
        serde_json::from_value(json!({"name": "pay", "args": args})).expect("a valid expectation")
    }

    fn call(name: &str, arguments: Value) -> ToolCallRecord {
        ToolCallRecord {
            name: name.to_owned(),
            arguments,
            outcome: Some(Ok(())),
        }
    }

    #[test]
    fn numbers_are_equal_by_value_and_objects_by_keys() {
        assert!(json_equal(&json!(3), &json!(3.0)));
        assert!(json_equal(
            &json!({"a": 1, "b": [1, 2]}),
            &json!({"b": [1.0, 2], "a": 1})
        ));
        assert!(!json_equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    }

    #[test]
    fn a_subset_ignores_extra_keys_and_finds_array_elements_anywhere() {
        let actual = json!({"to": {"iban": "DE1", "name": "Ada"}, "tags": ["x", "y"], "n": 5});
        assert!(json_subset(
            &json!({"to": {"iban": "DE1"}, "tags": ["y"]}),
            &actual
        ));
        assert!(!json_subset(&json!({"to": {"iban": "DE2"}}), &actual));
        assert!(!json_subset(&json!({"missing": 1}), &actual));
    }

    #[test]
    fn argument_matchers_cover_equality_regex_ranges_and_pointers() {
        let arguments = json!({"city": "Paris", "amount": "120.5", "to": {"iban": "DE12"}});
        assert!(
            tool(json!({"city": {"equals": "Paris"}}))
                .matches_call(&call("pay", arguments.clone()))
        );
        assert!(
            tool(json!({"city": {"regex": "(?i)^paris$"}}))
                .matches_call(&call("pay", arguments.clone()))
        );
        assert!(
            tool(json!({"amount": {"min": 100, "max": 200}}))
                .matches_call(&call("pay", arguments.clone()))
        );
        assert!(
            !tool(json!({"amount": {"max": 100}})).matches_call(&call("pay", arguments.clone()))
        );
        assert!(
            tool(json!({"/to/iban": {"regex": "^DE"}}))
                .matches_call(&call("pay", arguments.clone()))
        );
        assert!(
            !tool(json!({"missing": {"regex": ".*"}}))
                .matches_call(&call("pay", arguments.clone()))
        );
        assert!(!tool(json!({})).matches_call(&call("refund", arguments)));
    }

    #[test]
    fn succeeded_counts_only_calls_with_that_outcome() {
        let parked = ToolCallRecord {
            outcome: Some(Err("waiting for approval".to_owned())),
            ..call("pay", json!({}))
        };
        let ran = call("pay", json!({}));
        let only_ok: ToolExpect =
            serde_json::from_value(json!({"name": "pay", "succeeded": true})).expect("valid");
        assert!(!only_ok.matches_call(&parked));
        assert!(only_ok.matches_call(&ran));
        assert!(
            tool(json!({})).matches_call(&parked),
            "any outcome by default"
        );
    }

    #[test]
    fn arguments_logged_as_a_json_string_are_read_as_an_object() {
        let logged = json!("{\"city\":\"Tokyo\"}");
        assert!(tool(json!({"city": {"equals": "Tokyo"}})).matches_call(&call("pay", logged)));
    }

    #[test]
    fn a_pattern_that_compiles_too_large_is_refused() {
        assert!(compile("a{1000}{1000}").is_err());
        assert!(compile("(").is_err());
    }
}
