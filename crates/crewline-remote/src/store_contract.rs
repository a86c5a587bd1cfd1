//! The [`TaskStore`] contract as a test suite every store runs: one `pub async fn` per
//! behaviour, each given a [`Backend`] that opens stores, and [`store_contract_tests!`] to run
//! them all as separate `#[tokio::test]`s.
//!
//! ```ignore
//! // In a store's test file (with the `store-contract` feature of crewline-remote):
//! crewline_remote::store_contract_tests!(crewline_remote::store_contract::Memory::open());
//! ```
//!
//! The expression is evaluated once per test and gives `Option<impl Backend>`; `None` skips the
//! test (a backend that is not installed here), as the backend decides.
//!
//! One file on purpose: it is one list of behaviours that every store must pass alike, read top
//! to bottom as the contract; split by theme, a new store's author would have to find them all.
//!
//! [`store_contract_tests!`]: crate::store_contract_tests

use std::{future::Future, time::Duration};

use serde_json::json;

use crate::{
    MemoryStore, StoreError, StoreLimits, TaskSnapshot, TaskStore,
    wire::{CustomTool, TaskEvent, TaskStatus, ToolAnswer},
};

/// How long a step that should happen at once may take before the test calls it stuck.
const PROMPTLY: Duration = Duration::from_secs(5);

/// What a store holds, as counted against its [`StoreLimits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Tasks held (expired ones included until the store next sweeps).
    pub tasks: usize,
    /// Bytes held.
    pub bytes: usize,
}

/// Opens the stores a contract test runs against.
pub trait Backend {
    /// The store.
    type Store: TaskStore + Clone;

    /// A store with `limits` over a fresh, empty backend.
    fn store(&self, limits: StoreLimits) -> impl Future<Output = Self::Store>;

    /// A second store over the same backend as `of` (another replica), with the same limits.
    fn replica(&self, of: &Self::Store) -> impl Future<Output = Self::Store>;

    /// What `store`'s backend holds.
    fn held(&self, store: &Self::Store) -> impl Future<Output = Held>;
}

/// The in-memory backend: a fresh [`MemoryStore`]; a replica is a clone.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory;

impl Memory {
    /// The backend (always available).
    pub fn open() -> Option<Self> {
        Some(Self)
    }
}

impl Backend for Memory {
    type Store = MemoryStore;

    async fn store(&self, limits: StoreLimits) -> MemoryStore {
        MemoryStore::with_limits(limits)
    }

    async fn replica(&self, of: &MemoryStore) -> MemoryStore {
        of.clone()
    }

    async fn held(&self, store: &MemoryStore) -> Held {
        Held {
            tasks: store.len(),
            bytes: store.bytes(),
        }
    }
}

/// Runs every contract test against the backend `$backend` (an `Option<impl Backend>`
/// expression, evaluated per test; `None` skips), each as its own `#[tokio::test]`.
#[macro_export]
macro_rules! store_contract_tests {
    ($backend:expr) => {
        $crate::store_contract_tests!(@each $backend;
            a_tool_call_is_answered_once,
            abandoned_calls_refuse_late_answers,
            events_are_pruned_oldest_first_and_timestamps_increase,
            waiting_tasks_expire_and_finished_ones_linger,
            a_full_store_refuses_new_tasks,
            a_long_poll_wakes_for_a_new_event,
            a_call_of_a_tool_the_task_never_registered_is_refused_at_once,
            a_finished_task_keeps_its_output_and_a_second_finish_changes_nothing,
            an_output_over_the_tasks_budget_is_left_out_but_the_task_finishes,
            one_caller_cannot_take_every_task_slot,
            a_callers_finished_tasks_make_room_for_its_new_ones,
            a_task_larger_than_its_budget_is_refused,
            one_callers_bytes_cannot_fill_the_store,
            an_oversized_answer_is_refused_and_the_call_still_waits,
            large_tool_calls_prune_settled_events_and_never_waiting_ones,
            expired_tasks_give_their_bytes_back,
            expired_tasks_give_their_slots_back,
            unknown_tasks_and_events_are_named_as_such,
            attaching_twice_or_after_the_end_is_refused,
            finishing_stops_every_waiting_call,
            two_replicas_share_a_task_end_to_end,
            answers_are_counted_until_their_waiter_takes_them,
            a_callers_finished_tasks_make_room_for_its_bytes,
            a_pruned_call_that_still_waits_takes_its_answer,
            racing_replicas_attach_a_task_once,
            racing_replicas_keep_a_callers_task_cap,
            a_pruned_answer_nobody_took_gives_its_bytes_back,
            a_leased_task_is_reattached_by_its_call_and_released_after_its_lease,
            withdrawing_a_call_says_whether_a_poll_handed_it_out,
        );
    };
    (@each $backend:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                if let Some(backend) = $backend {
                    $crate::store_contract::$name(&backend).await;
                }
            }
        )*
    };
}

/// One small tool named `t`, for tasks whose tests call it.
fn tool_t() -> Vec<CustomTool> {
    tools_of(1)
}

/// A task of `a` with the one tool `t`, attached, with one call of `t` waiting for its answer.
async fn running_call(store: &impl TaskStore) -> (TaskSnapshot, TaskEvent) {
    let task = store.create("a", None, tool_t()).await.expect("create");
    store.attach(&task.id).await.expect("attach");
    let event = store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .expect("emit");
    (task, event)
}

/// A tool `t` whose description is `bytes` long: a task that holds about that much.
fn tools_of(bytes: usize) -> Vec<CustomTool> {
    vec![CustomTool {
        name: "t".to_owned(),
        description: "x".repeat(bytes),
        inputs: json!({"type": "object"}),
        output: String::new(),
        timeout_ms: None,
    }]
}

/// `step`'s result, failing the test when it takes longer than it should.
async fn promptly<T>(what: &str, step: impl Future<Output = T>) -> T {
    match tokio::time::timeout(PROMPTLY, step).await {
        Ok(value) => value,
        Err(_) => panic!("{what} took more than {PROMPTLY:?}"),
    }
}

/// An answer is taken once; a second answer is refused.
pub async fn a_tool_call_is_answered_once(backend: &impl Backend) {
    let store = backend.store(StoreLimits::default()).await;
    let task = store.create("a", None, tool_t()).await.expect("create");
    store.attach(&task.id).await.expect("attach");
    let event = store
        .emit_tool_call(&task.id, "t", json!({"a": 1}))
        .await
        .expect("emit");
    store
        .answer(&task.id, &event.id, ToolAnswer::ok(json!("fine")))
        .await
        .expect("answer");
    assert_eq!(
        store
            .answer(&task.id, &event.id, ToolAnswer::ok(json!("again")))
            .await,
        Err(StoreError::AlreadyAnswered(event.id.clone()))
    );
    let answer = store
        .wait_answer(&task.id, &event.id)
        .await
        .expect("the answer");
    assert_eq!(answer.output, json!("fine"));
    assert_eq!(
        store.wait_answer(&task.id, &event.id).await,
        Err(StoreError::AlreadyAnswered(event.id.clone())),
        "an answer is taken once"
    );
}

/// An answer after its call was abandoned is `NotWaiting`.
pub async fn abandoned_calls_refuse_late_answers(backend: &impl Backend) {
    let store = backend.store(StoreLimits::default()).await;
    let task = store.create("a", None, tool_t()).await.expect("create");
    let event = store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .expect("emit");
    abandon_settled(&store, &task.id, &event.id).await;
    assert_eq!(
        store
            .answer(&task.id, &event.id, ToolAnswer::ok(json!(1)))
            .await,
        Err(StoreError::NotWaiting(event.id.clone()))
    );
}

/// Abandons `event` of `task` and waits until the store has recorded it (a shared store may
/// abandon in the background, since `abandon` is synchronous): a waiter then hears
/// `NotWaiting` at once.
async fn abandon_settled(store: &impl TaskStore, task: &str, event: &str) {
    store.abandon(task, event);
    assert_eq!(
        promptly("the abandon", store.wait_answer(task, event)).await,
        Err(StoreError::NotWaiting(event.to_owned()))
    );
}

/// Past `max_events`, the oldest events go; timestamps strictly increase.
pub async fn events_are_pruned_oldest_first_and_timestamps_increase(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_events: 3,
            ..StoreLimits::default()
        })
        .await;
    let task = store.create("a", None, tool_t()).await.expect("create");
    let mut ids = Vec::new();
    for _ in 0..5 {
        let event = store
            .emit_tool_call(&task.id, "t", json!({}))
            .await
            .expect("emit");
        abandon_settled(&store, &task.id, &event.id).await;
        ids.push(event);
    }
    let polled = store.poll(&task.id, 0, Duration::ZERO).await.expect("poll");
    let kept: Vec<&str> = polled.events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(kept, [&ids[2].id, &ids[3].id, &ids[4].id]);
    assert_eq!(polled.events, ids[2..], "events come back as emitted");
    assert!(
        ids.windows(2).all(|w| w[0].timestamp < w[1].timestamp),
        "strictly increasing"
    );
    // The cursor: only what came after it.
    let after = ids[3].timestamp.expect("a timestamp");
    let polled = store
        .poll(&task.id, after, Duration::ZERO)
        .await
        .expect("poll");
    assert_eq!(polled.events, ids[4..]);
    assert!(matches!(
        store
            .answer(&task.id, &ids[0].id, ToolAnswer::ok(json!(1)))
            .await,
        Err(StoreError::UnknownEvent { .. })
    ));
}

/// Waiting tasks expire after `waiting_ttl`, finished ones after `linger`.
pub async fn waiting_tasks_expire_and_finished_ones_linger(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            waiting_ttl: Duration::from_millis(300),
            linger: Duration::from_millis(300),
            ..StoreLimits::default()
        })
        .await;
    let waiting = store.create("a", None, Vec::new()).await.expect("create");
    let finished = store.create("a", None, Vec::new()).await.expect("create");
    store.attach(&finished.id).await.expect("attach");
    store
        .finish(&finished.id, TaskStatus::Done, None)
        .await
        .expect("finish");
    assert_eq!(
        store.get(&finished.id).await.expect("get").status,
        TaskStatus::Done
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        store.get(&waiting.id).await,
        Err(StoreError::UnknownTask(waiting.id.clone()))
    );
    assert_eq!(
        store.get(&finished.id).await,
        Err(StoreError::UnknownTask(finished.id.clone()))
    );
}

/// At `max_tasks`, a new task is `Full`.
pub async fn a_full_store_refuses_new_tasks(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_tasks: 2,
            ..StoreLimits::default()
        })
        .await;
    store.create("a", None, Vec::new()).await.expect("create");
    store.create("b", None, Vec::new()).await.expect("create");
    assert_eq!(
        store.create("c", None, Vec::new()).await,
        Err(StoreError::Full(2))
    );
}

/// A long poll answers as soon as an event exists.
pub async fn a_long_poll_wakes_for_a_new_event(backend: &impl Backend) {
    let store = backend.store(StoreLimits::default()).await;
    let task = store.create("a", None, tool_t()).await.expect("create");
    store.attach(&task.id).await.expect("attach");
    let poller = {
        let store = store.clone();
        let id = task.id.clone();
        tokio::spawn(async move { store.poll(&id, 0, Duration::from_secs(30)).await })
    };
    // Let the poll park (were it not parked yet, it would find the event at once: the same).
    tokio::time::sleep(Duration::from_millis(50)).await;
    let event = store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .expect("emit");
    let polled = promptly("the long poll", poller)
        .await
        .expect("the poller")
        .expect("poll");
    assert_eq!(polled.events, [event]);
}

/// A tool the task never registered is `UnknownTool`, and nothing reaches the client.
pub async fn a_call_of_a_tool_the_task_never_registered_is_refused_at_once(backend: &impl Backend) {
    let store = backend.store(StoreLimits::default()).await;
    let task = store.create("a", None, tool_t()).await.expect("create");
    store.attach(&task.id).await.expect("attach");
    assert_eq!(
        store
            .emit_tool_call(&task.id, "get_forecast", json!({}))
            .await,
        Err(StoreError::UnknownTool {
            task: task.id.clone(),
            tool: "get_forecast".to_owned()
        })
    );
    let polled = store.poll(&task.id, 0, Duration::ZERO).await.expect("poll");
    assert!(polled.events.is_empty());
}

/// The output is kept (and counted); a second finish changes nothing.
pub async fn a_finished_task_keeps_its_output_and_a_second_finish_changes_nothing(
    backend: &impl Backend,
) {
    let store = backend.store(StoreLimits::default()).await;
    let task = store.create("a", None, tool_t()).await.expect("create");
    store.attach(&task.id).await.expect("attach");
    let before = backend.held(&store).await.bytes;
    let done = store
        .finish(
            &task.id,
            TaskStatus::Done,
            Some(json!("It is 7 degrees in Oslo.")),
        )
        .await
        .expect("finish");
    assert_eq!(done.output, Some(json!("It is 7 degrees in Oslo.")));
    assert!(
        backend.held(&store).await.bytes > before,
        "the output counts against the task's bytes"
    );
    let again = store
        .finish(&task.id, TaskStatus::Cancelled, Some(json!("other")))
        .await
        .expect("finish again");
    assert_eq!(
        (again.status, again.output),
        (TaskStatus::Done, done.output.clone())
    );
    let read = store.get(&task.id).await.expect("get");
    assert_eq!((read.status, read.output), (TaskStatus::Done, done.output));
}

/// An output over the task's budget is left out; the task still finishes.
pub async fn an_output_over_the_tasks_budget_is_left_out_but_the_task_finishes(
    backend: &impl Backend,
) {
    let store = backend
        .store(StoreLimits {
            max_task_bytes: 1024,
            ..StoreLimits::default()
        })
        .await;
    let task = store.create("a", None, tool_t()).await.expect("create");
    let done = store
        .finish(&task.id, TaskStatus::Done, Some(json!("x".repeat(4096))))
        .await
        .expect("finish");
    assert_eq!((done.status, done.output), (TaskStatus::Done, None));
}

/// One caller's task cap does not hold back another caller.
pub async fn one_caller_cannot_take_every_task_slot(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_tasks: 10,
            max_tasks_per_owner: 3,
            ..StoreLimits::default()
        })
        .await;
    for _ in 0..3 {
        store
            .create("greedy", None, Vec::new())
            .await
            .expect("create");
    }
    assert_eq!(
        store.create("greedy", None, Vec::new()).await,
        Err(StoreError::TooManyTasks(3))
    );
    store
        .create("other", None, Vec::new())
        .await
        .expect("another caller");
    assert_eq!(
        backend.held(&store).await.tasks,
        4,
        "nothing already accepted was dropped"
    );
}

/// A caller's own finished tasks make room for its new ones; its live task stays.
pub async fn a_callers_finished_tasks_make_room_for_its_new_ones(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_tasks_per_owner: 2,
            ..StoreLimits::default()
        })
        .await;
    let live = store.create("a", None, Vec::new()).await.expect("create");
    let done = store.create("a", None, Vec::new()).await.expect("create");
    store
        .finish(&done.id, TaskStatus::Cancelled, None)
        .await
        .expect("finish");
    for _ in 0..5 {
        let task = store.create("a", None, Vec::new()).await.expect("create");
        store
            .finish(&task.id, TaskStatus::Cancelled, None)
            .await
            .expect("finish");
    }
    assert_eq!(
        store.get(&live.id).await.expect("the live task").status,
        TaskStatus::Waiting
    );
    assert_eq!(backend.held(&store).await.tasks, 2);
}

/// A task over `max_task_bytes` is refused; a smaller one is not.
pub async fn a_task_larger_than_its_budget_is_refused(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_task_bytes: 4096,
            ..StoreLimits::default()
        })
        .await;
    assert_eq!(
        store.create("a", None, tools_of(8192)).await,
        Err(StoreError::TaskBudget(4096))
    );
    store
        .create("a", None, tools_of(1024))
        .await
        .expect("a task that fits");
}

/// A caller's bytes are capped, and so are all callers' together.
pub async fn one_callers_bytes_cannot_fill_the_store(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_task_bytes: 64 << 10,
            max_owner_bytes: 100 << 10,
            max_total_bytes: 200 << 10,
            ..StoreLimits::default()
        })
        .await;
    store
        .create("greedy", None, tools_of(60 << 10))
        .await
        .expect("create");
    assert_eq!(
        store.create("greedy", None, tools_of(60 << 10)).await,
        Err(StoreError::OwnerBudget(100 << 10))
    );
    store
        .create("b", None, tools_of(60 << 10))
        .await
        .expect("create");
    store
        .create("c", None, tools_of(60 << 10))
        .await
        .expect("create");
    assert_eq!(
        store.create("d", None, tools_of(60 << 10)).await,
        Err(StoreError::FullBytes(200 << 10))
    );
    assert!(backend.held(&store).await.bytes <= 200 << 10);
}

/// An answer over the task's budget is refused and the call still takes a proper one.
pub async fn an_oversized_answer_is_refused_and_the_call_still_waits(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_task_bytes: 4096,
            ..StoreLimits::default()
        })
        .await;
    let (task, event) = running_call(&store).await;
    assert_eq!(
        store
            .answer(&task.id, &event.id, ToolAnswer::ok(json!("x".repeat(8192))))
            .await,
        Err(StoreError::TaskBudget(4096))
    );
    store
        .answer(&task.id, &event.id, ToolAnswer::ok(json!("fine")))
        .await
        .expect("a proper answer");
    let answer = store
        .wait_answer(&task.id, &event.id)
        .await
        .expect("the answer");
    assert_eq!(answer.output, json!("fine"));
}

/// Settled calls make room for new ones, waiting calls never go.
pub async fn large_tool_calls_prune_settled_events_and_never_waiting_ones(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_task_bytes: 8192,
            ..StoreLimits::default()
        })
        .await;
    let task = store.create("a", None, tool_t()).await.expect("create");
    store.attach(&task.id).await.expect("attach");
    let big = json!({"text": "x".repeat(2000)});
    for _ in 0..20 {
        let event = store
            .emit_tool_call(&task.id, "t", big.clone())
            .await
            .expect("emit");
        abandon_settled(&store, &task.id, &event.id).await;
    }
    assert!(backend.held(&store).await.bytes <= 8192);
    let mut waiting = Vec::new();
    let refused = loop {
        match store.emit_tool_call(&task.id, "t", big.clone()).await {
            Ok(event) => waiting.push(event.id),
            Err(error) => break error,
        }
        assert!(waiting.len() < 10, "the budget bounds waiting calls");
    };
    assert_eq!(refused, StoreError::TaskBudget(8192));
    assert!(!waiting.is_empty());
    for id in &waiting {
        store
            .answer(&task.id, id, ToolAnswer::ok(json!(1)))
            .await
            .expect("a waiting call takes its answer");
    }
}

/// An expired task's bytes are its caller's again.
pub async fn expired_tasks_give_their_bytes_back(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            waiting_ttl: Duration::from_millis(300),
            max_owner_bytes: 100 << 10,
            ..StoreLimits::default()
        })
        .await;
    store
        .create("a", None, tools_of(60 << 10))
        .await
        .expect("create");
    assert!(backend.held(&store).await.bytes >= 60 << 10);
    tokio::time::sleep(Duration::from_millis(350)).await;
    store
        .create("a", None, tools_of(60 << 10))
        .await
        .expect("the expired task's bytes came back");
    let held = backend.held(&store).await;
    assert_eq!(held.tasks, 1);
    assert!(held.bytes < 100 << 10);
}

/// An expired task's slot is its caller's again: per-caller counts do not drift.
pub async fn expired_tasks_give_their_slots_back(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            waiting_ttl: Duration::from_millis(300),
            max_tasks_per_owner: 2,
            max_tasks: 3,
            ..StoreLimits::default()
        })
        .await;
    for _ in 0..2 {
        store.create("a", None, Vec::new()).await.expect("create");
    }
    assert_eq!(
        store.create("a", None, Vec::new()).await,
        Err(StoreError::TooManyTasks(2))
    );
    store.create("b", None, Vec::new()).await.expect("create");
    tokio::time::sleep(Duration::from_millis(350)).await;
    for _ in 0..2 {
        store
            .create("a", None, Vec::new())
            .await
            .expect("the expired tasks' slots came back");
    }
    store
        .create("b", None, Vec::new())
        .await
        .expect("and the store's");
    assert_eq!(backend.held(&store).await.tasks, 3);
}

/// Unknown tasks and events are refused by name, on every operation.
pub async fn unknown_tasks_and_events_are_named_as_such(backend: &impl Backend) {
    let store = backend.store(StoreLimits::default()).await;
    let unknown = Some(StoreError::UnknownTask("task_nope".to_owned()));
    assert_eq!(store.get("task_nope").await.err(), unknown);
    assert_eq!(store.attach("task_nope").await.err(), unknown);
    let finished = store.finish("task_nope", TaskStatus::Done, None).await;
    assert_eq!(finished.err(), unknown);
    let emitted = store.emit_tool_call("task_nope", "t", json!({})).await;
    assert_eq!(emitted.err(), unknown);
    let polled = store.poll("task_nope", 0, Duration::ZERO).await;
    assert_eq!(polled.err(), unknown);
    let answered = store.answer("task_nope", "evt_x", ToolAnswer::ok(json!(1)));
    assert_eq!(answered.await.err(), unknown);
    assert_eq!(store.wait_answer("task_nope", "evt_x").await.err(), unknown);
    let task = store.create("a", None, tool_t()).await.expect("create");
    let unknown_event = Some(StoreError::UnknownEvent {
        task: task.id.clone(),
        event: "evt_x".to_owned(),
    });
    let answered = store.answer(&task.id, "evt_x", ToolAnswer::ok(json!(1)));
    assert_eq!(answered.await.err(), unknown_event);
    let waited = store.wait_answer(&task.id, "evt_x").await;
    assert_eq!(waited.err(), unknown_event);
    // Abandoning what does not exist changes nothing and fails nothing.
    store.abandon("task_nope", "evt_x");
    store.abandon(&task.id, "evt_x");
    assert_eq!(
        store.get(&task.id).await.expect("get").status,
        TaskStatus::Waiting
    );
}

/// A task is attached once, and never after it finished; a finished task takes no calls.
pub async fn attaching_twice_or_after_the_end_is_refused(backend: &impl Backend) {
    let store = backend.store(StoreLimits::default()).await;
    let task = store
        .create("a", Some("Book a table".to_owned()), tool_t())
        .await
        .expect("create");
    assert_eq!(
        (task.status, task.owner.as_str(), task.task.as_deref()),
        (TaskStatus::Waiting, "a", Some("Book a table"))
    );
    assert_eq!(store.get(&task.id).await.expect("get"), task);
    let running = store.attach(&task.id).await.expect("attach");
    assert_eq!(running.status, TaskStatus::Running);
    assert_eq!(running.custom_tools, tool_t());
    assert_eq!(
        store.attach(&task.id).await,
        Err(StoreError::AlreadyAttached(task.id.clone()))
    );
    store
        .finish(&task.id, TaskStatus::Failed, None)
        .await
        .expect("finish");
    let finished = Err(StoreError::Finished {
        id: task.id.clone(),
        status: TaskStatus::Failed,
    });
    assert_eq!(store.attach(&task.id).await.map(|_| ()), finished);
    assert_eq!(
        store
            .emit_tool_call(&task.id, "t", json!({}))
            .await
            .map(|_| ()),
        finished
    );
}

/// Finishing a task stops its waiting calls: their waiters and late answers get `NotWaiting`,
/// and a long poll returns at once with the finished task.
pub async fn finishing_stops_every_waiting_call(backend: &impl Backend) {
    let store = backend.store(StoreLimits::default()).await;
    let (task, event) = running_call(&store).await;
    let waiter = {
        let (store, id, event) = (store.clone(), task.id.clone(), event.id.clone());
        tokio::spawn(async move { store.wait_answer(&id, &event).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    store
        .finish(&task.id, TaskStatus::Cancelled, None)
        .await
        .expect("finish");
    assert_eq!(
        promptly("the waiter", waiter).await.expect("the waiter"),
        Err(StoreError::NotWaiting(event.id.clone()))
    );
    assert_eq!(
        store
            .answer(&task.id, &event.id, ToolAnswer::ok(json!(1)))
            .await,
        Err(StoreError::NotWaiting(event.id.clone()))
    );
    let polled = promptly(
        "a poll of a finished task",
        store.poll(&task.id, u64::MAX, Duration::from_secs(30)),
    )
    .await
    .expect("poll");
    assert_eq!(polled.task.status, TaskStatus::Cancelled);
}

/// Two stores over one backend are two replicas: one creates, the other attaches and emits,
/// the first's long poll is woken by it and answers, and the second's waiter gets the answer.
pub async fn two_replicas_share_a_task_end_to_end(backend: &impl Backend) {
    let a = backend.store(StoreLimits::default()).await;
    let b = backend.replica(&a).await;
    let task = a.create("a", None, tool_t()).await.expect("create on A");
    assert_eq!(b.get(&task.id).await.expect("get on B"), task);
    b.attach(&task.id).await.expect("attach on B");
    assert_eq!(
        a.get(&task.id).await.expect("get on A").status,
        TaskStatus::Running
    );
    assert_eq!(
        a.attach(&task.id).await,
        Err(StoreError::AlreadyAttached(task.id.clone())),
        "one call per task, whichever replica asks"
    );
    let poller = {
        let (a, id) = (a.clone(), task.id.clone());
        tokio::spawn(async move { a.poll(&id, 0, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let event = b
        .emit_tool_call(&task.id, "t", json!({"city": "Oslo"}))
        .await
        .expect("emit on B");
    let polled = promptly("A's long poll, woken by B's call", poller)
        .await
        .expect("the poller")
        .expect("poll on A");
    assert_eq!(polled.events, std::slice::from_ref(&event));
    let waiter = {
        let (b, id, event) = (b.clone(), task.id.clone(), event.id.clone());
        tokio::spawn(async move { b.wait_answer(&id, &event).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    a.answer(&task.id, &event.id, ToolAnswer::ok(json!("7 degrees")))
        .await
        .expect("answer on A");
    let answer = promptly("B's waiter, woken by A's answer", waiter)
        .await
        .expect("the waiter")
        .expect("the answer on B");
    assert_eq!(answer, ToolAnswer::ok(json!("7 degrees")));
    b.finish(&task.id, TaskStatus::Done, Some(json!("done")))
        .await
        .expect("finish on B");
    let read = a.get(&task.id).await.expect("get on A");
    assert_eq!(
        (read.status, read.output),
        (TaskStatus::Done, Some(json!("done")))
    );
}

/// An answer is held, and counted, until its waiter takes it.
pub async fn answers_are_counted_until_their_waiter_takes_them(backend: &impl Backend) {
    let store = backend.store(StoreLimits::default()).await;
    let (task, event) = running_call(&store).await;
    let before = backend.held(&store).await.bytes;
    let answer = ToolAnswer::ok(json!("x".repeat(1000)));
    store
        .answer(&task.id, &event.id, answer.clone())
        .await
        .expect("answer");
    let holding = backend.held(&store).await.bytes;
    assert!(holding >= before + 1000, "{holding} held, {before} before");
    assert_eq!(
        store.wait_answer(&task.id, &event.id).await,
        Ok(answer),
        "the answer comes back as sent"
    );
    assert_eq!(
        backend.held(&store).await.bytes,
        before,
        "taken: no longer held"
    );
}

/// Over its byte budget, a caller's own finished tasks make room for its new one.
pub async fn a_callers_finished_tasks_make_room_for_its_bytes(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_task_bytes: 64 << 10,
            max_owner_bytes: 100 << 10,
            ..StoreLimits::default()
        })
        .await;
    let done = store
        .create("a", None, tools_of(60 << 10))
        .await
        .expect("create");
    store
        .finish(&done.id, TaskStatus::Done, None)
        .await
        .expect("finish");
    let live = store
        .create("a", None, tools_of(60 << 10))
        .await
        .expect("the finished task made room");
    assert_eq!(
        store.get(&done.id).await,
        Err(StoreError::UnknownTask(done.id.clone()))
    );
    // A live task never makes room: the caller is refused instead.
    assert_eq!(
        store.create("a", None, tools_of(60 << 10)).await,
        Err(StoreError::OwnerBudget(100 << 10))
    );
    assert_eq!(
        store.get(&live.id).await.expect("the live task").status,
        TaskStatus::Waiting
    );
}

/// A call pruned from the event list (past `max_events`) still takes its answer.
pub async fn a_pruned_call_that_still_waits_takes_its_answer(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_events: 2,
            ..StoreLimits::default()
        })
        .await;
    let task = store.create("a", None, tool_t()).await.expect("create");
    store.attach(&task.id).await.expect("attach");
    let mut events = Vec::new();
    for _ in 0..3 {
        let event = store
            .emit_tool_call(&task.id, "t", json!({}))
            .await
            .expect("emit");
        events.push(event);
    }
    let polled = store.poll(&task.id, 0, Duration::ZERO).await.expect("poll");
    assert_eq!(polled.events, events[1..], "the oldest event was pruned");
    store
        .answer(&task.id, &events[0].id, ToolAnswer::ok(json!("late")))
        .await
        .expect("its call still waits");
    let answer = store
        .wait_answer(&task.id, &events[0].id)
        .await
        .expect("the answer");
    assert_eq!(answer.output, json!("late"));
}

/// Replicas racing to attach one task: exactly one call gets it.
pub async fn racing_replicas_attach_a_task_once(backend: &impl Backend) {
    let a = backend.store(StoreLimits::default()).await;
    let b = backend.replica(&a).await;
    let task = a.create("a", None, tool_t()).await.expect("create");
    let attaches: Vec<_> = (0..8)
        .map(|i| {
            let (store, id) = (
                if i % 2 == 0 { a.clone() } else { b.clone() },
                task.id.clone(),
            );
            tokio::spawn(async move { store.attach(&id).await })
        })
        .collect();
    let mut attached = 0;
    for attach in attaches {
        match attach.await.expect("an attach") {
            Ok(_) => attached += 1,
            Err(error) => assert_eq!(error, StoreError::AlreadyAttached(task.id.clone())),
        }
    }
    assert_eq!(attached, 1);
}

/// Replicas racing to create tasks for one caller: the caller's cap holds exactly.
pub async fn racing_replicas_keep_a_callers_task_cap(backend: &impl Backend) {
    let a = backend
        .store(StoreLimits {
            max_tasks_per_owner: 5,
            ..StoreLimits::default()
        })
        .await;
    let b = backend.replica(&a).await;
    let creates: Vec<_> = (0..20)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { store.create("greedy", None, Vec::new()).await })
        })
        .collect();
    let mut created = 0;
    for create in creates {
        match create.await.expect("a create") {
            Ok(_) => created += 1,
            Err(error) => assert_eq!(error, StoreError::TooManyTasks(5)),
        }
    }
    assert_eq!(created, 5);
    assert_eq!(backend.held(&a).await.tasks, 5);
}

/// A settled call pruned with an answer nobody took gives that answer's bytes back.
pub async fn a_pruned_answer_nobody_took_gives_its_bytes_back(backend: &impl Backend) {
    let store = backend
        .store(StoreLimits {
            max_events: 1,
            ..StoreLimits::default()
        })
        .await;
    let (task, first) = running_call(&store).await;
    store
        .answer(&task.id, &first.id, ToolAnswer::ok(json!("x".repeat(1000))))
        .await
        .expect("an answer its waiter never takes");
    let holding = backend.held(&store).await.bytes;
    store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .expect("a second call prunes the first");
    let after = backend.held(&store).await.bytes;
    assert!(
        after + 900 < holding,
        "{after} held after, {holding} before"
    );
    assert!(matches!(
        store.wait_answer(&task.id, &first.id).await,
        Err(StoreError::UnknownEvent { .. })
    ));
}

/// A leased attachment: the same call re-attaches at once (its old token can neither renew
/// nor finish the task any more); another call waits for the lease to lapse, then gets it.
pub async fn a_leased_task_is_reattached_by_its_call_and_released_after_its_lease(
    backend: &impl Backend,
) {
    let lease = Duration::from_millis(300);
    let a = backend.store(StoreLimits::default()).await;
    let b = backend.replica(&a).await;
    let task = a.create("a", None, tool_t()).await.expect("create");
    a.attach_leased(&task.id, "call-1", "t1", lease)
        .await
        .expect("attach");
    let other = b.attach_leased(&task.id, "call-2", "t2", lease).await;
    assert_eq!(other, Err(StoreError::AlreadyAttached(task.id.clone())));
    b.attach_leased(&task.id, "call-1", "t3", lease)
        .await
        .expect("the same call re-attaches on another replica");
    assert_eq!(
        a.renew(&task.id, "t1", lease).await,
        Err(StoreError::AlreadyAttached(task.id.clone()))
    );
    assert_eq!(
        a.release(&task.id, "t1", TaskStatus::Done, None).await,
        Ok(false)
    );
    b.renew(&task.id, "t3", lease).await.expect("renewed");
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    b.attach_leased(&task.id, "call-2", "t4", lease)
        .await
        .expect("released once the lease lapsed");
    assert_eq!(
        b.release(&task.id, "t4", TaskStatus::Done, None).await,
        Ok(true)
    );
    assert_eq!(a.get(&task.id).await.expect("get").status, TaskStatus::Done);
}

/// A call no poll returned is withdrawn for good; one a poll returned is abandoned; one
/// answered gives its answer.
pub async fn withdrawing_a_call_says_whether_a_poll_handed_it_out(backend: &impl Backend) {
    let store = backend.store(StoreLimits::default()).await;
    let (task, unseen) = running_call(&store).await;
    assert_eq!(
        store.withdraw(&task.id, &unseen.id).await,
        Ok(crate::Withdrawn::NeverHandedOut)
    );
    let polled = store.poll(&task.id, 0, Duration::ZERO).await.expect("poll");
    assert!(polled.events.is_empty(), "{:?}", polled.events);
    let seen = store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .expect("emit");
    store.poll(&task.id, 0, Duration::ZERO).await.expect("poll");
    assert_eq!(
        store.withdraw(&task.id, &seen.id).await,
        Ok(crate::Withdrawn::HandedOut)
    );
    assert_eq!(
        store
            .answer(&task.id, &seen.id, ToolAnswer::ok(json!(1)))
            .await,
        Err(StoreError::NotWaiting(seen.id.clone()))
    );
    let answered = store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .expect("emit");
    store
        .answer(&task.id, &answered.id, ToolAnswer::ok(json!("late")))
        .await
        .expect("answer");
    assert_eq!(
        store.withdraw(&task.id, &answered.id).await,
        Ok(crate::Withdrawn::Answered(ToolAnswer::ok(json!("late"))))
    );
}
