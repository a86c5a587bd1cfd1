//! Strict mode: which tools are strict, what their definitions say, and why a schema that
//! cannot be strict is refused at registration.

use std::collections::HashMap;

use crewline_tools::{ToolPolicy, schema_for};

use super::*;

/// `inner` with `policy`.
struct WithPolicy {
    inner: TestTool,
    policy: ToolPolicy,
}

#[async_trait]
impl Tool for WithPolicy {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn parameters(&self) -> Value {
        self.inner.parameters()
    }
    fn policy(&self) -> ToolPolicy {
        self.policy
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.inner.call(arguments).await
    }
}

fn strict(inner: TestTool, strict: bool) -> WithPolicy {
    WithPolicy {
        inner,
        policy: ToolPolicy::new().strict(strict),
    }
}

/// Tags a record: its one argument is a map (what a `HashMap<String, String>` argument gives).
fn lookup() -> TestTool {
    tool(
        "lookup",
        json!({
            "type": "object",
            "properties": {"tags": schema_for::<HashMap<String, String>>()},
            "required": ["tags"]
        }),
        |arguments| async move { Ok(arguments) },
    )
}

fn strictness(registry: &ToolRegistry) -> Vec<(String, bool)> {
    registry
        .definitions()
        .into_iter()
        .map(|d| (d.name, d.strict))
        .collect()
}

#[test]
fn a_strict_tool_registers_and_its_definition_says_strict() {
    let mut registry = ToolRegistry::new();
    registry.register(strict(weather(), true)).unwrap();
    let definition = &registry.definitions()[0];
    assert!(definition.strict);
    assert_eq!(registry.get_schemas()[0]["function"]["strict"], json!(true));
    // The schema shown is the normalised one, unchanged by being strict.
    assert_eq!(
        definition.parameters,
        registry_of([weather()]).definitions()[0].parameters
    );
}

#[test]
fn a_tool_that_is_not_strict_says_nothing_of_it() {
    let registry = registry_of([weather(), lookup()]);
    assert_eq!(
        strictness(&registry),
        [
            ("get_weather".to_owned(), false),
            ("lookup".to_owned(), false)
        ]
    );
    for schema in registry.get_schemas() {
        assert!(schema["function"].get("strict").is_none(), "{schema}");
    }
}

#[test]
fn a_strict_map_argument_fails_with_its_path_and_the_rule() {
    let mut registry = ToolRegistry::new();
    let error = registry.register(strict(lookup(), true)).unwrap_err();
    assert!(
        matches!(&error, RegistryError::NotStrict { name, path, .. }
            if name == "lookup" && path == "/properties/tags"),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with("tool `lookup`: `/properties/tags` is a map"),
        "{message}"
    );
    assert!(
        message.contains("turn strict off for this tool"),
        "{message}"
    );
    assert!(registry.is_empty(), "nothing is registered");
}

#[test]
fn the_registry_default_applies_to_tools_that_do_not_say_and_theirs_wins() {
    let mut registry = ToolRegistry::new().with_strict(true);
    registry.register(weather()).unwrap();
    registry.register(strict(lookup(), false)).unwrap();
    assert_eq!(
        strictness(&registry),
        [
            ("get_weather".to_owned(), true),
            ("lookup".to_owned(), false)
        ]
    );
    // A map under a strict default fails like a strict tool does.
    let error = registry
        .register(tool("tag", lookup().parameters, |a| async move { Ok(a) }))
        .unwrap_err();
    assert!(
        matches!(error, RegistryError::NotStrict { .. }),
        "{error:?}"
    );

    // The default off: only the tool that asks is strict.
    let mut registry = ToolRegistry::new().with_strict(false);
    registry.register(strict(weather(), true)).unwrap();
    registry.register(echo("echo")).unwrap();
    assert_eq!(
        strictness(&registry),
        [("get_weather".to_owned(), true), ("echo".to_owned(), false)]
    );
}

#[test]
fn subsets_keep_strictness_and_discover_uses_the_default() {
    let mut registry = ToolRegistry::new().with_strict(true);
    registry.register(weather()).unwrap();
    let subset = registry.subset(&["get_weather"]).unwrap();
    assert!(subset.definitions()[0].strict);

    // One tool of an agent cannot be strict: discover adds none.
    struct Agent;
    impl ToolProvider for Agent {
        fn tools(_agent: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
            vec![Arc::new(weather()), Arc::new(lookup())]
        }
    }
    let mut fresh = ToolRegistry::new().with_strict(true);
    let error = fresh.discover(&Arc::new(Agent)).unwrap_err();
    assert!(
        matches!(&error, RegistryError::NotStrict { name, .. } if name == "lookup"),
        "{error:?}"
    );
    assert!(fresh.is_empty());
}
