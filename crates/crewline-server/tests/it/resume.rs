//! A call outlives its socket (issue 31): run-once state follows the platform's call id, a
//! reconnect with the same call id resumes the call where it was (the router's sub-agent, the
//! outcomes the caller has not heard), and a call never has two live sessions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{Client, TestServer, WAIT, spoken};
use crewline::async_trait;
use crewline::{
    Crew, SessionSetup, ToolLoop,
    agent::LoopAgent,
    crew::OutputNode,
    llm::{ChatRequest, Reply, ScriptedLlm},
    router::{DeterministicRouter, SubAgent},
    session_store::MemoryCallStore,
    tool::{Executor, Tool, ToolError, ToolPolicy, ToolRegistry},
    types::Message,
};
use crewline_server::CrewServer;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The platform's handshake for a phone call with the call id `call_id`.
fn phone_init(call_id: &str) -> Value {
    json!({
        "type": "system.init",
        "timestamp": "2030-01-02T03:04:00.000000",
        "version": "1.0",
        "session_context": {
            "initial_variables": {},
            "conversation_type": "telephonyInbound",
            "caller": {
                "user_number": "+15550100",
                "agent_number": "+15550199",
                "direction": "inbound",
                "call_id": call_id
            }
        },
        "output_agent_settings": {"interruptible": true}
    })
}

async fn phone_call(server: &TestServer, call_id: &str) -> Client {
    let mut client = Client::connect(&server.ws_url()).await;
    client.send(&phone_init(call_id)).await;
    let ready = client.recv().await;
    assert_eq!(ready["type"], "agent.ready", "{ready}");
    client
}

/// Asks for a turn without waiting for its end.
async fn ask(client: &mut Client, words: &str) {
    client
        .send(&json!({"type": "system.llm.request", "messages": [{"role": "user", "content": words}]}))
        .await;
}

/// A transfer that waits for `gate`, counting its runs; it cannot be cancelled.
struct Transfer {
    runs: Arc<AtomicUsize>,
    gate: Arc<Notify>,
}

#[async_trait]
impl Tool for Transfer {
    fn name(&self) -> &str {
        "transfer_money"
    }
    fn description(&self) -> &str {
        "Sends money."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"amount": {"type": "number"}}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().cancellable(false)
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        self.gate.notified().await;
        Ok(json!({"status": "completed", "transfer": run}))
    }
}

/// A server whose calls ask for a $50 transfer and read its result back as their answer.
fn transfer_server(runs: Arc<AtomicUsize>, gate: Arc<Notify>) -> CrewServer {
    let mut registry = ToolRegistry::new().with_executor(Arc::new(Executor::builder().build()));
    registry.register(Transfer { runs, gate }).unwrap();
    let registry = Arc::new(registry);
    let llm: Arc<dyn crewline::llm::LlmClient> = Arc::new(ScriptedLlm::from_fn(
        |request: &ChatRequest| match request.messages.last() {
            Some(Message::Tool { content, .. }) => Reply::text(content.clone()),
            _ => Reply::tool_call("transfer_money", json!({"amount": 50})),
        },
    ));
    CrewServer::new(move |_setup: SessionSetup| {
        let agent = LoopAgent::new(
            "You move money.",
            ToolLoop::new(llm.clone(), registry.clone()),
        );
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new("bank", agent));
        crew
    })
    .allow_unauthenticated()
}

/// Reads frames until an `agent.log` named `tool_call_start`.
async fn until_tool_started(client: &mut Client) {
    loop {
        let frame = client.recv().await;
        if frame["type"] == "agent.log" && frame["name"] == "tool_call_start" {
            return;
        }
        assert_ne!(
            frame["type"], "agent.llm.response.end",
            "no tool call: {frame}"
        );
    }
}

#[tokio::test]
async fn a_reconnect_with_the_same_call_id_joins_the_running_transfer_and_it_runs_once() {
    let (runs, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
    let server = TestServer::ready(transfer_server(runs.clone(), gate.clone())).await;

    // The socket drops while the transfer runs.
    let mut first = phone_call(&server, "call-31").await;
    ask(&mut first, "Send Alice $50").await;
    until_tool_started(&mut first).await;
    drop(first);

    // The platform reconnects with the same call id and the caller asks again.
    let mut second = phone_call(&server, "call-31").await;
    ask(&mut second, "Did it go through? Send Alice $50").await;
    // The retry must have joined before the transfer finishes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    gate.notify_waiters();
    let frames = second.recv_until("agent.llm.response.end").await;
    let answer = spoken(&frames);
    assert!(answer.contains(r#""transfer":1"#), "{answer}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the transfer ran twice");

    // Another call id shares nothing: its transfer is its own.
    let mut other = phone_call(&server, "call-32").await;
    ask(&mut other, "Send Bob $50").await;
    until_tool_started(&mut other).await;
    gate.notify_waiters();
    let frames = other.recv_until("agent.llm.response.end").await;
    assert!(spoken(&frames).contains(r#""transfer":2"#), "{frames:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A collections router: `intake` moves to `resolve` after its first completed turn. The
/// model answers with the active sub-agent's prompt, so the answer names who spoke.
fn router_server(resumed: Arc<Mutex<Vec<bool>>>) -> CrewServer {
    let llm: Arc<dyn crewline::llm::LlmClient> = Arc::new(ScriptedLlm::from_fn(
        |request: &ChatRequest| {
            let prompt = request
                .messages
                .iter()
                .find_map(|m| match m {
                    Message::System { content } => Some(content.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            let note = request.messages.iter().any(|m| {
                matches!(m, Message::Assistant { content: Some(text), .. } if text.contains("Not yet told"))
            });
            Reply::text(format!("{prompt} note={note}"))
        },
    ));
    CrewServer::new(move |setup: SessionSetup| {
        if !setup.is_dry_run() {
            resumed.lock().unwrap().push(setup.resumed().is_some());
        }
        if setup.resumed().is_none() {
            // An outcome the caller has not heard yet, as a tool would record it.
            setup
                .call()
                .push_outcome("The $50 transfer to Alice completed.")
                .unwrap();
        }
        let router = DeterministicRouter::builder("intake", llm.clone())
            .sub_agent(SubAgent::new("intake", "intake"))
            .sub_agent(SubAgent::new("resolve", "resolve"))
            .add_default("intake", "resolve")
            .build()
            .unwrap();
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new("collections", router));
        crew
    })
    .allow_unauthenticated()
}

#[tokio::test]
async fn a_reconnect_resumes_in_the_sub_agent_the_call_was_in_and_hears_the_missed_outcome_once() {
    let resumed = Arc::new(Mutex::new(Vec::new()));
    let server =
        TestServer::ready(router_server(resumed.clone()).call_store(MemoryCallStore::new())).await;

    let mut first = phone_call(&server, "call-router").await;
    let (_, answer) = first.turn("Hi").await;
    // The outcome was told in this completed turn.
    assert_eq!(answer, "intake note=true");
    // The router moved to `resolve` at the turn's end; the socket drops.
    first.close().await;

    let mut second = phone_call(&server, "call-router").await;
    let (_, answer) = second.turn("Are you there?").await;
    assert_eq!(
        answer, "resolve note=false",
        "the call did not continue in its sub-agent"
    );
    assert_eq!(*resumed.lock().unwrap(), vec![false, true]);
}

#[tokio::test]
async fn an_outcome_the_socket_dropped_before_is_heard_after_the_reconnect_and_only_once() {
    let resumed = Arc::new(Mutex::new(Vec::new()));
    let server =
        TestServer::ready(router_server(resumed.clone()).call_store(MemoryCallStore::new())).await;
    // The socket drops before any turn: the outcome was never told.
    let first = phone_call(&server, "call-untold").await;
    // Let the checkpointer write the outcome.
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.close().await;

    let mut second = phone_call(&server, "call-untold").await;
    let (_, answer) = second.turn("Hello?").await;
    assert_eq!(answer, "intake note=true");
    let (_, answer) = second.turn("And now?").await;
    assert_eq!(answer, "resolve note=false", "an outcome was told twice");
}

#[tokio::test]
async fn a_second_connection_for_a_call_closes_the_first_with_a_reason() {
    let server = TestServer::ready(router_server(Arc::default())).await;
    let mut first = phone_call(&server, "call-twice").await;
    let mut second = phone_call(&server, "call-twice").await;

    let (frames, close) = first.recv_until_close().await;
    let error = frames
        .iter()
        .find(|f| f["type"] == "agent.error")
        .expect("an agent.error");
    assert_eq!(error["payload"]["reason"], "superseded", "{error}");
    let close = close.expect("a close frame");
    assert_eq!(close.code, 4409, "{close:?}");
    assert!(close.reason.contains("superseded"), "{close:?}");

    // The newer connection goes on.
    let (_, answer) = tokio::time::timeout(WAIT, second.turn("Hi"))
        .await
        .expect("the second connection answers");
    assert!(answer.starts_with("intake"), "{answer}");

    // Another call id is not touched.
    let mut other = phone_call(&server, "call-other").await;
    let (_, answer) = other.turn("Hi").await;
    assert!(answer.starts_with("intake"), "{answer}");
    server.wait_for_active(2).await;
}

#[tokio::test]
async fn a_hand_off_sent_before_the_reconnect_is_not_lost() {
    let server = TestServer::ready(
        CrewServer::new(|setup: SessionSetup| {
            let call = setup.call().clone();
            if !setup.is_dry_run() && setup.resumed().is_none() {
                // The crew hangs up at once (a tool would, mid-call).
                tokio::spawn(async move { call.end_call().await });
            }
            let llm = Arc::new(ScriptedLlm::from_fn(|_: &ChatRequest| Reply::text("Hello")));
            let agent = LoopAgent::new(
                "Be brief.",
                ToolLoop::new(llm, Arc::new(ToolRegistry::new())),
            );
            let mut crew = Crew::new();
            crew.add_node(OutputNode::new("agent", agent));
            crew
        })
        .allow_unauthenticated()
        .call_store(MemoryCallStore::new()),
    )
    .await;
    let mut first = phone_call(&server, "call-ended").await;
    let frame = first.recv().await;
    assert_eq!(frame["type"], "agent.end_call", "{frame}");
    // The socket drops before the platform acted on it; it reconnects.
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.close().await;

    let mut second = phone_call(&server, "call-ended").await;
    let frame = second.recv().await;
    assert_eq!(
        frame["type"], "agent.end_call",
        "the hand-off was lost: {frame}"
    );
    // And the crew stays silent, as it would have.
    ask(&mut second, "Hello?").await;
    let quiet = tokio::time::timeout(Duration::from_millis(300), second.recv()).await;
    match quiet {
        Err(_) => {}
        Ok(frame) => assert_ne!(frame["type"], "agent.llm.response.chunk", "{frame}"),
    }
}

/// A memory store whose first `failures` claims fail, as while a Redis primary fails over.
struct FailingOver {
    inner: MemoryCallStore,
    failures: AtomicUsize,
}

#[async_trait]
impl crewline::session_store::CallStore for FailingOver {
    async fn claim(&self, call: &str) -> Result<String, crewline::session_store::CallStoreError> {
        let failing = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .is_ok();
        if failing {
            return Err(crewline::session_store::CallStoreError::Backend(
                "the primary is failing over".into(),
            ));
        }
        self.inner.claim(call).await
    }
    async fn load(
        &self,
        call: &str,
    ) -> Result<Option<String>, crewline::session_store::CallStoreError> {
        self.inner.load(call).await
    }
    async fn save(
        &self,
        call: &str,
        token: &str,
        json: &str,
    ) -> Result<crewline::session_store::Fenced, crewline::session_store::CallStoreError> {
        self.inner.save(call, token, json).await
    }
    async fn renew(
        &self,
        call: &str,
        token: &str,
    ) -> Result<crewline::session_store::Fenced, crewline::session_store::CallStoreError> {
        self.inner.renew(call, token).await
    }
    async fn release(
        &self,
        call: &str,
        token: &str,
    ) -> Result<(), crewline::session_store::CallStoreError> {
        self.inner.release(call, token).await
    }
}

#[tokio::test]
async fn a_call_that_starts_while_its_store_fails_over_is_still_checkpointed() {
    let resumed = Arc::new(Mutex::new(Vec::new()));
    let store = FailingOver {
        inner: MemoryCallStore::new(),
        failures: AtomicUsize::new(2),
    };
    let server = TestServer::ready(router_server(resumed.clone()).call_store(store)).await;

    // The store refuses the call's first two claims, then is back.
    let mut first = phone_call(&server, "call-failover").await;
    let (_, answer) = first.turn("Hi").await;
    assert_eq!(answer, "intake note=true");
    first.close().await;

    let mut second = phone_call(&server, "call-failover").await;
    let (_, answer) = second.turn("Are you there?").await;
    assert_eq!(
        answer, "resolve note=false",
        "a call started during the failover was never checkpointed, so it started over"
    );
    assert_eq!(*resumed.lock().unwrap(), vec![false, true]);
}

/// A booking that runs in the background and never finishes, counting its runs.
struct Booking {
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Booking {
    fn name(&self) -> &str {
        "book_table"
    }
    fn description(&self) -> &str {
        "Books a table."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().background(true)
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_background_call_started_before_a_reconnect_is_not_started_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut registry = ToolRegistry::new();
    registry.register(Booking { runs: runs.clone() }).unwrap();
    let registry = Arc::new(registry);
    let llm: Arc<dyn crewline::llm::LlmClient> = Arc::new(ScriptedLlm::from_fn(
        |request: &ChatRequest| match request.messages.last() {
            Some(Message::Tool { content, .. }) => Reply::text(content.clone()),
            _ => Reply::tool_call("book_table", json!({})),
        },
    ));
    let server = CrewServer::new(move |_setup: SessionSetup| {
        let agent = LoopAgent::new(
            "You book tables.",
            ToolLoop::new(llm.clone(), registry.clone()),
        );
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new("desk", agent));
        crew
    })
    .call_store(MemoryCallStore::new())
    .allow_unauthenticated();
    let server = TestServer::ready(server).await;

    let mut first = phone_call(&server, "call-booking").await;
    let (_, answer) = first.turn("Book a table").await;
    assert!(answer.contains(r#""status":"started""#), "{answer}");
    // Let the checkpointer write the turn's checkpoint; the line drops, which stops the call.
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.close().await;

    let mut second = phone_call(&server, "call-booking").await;
    let (_, answer) = second.turn("Did you book it? Book a table").await;
    assert!(answer.contains(r#""status":"outcome_unknown""#), "{answer}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the booking ran twice");
}

/// The `call` object of the turn's `llm_usage` entry.
fn call_usage(frames: &[Value]) -> Value {
    let entry = frames
        .iter()
        .find(|frame| frame["type"] == "agent.log" && frame["name"] == "llm_usage")
        .unwrap_or_else(|| panic!("no llm_usage entry in {frames:?}"));
    entry["payload"]["call"].clone()
}

#[tokio::test]
async fn a_resumed_call_goes_on_counting_what_it_cost() {
    let llm: Arc<dyn crewline::llm::LlmClient> =
        Arc::new(ScriptedLlm::from_fn(|_: &ChatRequest| Reply::text("Sure.")));
    let server = CrewServer::new(move |_setup: SessionSetup| {
        let agent = LoopAgent::new(
            "You help.",
            ToolLoop::new(llm.clone(), Arc::new(ToolRegistry::new())),
        );
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new("desk", agent).log_usage(true));
        crew
    })
    .call_store(MemoryCallStore::new())
    .allow_unauthenticated();
    let server = TestServer::ready(server).await;

    let mut first = phone_call(&server, "call-cost").await;
    first.turn("Hi").await;
    let (frames, _) = first.turn("Still there?").await;
    let before = call_usage(&frames);
    assert_eq!(before["turns"], 2, "{before}");
    // Let the checkpointer write the turn's checkpoint; the line drops.
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.close().await;

    let mut second = phone_call(&server, "call-cost").await;
    let (frames, _) = second.turn("And now?").await;
    let after = call_usage(&frames);
    assert_eq!(
        after["turns"], 3,
        "the resumed call counted from zero: {after}"
    );
    let tokens = |usage: &Value| usage["usage"]["total_tokens"].as_u64().unwrap();
    assert!(tokens(&after) > tokens(&before), "{before} {after}");
}

/// The desk's crew: `tool` and a model that books on any words, reads each tool result back,
/// and says `TOLD` when told that a booking landed.
fn booking_server(
    tool: impl Tool + 'static,
    store: impl crewline::session_store::CallStore,
) -> CrewServer {
    let mut registry = ToolRegistry::new();
    registry.register(tool).unwrap();
    let registry = Arc::new(registry);
    let llm: Arc<dyn crewline::llm::LlmClient> = Arc::new(ScriptedLlm::from_fn(
        |request: &ChatRequest| match request.messages.last() {
            Some(Message::Tool { content, .. }) => Reply::text(content.clone()),
            Some(message) if message.role() == crewline::types::Role::System => Reply::text(TOLD),
            _ => Reply::tool_call("book_table", json!({})),
        },
    ));
    CrewServer::new(move |_setup: SessionSetup| {
        let agent = LoopAgent::new(
            "You book tables.",
            ToolLoop::new(llm.clone(), registry.clone()),
        );
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new("desk", agent));
        crew
    })
    .call_store(store)
    .allow_unauthenticated()
}

/// What the model says when a booking landed.
const TOLD: &str = "Your table is booked.";

/// A booking that, when it runs, reads what the call's store holds of its start.
struct CheckedBooking {
    store: MemoryCallStore,
    call_id: &'static str,
    /// Per run: whether the store held the record of this booking's start.
    recorded: Arc<Mutex<Vec<bool>>>,
}

#[async_trait]
impl Tool for CheckedBooking {
    fn name(&self) -> &str {
        "book_table"
    }
    fn description(&self) -> &str {
        "Books a table."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().background(true)
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        use crewline::session_store::CallStore as _;
        let kept = self
            .store
            .load(self.call_id)
            .await
            .unwrap()
            .unwrap_or_default();
        let recorded = crewline::Checkpoint::from_json(&kept)
            .ok()
            .and_then(|checkpoint| checkpoint.nodes.get("crewline.background_calls").cloned())
            .and_then(|started| started.as_array().cloned())
            .is_some_and(|started| {
                started.iter().any(|key| {
                    key.as_str()
                        .is_some_and(|key| key.starts_with("book_table:"))
                })
            });
        self.recorded.lock().unwrap().push(recorded);
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_background_call_starts_only_once_its_start_is_in_the_store() {
    // Record first, then start: a replica killed right after the start must leave the record
    // for the resume, or the booking runs a second time there.
    let store = MemoryCallStore::new();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let booking = CheckedBooking {
        store: store.clone(),
        call_id: "call-order",
        recorded: recorded.clone(),
    };
    let server = TestServer::ready(booking_server(booking, store)).await;
    let mut call = phone_call(&server, "call-order").await;
    let (_, answer) = call.turn("Book a table").await;
    assert!(answer.contains(r#""status":"started""#), "{answer}");
    common::eventually("the booking ran", || {
        let recorded = recorded.clone();
        async move { !recorded.lock().unwrap().is_empty() }
    })
    .await;
    assert_eq!(
        *recorded.lock().unwrap(),
        [true],
        "the booking started before its start was in the store"
    );
}

/// A memory store whose saves fail while `down` is set.
struct SavesFail {
    inner: MemoryCallStore,
    down: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait]
impl crewline::session_store::CallStore for SavesFail {
    async fn claim(&self, call: &str) -> Result<String, crewline::session_store::CallStoreError> {
        self.inner.claim(call).await
    }
    async fn load(
        &self,
        call: &str,
    ) -> Result<Option<String>, crewline::session_store::CallStoreError> {
        self.inner.load(call).await
    }
    async fn save(
        &self,
        call: &str,
        token: &str,
        json: &str,
    ) -> Result<crewline::session_store::Fenced, crewline::session_store::CallStoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(crewline::session_store::CallStoreError::Backend(
                "the primary is down".into(),
            ));
        }
        self.inner.save(call, token, json).await
    }
    async fn renew(
        &self,
        call: &str,
        token: &str,
    ) -> Result<crewline::session_store::Fenced, crewline::session_store::CallStoreError> {
        self.inner.renew(call, token).await
    }
    async fn release(
        &self,
        call: &str,
        token: &str,
    ) -> Result<(), crewline::session_store::CallStoreError> {
        self.inner.release(call, token).await
    }
}

#[tokio::test]
async fn a_background_call_whose_start_cannot_be_recorded_does_not_start() {
    let runs = Arc::new(AtomicUsize::new(0));
    let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let store = SavesFail {
        inner: MemoryCallStore::new(),
        down: down.clone(),
    };
    let booking = Booking { runs: runs.clone() };
    let server = TestServer::ready(booking_server(booking, store)).await;
    let mut call = phone_call(&server, "call-unrecorded").await;

    down.store(true, Ordering::SeqCst);
    let (_, answer) = call.turn("Book a table").await;
    assert!(answer.contains("was not started"), "{answer}");
    assert!(answer.contains("ToolError"), "{answer}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "it ran without a record");

    // The store is back: the same booking may start now (nothing ran before).
    down.store(false, Ordering::SeqCst);
    let (_, answer) = call.turn("Book a table").await;
    assert!(answer.contains(r#""status":"started""#), "{answer}");
    common::eventually("the booking ran", || {
        let runs = runs.clone();
        async move { runs.load(Ordering::SeqCst) == 1 }
    })
    .await;
}

/// A booking that lands at once, counting its runs.
struct QuickBooking {
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for QuickBooking {
    fn name(&self) -> &str {
        "book_table"
    }
    fn description(&self) -> &str {
        "Books a table."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().background(true)
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(json!("booked, reference R-7"))
    }
}

#[tokio::test]
async fn a_background_call_that_landed_before_a_reconnect_is_told_as_done() {
    let runs = Arc::new(AtomicUsize::new(0));
    let booking = QuickBooking { runs: runs.clone() };
    let server = TestServer::ready(booking_server(booking, MemoryCallStore::new())).await;

    let mut first = phone_call(&server, "call-landed").await;
    let (_, answer) = first.turn("Book a table").await;
    assert!(answer.contains(r#""status":"started""#), "{answer}");
    // It lands, and the caller is told.
    loop {
        let frame = first.recv().await;
        if frame["type"] == "agent.speak" {
            assert_eq!(frame["text"], TOLD, "{frame}");
            break;
        }
    }
    // Let the checkpointer write what the landing changed; the line drops.
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.close().await;

    let mut second = phone_call(&server, "call-landed").await;
    let (_, answer) = second.turn("Did you book it? Book a table").await;
    assert!(answer.contains(r#""status":"already_done""#), "{answer}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the booking ran twice");
}
