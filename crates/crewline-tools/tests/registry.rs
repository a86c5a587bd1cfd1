//! The tool registry: registration, definitions, and running the model's tool calls.

#![allow(clippy::unwrap_used)]

use std::{
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_tools::{
    DEFAULT_MAX_CONCURRENCY, ExecuteOptions, RegistryError, Tool, ToolError, ToolProvider,
    ToolRegistry,
};
use futures::{StreamExt, future::BoxFuture};
use serde_json::{Value, json};
use tokio::sync::{Barrier, Notify, Semaphore, oneshot, watch};

/// The results of `calls` run by `registry`, in call order (`parallel`: concurrently).
async fn results(registry: &ToolRegistry, calls: &[ToolCall], parallel: bool) -> Vec<ToolResult> {
    registry
        .execute(calls, ExecuteOptions::new().parallel(parallel))
        .await
        .into_iter()
        .map(|run| run.result)
        .collect()
}

/// Generous: only reached when a test is about to fail (a deadlock), never on the happy path.
const DEADLOCK: Duration = Duration::from_secs(20);

type Body = Arc<dyn Fn(Value) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync>;

/// A hand-written tool whose body is a closure.
struct TestTool {
    name: String,
    parameters: Value,
    body: Body,
}

#[async_trait]
impl Tool for TestTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "A test tool."
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        (self.body)(arguments).await
    }
}

fn tool<F, Fut>(name: &str, parameters: Value, body: F) -> TestTool
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    TestTool {
        name: name.to_owned(),
        parameters,
        body: Arc::new(move |arguments| Box::pin(body(arguments))),
    }
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

/// Returns its arguments.
fn echo(name: &str) -> TestTool {
    tool(name, json!({"type": "object"}), |arguments| async move {
        Ok(arguments)
    })
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

fn registry_of(tools: impl IntoIterator<Item = TestTool>) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for t in tools {
        registry.register(t).unwrap();
    }
    registry
}

async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLOCK, future)
        .await
        .expect("deadlocked")
}

fn ids(results: &[ToolResult]) -> Vec<&str> {
    results.iter().map(|r| r.tool_call_id.as_str()).collect()
}

fn error_message(result: &ToolResult) -> String {
    let content: Value = serde_json::from_str(&result.content()).unwrap();
    content["error"]["message"].as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------------------------------------
// Running calls

#[tokio::test]
async fn parallel_results_are_in_call_order_even_when_they_finish_out_of_order() {
    // `wait` can only finish after `open` ran, so completion order is 1, 2, 0.
    let gate = Arc::new(Notify::new());
    let (g1, g2) = (Arc::clone(&gate), Arc::clone(&gate));
    let registry = registry_of([
        tool("wait", no_args(), move |_| {
            let gate = Arc::clone(&g1);
            async move {
                gate.notified().await;
                Ok(json!("waited"))
            }
        }),
        tool("open", no_args(), move |_| {
            let gate = Arc::clone(&g2);
            async move {
                gate.notify_one();
                Ok(json!("opened"))
            }
        }),
        echo("echo"),
    ]);
    let calls = [
        call("c0", "wait", "{}"),
        call("c1", "echo", r#"{"n":1}"#),
        call("c2", "open", "{}"),
    ];
    let results = within(results(&registry, &calls, true)).await;
    assert_eq!(ids(&results), ["c0", "c1", "c2"]);
    let contents: Vec<String> = results.iter().map(ToolResult::content).collect();
    assert_eq!(contents, ["waited", r#"{"n":1}"#, "opened"]);
}

#[tokio::test]
async fn sequential_results_are_in_call_order() {
    let registry = registry_of([echo("echo")]);
    let calls: Vec<ToolCall> = (0..5)
        .map(|i| call(&format!("c{i}"), "echo", &format!(r#"{{"i":{i}}}"#)))
        .collect();
    let results = within(results(&registry, &calls, false)).await;
    assert_eq!(ids(&results), ["c0", "c1", "c2", "c3", "c4"]);
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result.content(), format!(r#"{{"i":{i}}}"#));
    }
}

#[tokio::test]
async fn parallel_calls_really_overlap() {
    // Both calls must be inside the tool at once to pass the barrier; one at a time deadlocks.
    let barrier = Arc::new(Barrier::new(2));
    let registry = registry_of([tool("meet", no_args(), move |_| {
        let barrier = Arc::clone(&barrier);
        async move {
            barrier.wait().await;
            Ok(json!("met"))
        }
    })]);
    let calls = [call("a", "meet", "{}"), call("b", "meet", "{}")];
    let results = within(results(&registry, &calls, true)).await;
    assert!(
        results
            .iter()
            .all(|r| !r.is_error() && r.content() == "met")
    );
}

/// A tool that logs its start and end, yielding in between so that overlapping calls would
/// interleave, and counts how many run at once.
fn logging_tool(
    log: Arc<Mutex<Vec<String>>>,
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
) -> TestTool {
    tool("log", json!({"type": "object"}), move |arguments| {
        let (log, running, peak) = (Arc::clone(&log), Arc::clone(&running), Arc::clone(&peak));
        async move {
            let i = arguments["i"].as_u64().unwrap();
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            log.lock().unwrap().push(format!("start {i}"));
            for _ in 0..5 {
                tokio::task::yield_now().await;
            }
            log.lock().unwrap().push(format!("end {i}"));
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(Value::Null)
        }
    })
}

#[tokio::test]
async fn sequential_calls_run_one_at_a_time_in_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let peak = Arc::new(AtomicUsize::new(0));
    let registry = registry_of([logging_tool(
        Arc::clone(&log),
        Arc::new(AtomicUsize::new(0)),
        Arc::clone(&peak),
    )]);
    let calls: Vec<ToolCall> = (0..4)
        .map(|i| call(&format!("c{i}"), "log", &format!(r#"{{"i":{i}}}"#)))
        .collect();
    within(results(&registry, &calls, false)).await;
    assert_eq!(peak.load(Ordering::SeqCst), 1);
    let expected: Vec<String> = (0..4)
        .flat_map(|i| [format!("start {i}"), format!("end {i}")])
        .collect();
    assert_eq!(*log.lock().unwrap(), expected);
}

/// Runs `calls` holding tools on `registry`, checks that `limit` of them get to run at once,
/// then lets them all finish; returns the peak number running at once.
async fn peak_concurrency(limit: usize, calls: usize) -> usize {
    let release = Arc::new(Semaphore::new(0));
    let (running_tx, mut running_rx) = watch::channel(0usize);
    let running_tx = Arc::new(running_tx);
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (Arc::clone(&release), Arc::clone(&peak));
    let registry = registry_of([tool("hold", no_args(), move |_| {
        let (release, running, peak) = (Arc::clone(&r), Arc::clone(&running_tx), Arc::clone(&p));
        async move {
            running.send_modify(|n| *n += 1);
            peak.fetch_max(*running.borrow(), Ordering::SeqCst);
            release.acquire().await.unwrap().forget();
            running.send_modify(|n| *n -= 1);
            Ok(Value::Null)
        }
    })])
    .with_max_concurrency(limit);
    let calls: Vec<ToolCall> = (0..calls)
        .map(|i| call(&format!("c{i}"), "hold", "{}"))
        .collect();
    let expected_peak = limit.clamp(1, calls.len());
    let controller = async {
        running_rx.wait_for(|n| *n >= expected_peak).await.unwrap();
        release.add_permits(calls.len());
    };
    let (results, ()) =
        within(async { tokio::join!(results(&registry, &calls, true), controller) }).await;
    assert!(results.iter().all(|r| !r.is_error()));
    peak.load(Ordering::SeqCst)
}

#[tokio::test]
async fn max_concurrency_bounds_parallel_calls() {
    assert_eq!(peak_concurrency(2, 6).await, 2);
    assert_eq!(peak_concurrency(3, 3).await, 3);
}

#[tokio::test]
async fn a_max_concurrency_of_zero_runs_one_at_a_time() {
    assert_eq!(
        ToolRegistry::new()
            .with_max_concurrency(0)
            .max_concurrency(),
        1
    );
    assert_eq!(peak_concurrency(0, 3).await, 1);
    assert_eq!(
        ToolRegistry::new().max_concurrency(),
        DEFAULT_MAX_CONCURRENCY
    );
}

#[tokio::test]
async fn execute_each_yields_each_call_as_it_finishes() {
    let (slow_tx, slow_rx) = oneshot::channel::<()>();
    let (fast_tx, fast_rx) = oneshot::channel::<()>();
    let slow_rx = Arc::new(Mutex::new(Some(slow_rx)));
    let fast_rx = Arc::new(Mutex::new(Some(fast_rx)));
    let waiting = |name: &str, rx: Arc<Mutex<Option<oneshot::Receiver<()>>>>| {
        tool(name, no_args(), move |_| {
            let rx = rx.lock().unwrap().take();
            async move {
                rx.unwrap().await.unwrap();
                Ok(json!("done"))
            }
        })
    };
    let registry = registry_of([waiting("slow", slow_rx), waiting("fast", fast_rx)]);
    let calls = [call("s", "slow", "{}"), call("f", "fast", "{}")];
    let mut finished = registry.execute_each(&calls, ExecuteOptions::new());

    fast_tx.send(()).unwrap();
    let (index, run) = within(finished.next()).await.unwrap();
    assert_eq!((index, run.result.tool_call_id.as_str()), (1, "f"));

    slow_tx.send(()).unwrap();
    let (index, run) = within(finished.next()).await.unwrap();
    assert_eq!((index, run.result.tool_call_id.as_str()), (0, "s"));
    assert!(within(finished.next()).await.is_none());
}

/// Sets its flag when dropped, i.e. when the tool's future is dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn dropping_the_execution_cancels_running_tools() {
    let dropped = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Notify::new());
    let (d, s) = (Arc::clone(&dropped), Arc::clone(&started));
    let registry = registry_of([tool("forever", no_args(), move |_| {
        let (guard, started) = (DropFlag(Arc::clone(&d)), Arc::clone(&s));
        async move {
            let _guard = guard;
            started.notify_one();
            std::future::pending::<()>().await;
            Ok(Value::Null)
        }
    })]);
    let calls = [call("a", "forever", "{}"), call("b", "forever", "{}")];
    // Boxed so that `drop` below really drops the future (a pinned reference would not).
    let mut execution = Box::pin(results(&registry, &calls, true));
    within(async {
        tokio::select! {
            _ = &mut execution => panic!("a tool that never ends finished"),
            () = started.notified() => {}
        }
    })
    .await;
    assert!(!dropped.load(Ordering::SeqCst), "still running");
    drop(execution);
    assert!(dropped.load(Ordering::SeqCst), "the tool was not cancelled");
}

#[tokio::test]
async fn execute_reports_latency_in_call_order() {
    let registry = registry_of([echo("echo")]);
    let calls = [call("a", "echo", "{}"), call("b", "nope", "{}")];
    let runs = within(registry.execute(&calls, ExecuteOptions::new())).await;
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].result.tool_call_id, "a");
    assert_eq!(
        runs[1].result.error_kind(),
        Some(ToolErrorKind::UnknownTool)
    );
    assert!(runs.iter().all(|r| r.latency < DEADLOCK));
}

#[tokio::test]
async fn an_empty_batch_gives_no_results() {
    let registry = registry_of([echo("echo")]);
    assert!(results(&registry, &[], true).await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Failures become results

fn weather() -> TestTool {
    tool(
        "get_weather",
        json!({
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "days": {"type": "integer", "minimum": 1},
                "address": {
                    "type": "object",
                    "properties": {"zip": {"type": "string"}},
                    "required": ["zip"]
                }
            },
            "required": ["location"]
        }),
        |arguments| async move { Ok(json!({"forecast": "sunny", "arguments": arguments})) },
    )
}

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

// ---------------------------------------------------------------------------------------------
// Registration

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

// ---------------------------------------------------------------------------------------------
// What the model is shown

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
