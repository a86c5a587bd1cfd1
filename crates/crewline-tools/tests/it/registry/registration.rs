//! Registration.

use super::*;

#[test]
fn duplicate_names_are_rejected_and_the_first_tool_kept() {
    let mut registry = ToolRegistry::new();
    registry.register(echo("echo")).unwrap();
    let error = registry
        .register(tool("echo", no_args(), |_| async { Ok(json!("second")) }))
        .unwrap_err();
    assert!(
        matches!(error, RegistryError::DuplicateName(ref n) if n == "echo"),
        "{error}"
    );
    assert_eq!(registry.len(), 1);
    assert_eq!(
        registry.definitions()[0].parameters["properties"],
        json!({})
    );
}

#[test]
fn invalid_names_are_rejected() {
    for name in ["", "get weather", "dotted.name", "émoji", &"x".repeat(65)] {
        let mut registry = ToolRegistry::new();
        let error = registry.register(echo(name)).unwrap_err();
        assert!(
            matches!(error, RegistryError::InvalidName(_)),
            "{name}: {error}"
        );
        assert!(registry.is_empty());
    }
    let mut registry = ToolRegistry::new();
    registry
        .register(echo("a"))
        .unwrap()
        .register(echo(&"x".repeat(64)))
        .unwrap()
        .register(echo("get-weather_2"))
        .unwrap();
    assert_eq!(registry.len(), 3);
}

#[test]
fn unusable_schemas_are_rejected() {
    let cases = [
        json!({"type": "string"}),
        json!({"type": 5}),
        json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}}),
        json!({"type": "object", "properties": {"x": {"type": "string", "pattern": "(unclosed"}}}),
    ];
    for parameters in cases {
        let mut registry = ToolRegistry::new();
        let error = registry
            .register(tool("t", parameters.clone(), |_| async { Ok(Value::Null) }))
            .unwrap_err();
        assert!(
            matches!(error, RegistryError::InvalidSchema { ref name, .. } if name == "t"),
            "{parameters}: {error}"
        );
        assert!(registry.is_empty());
    }
}

struct Agent {
    tools: fn() -> Vec<TestTool>,
}

impl ToolProvider for Agent {
    fn tools(agent: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        (agent.tools)()
            .into_iter()
            .map(|t| Arc::new(t) as Arc<dyn Tool>)
            .collect()
    }
}

#[test]
fn discover_registers_all_tools_of_an_agent_or_none() {
    let mut registry = registry_of([echo("existing")]);

    let bad_name = Arc::new(Agent {
        tools: || vec![echo("fine"), echo("bad name")],
    });
    assert!(matches!(
        registry.discover(&bad_name),
        Err(RegistryError::InvalidName(_))
    ));
    let twice = Arc::new(Agent {
        tools: || vec![echo("same"), echo("same")],
    });
    assert!(matches!(
        registry.discover(&twice),
        Err(RegistryError::DuplicateName(_))
    ));
    let clash = Arc::new(Agent {
        tools: || vec![echo("new"), echo("existing")],
    });
    assert!(matches!(
        registry.discover(&clash),
        Err(RegistryError::DuplicateName(_))
    ));
    assert_eq!(registry.names(), ["existing"]);

    let good = Arc::new(Agent {
        tools: || vec![echo("b"), echo("a")],
    });
    registry.discover(&good).unwrap();
    assert_eq!(registry.names(), ["existing", "b", "a"]);
}
