//! The deterministic router in a real session: transitions in order, the default, skips,
//! barge-in, hand-offs, the graph checks, multi-round tools per sub-agent, and the
//! `agent.transition` log. The model is a `ScriptedLlm` answering by the active prompt.

use crate::common;

use crewline::{
    CallControl, ToolLoop, TurnEvent,
    crew::OutputAgent,
    llm::{Reply, ScriptedLlm},
    protocol::{Event, EventBody},
    router::{DeterministicRouter, RouterState, SubAgent},
    tool::ToolRegistry,
    types::{Context, Message},
};
use futures::StreamExt;
use std::{sync::Arc, time::Duration};

use crewline::{
    Session,
    llm::ChatRequest,
    prelude::*,
    protocol::{ConversationType, OutputAgentSettings, SessionContext, SystemInit},
    router::{RouterBuilder, RouterError, when},
};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

/// Tools of the test crew: they write to the router's state and act on the call.
struct Tools {
    state: RouterState,
    call: CallControl,
}

#[tools]
impl Tools {
    /// Look up an account.
    ///
    /// # Arguments
    /// * `account_id` - The account
    #[function_tool]
    async fn find_account(&self, account_id: String) -> Value {
        self.state.set("account_id", account_id.clone());
        json!({"account_id": account_id, "balance": 120})
    }

    /// Check the caller's date of birth.
    ///
    /// # Arguments
    /// * `dob` - Date of birth
    #[function_tool]
    async fn verify(&self, dob: String) -> Value {
        let ok = dob == "1980-01-01";
        self.state.set("verified", ok);
        json!({"verified": ok})
    }

    /// Record a note.
    ///
    /// # Arguments
    /// * `text` - The note
    #[function_tool]
    async fn note(&self, text: String) -> &'static str {
        self.state.set("note", text);
        "noted"
    }

    /// Transfer to a human.
    #[function_tool]
    async fn transfer(&self) -> Result<&'static str, ToolError> {
        self.call
            .transfer_call("+15550100", Default::default(), None)
            .await
            .map_err(ToolError::from)?;
        Ok("transferring")
    }
}

/// The sub-agent a request is for, by its system prompt (`"<id>: ..."`).
fn active_of(request: &ChatRequest) -> String {
    match request.messages.first() {
        Some(Message::System { content }) => {
            content.split(':').next().unwrap_or_default().to_owned()
        }
        _ => String::new(),
    }
}

fn last_user(request: &ChatRequest) -> &str {
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or("")
}

/// The test model: tool calls on cue words, a second round on `two rounds`, and after tool
/// results a reply naming the sub-agent and the results.
fn model(request: &ChatRequest) -> Reply {
    let agent = active_of(request);
    let results = ScriptedLlm::last_tool_results(request);
    if !results.is_empty() {
        if last_user(request) == "two rounds" && results.iter().all(|r| r.contains("noted")) {
            return Reply::tool_call("find_account", json!({"account_id": "A1"}));
        }
        return Reply::text(format!("[{agent}] after tools: {}", results.join(" ")));
    }
    match last_user(request) {
        "account A1" => Reply::tool_call("find_account", json!({"account_id": "A1"})),
        "born 1980-01-01" => Reply::tool_call("verify", json!({"dob": "1980-01-01"})),
        "born 1999-09-09" => Reply::tool_call("verify", json!({"dob": "1999-09-09"})),
        "two rounds" => Reply::tool_call("note", json!({"text": "first"})),
        "human please" => Reply::tool_call("transfer", json!({})).with_text("Connecting you now."),
        "long" => Reply::text("one two three four five six seven eight nine ten eleven twelve"),
        other => Reply::text(format!("[{agent}] you said {other}")),
    }
}

fn init() -> SystemInit {
    SystemInit {
        version: "1.0".into(),
        session_context: SessionContext {
            initial_variables: Map::new(),
            conversation_type: ConversationType::Webcall,
            caller: None,
        },
        output_agent_settings: Some(OutputAgentSettings {
            interruptible: true,
            extra: Map::new(),
        }),
    }
}

struct Harness {
    line: common::Line,
    llm: ScriptedLlm,
    state: RouterState,
}

/// The usual three-step graph: intake (find_account, transfer) -> verify (verify, transfer)
/// -> resolve (no tools), skipping verify for a verified caller.
fn collections(builder: RouterBuilder) -> RouterBuilder {
    builder
        .sub_agent(
            SubAgent::new("intake", "intake: find the account.").with_tools([
                "find_account",
                "note",
                "transfer",
            ]),
        )
        .sub_agent(
            SubAgent::new("verify", "verify: check identity.").with_tools(["verify", "transfer"]),
        )
        .sub_agent(SubAgent::new("resolve", "resolve: agree a plan."))
        .add_transition("intake", "resolve", |s: &Map<String, Value>| {
            when::present("account_id")(s) && when::flag("verified")(s)
        })
        .add_transition("intake", "verify", when::present("account_id"))
        .add_transition("verify", "resolve", when::flag("verified"))
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
        chunk_delay: Duration,
        graph: impl FnOnce(RouterBuilder) -> RouterBuilder,
    ) -> Self {
        let (outbound, frames) = mpsc::channel(1024);
        let setup = SessionSetup::new(init(), outbound);
        let state = RouterState::new();
        let mut registry = ToolRegistry::new();
        registry
            .discover(&Arc::new(Tools {
                state: state.clone(),
                call: setup.call().clone(),
            }))
            .expect("tools register");
        let llm = ScriptedLlm::from_fn(model).with_chunk_delay(chunk_delay);
        let builder = DeterministicRouter::builder("intake", Arc::new(llm.clone()))
            .tools(Arc::new(registry))
            .state(state.clone());
        let router = graph(builder).build().expect("graph is valid");
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new("router", router));
        let session = Session::start(crew, setup).await.expect("crew starts");
        let mut harness = Self {
            line: common::Line { session, frames },
            llm,
            state,
        };
        assert_eq!(harness.next().await.body, EventBody::AgentReady);
        harness
    }

    /// One user turn, up to its `end`.
    async fn turn(&mut self, text: &str) -> Vec<Event> {
        self.user_turn(text);
        self.until("agent.llm.response.end").await
    }
}

/// The `agent.transition` payloads among `frames`.
fn transitions(frames: &[Event]) -> Vec<Map<String, Value>> {
    frames
        .iter()
        .filter_map(|f| match &f.body {
            EventBody::Log { name, payload } if name == "agent.transition" => Some(payload.clone()),
            _ => None,
        })
        .collect()
}

/// The (from, to) of each transition among `frames`.
fn moves(frames: &[Event]) -> Vec<(Value, Value)> {
    transitions(frames)
        .into_iter()
        .map(|p| (p["from"].clone(), p["to"].clone()))
        .collect()
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

fn types(frames: &[Event]) -> Vec<&'static str> {
    frames.iter().map(|f| f.body.type_name()).collect()
}

#[tokio::test]
async fn the_first_turn_logs_the_start_and_a_tool_result_moves_to_the_next_step() {
    let mut h = Harness::start(Duration::ZERO, collections).await;

    let frames = h.turn("account A1").await;

    let logged = transitions(&frames);
    assert_eq!(logged.len(), 2, "{frames:?}");
    assert_eq!(
        Value::Object(logged[0].clone()),
        json!({"from": null, "to": "intake", "state": {}})
    );
    assert_eq!(
        Value::Object(logged[1].clone()),
        json!({"from": "intake", "to": "verify", "state": {"account_id": "A1"}}),
        "payload keys in the reference's order, with the state it was decided on"
    );
    let keys: Vec<&String> = logged[1].keys().collect();
    assert_eq!(keys, ["from", "to", "state"]);
    assert!(text_of(&frames).starts_with("[intake] after tools"));
    // The start is logged right after `start`, the move after the last chunk, before `end`.
    let kinds = types(&frames);
    let start = kinds.iter().position(|k| *k == "agent.llm.response.start");
    assert_eq!(
        kinds.iter().position(|k| *k == "agent.log"),
        start.map(|i| i + 1)
    );
    assert_eq!(kinds[kinds.len() - 2], "agent.log");

    let frames = h.turn("hello").await;
    assert_eq!(text_of(&frames), "[verify] you said hello");
    assert!(
        transitions(&frames).is_empty(),
        "verify waits for `verified`"
    );
}

#[tokio::test]
async fn the_new_prompt_replaces_the_old_and_the_conversation_is_kept() {
    let mut h = Harness::start(Duration::ZERO, collections).await;
    h.turn("account A1").await;

    h.turn("hello").await;

    let requests = h.llm.requests();
    let last = requests.last().expect("a request");
    let systems: Vec<&Message> = last
        .messages
        .iter()
        .filter(|m| matches!(m, Message::System { .. }))
        .collect();
    assert_eq!(systems, [&Message::system("verify: check identity.")]);
    assert!(
        last.messages
            .iter()
            .any(|m| m == &Message::user("account A1")),
        "earlier turns are kept"
    );
    assert!(
        last.messages
            .iter()
            .any(|m| matches!(m, Message::Tool { .. })),
        "tool results are kept"
    );
}

#[tokio::test]
async fn conditional_transitions_are_tried_in_order_before_the_default() {
    fn graph(builder: RouterBuilder) -> RouterBuilder {
        builder
            .sub_agent(SubAgent::new("intake", "intake: route."))
            .sub_agent(SubAgent::new("billing", "billing: bills."))
            .sub_agent(SubAgent::new("dispute", "dispute: disputes."))
            .sub_agent(SubAgent::new("fallback", "fallback: anything."))
            // The default is declared first: it is still tried last.
            .add_default("intake", "fallback")
            .add_transition("intake", "billing", when::flag("billing"))
            .add_transition("intake", "dispute", when::flag("dispute"))
    }

    // Both conditions hold: the first added wins.
    let mut h = Harness::start(Duration::ZERO, graph).await;
    h.state.set("dispute", true);
    h.state.set("billing", true);
    let frames = h.turn("hi").await;
    assert_eq!(moves(&frames)[1], (json!("intake"), json!("billing")));

    // Only the second holds.
    let mut h = Harness::start(Duration::ZERO, graph).await;
    h.state.set("dispute", true);
    let frames = h.turn("hi").await;
    assert_eq!(moves(&frames)[1], (json!("intake"), json!("dispute")));

    // None holds: the default.
    let mut h = Harness::start(Duration::ZERO, graph).await;
    let frames = h.turn("hi").await;
    assert_eq!(moves(&frames)[1], (json!("intake"), json!("fallback")));
    let frames = h.turn("and now?").await;
    assert_eq!(text_of(&frames), "[fallback] you said and now?");
}

#[tokio::test]
async fn a_sub_agent_without_a_matching_transition_stays() {
    let mut h = Harness::start(Duration::ZERO, collections).await;
    h.turn("account A1").await;

    let frames = h.turn("born 1999-09-09").await;

    assert!(transitions(&frames).is_empty(), "wrong date of birth: stay");
    assert!(text_of(&frames).starts_with("[verify] after tools"));
    let frames = h.turn("born 1980-01-01").await;
    assert_eq!(moves(&frames), [(json!("verify"), json!("resolve"))]);
}

#[tokio::test]
async fn a_verified_caller_skips_verification() {
    let mut h = Harness::start(Duration::ZERO, collections).await;
    // Set up front, as from a call variable.
    h.state.set("verified", true);

    let frames = h.turn("account A1").await;

    assert_eq!(moves(&frames)[1], (json!("intake"), json!("resolve")));
    let frames = h.turn("what now").await;
    assert_eq!(text_of(&frames), "[resolve] you said what now");
}

#[tokio::test]
async fn an_interrupted_turn_does_not_move_the_router() {
    let mut h = Harness::start(Duration::from_millis(40), collections).await;
    h.state.set("account_id", "A1");
    h.user_turn("long");
    let mut frames = h.until("agent.llm.response.chunk").await;

    h.send(EventBody::Interrupt);
    frames.extend(h.until("agent.llm.response.end").await);

    assert_eq!(
        moves(&frames),
        [(Value::Null, json!("intake"))],
        "only the start is logged"
    );
    // The next completed turn is still intake's, and then the router moves.
    let frames = h.turn("hi").await;
    assert_eq!(text_of(&frames), "[intake] you said hi");
    assert_eq!(moves(&frames), [(json!("intake"), json!("verify"))]);
}

#[tokio::test]
async fn after_a_transfer_the_router_neither_speaks_nor_moves() {
    let mut h = Harness::start(Duration::ZERO, collections).await;
    h.state.set("account_id", "A1");

    let frames = h.turn("human please").await;

    assert_eq!(text_of(&frames), "Connecting you now.");
    let kinds = types(&frames);
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["agent.transfer_call", "agent.llm.response.end"]
    );
    assert_eq!(
        moves(&frames),
        [(Value::Null, json!("intake"))],
        "no move although intake -> verify holds"
    );
    assert_eq!(
        h.llm.requests().len(),
        1,
        "the model is not asked again after the transfer"
    );
}

#[tokio::test]
async fn each_sub_agent_runs_several_tool_rounds_with_only_its_own_tools() {
    let mut h = Harness::start(Duration::ZERO, collections).await;

    let frames = h.turn("two rounds").await;

    let logs: Vec<String> = frames
        .iter()
        .filter_map(|f| match &f.body {
            EventBody::Log { name, payload } if name == "tool_call_end" => {
                payload["function_name"].as_str().map(str::to_owned)
            }
            _ => None,
        })
        .collect();
    assert_eq!(logs, ["note", "find_account"], "two rounds in one turn");
    assert!(text_of(&frames).starts_with("[intake] after tools"));
    let requests = h.llm.requests();
    assert_eq!(requests.len(), 3);
    let offered =
        |r: &ChatRequest| -> Vec<String> { r.tools.iter().map(|t| t.name.clone()).collect() };
    for request in &requests {
        assert_eq!(offered(request), ["find_account", "note", "transfer"]);
    }

    h.turn("hello").await;
    let requests = h.llm.requests();
    assert_eq!(offered(&requests[3]), ["verify", "transfer"]);
    h.turn("born 1980-01-01").await;
    h.turn("thanks").await;
    let requests = h.llm.requests();
    let last = requests.last().expect("a request");
    assert!(last.tools.is_empty(), "resolve has no tools");
}

#[tokio::test]
async fn a_tool_less_sub_agent_streams_in_one_request() {
    let mut h = Harness::start(Duration::ZERO, |b| {
        b.sub_agent(SubAgent::new("intake", "intake: chat."))
    })
    .await;

    let frames = h.turn("long").await;

    let chunks = frames
        .iter()
        .filter(|f| matches!(f.body, EventBody::ResponseChunk { .. }))
        .count();
    assert_eq!(chunks, 12, "one chunk per word, as the model streamed them");
    let requests = h.llm.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].tools.is_empty());
}

#[tokio::test]
async fn a_panicking_condition_counts_as_false() {
    let mut h = Harness::start(Duration::ZERO, |b| {
        b.sub_agent(SubAgent::new("intake", "intake: a."))
            .sub_agent(SubAgent::new("next", "next: b."))
            .sub_agent(SubAgent::new("never", "never: c."))
            .add_transition("intake", "never", |_: &Map<String, Value>| {
                panic!("bug in a condition")
            })
            .add_default("intake", "next")
    })
    .await;

    let frames = h.turn("hi").await;

    assert_eq!(moves(&frames)[1], (json!("intake"), json!("next")));
    assert!(!types(&frames).contains(&"agent.error"), "the call goes on");
}

fn builder() -> RouterBuilder {
    DeterministicRouter::builder("intake", Arc::new(ScriptedLlm::new([])))
}

#[test]
fn graph_errors_name_the_ids_at_fault() {
    let err = builder().build().err();
    assert_eq!(err, Some(RouterError::NoSubAgents));

    let err = builder()
        .sub_agent(SubAgent::new("intake", "a"))
        .sub_agent(SubAgent::new("intake", "b"))
        .build()
        .err();
    assert_eq!(err, Some(RouterError::DuplicateSubAgent("intake".into())));

    let err = DeterministicRouter::builder("start", Arc::new(ScriptedLlm::new([])))
        .sub_agent(SubAgent::new("intake", "a"))
        .build()
        .err()
        .expect("unknown start");
    assert_eq!(
        err.to_string(),
        "the start `start` is not a sub-agent (sub-agents: intake)"
    );

    let err = builder()
        .sub_agent(SubAgent::new("intake", "a"))
        .sub_agent(SubAgent::new("verify", "b"))
        .add_transition("intake", "resolve", when::flag("x"))
        .build()
        .err()
        .expect("unknown target");
    assert_eq!(
        err.to_string(),
        "transition `intake` -> `resolve` names `resolve`, which is not a sub-agent \
         (sub-agents: intake, verify)"
    );

    let err = builder()
        .sub_agent(SubAgent::new("intake", "a"))
        .add_default("verfiy", "intake")
        .build()
        .err();
    assert!(
        matches!(&err, Some(RouterError::UnknownSubAgent { missing, .. }) if missing == "verfiy"),
        "unknown source: {err:?}"
    );

    let err = builder()
        .sub_agent(SubAgent::new("intake", "a"))
        .sub_agent(SubAgent::new("b", "b"))
        .sub_agent(SubAgent::new("c", "c"))
        .add_default("intake", "b")
        .add_default("intake", "c")
        .build()
        .err();
    assert_eq!(
        err,
        Some(RouterError::DuplicateDefault {
            from: "intake".into(),
            first: "b".into(),
            second: "c".into()
        })
    );

    let err = builder()
        .sub_agent(SubAgent::new("intake", "a").with_tools(["lookup"]))
        .build()
        .err()
        .expect("unknown tool");
    assert_eq!(
        err.to_string(),
        "sub-agent `intake` uses the tool `lookup`, which is not in the router's registry"
    );
}

#[test]
fn a_valid_graph_starts_at_its_start_with_its_prompt() {
    let mut router = builder()
        .sub_agent(SubAgent::new("verify", "Verify."))
        .sub_agent(SubAgent::new("intake", "Greet."))
        .add_default("intake", "verify")
        .build()
        .expect("valid");
    assert_eq!(router.active(), "intake");
    assert_eq!(
        router.sub_agents().collect::<Vec<_>>(),
        ["verify", "intake"]
    );
    assert_eq!(router.context().messages(), [Message::system("Greet.")]);
}

#[tokio::test]
async fn run_until_ends_the_turn_after_the_tool_round_that_met_the_condition() {
    let state = RouterState::new();
    let (outbound, _frames) = mpsc::channel(16);
    let setup = SessionSetup::new(init(), outbound);
    let mut registry = ToolRegistry::new();
    registry
        .discover(&Arc::new(Tools {
            state: state.clone(),
            call: setup.call().clone(),
        }))
        .expect("tools register");
    let llm = ScriptedLlm::from_fn(model);
    let turn_loop = ToolLoop::new(Arc::new(llm.clone()), Arc::new(registry));

    let mut context = Context::with_system("intake: test.");
    context.add(Message::user("two rounds"));
    let mut events = Vec::new();
    {
        let mut turn = turn_loop.run_until(&mut context, || state.get("note").is_some());
        while let Some(event) = turn.next().await {
            events.push(event.expect("turn ok"));
        }
    }

    assert_eq!(llm.requests().len(), 1, "not asked again after the round");
    assert!(matches!(events.last(), Some(TurnEvent::Done(report)) if report.rounds.len() == 1));
    assert!(
        matches!(context.last(), Some(Message::Tool { .. })),
        "the round's call and result are in the context"
    );

    // Without the condition the same turn goes on to a second round and an answer.
    let mut context = Context::with_system("intake: test.");
    context.add(Message::user("two rounds"));
    let mut turn = turn_loop.run(&mut context);
    while let Some(event) = turn.next().await {
        event.expect("turn ok");
    }
    assert_eq!(llm.requests().len(), 4);
}
