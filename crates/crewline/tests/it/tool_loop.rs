//! The `generate_response` tool loop against a mocked LLM (mockall).
//!
//! One long file for now: the tool loop itself is being reworked on another branch; this file
//! is split by topic once that has landed, to spare a merge.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline::prelude::*;
use crewline::{
    ToolLoop, TurnEvent,
    llm::{LlmError, StreamItem, ToolChoice, Usage},
    tool::{Tool, ToolRegistry},
    turn::{TurnError, TurnReport},
    types::{Context, Message, ToolErrorKind, ToolResult},
};
use crewline_core::Role;
use crewline_llm::{FinishReason, LlmStream, MockLlmClient};
use futures::StreamExt;
use futures::stream;
use mockall::Sequence;
use serde_json::{Value, json};

type Body = Arc<
    dyn Fn(Value) -> Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>> + Send + Sync,
>;

/// A tool made from a closure, so each test states its tool's behaviour inline.
struct FnTool {
    name: &'static str,
    body: Body,
}

impl FnTool {
    fn new<F, Fut>(name: &'static str, body: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        Self {
            name,
            body: Arc::new(move |args| Box::pin(body(args))),
        }
    }
}

#[async_trait]
impl Tool for FnTool {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "A test tool."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}})
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        (self.body)(arguments).await
    }
}

fn weather_tool() -> FnTool {
    FnTool::new("get_weather", |args| async move {
        let city = args["city"].as_str().unwrap_or("nowhere").to_owned();
        Ok(json!(format!("Sunny in {city}")))
    })
}

fn registry(tools: Vec<FnTool>) -> Arc<ToolRegistry> {
    let mut registry = ToolRegistry::new();
    for tool in tools {
        registry
            .register(tool)
            .expect("test tools have unique, valid names");
    }
    Arc::new(registry)
}

fn text_reply(chunks: &[&str]) -> LlmStream {
    let mut items: Vec<Result<StreamItem, LlmError>> = chunks
        .iter()
        .map(|c| Ok(StreamItem::Text((*c).to_owned())))
        .collect();
    items.push(Ok(StreamItem::Finish(FinishReason::Stop)));
    items.push(Ok(StreamItem::Usage(Usage {
        prompt_tokens: 10,
        completion_tokens: 5,
        total_tokens: 15,
        reasoning_tokens: 0,
        cached_tokens: 0,
    })));
    Box::pin(stream::iter(items))
}

fn tool_reply(text: &str, calls: &[(&str, &str, Value)]) -> LlmStream {
    let mut items = Vec::new();
    if !text.is_empty() {
        items.push(Ok(StreamItem::Text(text.to_owned())));
    }
    items.push(Ok(StreamItem::ToolCalls(
        calls
            .iter()
            .map(|(id, name, args)| ToolCall::new(*id, *name, args.to_string()))
            .collect(),
    )));
    items.push(Ok(StreamItem::Finish(FinishReason::ToolCalls)));
    items.push(Ok(StreamItem::Usage(Usage {
        prompt_tokens: 20,
        completion_tokens: 3,
        total_tokens: 23,
        reasoning_tokens: 0,
        cached_tokens: 0,
    })));
    Box::pin(stream::iter(items))
}

fn context() -> Context {
    let mut context = Context::with_system("You are a weather agent.");
    context.add(Message::user("Weather in Paris?"));
    context
}

/// Runs a turn to its end, returning its events (or the error that ended it).
async fn drive(turn_loop: &ToolLoop, context: &mut Context) -> (Vec<TurnEvent>, Option<TurnError>) {
    let mut turn = turn_loop.run(context);
    let mut events = Vec::new();
    while let Some(event) = turn.next().await {
        match event {
            Ok(event) => events.push(event),
            Err(error) => return (events, Some(error)),
        }
    }
    (events, None)
}

fn texts(events: &[TurnEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn report(events: &[TurnEvent]) -> &TurnReport {
    match events.last() {
        Some(TurnEvent::Done(report)) => report,
        other => panic!("turn did not end with Done: {other:?}"),
    }
}

#[tokio::test]
async fn text_only_turn_streams_chunks_and_appends_one_assistant_message() {
    let mut llm = MockLlmClient::new();
    llm.expect_stream_chat()
        .times(1)
        .withf(|req| req.tools.len() == 1 && req.tool_choice.is_none())
        .returning(|_| Ok(text_reply(&["Hello", " there", "!"])));
    let turn_loop = ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()]));
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none());
    let chunks: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, TurnEvent::Text(_)))
        .collect();
    assert_eq!(chunks.len(), 3, "each chunk is yielded as it arrives");
    assert_eq!(texts(&events), "Hello there!");
    assert_eq!(context.last(), Some(&Message::assistant("Hello there!")));
    assert_eq!(context.len(), 3);
    let report = report(&events);
    assert_eq!(report.rounds.len(), 1);
    assert_eq!(report.usage.total_tokens, 15);
    assert!(report.time_to_first_token.is_some());
    assert!(!report.hit_round_cap);
}

#[tokio::test]
async fn the_provider_that_answered_is_on_the_turn_report_and_never_spoken() {
    let mut llm = MockLlmClient::new();
    llm.expect_stream_chat().times(1).returning(|_| {
        Ok(Box::pin(stream::iter(vec![
            Ok(StreamItem::Provider("backup".into())),
            Ok(StreamItem::Text("Sunny.".into())),
            Ok(StreamItem::Finish(FinishReason::Stop)),
        ])))
    });
    let turn_loop = ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()]));
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none());
    assert_eq!(texts(&events), "Sunny.");
    assert_eq!(report(&events).provider(), Some("backup"));
}

#[tokio::test]
async fn reasoning_is_never_spoken_nor_kept_in_the_context() {
    let mut llm = MockLlmClient::new();
    llm.expect_stream_chat().times(1).returning(|_| {
        Ok(Box::pin(stream::iter(vec![
            Ok(StreamItem::Reasoning("The user wants Paris. ".into())),
            Ok(StreamItem::Text("Sunny.".into())),
            Ok(StreamItem::Reasoning("Done.".into())),
            Ok(StreamItem::Finish(FinishReason::Stop)),
        ])))
    });
    let turn_loop = ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()]));
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none());
    assert_eq!(texts(&events), "Sunny.");
    assert_eq!(context.last(), Some(&Message::assistant("Sunny.")));
}

#[tokio::test]
async fn one_tool_round_feeds_results_back_and_answers() {
    let mut llm = MockLlmClient::new();
    let mut seq = Sequence::new();
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| {
            Ok(tool_reply(
                "Let me check.",
                &[("call_a", "get_weather", json!({"city": "Paris"}))],
            ))
        });
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|req| {
            // The second request carries the assistant's tool call and its result.
            let n = req.messages.len();
            req.messages[n - 2].tool_calls().len() == 1
                && req.messages[n - 1] == Message::tool("call_a", "Sunny in Paris")
        })
        .returning(|_| Ok(text_reply(&["It is sunny in Paris."])));
    let turn_loop = ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()]));
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none(), "{error:?}");
    assert_eq!(texts(&events), "Let me check.It is sunny in Paris.");
    let roles: Vec<Role> = context.messages().iter().map(Message::role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ]
    );
    assert_eq!(context.messages()[2].text(), Some("Let me check."));
    assert_eq!(
        context.messages()[2].tool_calls()[0],
        ToolCall::new("call_a", "get_weather", r#"{"city":"Paris"}"#)
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, TurnEvent::ToolStarted { call: c, .. } if c.id == "call_a"))
    );
    assert!(events.iter().any(
        |e| matches!(e, TurnEvent::ToolFinished(run) if run.result.content() == "Sunny in Paris")
    ));
    let report = report(&events);
    assert_eq!(report.rounds.len(), 2);
    assert_eq!(report.rounds[0].tools.len(), 1);
    assert_eq!(report.usage.total_tokens, 23 + 15);
}

#[tokio::test]
async fn several_rounds_run_until_the_model_stops_calling_tools() {
    let mut llm = MockLlmClient::new();
    let round = Arc::new(AtomicUsize::new(0));
    let counter = round.clone();
    llm.expect_stream_chat().times(4).returning(move |_| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        Ok(if n < 3 {
            tool_reply(
                "",
                &[(&format!("call_{n}"), "get_weather", json!({"city": "Oslo"}))],
            )
        } else {
            text_reply(&["Done."])
        })
    });
    let turn_loop = ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()]));
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none());
    assert_eq!(report(&events).rounds.len(), 4);
    assert!(
        !report(&events).hit_round_cap,
        "3 tool rounds are under the default cap of 4"
    );
    // 3 × (assistant + tool) + final assistant.
    assert_eq!(context.len(), 2 + 3 * 2 + 1);
}

#[tokio::test]
async fn reaching_the_round_cap_forces_a_final_answer_without_tools() {
    let mut llm = MockLlmClient::new();
    let mut seq = Sequence::new();
    for i in 0..2 {
        llm.expect_stream_chat()
            .times(1)
            .in_sequence(&mut seq)
            .withf(|req| req.tool_choice.is_none())
            .returning(move |_| {
                Ok(tool_reply(
                    "",
                    &[(&format!("call_{i}"), "get_weather", json!({"city": "Rome"}))],
                ))
            });
    }
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|req| req.tool_choice == Some(ToolChoice::None) && !req.tools.is_empty())
        .returning(|_| Ok(text_reply(&["Here is what I found: sunny in Rome."])));
    let turn_loop =
        ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()])).with_max_tool_rounds(2);
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none());
    assert_eq!(texts(&events), "Here is what I found: sunny in Rome.");
    let report = report(&events);
    assert!(report.hit_round_cap);
    assert_eq!(report.rounds.len(), 3);
    assert_eq!(
        context.last(),
        Some(&Message::assistant("Here is what I found: sunny in Rome."))
    );
}

#[tokio::test]
async fn tool_calls_after_the_cap_are_dropped_not_left_dangling() {
    let mut llm = MockLlmClient::new();
    llm.expect_stream_chat().times(2).returning(|req| {
        let id = format!("call_{}", req.messages.len());
        Ok(tool_reply(
            "Checking.",
            &[(&id, "get_weather", json!({"city": "Rome"}))],
        ))
    });
    let turn_loop =
        ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()])).with_max_tool_rounds(1);
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none());
    assert!(report(&events).hit_round_cap);
    // Every assistant message with tool calls is followed by one result per call.
    assert_every_call_answered(&context);
    assert_eq!(context.last(), Some(&Message::assistant("Checking.")));
}

fn assert_every_call_answered(context: &Context) {
    let messages = context.messages();
    for (i, message) in messages.iter().enumerate() {
        for (j, call) in message.tool_calls().iter().enumerate() {
            match messages.get(i + 1 + j) {
                Some(Message::Tool { tool_call_id, .. }) => assert_eq!(tool_call_id, &call.id),
                other => panic!("call {} has no result, found {other:?}", call.id),
            }
        }
    }
}

fn barrier_tool(name: &'static str, barrier: Arc<tokio::sync::Barrier>) -> FnTool {
    FnTool::new(name, move |_| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            Ok(json!(format!("{name} done")))
        }
    })
}

#[tokio::test]
async fn parallel_tools_overlap() {
    // Both tools wait at a barrier of two: the round only finishes if they run at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let tools = registry(vec![
        barrier_tool("first", barrier.clone()),
        barrier_tool("second", barrier),
    ]);
    let mut llm = MockLlmClient::new();
    let mut seq = Sequence::new();
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| {
            Ok(tool_reply(
                "",
                &[("c1", "first", json!({})), ("c2", "second", json!({}))],
            ))
        });
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(text_reply(&["ok"])));
    let turn_loop = ToolLoop::new(Arc::new(llm), tools);
    let mut context = context();

    let (events, error) =
        tokio::time::timeout(Duration::from_secs(10), drive(&turn_loop, &mut context))
            .await
            .expect("parallel tools deadlocked: they did not run concurrently");

    assert!(error.is_none());
    assert_eq!(report(&events).rounds[0].tools.len(), 2);
    // Results are in call order whatever order the tools finished in.
    assert_eq!(context.messages()[3], Message::tool("c1", "first done"));
    assert_eq!(context.messages()[4], Message::tool("c2", "second done"));
}

#[tokio::test]
async fn sequential_tools_run_one_at_a_time_in_call_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let running = Arc::new(AtomicUsize::new(0));
    let make = |name: &'static str| {
        let log = log.clone();
        let running = running.clone();
        FnTool::new(name, move |_| {
            let log = log.clone();
            let running = running.clone();
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                log.lock()
                    .unwrap()
                    .push(format!("{name} start ({now} running)"));
                tokio::task::yield_now().await;
                log.lock().unwrap().push(format!("{name} end"));
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(json!("ok"))
            }
        })
    };
    let tools = registry(vec![make("book_flight"), make("send_confirmation")]);
    let mut llm = MockLlmClient::new();
    let mut seq = Sequence::new();
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| {
            Ok(tool_reply(
                "",
                &[
                    ("c1", "book_flight", json!({})),
                    ("c2", "send_confirmation", json!({})),
                ],
            ))
        });
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(text_reply(&["Booked."])));
    let turn_loop = ToolLoop::new(Arc::new(llm), tools).with_parallel_tools(false);
    let mut context = context();

    let (_, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none());
    assert_eq!(
        *log.lock().unwrap(),
        [
            "book_flight start (1 running)",
            "book_flight end",
            "send_confirmation start (1 running)",
            "send_confirmation end"
        ]
    );
}

#[tokio::test]
async fn tool_failures_reach_the_model_as_errors_and_the_turn_goes_on() {
    let tools = registry(vec![
        weather_tool(),
        FnTool::new("flaky", |_| async {
            Err(ToolError::new("Service down, try later"))
        }),
        FnTool::new("explodes", |_| async { panic!("bug in tool") }),
    ]);
    let mut llm = MockLlmClient::new();
    let mut seq = Sequence::new();
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| {
            let mut stream_items = vec![Ok(StreamItem::ToolCalls(vec![
                ToolCall::new("c1", "no_such_tool", "{}"),
                ToolCall::new("c2", "get_weather", "{not json"),
                ToolCall::new("c3", "get_weather", r#"{"city": 42}"#),
                ToolCall::new("c4", "flaky", "{}"),
                ToolCall::new("c5", "explodes", "{}"),
                ToolCall::new("c6", "get_weather", r#"{"city": "Lima"}"#),
            ]))];
            stream_items.push(Ok(StreamItem::Finish(FinishReason::ToolCalls)));
            Ok(Box::pin(stream::iter(stream_items)) as LlmStream)
        });
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(text_reply(&["Sorry, only Lima worked."])));
    let turn_loop = ToolLoop::new(Arc::new(llm), tools);
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none(), "{error:?}");
    let results: Vec<ToolResult> = events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolFinished(run) => Some(run.result.clone()),
            _ => None,
        })
        .collect();
    let kind = |id: &str| {
        results
            .iter()
            .find(|r| r.tool_call_id == id)
            .unwrap()
            .error_kind()
    };
    assert_eq!(results.len(), 6, "nothing is dropped");
    assert_eq!(kind("c1"), Some(ToolErrorKind::UnknownTool));
    assert_eq!(kind("c2"), Some(ToolErrorKind::ToolArgsInvalid));
    assert_eq!(kind("c3"), Some(ToolErrorKind::ToolArgsInvalid));
    assert_eq!(kind("c4"), Some(ToolErrorKind::ToolError));
    assert_eq!(kind("c5"), Some(ToolErrorKind::ToolError));
    assert_eq!(kind("c6"), None);
    assert!(
        results
            .iter()
            .any(|r| r.content().contains("Service down, try later"))
    );
    assert_every_call_answered(&context);
    assert_eq!(
        context.last(),
        Some(&Message::assistant("Sorry, only Lima worked."))
    );
}

#[tokio::test]
async fn llm_failure_before_the_first_byte_ends_the_turn_with_an_error() {
    let mut llm = MockLlmClient::new();
    llm.expect_stream_chat().times(1).returning(|_| {
        Err(LlmError::Api {
            status: Some(500),
            message: "overloaded".into(),
            retry_after: None,
        })
    });
    let turn_loop = ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()]));
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(events.is_empty());
    assert!(matches!(
        error,
        Some(TurnError::Llm(LlmError::Api {
            status: Some(500),
            ..
        }))
    ));
    assert_eq!(context.len(), 2, "context is unchanged");
}

#[tokio::test]
async fn llm_stream_dying_mid_way_keeps_the_text_already_spoken() {
    let mut llm = MockLlmClient::new();
    llm.expect_stream_chat().times(1).returning(|_| {
        Ok(Box::pin(stream::iter(vec![
            Ok(StreamItem::Text("The weather is".into())),
            Err(LlmError::StreamCut("connection reset".into())),
        ])) as LlmStream)
    });
    let turn_loop = ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()]));
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert_eq!(texts(&events), "The weather is");
    assert!(matches!(
        error,
        Some(TurnError::Llm(LlmError::StreamCut(_)))
    ));
    assert_eq!(context.last(), Some(&Message::assistant("The weather is")));
}

/// Sets a flag when dropped: proves a future or stream was cancelled.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn barge_in_during_text_cancels_the_llm_stream() {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let mut llm = MockLlmClient::new();
    llm.expect_stream_chat().times(1).returning(move |_| {
        let guard = DropFlag(flag.clone());
        // One chunk, then a stream that never ends (a model still talking).
        let rest = stream::pending::<Result<StreamItem, LlmError>>().map(move |item| {
            let _keep = &guard;
            item
        });
        Ok(
            Box::pin(stream::iter(vec![Ok(StreamItem::Text("Well,".into()))]).chain(rest))
                as LlmStream,
        )
    });
    let turn_loop = ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()]));
    let mut context = context();

    {
        let mut turn = turn_loop.run(&mut context);
        assert!(matches!(turn.next().await, Some(Ok(TurnEvent::Text(t))) if t == "Well,"));
        assert!(!dropped.load(Ordering::SeqCst));
    } // the caller interrupts: the turn is dropped

    assert!(
        dropped.load(Ordering::SeqCst),
        "the LLM stream was cancelled at once"
    );
    assert_eq!(context.last(), Some(&Message::assistant("Well,")));
}

#[tokio::test]
async fn barge_in_during_tools_cancels_them_and_leaves_no_dangling_tool_call() {
    let cancelled = Arc::new(AtomicBool::new(false));
    let started = Arc::new(tokio::sync::Notify::new());
    let (flag, notify) = (cancelled.clone(), started.clone());
    let tools = registry(vec![
        weather_tool(),
        FnTool::new("slow_lookup", move |_| {
            let guard = DropFlag(flag.clone());
            let notify = notify.clone();
            async move {
                let _guard = guard;
                notify.notify_one();
                std::future::pending::<()>().await;
                Ok(json!("never"))
            }
        }),
    ]);
    let mut llm = MockLlmClient::new();
    llm.expect_stream_chat().times(1).returning(|_| {
        Ok(tool_reply(
            "One moment.",
            &[
                ("c1", "get_weather", json!({"city": "Quito"})),
                ("c2", "slow_lookup", json!({})),
            ],
        ))
    });
    let turn_loop = ToolLoop::new(Arc::new(llm), tools);
    let mut context = context();

    {
        let mut turn = turn_loop.run(&mut context);
        // Drive the turn until the fast tool finished while the slow one still runs.
        while let Some(event) = turn.next().await {
            if let Ok(TurnEvent::ToolFinished(run)) = event {
                assert_eq!(run.result.tool_call_id, "c1");
                break;
            }
        }
        // Keep driving the turn until the slow tool is running.
        tokio::select! {
            () = started.notified() => {}
            event = turn.next() => panic!("the turn went on past a pending tool: {event:?}"),
        }
    } // barge-in

    assert!(
        cancelled.load(Ordering::SeqCst),
        "the running tool was cancelled"
    );
    assert_every_call_answered(&context);
    let n = context.len();
    assert_eq!(context.messages()[n - 3].text(), Some("One moment."));
    assert_eq!(
        context.messages()[n - 2],
        Message::tool("c1", "Sunny in Quito")
    );
    let cancelled_result = &context.messages()[n - 1];
    assert!(cancelled_result.text().unwrap().contains("Cancelled"));
}

#[tokio::test]
async fn run_limits_count_over_every_round_of_a_turn() {
    use crewline::tool::{Executor, executor::limits::RunLimits};

    let executor = Executor::builder()
        .run_limits(RunLimits {
            max_calls: Some(2),
            ..RunLimits::default()
        })
        .build();
    let mut registry = ToolRegistry::new().with_executor(Arc::new(executor));
    registry.register(weather_tool()).unwrap();
    let mut llm = MockLlmClient::new();
    let round = Arc::new(AtomicUsize::new(0));
    let counter = round.clone();
    llm.expect_stream_chat().times(4).returning(move |_| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        Ok(if n < 3 {
            tool_reply(
                "",
                &[(&format!("call_{n}"), "get_weather", json!({"city": "Oslo"}))],
            )
        } else {
            text_reply(&["Done."])
        })
    });
    let turn_loop = ToolLoop::new(Arc::new(llm), Arc::new(registry));
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none());
    let kinds: Vec<Option<ToolErrorKind>> = events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolFinished(run) => Some(run.result.error_kind()),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [None, None, Some(ToolErrorKind::RunLimitExceeded)],
        "the third call of the turn is over the limit of two, whatever round it is in"
    );
}

/// A tool exported to MCP clients only.
struct McpOnly;

#[async_trait]
impl Tool for McpOnly {
    fn name(&self) -> &str {
        "admin_reset"
    }
    fn description(&self) -> &str {
        "Resets an account; for operators' agents, not for callers."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn policy(&self) -> crewline::tool::ToolPolicy {
        crewline::tool::ToolPolicy::default().exports(crewline::tool::Exports::only(&[
            crewline::tool::Target::Mcp,
        ]))
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        Ok(json!("reset"))
    }
}

#[tokio::test]
async fn only_tools_exported_to_the_crew_are_offered_to_its_model() {
    let mut registry = ToolRegistry::new();
    registry.register(weather_tool()).unwrap();
    registry.register(McpOnly).unwrap();
    let mut llm = MockLlmClient::new();
    llm.expect_stream_chat()
        .times(1)
        .withf(|req| {
            req.tools
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                == ["get_weather"]
        })
        .returning(|_| Ok(text_reply(&["ok"])));
    let turn_loop = ToolLoop::new(Arc::new(llm), Arc::new(registry));
    let mut context = context();

    let (_, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none());
}

/// The filler of the weather crew: only `get_weather` is slow enough to need one.
fn weather_filler(calls: &[ToolCall]) -> Option<String> {
    calls
        .iter()
        .any(|c| c.name == "get_weather")
        .then(|| "Let me check that for you.".to_owned())
}

#[tokio::test]
async fn a_filler_is_spoken_before_slow_tools_when_the_model_said_nothing() {
    let mut llm = MockLlmClient::new();
    let mut seq = Sequence::new();
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| {
            Ok(tool_reply(
                "",
                &[("call_a", "get_weather", json!({"city": "Paris"}))],
            ))
        });
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(text_reply(&["It is sunny in Paris."])));
    let turn_loop =
        ToolLoop::new(Arc::new(llm), registry(vec![weather_tool()])).with_filler(weather_filler);
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none(), "{error:?}");
    assert!(
        matches!(&events[0], TurnEvent::Text(t) if t == "Let me check that for you."),
        "the filler comes first: {events:?}"
    );
    assert!(matches!(&events[1], TurnEvent::ToolStarted { call: c, .. } if c.id == "call_a"));
    assert_eq!(
        texts(&events),
        "Let me check that for you.It is sunny in Paris."
    );
    // The model's next request knows the filler was said.
    assert_eq!(
        context.messages()[2].text(),
        Some("Let me check that for you.")
    );
    assert_eq!(context.messages()[2].tool_calls().len(), 1);
    assert_every_call_answered(&context);
}

#[tokio::test]
async fn no_filler_when_the_model_spoke_first_or_the_tools_need_none() {
    let mut llm = MockLlmClient::new();
    let mut seq = Sequence::new();
    // Turn 1: the model speaks before its call, so the filler would be double talk.
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| {
            Ok(tool_reply(
                "One sec.",
                &[("call_a", "get_weather", json!({"city": "Paris"}))],
            ))
        });
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(text_reply(&["Sunny."])));
    // Turn 2: a tool the filler function leaves silent.
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(tool_reply("", &[("call_b", "get_time", json!({}))])));
    llm.expect_stream_chat()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(text_reply(&["Noon."])));
    let tools = registry(vec![
        weather_tool(),
        FnTool::new("get_time", |_| async { Ok(json!("12:00")) }),
    ]);
    let turn_loop = ToolLoop::new(Arc::new(llm), tools).with_filler(weather_filler);
    let mut context = context();

    let (events, _) = drive(&turn_loop, &mut context).await;
    assert_eq!(texts(&events), "One sec.Sunny.");

    context.add(Message::user("And the time?"));
    let (events, _) = drive(&turn_loop, &mut context).await;
    assert_eq!(texts(&events), "Noon.");
}

/// Counts its runs (and how many run at once at most).
fn counted_tool(runs: Arc<AtomicUsize>) -> FnTool {
    FnTool::new("get_weather", move |_| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok(json!("Sunny")) }
    })
}

fn kinds_of(events: &[TurnEvent]) -> Vec<Option<ToolErrorKind>> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolFinished(run) => Some(run.result.error_kind()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_answer_with_a_hundred_tool_calls_runs_at_most_the_cap_and_the_turn_ends_normally() {
    use crewline_llm::{Reply, ScriptedLlm};

    let runs = Arc::new(AtomicUsize::new(0));
    let hundred = (0..100).map(|i| ("get_weather", json!({"city": format!("c{i}")})));
    let llm = ScriptedLlm::new([Reply::tool_calls(hundred), Reply::text("Here you go.")]);
    let turn_loop = ToolLoop::new(
        Arc::new(llm.clone()),
        registry(vec![counted_tool(runs.clone())]),
    );
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none(), "{error:?}");
    let cap = crewline::turn::MAX_CALLS_PER_ANSWER;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        cap,
        "only the first {cap} calls ran"
    );
    let kinds = kinds_of(&events);
    assert_eq!(kinds.len(), 100, "every call gets a result");
    let refused = kinds
        .iter()
        .filter(|k| **k == Some(ToolErrorKind::RunLimitExceeded))
        .count();
    assert_eq!(refused, 100 - cap);
    // The model read a structured error for each refused call, and answered.
    let second = &llm.requests()[1];
    let results = ScriptedLlm::last_tool_results(second);
    assert_eq!(results.len(), 100);
    assert!(
        results[cap].contains("RunLimitExceeded"),
        "{}",
        results[cap]
    );
    assert_eq!(texts(&events), "Here you go.");
    assert!(matches!(events.last(), Some(TurnEvent::Done(_))));
}

#[tokio::test]
async fn the_turns_call_cap_holds_by_default_across_answers() {
    use crewline_llm::{Reply, ScriptedLlm};

    let runs = Arc::new(AtomicUsize::new(0));
    let answer = |round: usize| {
        Reply::tool_calls(
            (0..10).map(move |i| ("get_weather", json!({"city": format!("{round}-{i}")}))),
        )
    };
    // Four answers of ten calls: forty asked for, more than the turn's default cap.
    let llm = ScriptedLlm::new([
        answer(0),
        answer(1),
        answer(2),
        answer(3),
        Reply::text("Done."),
    ]);
    let turn_loop = ToolLoop::new(Arc::new(llm), registry(vec![counted_tool(runs.clone())]));
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none(), "{error:?}");
    let cap = crewline::turn::MAX_CALLS_PER_TURN;
    assert_eq!(runs.load(Ordering::SeqCst), cap);
    let kinds = kinds_of(&events);
    assert_eq!(kinds.len(), 40);
    let refused = kinds
        .iter()
        .filter(|k| **k == Some(ToolErrorKind::RunLimitExceeded))
        .count();
    assert_eq!(refused, 40 - cap);
    assert_eq!(texts(&events), "Done.");
}

#[tokio::test]
async fn a_barge_in_during_tools_leaves_a_cancelled_record_in_the_ledger() {
    use crewline::tool::{Executor, executor::ledger::MemoryLedger};
    use crewline_llm::{Reply, ScriptedLlm};

    let started = Arc::new(tokio::sync::Notify::new());
    let notify = started.clone();
    let ledger = Arc::new(MemoryLedger::new());
    let executor = Executor::builder().ledger(ledger.clone()).build();
    let mut tools = ToolRegistry::new().with_executor(Arc::new(executor));
    tools
        .register(FnTool::new("slow_lookup", move |_| {
            let notify = notify.clone();
            async move {
                notify.notify_one();
                std::future::pending::<()>().await;
                Ok(json!("never"))
            }
        }))
        .unwrap();
    let llm = ScriptedLlm::new([Reply::tool_call("slow_lookup", json!({"city": "Lima"}))]);
    let turn_loop = ToolLoop::new(Arc::new(llm), Arc::new(tools));
    let mut context = context();
    {
        let mut turn = turn_loop.run(&mut context);
        // Drive the turn until the tool runs, then drop it: the caller barged in.
        tokio::select! {
            _ = async { while turn.next().await.is_some() {} } => panic!("the turn ended"),
            () = started.notified() => {}
        }
    }
    let records = ledger.records();
    assert_eq!(records.len(), 1, "the cut-short call has no ledger record");
    assert_eq!(records[0].tool, "slow_lookup");
    assert_eq!(records[0].error_kind, Some(ToolErrorKind::Cancelled));
    assert_eq!(records[0].arguments, json!({"city": "Lima"}));
}
