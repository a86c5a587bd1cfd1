//! A call's session: nodes as tasks, the protocol around the tool loop, barge-in, hand-offs,
//! errors. Driven without a server: events in through `dispatch`, frames out of a channel.

use crate::common;

use crewline::{
    CallControl, ToolLoop,
    crew::{NodeError, NodeHandle, OutputAgent},
    llm::{Reply, ScriptedLlm},
    protocol::{Event, EventBody},
    tool::ToolRegistry,
    turn::TurnStream,
    types::{Context, Message},
};
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crewline::{
    Session,
    crew::GraphError,
    llm::ChatRequest,
    prelude::*,
    protocol::{
        AgentError, ConversationType, LlmRequest, OutputAgentSettings, SessionContext, Severity,
        SystemInit, TranscriptRole, TranscriptUpdate,
    },
    session::DispatchError,
};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);

fn init(interruptible: bool) -> SystemInit {
    SystemInit {
        version: "1.0".into(),
        session_context: SessionContext {
            initial_variables: Map::new(),
            conversation_type: ConversationType::Webcall,
            caller: None,
        },
        output_agent_settings: Some(OutputAgentSettings {
            interruptible,
            extra: Map::new(),
        }),
    }
}

/// Tools of the test agent; they act on the call through its controls.
struct CallTools {
    call: CallControl,
    tool_dropped: Arc<AtomicBool>,
    /// Lets the payment tool finish.
    payment_gate: Arc<tokio::sync::Notify>,
    /// Set when the payment tool finished.
    payment_done: Arc<AtomicBool>,
}

/// Sets a flag when dropped: proves a tool's future was cancelled.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tools]
impl CallTools {
    /// Get the weather.
    ///
    /// # Arguments
    /// * `location` - A city
    #[function_tool]
    async fn get_weather(&self, location: String) -> String {
        format!("Sunny in {location}")
    }

    /// Hang up.
    #[function_tool]
    async fn end_call(&self) -> Result<&'static str, ToolError> {
        self.call.end_call().await.map_err(ToolError::from)?;
        Ok("ending")
    }

    /// Charge the caller's card; must never be cut off half-way.
    #[function_tool(cancellable = false)]
    async fn charge_card(&self) -> &'static str {
        self.payment_gate.notified().await;
        self.payment_done.store(true, Ordering::SeqCst);
        "charged"
    }

    /// Hang up, then look something up forever.
    #[function_tool]
    async fn end_then_hang(&self) -> Result<&'static str, ToolError> {
        self.call.end_call().await.map_err(ToolError::from)?;
        let _flag = DropFlag(self.tool_dropped.clone());
        std::future::pending::<()>().await;
        Ok("never")
    }
}

struct Agent {
    context: Context,
    turn_loop: ToolLoop,
}

impl OutputAgent for Agent {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }
    fn generate_response(&mut self) -> TurnStream<'_> {
        self.turn_loop.run(&mut self.context)
    }
}

/// What the test crew's model says, by the last user message.
fn model(request: &ChatRequest) -> Reply {
    let last_user = request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or("");
    if let Some(Message::Tool { content, .. }) = request.messages.last() {
        return Reply::text(format!("Tool said: {content}"));
    }
    match last_user {
        "weather" => Reply::tool_call("get_weather", json!({"location": "Paris"})),
        "bye" => Reply::tool_call("end_call", json!({})).with_text("Goodbye."),
        "bye slowly" => Reply::tool_call("end_then_hang", json!({})),
        "pay" => Reply::tool_call("charge_card", json!({})),
        "long" => Reply::text("one two three four five six seven eight nine ten eleven twelve"),
        "fail" => Reply::CutAfter("I was saying".into()),
        "fail loudly" => Reply::Fail(crewline::llm::LlmError::Api {
            status: Some(400),
            message: "e".repeat(1 << 20),
            retry_after: None,
        }),
        // Issue 30: one answer with 10,000 parallel calls.
        "flood" => Reply::tool_calls(
            (0..10_000).map(|i| ("get_weather", json!({"location": format!("c{i}")}))),
        ),
        other => Reply::text(format!("You said {other}.")),
    }
}

struct Harness {
    line: common::Line,
    tool_dropped: Arc<AtomicBool>,
    payment_gate: Arc<tokio::sync::Notify>,
    payment_done: Arc<AtomicBool>,
}

// The harness is a line to the session plus what this file's tests inspect.
impl std::ops::Deref for Harness {
    type Target = common::Line;
    fn deref(&self) -> &common::Line {
        &self.line
    }
}

impl std::ops::DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut common::Line {
        &mut self.line
    }
}

impl Harness {
    async fn start(
        interruptible: bool,
        chunk_delay: Duration,
        extra: Option<BackgroundNode>,
    ) -> Self {
        let (outbound, frames) = mpsc::channel(1024);
        let setup = SessionSetup::new(init(interruptible), outbound);
        let tool_dropped = Arc::new(AtomicBool::new(false));
        let payment_gate = Arc::new(tokio::sync::Notify::new());
        let payment_done = Arc::new(AtomicBool::new(false));
        let tools = Arc::new(CallTools {
            call: setup.call().clone(),
            tool_dropped: tool_dropped.clone(),
            payment_gate: payment_gate.clone(),
            payment_done: payment_done.clone(),
        });
        let mut registry = ToolRegistry::new();
        registry.discover(&tools).expect("tools register");
        let llm = Arc::new(ScriptedLlm::from_fn(model).with_chunk_delay(chunk_delay));
        let agent = Agent {
            context: Context::with_system("You are a test agent."),
            turn_loop: ToolLoop::new(llm, Arc::new(registry)),
        };
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new("agent", agent));
        if let Some(node) = extra {
            crew.add_node(node);
        }
        let session = Session::start(crew, setup).await.expect("crew starts");
        Self {
            line: common::Line { session, frames },
            tool_dropped,
            payment_gate,
            payment_done,
        }
    }

    /// No frame arrives for a short while.
    async fn assert_quiet(&mut self) {
        if let Ok(Some(frame)) =
            tokio::time::timeout(Duration::from_millis(300), self.frames.recv()).await
        {
            panic!("unexpected frame {frame:?}");
        }
    }
}

fn types(frames: &[Event]) -> Vec<&'static str> {
    frames.iter().map(|f| f.body.type_name()).collect()
}

fn text_of(frames: &[Event]) -> String {
    frames
        .iter()
        .filter_map(|f| match &f.body {
            EventBody::ResponseChunk { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_text_turn_streams_start_chunks_end_and_echoes_like_the_reference() {
    let mut h = Harness::start(true, Duration::ZERO, None).await;
    assert_eq!(h.next().await.body, EventBody::AgentReady);
    h.user_turn("hello");

    let frames = h.until("system.llm.request").await;

    let kinds = types(&frames);
    assert_eq!(
        kinds[0], "agent.transcript.update",
        "the transcript is echoed"
    );
    assert_eq!(kinds[1], "agent.llm.response.start");
    assert_eq!(kinds[kinds.len() - 2], "agent.llm.response.end");
    assert_eq!(text_of(&frames), "You said hello.");
    match &frames[1].body {
        EventBody::ResponseStart { request_id } => {
            assert!(request_id.as_ref().is_some_and(|id| !id.is_empty()))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_tool_turn_logs_tool_events_with_the_turn_id() {
    let mut h = Harness::start(true, Duration::ZERO, None).await;
    h.next().await;
    h.user_turn("weather");

    let frames = h.until("agent.llm.response.end").await;

    let request_id = frames.iter().find_map(|f| match &f.body {
        EventBody::ResponseStart { request_id } => request_id.clone(),
        _ => None,
    });
    let logs: Vec<(&str, &Map<String, Value>)> = frames
        .iter()
        .filter_map(|f| match &f.body {
            EventBody::Log { name, payload } => Some((name.as_str(), payload)),
            _ => None,
        })
        .collect();
    assert_eq!(logs.len(), 2);
    assert_eq!(logs[0].0, "tool_call_start");
    assert_eq!(logs[1].0, "tool_call_end");
    for (_, payload) in &logs {
        assert_eq!(payload["turn_id"], json!(request_id));
        assert_eq!(payload["function_name"], "get_weather");
        assert_eq!(
            payload["context"]["arguments"],
            json!({"location": "Paris"})
        );
    }
    assert_eq!(logs[1].1["context"]["response"], "Sunny in Paris");
    assert_eq!(logs[1].1["success"], true);
    assert!(logs[1].1["latency"].is_u64());
    let keys: Vec<&String> = logs[1].1.keys().collect();
    assert_eq!(
        keys,
        [
            "turn_id",
            "tool_call_id",
            "function_name",
            "context",
            "latency",
            "success"
        ],
        "the reference's key order"
    );
    assert_eq!(text_of(&frames), "Tool said: Sunny in Paris");
}

#[tokio::test]
async fn an_interrupt_stops_the_stream_at_once_and_nothing_leaks_after_end() {
    let mut h = Harness::start(true, Duration::from_millis(40), None).await;
    h.next().await;
    h.user_turn("long");
    h.until("agent.llm.response.chunk").await;

    h.send(EventBody::Interrupt);
    let frames = h.until("agent.llm.response.end").await;

    assert!(
        text_of(&frames).split_whitespace().count() < 6,
        "the generation stopped early: {:?}",
        text_of(&frames)
    );
    // After end: the interrupt's echo, and nothing else (the request is never echoed).
    assert_eq!(h.next().await.body, EventBody::Interrupt);
    h.assert_quiet().await;

    h.user_turn("again");
    let next = h.until("system.llm.request").await;
    assert_eq!(
        text_of(&next),
        "You said again.",
        "the next request is answered"
    );
}

#[tokio::test]
async fn a_request_sent_after_a_late_interrupt_is_answered() {
    let mut h = Harness::start(true, Duration::ZERO, None).await;
    h.next().await;
    h.user_turn("hello");
    h.until("agent.llm.response.end").await;

    // The caller barged in just as the answer ended: the interrupt and the next turn arrive
    // together, the interrupt first. The next turn is not stale work and must be answered.
    h.send(EventBody::Interrupt);
    h.user_turn("again");
    let frames = h.until("agent.llm.response.end").await;
    assert_eq!(text_of(&frames), "You said again.");
}

#[tokio::test]
async fn transcripts_queued_behind_an_interrupt_are_kept() {
    let mut h = Harness::start(true, Duration::from_millis(40), None).await;
    h.next().await;
    h.user_turn("long");
    h.until("agent.llm.response.chunk").await;
    // While the node generates, a transcript and a second request queue up behind it.
    h.send(EventBody::TranscriptUpdate(TranscriptUpdate {
        role: TranscriptRole::User,
        content: "kept".into(),
    }));
    h.send(EventBody::LlmRequest(LlmRequest::default()));
    h.send(EventBody::Interrupt);
    h.until("agent.llm.response.end").await;
    h.until("system.control.interrupt").await;

    // The stale request was dropped; the transcript was kept and reached the context.
    h.send(EventBody::LlmRequest(LlmRequest::default()));
    let frames = h.until("agent.llm.response.end").await;
    assert_eq!(text_of(&frames), "You said kept.");
    assert_eq!(
        frames
            .iter()
            .filter(|f| f.body.type_name() == "agent.llm.response.start")
            .count(),
        1,
        "only the new request was answered"
    );
}

#[tokio::test]
async fn a_hand_off_from_a_completed_turn_is_sent_before_end_and_later_requests_go_unanswered() {
    let mut h = Harness::start(true, Duration::ZERO, None).await;
    h.next().await;
    h.user_turn("bye");

    let frames = h.until("agent.llm.response.end").await;
    let kinds = types(&frames);
    let end_call = kinds
        .iter()
        .position(|k| *k == "agent.end_call")
        .expect("end_call sent");
    assert_eq!(
        end_call,
        kinds.len() - 2,
        "sent after the turn's text, right before end"
    );
    assert!(text_of(&frames).starts_with("Goodbye."));

    h.until("system.llm.request").await;
    h.user_turn("hello?");
    let after = h.until("system.llm.request").await;
    assert_eq!(
        types(&after),
        ["agent.transcript.update", "system.llm.request"]
    );
}

#[tokio::test]
async fn an_interrupted_generation_never_hands_off_and_its_tool_is_cancelled() {
    let mut h = Harness::start(true, Duration::ZERO, None).await;
    h.next().await;
    h.user_turn("bye slowly");
    h.until("agent.log").await; // the tool started (and asked to end the call)

    h.send(EventBody::Interrupt);
    let frames = h.until("agent.llm.response.end").await;

    assert!(!types(&frames).contains(&"agent.end_call"));
    h.until("system.control.interrupt").await;
    assert!(
        h.tool_dropped.load(Ordering::SeqCst),
        "the running tool was cancelled"
    );
    h.user_turn("still there?");
    let next = h.until("agent.llm.response.end").await;
    assert_eq!(text_of(&next), "You said still there?.");
}

#[tokio::test]
async fn a_model_failing_mid_stream_sends_a_fatal_error_then_end_and_the_call_goes_on() {
    let mut h = Harness::start(true, Duration::ZERO, None).await;
    h.next().await;
    h.user_turn("fail");

    let frames = h.until("agent.llm.response.end").await;
    let error = frames
        .iter()
        .find_map(|f| match &f.body {
            EventBody::AgentError(error) => Some(error.clone()),
            _ => None,
        })
        .expect("agent.error");
    assert_eq!(error.severity, Severity::Fatal);
    assert_eq!(error.payload["node_name"], "agent");
    assert_eq!(error.payload["error_class"], "LlmError");
    assert!(
        error
            .message
            .starts_with("LlmError in agent.generate_response:")
    );
    assert_eq!(text_of(&frames), "I was saying");

    h.user_turn("ok");
    assert_eq!(
        text_of(&h.until("agent.llm.response.end").await),
        "You said ok."
    );
}

#[tokio::test]
async fn an_answer_past_its_limits_sends_one_error_then_end_and_the_call_goes_on() {
    // Before: 16 calls ran, and the platform got 20,000 tool log events and no error.
    let mut h = Harness::start(true, Duration::ZERO, None).await;
    h.next().await;
    h.user_turn("flood");

    let frames = h.until("agent.llm.response.end").await;

    let logs = frames
        .iter()
        .filter(|f| matches!(f.body, EventBody::Log { .. }))
        .count();
    assert_eq!(logs, 0, "no tool log for an answer that was refused");
    let errors = agent_errors(&frames);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].severity, Severity::Fatal);
    assert!(
        errors[0].message.contains("too many tool calls"),
        "{}",
        errors[0].message
    );
    assert!(frames.len() < 10, "{} frames", frames.len());

    h.user_turn("ok");
    assert_eq!(
        text_of(&h.until("agent.llm.response.end").await),
        "You said ok."
    );
}

#[tokio::test]
async fn a_megabyte_error_message_from_the_model_reaches_the_platform_cut() {
    let mut h = Harness::start(true, Duration::ZERO, None).await;
    h.next().await;
    h.user_turn("fail loudly");

    let frames = h.until("agent.llm.response.end").await;

    let errors = agent_errors(&frames);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].message.len() < 4 << 10,
        "{} bytes",
        errors[0].message.len()
    );
    let traceback = errors[0].payload["traceback"].as_str().unwrap_or_default();
    assert!(traceback.len() < 4 << 10, "{} bytes", traceback.len());
}

/// A background node that fails on every transcript.
struct Failing;

#[async_trait::async_trait]
impl BackgroundAgent for Failing {
    async fn on_event(&mut self, event: &Event, _node: &NodeHandle) -> Result<(), NodeError> {
        if let EventBody::TranscriptUpdate(update) = &event.body {
            if update.content == "panic" {
                panic!("observer bug");
            }
            return Err(std::io::Error::other("sentiment service down").into());
        }
        Ok(())
    }
}

fn agent_errors(frames: &[Event]) -> Vec<AgentError> {
    frames
        .iter()
        .filter_map(|f| match &f.body {
            EventBody::AgentError(error) => Some(error.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn background_errors_and_panics_are_warnings_and_the_call_goes_on() {
    let mut h = Harness::start(
        true,
        Duration::ZERO,
        Some(BackgroundNode::new("sentiment", Failing)),
    )
    .await;
    h.next().await;
    h.user_turn("hello");
    let frames = h.until("system.llm.request").await;
    let mut errors = agent_errors(&frames);
    if errors.is_empty() {
        errors = agent_errors(&[h.next().await]);
    }
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].severity, Severity::Warning);
    assert_eq!(errors[0].payload["node_name"], "sentiment");
    assert_eq!(errors[0].payload["error_class"], "Error");
    assert!(
        errors[0].payload["traceback"]
            .as_str()
            .unwrap()
            .contains("sentiment service down")
    );

    h.user_turn("panic");
    let frames = h.until("system.llm.request").await;
    assert_eq!(text_of(&frames), "You said panic.");
}

#[tokio::test]
async fn a_platform_that_says_not_interruptible_is_obeyed() {
    let mut h = Harness::start(false, Duration::from_millis(10), None).await;
    h.next().await;
    h.user_turn("long");
    h.until("agent.llm.response.chunk").await;
    h.send(EventBody::Interrupt);
    let frames = h.until("agent.llm.response.end").await;
    assert!(
        text_of(&frames).ends_with("twelve"),
        "the turn ran to its end"
    );
}

#[tokio::test]
async fn shutdown_cancels_running_tools_and_stops_every_task() {
    let mut h = Harness::start(true, Duration::ZERO, None).await;
    h.next().await;
    h.user_turn("bye slowly");
    h.until("agent.log").await;
    assert!(h.session.is_running());

    tokio::time::timeout(WAIT, h.line.session.shutdown())
        .await
        .expect("shutdown is prompt");

    assert!(h.tool_dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_greeting_from_on_start_never_precedes_agent_ready() {
    struct Greeter(Context);
    #[async_trait::async_trait]
    impl OutputAgent for Greeter {
        fn context(&mut self) -> &mut Context {
            &mut self.0
        }
        fn generate_response(&mut self) -> TurnStream<'_> {
            Box::pin(futures::stream::empty())
        }
        async fn on_start(&mut self, node: &NodeHandle) -> Result<(), NodeError> {
            node.call().speak("Hi, this is Ava.").await?;
            Ok(())
        }
    }
    let (outbound, mut frames) = mpsc::channel(16);
    let setup = SessionSetup::new(init(true), outbound);
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new("greeter", Greeter(Context::new())));
    let _session = Session::start(crew, setup).await.unwrap();
    assert_eq!(frames.recv().await.unwrap().body, EventBody::AgentReady);
    assert_eq!(
        frames.recv().await.unwrap().body,
        EventBody::Speak {
            text: "Hi, this is Ava.".into()
        }
    );
}

#[tokio::test]
async fn a_bad_graph_fails_at_start_naming_the_nodes_and_nothing_is_sent() {
    let (outbound, mut frames) = mpsc::channel(16);
    let setup = SessionSetup::new(init(true), outbound);
    let mut crew = Crew::new();
    crew.add_node(BackgroundNode::new("sentiment", Failing));
    crew.add_edge("sentiment", "agent");
    let err = Session::start(crew, setup).await.err().unwrap();
    assert!(matches!(err, GraphError::UnknownNode { ref missing, .. } if missing == "agent"));
    assert!(
        frames.try_recv().is_err(),
        "no agent.ready for a crew that never started"
    );
}

/// A background node that never finishes with an event.
struct Stuck;

#[async_trait::async_trait]
impl BackgroundAgent for Stuck {
    async fn on_event(&mut self, _: &Event, _: &NodeHandle) -> Result<(), NodeError> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_full_inbox_drops_the_event_instead_of_blocking_the_caller() {
    let (outbound, _frames) = mpsc::channel(4);
    let setup = SessionSetup::new(init(true), outbound);
    let mut crew = Crew::new();
    crew.add_node(BackgroundNode::new("slow", Stuck))
        .with_inbox_capacity(2);
    let session = Session::start(crew, setup).await.unwrap();

    let mut outcome = Ok(());
    for _ in 0..10 {
        outcome = session.dispatch(Event::now(EventBody::UserJoined));
        if outcome.is_err() {
            break;
        }
    }

    assert_eq!(outcome, Err(DispatchError::Full("slow".into())));
}

#[tokio::test]
async fn events_past_the_inbox_byte_budget_are_dropped_long_before_the_event_capacity() {
    let (outbound, _frames) = mpsc::channel(4);
    let setup = SessionSetup::new(init(true), outbound).with_inbox_bytes(3000);
    let mut crew = Crew::new();
    crew.add_node(BackgroundNode::new("slow", Stuck));
    let session = Session::start(crew, setup).await.unwrap();
    let event = || Event::now(EventBody::UserJoined);

    // The node takes the first event and is stuck on it; then 1000-byte events queue.
    session.dispatch_frame(event(), 1000).unwrap();
    tokio::task::yield_now().await;
    session.dispatch_frame(event(), 1000).unwrap();
    session.dispatch_frame(event(), 1000).unwrap();
    session.dispatch_frame(event(), 1000).unwrap();
    let refused = session.dispatch_frame(event(), 1000);
    assert_eq!(
        refused,
        Err(DispatchError::OverBudget {
            node: "slow".into(),
            event: "system.user.joined",
            bytes: 1000,
            queued: 3000,
            limit: 3000,
        })
    );
    // Far below the 256-event capacity: the bytes were the limit.
    assert!(refused.unwrap_err().to_string().contains("3000"));
}

#[tokio::test]
async fn a_tool_that_opts_out_of_cancellation_finishes_after_a_barge_in() {
    let mut h = Harness::start(true, Duration::ZERO, None).await;
    h.next().await;
    h.user_turn("pay");
    h.until("agent.log").await; // the payment started

    h.send(EventBody::Interrupt);
    h.until("agent.llm.response.end").await;
    assert!(!h.payment_done.load(Ordering::SeqCst));
    h.payment_gate.notify_one();

    tokio::time::timeout(WAIT, async {
        while !h.payment_done.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the payment ran to completion although the turn was interrupted");
}
