//! Failures become results.

use super::*;

fn failing_registry() -> ToolRegistry {
    registry_of([
        weather(),
        tool("down", no_args(), |_| async {
            Err(ToolError::new("Weather service unavailable, try later")
                .with_detail("upstream 503 from api.internal.example"))
        }),
        tool("picky", no_args(), |_| async {
            Err(ToolError::invalid_arguments("`date` must be in the future"))
        }),
        tool("boom", no_args(), |_| async {
            if true {
                panic!("secret panic payload");
            }
            Ok(Value::Null)
        }),
    ])
}

async fn check_error_paths(parallel: bool) {
    let registry = failing_registry();
    let calls = [
        call("unknown", "get_wether", "{}"),
        call("not_json", "get_weather", "{location: Paris"),
        call("not_object", "get_weather", r#"["Paris"]"#),
        call(
            "mismatch",
            "get_weather",
            r#"{"location": "Paris", "address": {"zip": 75001}}"#,
        ),
        call("missing", "get_weather", r#"{"days": 2}"#),
        call("tool_error", "down", "{}"),
        call("invalid_args", "picky", "{}"),
        call("panic", "boom", "{}"),
        call("ok", "get_weather", r#"{"location": "Paris"}"#),
    ];
    let results = within(results(&registry, &calls, parallel)).await;
    assert_eq!(
        ids(&results),
        calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>()
    );
    let kinds: Vec<Option<ToolErrorKind>> = results.iter().map(ToolResult::error_kind).collect();
    use ToolErrorKind::*;
    assert_eq!(
        kinds,
        [
            Some(UnknownTool),
            Some(ToolArgsInvalid),
            Some(ToolArgsInvalid),
            Some(ToolArgsInvalid),
            Some(ToolArgsInvalid),
            Some(ToolError),
            Some(ToolArgsInvalid),
            Some(ToolError),
            None,
        ]
    );
    for result in &results[..8] {
        assert!(result.is_error(), "{result:?}");
    }

    let unknown = error_message(&results[0]);
    assert!(unknown.contains("get_wether"), "{unknown}");
    for name in ["get_weather", "down", "picky", "boom"] {
        assert!(unknown.contains(name), "available tools listed: {unknown}");
    }
    assert!(error_message(&results[1]).contains("not valid JSON"));
    assert!(error_message(&results[2]).contains("an array"));
    let mismatch = error_message(&results[3]);
    assert!(mismatch.contains("/address/zip"), "{mismatch}");
    assert!(mismatch.contains("string"), "{mismatch}");
    assert!(error_message(&results[4]).contains("location"));

    let down = &results[5];
    assert_eq!(
        error_message(down),
        "Weather service unavailable, try later"
    );
    assert!(
        !down.content().contains("upstream 503"),
        "operator detail leaked: {}",
        down.content()
    );
    assert_eq!(error_message(&results[6]), "`date` must be in the future");
    let panic = error_message(&results[7]);
    assert_eq!(panic, "the tool failed unexpectedly");
    assert!(!results[7].content().contains("secret"));

    assert!(!results[8].is_error());
    assert!(results[8].content().contains("sunny"));
}

#[tokio::test]
async fn every_failure_is_an_error_result_and_the_batch_goes_on_in_parallel() {
    check_error_paths(true).await;
}

#[tokio::test]
async fn every_failure_is_an_error_result_and_the_batch_goes_on_in_sequence() {
    check_error_paths(false).await;
}

#[tokio::test]
async fn calling_an_unregistered_tool_on_an_empty_registry_says_so() {
    let results = results(&ToolRegistry::new(), &[call("a", "anything", "{}")], true).await;
    assert_eq!(results[0].error_kind(), Some(ToolErrorKind::UnknownTool));
    assert!(error_message(&results[0]).contains("no tools"));
}

#[tokio::test]
async fn empty_arguments_count_as_an_empty_object() {
    let registry = registry_of([echo("echo")]);
    let calls = [call("a", "echo", ""), call("b", "echo", "  \n ")];
    for result in results(&registry, &calls, true).await {
        assert!(!result.is_error(), "{result:?}");
        assert_eq!(result.content(), "{}");
    }
}

#[tokio::test]
async fn optional_arguments_may_be_omitted_or_null() {
    // Strict-mode models send every property, with null for "not given"; the tool then sees
    // it left out (so serde defaults apply), except where the author's schema allows null.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let registry = registry_of([tool(
        "book",
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "nights": {"type": "integer", "default": 1},
                "note": {"type": ["string", "null"]}
            },
            "required": ["city"]
        }),
        move |arguments| {
            s.lock().unwrap().push(arguments);
            async { Ok(json!("booked")) }
        },
    )]);
    let calls = [
        call("omitted", "book", r#"{"city": "Rome"}"#),
        call(
            "nulls",
            "book",
            r#"{"city": "Rome", "nights": null, "note": null}"#,
        ),
        call(
            "given",
            "book",
            r#"{"city": "Rome", "nights": 2, "note": "late"}"#,
        ),
        call("null_required", "book", r#"{"city": null}"#),
    ];
    let results = results(&registry, &calls, false).await;
    assert!(results[..3].iter().all(|r| !r.is_error()), "{results:?}");
    assert_eq!(
        results[3].error_kind(),
        Some(ToolErrorKind::ToolArgsInvalid)
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [
            json!({"city": "Rome"}),
            json!({"city": "Rome", "note": null}),
            json!({"city": "Rome", "nights": 2, "note": "late"}),
        ]
    );
}

#[tokio::test]
async fn a_string_result_is_the_content_as_is_and_anything_else_is_json() {
    let registry = registry_of([
        tool("text", no_args(), |_| async { Ok(json!("18°C, cloudy")) }),
        tool("object", no_args(), |_| async { Ok(json!({"temp": 18})) }),
        tool("nothing", no_args(), |_| async { Ok(Value::Null) }),
    ]);
    let calls = [
        call("a", "text", "{}"),
        call("b", "object", "{}"),
        call("c", "nothing", "{}"),
    ];
    let results = results(&registry, &calls, true).await;
    let contents: Vec<String> = results.iter().map(ToolResult::content).collect();
    assert_eq!(contents, ["18°C, cloudy", r#"{"temp":18}"#, "null"]);
    assert!(
        results
            .iter()
            .all(|r| !r.is_error() && r.error_kind().is_none())
    );
    assert_eq!(results[0].name, "text");
}
