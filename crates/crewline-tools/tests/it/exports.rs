//! Export targets: which tools a registry offers to the crew, MCP and remote agents, and the
//! naming rules a target imposes.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use async_trait::async_trait;
use crewline_core::{ToolCall, ToolResult};
use crewline_tools::{
    ExecuteOptions, Executor, ExportError, Exports, NameRules, Target, Tool, ToolError, ToolPolicy,
    ToolRegistry,
};
use serde_json::{Value, json};

/// The results of `calls` run by `registry`, in call order (`parallel`: concurrently).
async fn results(registry: &ToolRegistry, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
    registry
        .execute(calls, ExecuteOptions::new().parallel(parallel))
        .await
        .into_iter()
        .map(|run| run.result)
        .collect()
}

struct Named {
    name: &'static str,
    exports: Exports,
}

#[async_trait]
impl Tool for Named {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "A test tool."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().exports(self.exports)
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        Ok(Value::from(self.name))
    }
}

fn registry(tools: &[(&'static str, Exports)]) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for (name, exports) in tools {
        registry
            .register(Named {
                name,
                exports: *exports,
            })
            .unwrap();
    }
    registry
}

/// A tool whose policy names no export targets.
struct Plain;

#[async_trait]
impl Tool for Plain {
    fn name(&self) -> &str {
        "plain"
    }
    fn description(&self) -> &str {
        "sets no exports"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        Ok(Value::Null)
    }
}

#[test]
fn by_default_a_tool_is_exported_to_the_crew_only() {
    assert_eq!(ToolPolicy::new().exports, None);
    assert_eq!(Exports::default(), Exports::only(&[Target::Crew]));
    let mut registry = ToolRegistry::new();
    registry.register(Plain).unwrap();
    assert_eq!(registry.definitions_for(Target::Crew).len(), 1);
    assert!(registry.definitions_for(Target::Mcp).is_empty());
    assert!(registry.definitions_for(Target::Remote).is_empty());
    assert!(registry.export(Target::Mcp).unwrap().is_empty());
}

#[test]
fn a_registry_can_opt_its_tools_in_but_a_tools_own_exports_win() {
    let mut registry = ToolRegistry::new().with_default_exports(Exports::all());
    registry.register(Plain).unwrap();
    registry
        .register(Named {
            name: "crew_only",
            exports: Exports::crew_only(),
        })
        .unwrap();
    let names = |target| {
        registry
            .definitions_for(target)
            .into_iter()
            .map(|d| d.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(Target::Crew), ["plain", "crew_only"]);
    assert_eq!(names(Target::Mcp), ["plain"]);
    assert_eq!(names(Target::Remote), ["plain"]);
    // An export keeps the registry's default for the tools it carries.
    let exported = registry.export(Target::Mcp).unwrap();
    assert_eq!(exported.definitions_for(Target::Mcp).len(), 1);
}

#[test]
fn an_export_keeps_only_the_tools_exported_to_its_target_in_order() {
    let registry = registry(&[
        ("everywhere", Exports::all()),
        ("mcp_only", Exports::only(&[Target::Mcp])),
        (
            "crew_and_remote",
            Exports::only(&[Target::Crew, Target::Remote]),
        ),
    ]);
    let names = |target| {
        registry
            .export(target)
            .unwrap()
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(Target::Crew), ["everywhere", "crew_and_remote"]);
    assert_eq!(names(Target::Mcp), ["everywhere", "mcp_only"]);
    assert_eq!(names(Target::Remote), ["everywhere", "crew_and_remote"]);

    let definitions: Vec<String> = registry
        .definitions_for(Target::Crew)
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(definitions, ["everywhere", "crew_and_remote"]);
    // `definitions` itself is unchanged: every tool.
    assert_eq!(registry.definitions().len(), 3);
}

#[test]
fn an_export_shares_the_executor_and_concurrency_limit() {
    let executor = Arc::new(Executor::builder().build());
    let registry = registry(&[("a", Exports::all())])
        .with_executor(Arc::clone(&executor))
        .with_max_concurrency(3);
    let exported = registry.export(Target::Remote).unwrap();
    assert!(Arc::ptr_eq(exported.executor(), &executor));
    assert_eq!(exported.max_concurrency(), 3);
}

#[tokio::test]
async fn exported_tools_still_run() {
    let registry = registry(&[("echo_name", Exports::all())]);
    let exported = registry.export(Target::Mcp).unwrap();
    let call = crewline_core::ToolCall::new("c1", "echo_name", "{}");
    let results = results(&exported, &[call], false).await;
    assert_eq!(results.len(), 1);
    assert!(!results[0].is_error(), "{:?}", results[0]);
}

#[test]
fn python_rules_reject_keywords_and_non_identifiers_at_export_time() {
    for (bad, why) in [
        ("def", "keyword"),
        ("None", "keyword"),
        ("get-weather", "not a Python identifier"),
        ("3d_render", "not a Python identifier"),
    ] {
        let registry = registry(&[("fine", Exports::all()), (bad, Exports::all())]);
        let error = registry
            .export_with(Target::Mcp, NameRules::Python)
            .unwrap_err();
        let ExportError::InvalidName {
            tool,
            target,
            reason,
        } = &error
        else {
            panic!("unexpected error {error:?}");
        };
        assert_eq!((tool.as_str(), *target), (bad, Target::Mcp));
        assert!(reason.contains(why), "{reason}");
        assert!(error.to_string().contains(bad), "{error}");
        // The standard rules accept every registered name.
        assert_eq!(registry.export(Target::Mcp).unwrap().len(), 2);
    }
}

#[test]
fn python_rules_only_check_the_tools_the_target_gets() {
    let registry = registry(&[
        ("lookup", Exports::all()),
        ("class", Exports::only(&[Target::Crew])),
    ]);
    let exported = registry
        .export_with(Target::Mcp, NameRules::Python)
        .unwrap();
    assert_eq!(exported.names(), ["lookup"]);
    assert!(
        registry
            .export_with(Target::Crew, NameRules::Python)
            .is_err()
    );
}

#[test]
fn all_35_python_keywords_are_rejected() {
    assert_eq!(crewline_tools::PYTHON_KEYWORDS.len(), 35);
    for keyword in crewline_tools::PYTHON_KEYWORDS {
        assert!(NameRules::Python.check(keyword).is_err(), "{keyword}");
    }
}
