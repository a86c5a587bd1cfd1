//! Defaults and sync.

use super::*;

// There is no process-wide default executor: each new registry has one of its own, shared
// by its clones, subsets and exports only.
#[test]
fn each_new_registry_has_an_executor_of_its_own() {
    let (first, second) = (ToolRegistry::new(), ToolRegistry::new());
    assert!(!Arc::ptr_eq(first.executor(), second.executor()));
    assert!(Arc::ptr_eq(first.executor(), first.clone().executor()));
    let subset = first.subset(&[]).unwrap();
    assert!(Arc::ptr_eq(first.executor(), subset.executor()));
    let shared = Arc::new(Executor::default());
    let given = ToolRegistry::new().with_executor(Arc::clone(&shared));
    assert!(Arc::ptr_eq(given.executor(), &shared));
}

#[test]
fn run_sync_runs_a_call_from_plain_synchronous_code() {
    let (echo, _) = counting_echo("echo", ToolPolicy::new());
    let registry = registry(Executor::builder().build(), [echo]);
    let context = registry.context();
    let run = run_sync(registry.execute_one(&call("1", "echo", r#"{"n": 3}"#), &context)).unwrap();
    assert_eq!(run.result.content(), r#"{"n":3}"#);
}

#[tokio::test(flavor = "current_thread")]
async fn run_sync_inside_a_runtime_runs_a_call_on_its_own_thread_without_deadlock() {
    let sleeper = tool("sleep", ToolPolicy::new(), |_| async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(json!("slept"))
    });
    let registry = registry(Executor::builder().build(), [sleeper]);
    let context = registry.context();
    let run = run_sync(registry.execute_one(&call("1", "sleep", "{}"), &context)).unwrap();
    assert_eq!(run.result.content(), "slept");
}

// `ToolPolicy::cancellable` is the one way to say a tool is not cancellable.
#[test]
fn a_policy_says_whether_a_tool_is_cancellable() {
    struct Booking;
    #[async_trait]
    impl Tool for Booking {
        fn name(&self) -> &str {
            "book"
        }
        fn description(&self) -> &str {
            "Books."
        }
        fn parameters(&self) -> Value {
            json!({"type": "object"})
        }
        fn policy(&self) -> ToolPolicy {
            ToolPolicy::new().cancellable(false)
        }
        async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
            Ok(Value::Null)
        }
    }
    assert!(ToolPolicy::default().cancellable);
    let policy = Booking.policy();
    assert!(!policy.cancellable);
    assert_eq!(policy, ToolPolicy::new().cancellable(false));
}
