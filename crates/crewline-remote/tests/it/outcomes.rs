//! What a model is told about a remote tool call that got no answer: "not called" only when
//! the store certainly never handed the call to a client, `OutcomeUnknown` whenever it could
//! have. One test per path of a call: created in the store, handed out to a poller, waited
//! for, answered. Over the in-memory store, with a wrapper that makes it fail where a shared
//! store (Redis) can.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_remote::{
    MemoryStore, Polled, RemoteTools, StoreError, TaskApi, TaskSnapshot, TaskStore, Withdrawn,
    wire::{CustomTool, TaskEvent, TaskStatus, ToolAnswer},
};
use crewline_tools::{ExecuteOptions, ToolRegistry};
use serde_json::{Value, json};

/// The in-memory store, failing as told: the next emit, the next `waits` reads of an answer,
/// and every withdraw while `withdraw_fails`.
#[derive(Clone, Default)]
struct Flaky {
    inner: MemoryStore,
    emit_error: Arc<Mutex<Option<StoreError>>>,
    wait_failures: Arc<AtomicUsize>,
    withdraw_fails: Arc<AtomicUsize>,
    /// Like a shared store: it cannot withdraw at once (`withdraw_now` is `None`).
    remote: Arc<std::sync::atomic::AtomicBool>,
}

fn backend() -> StoreError {
    StoreError::Backend("Redis timed out".into())
}

#[async_trait]
impl TaskStore for Flaky {
    async fn create(
        &self,
        owner: &str,
        task: Option<String>,
        tools: Vec<CustomTool>,
    ) -> Result<TaskSnapshot, StoreError> {
        self.inner.create(owner, task, tools).await
    }
    async fn get(&self, id: &str) -> Result<TaskSnapshot, StoreError> {
        self.inner.get(id).await
    }
    async fn attach(&self, id: &str) -> Result<TaskSnapshot, StoreError> {
        self.inner.attach(id).await
    }
    async fn finish(
        &self,
        id: &str,
        status: TaskStatus,
        output: Option<Value>,
    ) -> Result<TaskSnapshot, StoreError> {
        self.inner.finish(id, status, output).await
    }
    async fn emit_tool_call(
        &self,
        id: &str,
        tool: &str,
        input: Value,
    ) -> Result<TaskEvent, StoreError> {
        let failure = self.emit_error.lock().expect("lock").take();
        match failure {
            // A reply lost after the call was stored: the call exists.
            Some(error @ StoreError::Backend(_)) => {
                self.inner.emit_tool_call(id, tool, input).await?;
                Err(error)
            }
            Some(error) => Err(error),
            None => self.inner.emit_tool_call(id, tool, input).await,
        }
    }
    async fn poll(&self, id: &str, after: u64, wait: Duration) -> Result<Polled, StoreError> {
        self.inner.poll(id, after, wait).await
    }
    async fn answer(&self, id: &str, event: &str, answer: ToolAnswer) -> Result<(), StoreError> {
        self.inner.answer(id, event, answer).await
    }
    async fn wait_answer(&self, id: &str, event: &str) -> Result<ToolAnswer, StoreError> {
        if self
            .wait_failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(backend());
        }
        self.inner.wait_answer(id, event).await
    }
    fn abandon(&self, id: &str, event: &str) {
        self.inner.abandon(id, event);
    }
    async fn withdraw(&self, id: &str, event: &str) -> Result<Withdrawn, StoreError> {
        if self.withdraw_fails.load(Ordering::SeqCst) > 0 {
            return Err(backend());
        }
        self.inner.withdraw(id, event).await
    }
    fn withdraw_now(&self, id: &str, event: &str) -> Option<Withdrawn> {
        if self.remote.load(Ordering::SeqCst) || self.withdraw_fails.load(Ordering::SeqCst) > 0 {
            return None;
        }
        self.inner.withdraw_now(id, event)
    }
}

/// A task with one remote tool `pay` (timeout 2 s) attached to a call; the call's registry.
async fn call_with_pay(store: &Flaky) -> (String, RemoteTools, ToolRegistry) {
    let tool = CustomTool {
        name: "pay".to_owned(),
        description: "Pays a bill.".to_owned(),
        inputs: json!({"type": "object"}),
        output: String::new(),
        timeout_ms: Some(2_000),
    };
    let task = store.create("a", None, vec![tool]).await.expect("create");
    let api = TaskApi::with_store(store.clone());
    let remote = api.attach(&task.id).await.expect("attach");
    let mut registry = ToolRegistry::new();
    remote.register_into(&mut registry).expect("register");
    (task.id, remote, registry)
}

async fn run(registry: &ToolRegistry) -> ToolResult {
    registry
        .execute(&[ToolCall::new("c1", "pay", "{}")], ExecuteOptions::new())
        .await
        .remove(0)
        .result
}

/// The model's message of a failed call.
fn message(result: &ToolResult) -> String {
    let content: Value = serde_json::from_str(&result.content()).expect("error JSON");
    content["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn said_not_called(result: &ToolResult) -> bool {
    message(result).contains("not called")
}

/// Polls `task` until its tool call shows up, as a client does; the call.
async fn hand_out(store: &Flaky, task: &str) -> TaskEvent {
    loop {
        let polled = store
            .poll(task, 0, Duration::from_secs(1))
            .await
            .expect("poll");
        if let Some(event) = polled.events.into_iter().next() {
            return event;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_no_client_took_before_the_timeout_is_not_called_and_never_reaches_one() {
    let store = Flaky::default();
    let (task, _remote, registry) = call_with_pay(&store).await;
    let result = run(&registry).await;
    assert_eq!(result.error_kind(), Some(ToolErrorKind::ToolError));
    assert!(said_not_called(&result), "{}", message(&result));
    // Not called, and it stays so: a client polling now does not see it.
    let polled = store.poll(&task, 0, Duration::ZERO).await.expect("poll");
    assert!(polled.events.is_empty(), "{:?}", polled.events);
}

#[tokio::test(start_paused = true)]
async fn a_call_a_client_took_without_answering_is_an_unknown_outcome() {
    let store = Flaky::default();
    let (task, _remote, registry) = call_with_pay(&store).await;
    let (result, event) = tokio::join!(run(&registry), hand_out(&store, &task));
    assert_eq!(
        result.error_kind(),
        Some(ToolErrorKind::OutcomeUnknown),
        "{}",
        message(&result)
    );
    assert!(!said_not_called(&result), "{}", message(&result));
    assert!(message(&result).contains("Do not call it again"));
    // The client's late answer is refused: nothing waits for it.
    assert_eq!(
        store
            .answer(&task, &event.id, ToolAnswer::ok(json!("paid")))
            .await,
        Err(StoreError::NotWaiting(event.id.clone()))
    );
}

#[tokio::test(start_paused = true)]
async fn an_answer_is_the_result() {
    let store = Flaky::default();
    let (task, _remote, registry) = call_with_pay(&store).await;
    let answering = async {
        let event = hand_out(&store, &task).await;
        store
            .answer(&task, &event.id, ToolAnswer::ok(json!("paid")))
            .await
            .expect("answer");
    };
    let (result, ()) = tokio::join!(run(&registry), answering);
    assert_eq!(result.content(), "paid");
}

#[tokio::test(start_paused = true)]
async fn a_store_refusal_at_creation_is_not_called() {
    let store = Flaky::default();
    let (_task, _remote, registry) = call_with_pay(&store).await;
    *store.emit_error.lock().expect("lock") = Some(StoreError::TaskBudget(1));
    let result = run(&registry).await;
    assert_eq!(result.error_kind(), Some(ToolErrorKind::ToolError));
    assert!(said_not_called(&result), "{}", message(&result));
    *store.emit_error.lock().expect("lock") = Some(StoreError::Unreachable("refused".into()));
    let result = run(&registry).await;
    assert!(said_not_called(&result), "{}", message(&result));
}

#[tokio::test(start_paused = true)]
async fn a_store_error_after_the_call_may_have_been_stored_is_an_unknown_outcome() {
    let store = Flaky::default();
    let (task, _remote, registry) = call_with_pay(&store).await;
    *store.emit_error.lock().expect("lock") = Some(backend());
    let result = run(&registry).await;
    assert_eq!(
        result.error_kind(),
        Some(ToolErrorKind::OutcomeUnknown),
        "{}",
        message(&result)
    );
    // Indeed the call was stored, and a client could take it.
    let polled = store.poll(&task, 0, Duration::ZERO).await.expect("poll");
    assert_eq!(polled.events.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_fails_while_the_call_waits_is_read_again_until_the_answer() {
    let store = Flaky::default();
    let (task, _remote, registry) = call_with_pay(&store).await;
    store.wait_failures.store(3, Ordering::SeqCst);
    let answering = async {
        let event = hand_out(&store, &task).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        store
            .answer(&task, &event.id, ToolAnswer::ok(json!("paid")))
            .await
            .expect("answer");
    };
    let (result, ()) = tokio::join!(run(&registry), answering);
    assert_eq!(result.content(), "paid");
}

#[tokio::test(start_paused = true)]
async fn a_store_that_stays_down_after_the_hand_out_is_an_unknown_outcome() {
    let store = Flaky::default();
    let (task, _remote, registry) = call_with_pay(&store).await;
    store.wait_failures.store(usize::MAX, Ordering::SeqCst);
    store.withdraw_fails.store(1, Ordering::SeqCst);
    let (result, _event) = tokio::join!(run(&registry), hand_out(&store, &task));
    assert_eq!(
        result.error_kind(),
        Some(ToolErrorKind::OutcomeUnknown),
        "{}",
        message(&result)
    );
    // Even a call no poll took: with the store down, nobody can know.
    let (_task, _remote, registry) = call_with_pay(&store).await;
    let result = run(&registry).await;
    assert_eq!(result.error_kind(), Some(ToolErrorKind::OutcomeUnknown));
}

#[tokio::test(start_paused = true)]
async fn a_task_ended_while_its_call_waits_says_whether_the_client_took_it() {
    let store = Flaky::default();
    // Taken by the client, then the client cancels its task: it may have run.
    let (task, _remote, registry) = call_with_pay(&store).await;
    let cancelling = async {
        hand_out(&store, &task).await;
        store
            .finish(&task, TaskStatus::Cancelled, None)
            .await
            .expect("cancel");
    };
    let (result, ()) = tokio::join!(run(&registry), cancelling);
    assert_eq!(
        result.error_kind(),
        Some(ToolErrorKind::OutcomeUnknown),
        "{}",
        message(&result)
    );
    // Cancelled before any client took it: certainly not run.
    let (task, _remote, registry) = call_with_pay(&store).await;
    let cancelling = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        store
            .finish(&task, TaskStatus::Cancelled, None)
            .await
            .expect("cancel");
    };
    let (result, ()) = tokio::join!(run(&registry), cancelling);
    assert!(said_not_called(&result), "{}", message(&result));
    assert_eq!(result.error_kind(), Some(ToolErrorKind::ToolError));
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_arrives_as_the_time_runs_out_is_still_the_result() {
    let store = Flaky::default();
    let (task, _remote, _registry) = call_with_pay(&store).await;
    let event = store
        .emit_tool_call(&task, "pay", json!({}))
        .await
        .expect("emit");
    hand_out(&store, &task).await;
    store
        .answer(&task, &event.id, ToolAnswer::ok(json!("paid")))
        .await
        .expect("answer");
    assert_eq!(
        store.withdraw(&task, &event.id).await,
        Ok(Withdrawn::Answered(ToolAnswer::ok(json!("paid"))))
    );
}

/// A barge-in: the turn running `pay` in the run `context` is dropped once `cut` is ready;
/// what the model reads for the call (what the tool loop writes when it drops a turn).
async fn barge_in(
    registry: &ToolRegistry,
    context: &crewline_tools::CallContext,
    cut: impl std::future::Future<Output = ()>,
) -> ToolResult {
    let call = ToolCall::new("c1", "pay", "{}");
    let turn = registry.execute(
        std::slice::from_ref(&call),
        ExecuteOptions::new().in_run(context.clone()),
    );
    tokio::select! {
        runs = turn => panic!("the call finished before the barge-in: {runs:?}"),
        () = cut => {}
    }
    registry.interrupted(&call, context)
}

#[tokio::test(start_paused = true)]
async fn a_barge_in_after_a_client_took_the_call_is_an_unknown_outcome() {
    let store = Flaky::default();
    let (task, _remote, registry) = call_with_pay(&store).await;
    let context = registry.context();
    let taken = Arc::new(Mutex::new(None));
    let result = barge_in(&registry, &context, async {
        let event = hand_out(&store, &task).await;
        *taken.lock().expect("lock") = Some(event);
    })
    .await;
    assert_eq!(
        result.error_kind(),
        Some(ToolErrorKind::OutcomeUnknown),
        "{}",
        message(&result)
    );
    assert!(message(&result).contains("Do not call it again"));
    // Its late answer is refused: nothing waits for it any more.
    let event = taken.lock().expect("lock").take().expect("handed out");
    assert_eq!(
        store
            .answer(&task, &event.id, ToolAnswer::ok(json!("paid")))
            .await,
        Err(StoreError::NotWaiting(event.id.clone()))
    );
}

#[tokio::test(start_paused = true)]
async fn a_barge_in_before_any_client_took_the_call_is_cancelled_and_never_reaches_one() {
    let store = Flaky::default();
    let (task, _remote, registry) = call_with_pay(&store).await;
    let context = registry.context();
    let result = barge_in(&registry, &context, async {
        tokio::time::sleep(Duration::from_millis(100)).await;
    })
    .await;
    assert_eq!(
        result.error_kind(),
        Some(ToolErrorKind::Cancelled),
        "{}",
        message(&result)
    );
    // Withdrawn: a client polling now does not see it, so "cancelled" stays true.
    let polled = store.poll(&task, 0, Duration::ZERO).await.expect("poll");
    assert!(polled.events.is_empty(), "{:?}", polled.events);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_a_client_took_is_an_unknown_outcome_and_one_it_answered_is_the_answer() {
    let store = Flaky::default();
    let (task, _remote, registry) = call_with_pay(&store).await;
    // The call's own token fires once the client took the call.
    let token = tokio_util::sync::CancellationToken::new();
    let context = registry.context().with_call_token(token.clone());
    let call = ToolCall::new("c1", "pay", "{}");
    let cancelling = async {
        hand_out(&store, &task).await;
        token.cancel();
    };
    let (mut runs, ()) = tokio::join!(
        registry.execute(
            std::slice::from_ref(&call),
            ExecuteOptions::new().in_run(context.clone())
        ),
        cancelling
    );
    let result = runs.remove(0).result;
    assert_eq!(
        result.error_kind(),
        Some(ToolErrorKind::OutcomeUnknown),
        "{}",
        message(&result)
    );
    // Answered just before the token fired: the answer is what happened.
    let (task, _remote, registry) = call_with_pay(&store).await;
    let token = tokio_util::sync::CancellationToken::new();
    let context = registry.context().with_call_token(token.clone());
    let answering = async {
        let event = hand_out(&store, &task).await;
        store
            .answer(&task, &event.id, ToolAnswer::ok(json!("paid")))
            .await
            .expect("answer");
        token.cancel();
    };
    let (mut runs, ()) = tokio::join!(
        registry.execute(
            std::slice::from_ref(&call),
            ExecuteOptions::new().in_run(context)
        ),
        answering
    );
    let result = runs.remove(0).result;
    assert_eq!(result.error_kind(), None, "{}", result.content());
    assert_eq!(result.content(), "paid");
}

#[tokio::test(start_paused = true)]
async fn a_barge_in_a_shared_store_cannot_check_at_once_is_unknown_and_withdrawn_behind() {
    let store = Flaky::default();
    store.remote.store(true, Ordering::SeqCst);
    let (task, _remote, registry) = call_with_pay(&store).await;
    let context = registry.context();
    let result = barge_in(&registry, &context, async {
        tokio::time::sleep(Duration::from_millis(100)).await;
    })
    .await;
    // Whether a client took it is not known at once: it may have run.
    assert_eq!(
        result.error_kind(),
        Some(ToolErrorKind::OutcomeUnknown),
        "{}",
        message(&result)
    );
    // Withdrawn in the background: no client takes it from now on.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let polled = store.poll(&task, 0, Duration::ZERO).await.expect("poll");
    assert!(polled.events.is_empty(), "{:?}", polled.events);
}

#[test]
fn a_store_failure_says_its_own_layer_and_keeps_the_cause() {
    let reset = std::io::Error::other("connection reset by peer");
    let error = StoreError::Backend(crewline_core::ErrorDetail::caused_by(
        "the task store (Redis at 127.0.0.1:6379) failed: connection reset by peer",
        reset,
    ));
    assert_eq!(error.to_string(), "the task store failed");
    let cause = std::error::Error::source(&error).expect("the cause is kept");
    assert!(
        cause.to_string().contains("Redis at 127.0.0.1:6379"),
        "{cause}"
    );
    assert!(
        cause
            .source()
            .is_some_and(|io| io.downcast_ref::<std::io::Error>().is_some()),
        "{cause:?}"
    );
    assert_eq!(
        crewline_core::error_chain(&error),
        "the task store failed: the task store (Redis at 127.0.0.1:6379) failed: connection \
         reset by peer"
    );
}
