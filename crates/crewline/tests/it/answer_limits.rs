//! The tool loop's bounds on one model answer (issue 30, point 2): an answer past them ends
//! the turn with an error and leaves nothing in the conversation; refused calls cost little;
//! what a round appends fits the conversation's own bounds.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use async_trait::async_trait;
use crewline::prelude::*;
use crewline::{
    ToolLoop, TurnEvent,
    llm::{AnswerLimits, LlmError, Reply, ScriptedLlm},
    tool::{Tool, ToolRegistry},
    turn::TurnError,
    types::{Context, ContextLimits, Message},
};
use futures::StreamExt;
use serde_json::{Value, json};

/// A tool that counts its runs and answers with `answer`.
struct Counted {
    runs: Arc<AtomicUsize>,
    answer: String,
}

#[async_trait]
impl Tool for Counted {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "A test tool."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}})
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(Value::String(self.answer.clone()))
    }
}

fn tools(runs: &Arc<AtomicUsize>, answer: &str) -> Arc<ToolRegistry> {
    let mut registry = ToolRegistry::new();
    registry
        .register(Counted {
            runs: runs.clone(),
            answer: answer.to_owned(),
        })
        .expect("the tool registers");
    Arc::new(registry)
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

fn started(events: &[TurnEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, TurnEvent::ToolStarted { .. }))
        .count()
}

#[tokio::test]
async fn ten_thousand_parallel_calls_end_the_turn_with_an_error_and_leave_no_trace() {
    // Before: 16 ran, and every one of the 10,000 got two log events and a message in the
    // next request.
    let runs = Arc::new(AtomicUsize::new(0));
    let flood = (0..10_000).map(|i| ("get_weather", json!({"city": format!("c{i}")})));
    let llm = ScriptedLlm::new([Reply::tool_calls(flood), Reply::text("Hello again.")]);
    let turn_loop = ToolLoop::new(Arc::new(llm.clone()), tools(&runs, "Sunny"));
    let mut context = context();
    let before = context.clone();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(
        matches!(
            error,
            Some(TurnError::Llm(LlmError::TooManyToolCalls { limit })) if limit == AnswerLimits::DEFAULT_MAX_TOOL_CALLS
        ),
        "{error:?}"
    );
    assert_eq!(started(&events), 0, "no call starts, none is logged");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no call runs");
    assert_eq!(context, before, "nothing of the answer enters the context");

    // The call goes on: the next turn asks with the conversation as it was.
    context.add(Message::user("Still there?"));
    let (events, error) = drive(&turn_loop, &mut context).await;
    assert!(error.is_none(), "{error:?}");
    assert!(matches!(events.last(), Some(TurnEvent::Done(_))));
    assert_eq!(llm.requests()[1].messages.len(), 3);
}

#[tokio::test]
async fn one_call_of_a_megabyte_ends_the_turn_and_the_text_before_it_is_not_kept() {
    let runs = Arc::new(AtomicUsize::new(0));
    let huge = "x".repeat(1 << 20);
    let llm = ScriptedLlm::new([
        Reply::tool_call("get_weather", json!({"city": huge})).with_text("Let me look.")
    ]);
    let turn_loop = ToolLoop::new(Arc::new(llm), tools(&runs, "Sunny"));
    let mut context = context();
    let before = context.clone();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(
        matches!(
            error,
            Some(TurnError::Llm(LlmError::TooLarge {
                what: "a tool call",
                ..
            }))
        ),
        "{error:?}"
    );
    assert_eq!(started(&events), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(context, before, "not even the text the model said first");
}

#[tokio::test]
async fn an_answer_larger_than_the_context_may_hold_is_refused() {
    // 8 KiB of text into a context that keeps 4 KiB: kept, it would be the newest turn, which
    // the context never drops, and every later request would be past the bound.
    let llm = ScriptedLlm::new([Reply::text("word ".repeat(1_638))]);
    let runs = Arc::new(AtomicUsize::new(0));
    let turn_loop = ToolLoop::new(Arc::new(llm), tools(&runs, "Sunny"));
    let mut context = context().with_limits(ContextLimits {
        max_messages: 100,
        max_bytes: 4 << 10,
        ..ContextLimits::default()
    });
    let before = context.clone();

    let (_, error) = drive(&turn_loop, &mut context).await;

    assert!(
        matches!(
            error,
            Some(TurnError::Llm(LlmError::TooLarge {
                what: "the answer",
                limit: 4096
            }))
        ),
        "{error:?}"
    );
    assert_eq!(context, before);
}

#[tokio::test]
async fn refused_calls_are_neither_echoed_nor_logged_with_their_arguments() {
    // 100 calls with 1 KiB of arguments each: 16 run, 84 are refused. Before, the refused
    // calls' arguments went to the platform twice each and into every later request.
    let runs = Arc::new(AtomicUsize::new(0));
    let calls = (0..100).map(|i| {
        (
            "get_weather",
            json!({"city": format!("{i}{}", "y".repeat(1024))}),
        )
    });
    let llm = ScriptedLlm::new([Reply::tool_calls(calls), Reply::text("Here you go.")]);
    let turn_loop = ToolLoop::new(Arc::new(llm.clone()), tools(&runs, "Sunny"));
    let mut context = context();

    let (events, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        crewline::turn::MAX_CALLS_PER_ANSWER
    );
    let logged: Vec<&Value> = events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolStarted { arguments, .. } => Some(arguments),
            _ => None,
        })
        .collect();
    assert_eq!(logged.len(), 100);
    assert!(logged[..16].iter().all(|a| a["city"].is_string()));
    assert!(
        logged[16..].iter().all(|a| **a == json!({})),
        "{:?}",
        logged[16]
    );
    let next = &llm.requests()[1];
    let asked = next
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => Some(tool_calls),
            _ => None,
        })
        .expect("the round's calls");
    assert_eq!(asked.len(), 100, "every call is answered");
    assert!(asked[16..].iter().all(|call| call.arguments == "{}"));
    let bytes: usize = asked.iter().map(|c| c.arguments.len()).sum();
    assert!(
        bytes < 20 << 10,
        "{bytes} bytes of arguments in the next request"
    );
}

#[tokio::test]
async fn a_rounds_results_are_cut_to_fit_the_context() {
    // Two 10 KiB results into a context of 8 KiB: the round is the newest turn, kept whole
    // by the context, so its results must fit on their own.
    let runs = Arc::new(AtomicUsize::new(0));
    let llm = ScriptedLlm::new([
        Reply::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Oslo"})),
        ]),
        Reply::text("Here you go."),
    ]);
    let turn_loop = ToolLoop::new(Arc::new(llm.clone()), tools(&runs, &"z".repeat(10 << 10)));
    let limits = ContextLimits {
        max_messages: 100,
        max_bytes: 8 << 10,
        ..ContextLimits::default()
    };
    let mut context = context().with_limits(limits);

    let (_, error) = drive(&turn_loop, &mut context).await;

    assert!(error.is_none(), "{error:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let next = &llm.requests()[1];
    let results: Vec<&str> = next
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|r| r.ends_with("too large for the conversation]"))
    );
    let round = Context::new()
        .with_limits(ContextLimits::unbounded())
        .tap_add(next.messages.iter().skip(2).cloned());
    assert!(round.bytes() <= limits.max_bytes, "{} bytes", round.bytes());
}

/// Adds messages to a context in a chain.
trait TapAdd {
    fn tap_add(self, messages: impl IntoIterator<Item = Message>) -> Self;
}

impl TapAdd for Context {
    fn tap_add(mut self, messages: impl IntoIterator<Item = Message>) -> Self {
        self.add_many(messages);
        self
    }
}
