use super::*;

fn store(limits: StoreLimits) -> MemoryStore {
    MemoryStore::with_limits(limits)
}

#[tokio::test]
async fn a_tool_call_is_answered_once() {
    let store = MemoryStore::new();
    let task = store.create("a", None, tool_t()).await.unwrap();
    store.attach(&task.id).await.unwrap();
    let event = store
        .emit_tool_call(&task.id, "t", json!({"a": 1}))
        .await
        .unwrap();
    store
        .answer(&task.id, &event.id, ToolAnswer::ok(json!("fine")))
        .await
        .unwrap();
    assert_eq!(
        store
            .answer(&task.id, &event.id, ToolAnswer::ok(json!("again")))
            .await,
        Err(StoreError::AlreadyAnswered(event.id.clone()))
    );
    let answer = store.wait_answer(&task.id, &event.id).await.unwrap();
    assert_eq!(answer.output, json!("fine"));
}

#[tokio::test]
async fn abandoned_calls_refuse_late_answers() {
    let store = MemoryStore::new();
    let task = store.create("a", None, tool_t()).await.unwrap();
    let event = store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .unwrap();
    store.abandon(&task.id, &event.id);
    assert_eq!(
        store
            .answer(&task.id, &event.id, ToolAnswer::ok(json!(1)))
            .await,
        Err(StoreError::NotWaiting(event.id.clone()))
    );
}

#[tokio::test]
async fn events_are_pruned_oldest_first_and_timestamps_increase() {
    let store = store(StoreLimits {
        max_events: 3,
        ..StoreLimits::default()
    });
    let task = store.create("a", None, tool_t()).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..5 {
        let event = store
            .emit_tool_call(&task.id, "t", json!({}))
            .await
            .unwrap();
        store.abandon(&task.id, &event.id);
        ids.push(event);
    }
    let polled = store.poll(&task.id, 0, Duration::ZERO).await.unwrap();
    let kept: Vec<&str> = polled.events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(kept, [&ids[2].id, &ids[3].id, &ids[4].id]);
    assert!(
        ids.windows(2).all(|w| w[0].timestamp < w[1].timestamp),
        "strictly increasing"
    );
    assert!(matches!(
        store
            .answer(&task.id, &ids[0].id, ToolAnswer::ok(json!(1)))
            .await,
        Err(StoreError::UnknownEvent { .. })
    ));
}

#[tokio::test]
async fn waiting_tasks_expire_and_finished_ones_linger() {
    let store = store(StoreLimits {
        waiting_ttl: Duration::from_millis(50),
        linger: Duration::from_millis(50),
        ..StoreLimits::default()
    });
    let waiting = store.create("a", None, Vec::new()).await.unwrap();
    let finished = store.create("a", None, Vec::new()).await.unwrap();
    store.attach(&finished.id).await.unwrap();
    store
        .finish(&finished.id, TaskStatus::Done, None)
        .await
        .unwrap();
    assert_eq!(
        store.get(&finished.id).await.unwrap().status,
        TaskStatus::Done
    );
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(
        store.get(&waiting.id).await,
        Err(StoreError::UnknownTask(waiting.id.clone()))
    );
    assert_eq!(
        store.get(&finished.id).await,
        Err(StoreError::UnknownTask(finished.id.clone()))
    );
}

#[tokio::test]
async fn a_full_store_refuses_new_tasks() {
    let store = store(StoreLimits {
        max_tasks: 2,
        ..StoreLimits::default()
    });
    store.create("a", None, Vec::new()).await.unwrap();
    store.create("a", None, Vec::new()).await.unwrap();
    assert_eq!(
        store.create("a", None, Vec::new()).await,
        Err(StoreError::Full(2))
    );
}

#[tokio::test]
async fn a_long_poll_wakes_for_a_new_event() {
    let store = MemoryStore::new();
    let task = store.create("a", None, tool_t()).await.unwrap();
    store.attach(&task.id).await.unwrap();
    let poller = {
        let store = store.clone();
        let id = task.id.clone();
        tokio::spawn(async move { store.poll(&id, 0, Duration::from_secs(30)).await })
    };
    tokio::task::yield_now().await;
    let event = store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .unwrap();
    let polled = poller.await.unwrap().unwrap();
    assert_eq!(polled.events, [event]);
}

/// A tool spec whose description is `bytes` long: a task that holds about that much.
/// One small tool named `t`, for tasks whose tests call it.
fn tool_t() -> Vec<CustomTool> {
    tools_of(1)
}

#[tokio::test]
async fn a_call_of_a_tool_the_task_never_registered_is_refused_at_once() {
    let store = MemoryStore::new();
    let task = store.create("a", None, tool_t()).await.unwrap();
    store.attach(&task.id).await.unwrap();
    assert_eq!(
        store
            .emit_tool_call(&task.id, "get_forecast", json!({}))
            .await,
        Err(StoreError::UnknownTool {
            task: task.id.clone(),
            tool: "get_forecast".to_owned()
        })
    );
    // Nothing reached the client's event list.
    let polled = store.poll(&task.id, 0, Duration::ZERO).await.unwrap();
    assert!(polled.events.is_empty());
}

#[tokio::test]
async fn a_finished_task_keeps_its_output_and_a_second_finish_changes_nothing() {
    let store = MemoryStore::new();
    let task = store.create("a", None, tool_t()).await.unwrap();
    store.attach(&task.id).await.unwrap();
    let before = store.bytes();
    let done = store
        .finish(
            &task.id,
            TaskStatus::Done,
            Some(json!("It is 7 degrees in Oslo.")),
        )
        .await
        .unwrap();
    assert_eq!(done.output, Some(json!("It is 7 degrees in Oslo.")));
    assert!(
        store.bytes() > before,
        "the output counts against the task's bytes"
    );
    let again = store
        .finish(&task.id, TaskStatus::Cancelled, Some(json!("other")))
        .await
        .unwrap();
    assert_eq!(
        (again.status, again.output),
        (TaskStatus::Done, done.output)
    );
}

#[tokio::test]
async fn an_output_over_the_tasks_budget_is_left_out_but_the_task_finishes() {
    let store = store(StoreLimits {
        max_task_bytes: 1024,
        ..StoreLimits::default()
    });
    let task = store.create("a", None, tool_t()).await.unwrap();
    let done = store
        .finish(&task.id, TaskStatus::Done, Some(json!("x".repeat(4096))))
        .await
        .unwrap();
    assert_eq!((done.status, done.output), (TaskStatus::Done, None));
}

fn tools_of(bytes: usize) -> Vec<CustomTool> {
    vec![CustomTool {
        name: "t".to_owned(),
        description: "x".repeat(bytes),
        inputs: json!({"type": "object"}),
        output: String::new(),
        timeout_ms: None,
    }]
}

#[tokio::test]
async fn one_caller_cannot_take_every_task_slot() {
    let store = store(StoreLimits {
        max_tasks: 10,
        max_tasks_per_owner: 3,
        ..StoreLimits::default()
    });
    for _ in 0..3 {
        store.create("greedy", None, Vec::new()).await.unwrap();
    }
    assert_eq!(
        store.create("greedy", None, Vec::new()).await,
        Err(StoreError::TooManyTasks(3))
    );
    // Another caller is not held back by the first one's tasks.
    store.create("other", None, Vec::new()).await.unwrap();
    assert_eq!(store.len(), 4, "nothing already accepted was dropped");
}

#[tokio::test]
async fn a_callers_finished_tasks_make_room_for_its_new_ones() {
    let store = store(StoreLimits {
        max_tasks_per_owner: 2,
        ..StoreLimits::default()
    });
    let live = store.create("a", None, Vec::new()).await.unwrap();
    let done = store.create("a", None, Vec::new()).await.unwrap();
    store
        .finish(&done.id, TaskStatus::Cancelled, None)
        .await
        .unwrap();
    // Create and cancel in a loop: the caller's own finished tasks go, its live one stays.
    for _ in 0..5 {
        let task = store.create("a", None, Vec::new()).await.unwrap();
        store
            .finish(&task.id, TaskStatus::Cancelled, None)
            .await
            .unwrap();
    }
    assert_eq!(
        store.get(&live.id).await.unwrap().status,
        TaskStatus::Waiting
    );
    assert_eq!(store.len(), 2);
}

#[tokio::test]
async fn a_task_larger_than_its_budget_is_refused() {
    let store = store(StoreLimits {
        max_task_bytes: 4096,
        ..StoreLimits::default()
    });
    assert_eq!(
        store.create("a", None, tools_of(8192)).await,
        Err(StoreError::TaskBudget(4096))
    );
    store.create("a", None, tools_of(1024)).await.unwrap();
}

#[tokio::test]
async fn one_callers_bytes_cannot_fill_the_store() {
    let store = store(StoreLimits {
        max_task_bytes: 64 << 10,
        max_owner_bytes: 100 << 10,
        max_total_bytes: 200 << 10,
        ..StoreLimits::default()
    });
    store
        .create("greedy", None, tools_of(60 << 10))
        .await
        .unwrap();
    assert_eq!(
        store.create("greedy", None, tools_of(60 << 10)).await,
        Err(StoreError::OwnerBudget(100 << 10))
    );
    store.create("b", None, tools_of(60 << 10)).await.unwrap();
    store.create("c", None, tools_of(60 << 10)).await.unwrap();
    // All callers together: the store's own budget.
    assert_eq!(
        store.create("d", None, tools_of(60 << 10)).await,
        Err(StoreError::FullBytes(200 << 10))
    );
    assert!(store.bytes() <= 200 << 10);
}

#[tokio::test]
async fn an_oversized_answer_is_refused_and_the_call_still_waits() {
    let store = store(StoreLimits {
        max_task_bytes: 4096,
        ..StoreLimits::default()
    });
    let task = store.create("a", None, tool_t()).await.unwrap();
    store.attach(&task.id).await.unwrap();
    let event = store
        .emit_tool_call(&task.id, "t", json!({}))
        .await
        .unwrap();
    assert_eq!(
        store
            .answer(&task.id, &event.id, ToolAnswer::ok(json!("x".repeat(8192))))
            .await,
        Err(StoreError::TaskBudget(4096))
    );
    // Nothing accepted was lost: the call still takes a proper answer.
    store
        .answer(&task.id, &event.id, ToolAnswer::ok(json!("fine")))
        .await
        .unwrap();
    let answer = store.wait_answer(&task.id, &event.id).await.unwrap();
    assert_eq!(answer.output, json!("fine"));
}

#[tokio::test]
async fn large_tool_calls_prune_settled_events_and_never_waiting_ones() {
    let store = store(StoreLimits {
        max_task_bytes: 8192,
        ..StoreLimits::default()
    });
    let task = store.create("a", None, tool_t()).await.unwrap();
    store.attach(&task.id).await.unwrap();
    let big = json!({"text": "x".repeat(2000)});
    // Settled calls make room for new ones, oldest first, without end.
    for _ in 0..20 {
        let event = store
            .emit_tool_call(&task.id, "t", big.clone())
            .await
            .unwrap();
        store.abandon(&task.id, &event.id);
    }
    assert!(store.bytes() <= 8192);
    // Calls still waiting are kept; once they fill the budget, a new call is refused.
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
            .unwrap();
    }
}

#[tokio::test]
async fn expired_tasks_give_their_bytes_back() {
    let store = store(StoreLimits {
        waiting_ttl: Duration::from_millis(30),
        max_owner_bytes: 100 << 10,
        ..StoreLimits::default()
    });
    store.create("a", None, tools_of(60 << 10)).await.unwrap();
    assert!(store.bytes() >= 60 << 10);
    std::thread::sleep(Duration::from_millis(40));
    // The expired task's bytes are the caller's again.
    store.create("a", None, tools_of(60 << 10)).await.unwrap();
    assert_eq!(store.len(), 1);
    assert!(store.bytes() < 100 << 10);
}
