//! What the model is shown.

use super::*;

#[test]
fn get_schemas_gives_openai_function_definitions_with_normalised_parameters() {
    let registry = registry_of([weather(), echo("echo")]);
    let schemas = registry.get_schemas();
    assert_eq!(schemas.len(), 2);
    let first = &schemas[0];
    assert_eq!(first["type"], "function");
    assert_eq!(first["function"]["name"], "get_weather");
    assert_eq!(first["function"]["description"], "A test tool.");
    let parameters = &first["function"]["parameters"];
    assert_eq!(parameters["type"], "object");
    assert_eq!(parameters["additionalProperties"], json!(false));
    assert_eq!(parameters["required"].as_array().unwrap().len(), 3);
    assert_eq!(
        parameters["properties"]["days"]["type"],
        json!(["integer", "null"])
    );
    assert_eq!(
        schemas[1]["function"]["parameters"],
        json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false})
    );
    let definitions = registry.definitions();
    assert_eq!(definitions[0].to_openai(), schemas[0]);
}

#[tokio::test]
async fn subset_keeps_only_the_named_tools() {
    let registry = registry_of([echo("a"), echo("b"), echo("c")]).with_max_concurrency(3);
    let subset = registry.subset(&["c", "a"]).unwrap();
    assert_eq!(subset.names(), ["c", "a"]);
    assert_eq!(subset.max_concurrency(), 3);
    assert!(subset.get("b").is_none());
    let results = results(&subset, &[call("1", "a", "{}"), call("2", "b", "{}")], true).await;
    assert!(!results[0].is_error());
    assert_eq!(results[1].error_kind(), Some(ToolErrorKind::UnknownTool));

    let error = registry.subset(&["a", "zzz"]).unwrap_err();
    assert!(matches!(error, RegistryError::UnknownTool(ref n) if n == "zzz"));
    assert!(error.to_string().contains("zzz"));
    assert!(matches!(
        registry.subset(&["a", "a"]),
        Err(RegistryError::DuplicateName(_))
    ));
}

#[test]
fn lookups_and_clones_share_the_tools() {
    let registry = registry_of([echo("a"), echo("b")]);
    assert_eq!(registry.len(), 2);
    assert!(!registry.is_empty());
    assert_eq!(registry.get("b").unwrap().name(), "b");
    assert!(registry.get("zzz").is_none());
    let clone = registry.clone();
    assert!(Arc::ptr_eq(
        clone.get("a").unwrap(),
        registry.get("a").unwrap()
    ));
    assert!(ToolRegistry::default().is_empty());
}

#[test]
fn the_registry_and_its_futures_can_cross_threads() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let registry = registry_of([echo("a")]);
    send_sync(&registry);
    let calls = [call("1", "a", "{}")];
    send(&registry.execute(&calls, ExecuteOptions::new()));
    send(&registry.execute_each(&calls, ExecuteOptions::new()));
}
