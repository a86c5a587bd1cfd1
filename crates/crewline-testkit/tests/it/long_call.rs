//! A long call, through the real server: past a share of its token budget the oldest turns
//! are summarized in the background, the summary replaces them in the next requests (the
//! platform's whole history notwithstanding), tool calls stay with their results, and a
//! summary that fails, hangs or meets a changed history leaves the call as it was.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use crewline::{
    llm::{ChatRequest, LlmClient, LlmError, LlmStream},
    prelude::*,
    protocol::ConversationType,
    summary::{SUMMARY_LOG, SUMMARY_PREFIX, Summarizer},
    types::{ContextLimits, Message, Role},
};
use crewline_testkit::{
    PlatformClient, ScriptedLlm, ScriptedReply as Reply, TestCrew,
    platform::{CrewFrame, PlatformConfig},
};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

const PROMPT: &str = "You are a hotel's phone line.";
const SUMMARY: &str = "The caller booked room 12 for two nights and asked about breakfast.";

/// What the summarizing model does with each request.
#[derive(Clone, Copy)]
enum Summaries {
    Answer,
    Fail,
    /// Answers past the summary's cap (4 KiB).
    TooLong,
    /// Never answers; the request's end (a cancel) is reported.
    Hang,
}

/// The summarizing model: records its requests, answers as `mode` says.
struct SummaryModel {
    mode: Summaries,
    requests: Arc<Mutex<Vec<ChatRequest>>>,
    cancelled: mpsc::UnboundedSender<()>,
}

/// Reports its drop: a hanging request that ends was cancelled.
struct Cancelled(mpsc::UnboundedSender<()>);

impl Drop for Cancelled {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

#[async_trait]
impl LlmClient for SummaryModel {
    async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError> {
        self.requests.lock().unwrap().push(request.clone());
        match self.mode {
            Summaries::Answer => {
                ScriptedLlm::new([Reply::text(SUMMARY)])
                    .stream_chat(request)
                    .await
            }
            Summaries::TooLong => {
                ScriptedLlm::new([Reply::text("and then ".repeat(1_000))])
                    .stream_chat(request)
                    .await
            }
            Summaries::Fail => Err(LlmError::Api {
                status: Some(503),
                message: "overloaded".to_owned(),
                retry_after: None,
            }),
            Summaries::Hang => {
                let _cancelled = Cancelled(self.cancelled.clone());
                std::future::pending().await
            }
        }
    }
}

/// The crew under test and what its models saw.
struct Setup {
    crew: TestCrew,
    agent_model: Arc<ScriptedLlm>,
    summary_requests: Arc<Mutex<Vec<ChatRequest>>>,
    cancelled: mpsc::UnboundedReceiver<()>,
}

/// An agent that looks rooms up when asked and notes everything else; summarizing with a
/// model doing `mode` past 60% of 400 tokens, keeping the last 2 turns.
async fn serve(mode: Summaries, limits: Option<ContextLimits>) -> Setup {
    let agent_model = Arc::new(ScriptedLlm::from_fn(|request: &ChatRequest| match request
        .messages
        .last()
    {
        Some(Message::User { content }) if content.starts_with("look up") => {
            Reply::tool_call("find_room", json!({"number": 12}))
        }
        Some(Message::Tool { content, .. }) => Reply::text(format!("Found: {content}.")),
        _ => Reply::text("Noted, thank you. Is there anything else I can do for you today?"),
    }));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (cancelled_tx, cancelled) = mpsc::unbounded_channel();
    let summary_model = Arc::new(SummaryModel {
        mode,
        requests: Arc::clone(&requests),
        cancelled: cancelled_tx,
    });
    let mut builder = Agent::builder(Arc::clone(&agent_model))
        .prompt(PROMPT)
        .tools(Rooms)
        .log_usage(true)
        .summarize(
            Summarizer::new(summary_model)
                .model("small-model")
                .budget(400)
                .at_share(0.6)
                .keep_last(2),
        );
    if let Some(limits) = limits {
        builder = builder.context_limits(limits);
    }
    Setup {
        crew: TestCrew::serve(builder.build().unwrap()).await.unwrap(),
        agent_model,
        summary_requests: requests,
        cancelled,
    }
}

struct Rooms;

#[tools]
impl Rooms {
    /// Look a room up.
    ///
    /// # Arguments
    /// * `number` - The room number
    #[function_tool]
    async fn find_room(&self, number: u32) -> String {
        format!("room {number} is free on the 3rd floor")
    }
}

async fn call(crew: &TestCrew) -> PlatformClient {
    let config = PlatformConfig {
        conversation_type: ConversationType::TelephonyInbound,
        ..crew.config()
    };
    PlatformClient::connect(config).await.unwrap()
}

async fn say(client: &mut PlatformClient, words: &str) {
    let summary = client.user_turn(words).unwrap().finish().await.unwrap();
    assert!(summary.ended, "{summary:?}");
}

/// The next `context_summary` entry said out of turn (within a minute of the paused clock).
async fn summary_log(client: &mut PlatformClient) -> Option<Map<String, Value>> {
    loop {
        let frame = client.recv_idle(Duration::from_secs(60)).await.unwrap()?;
        if let CrewFrame::Log { name, payload } = frame.frame
            && name == SUMMARY_LOG
        {
            return Some(payload);
        }
    }
}

/// A caller's turn, to its end: the `context_summary` entry among its frames, if one came.
async fn said_summary(client: &mut PlatformClient, words: &str) -> Option<Map<String, Value>> {
    let said = client.user_turn(words).unwrap().finish().await.unwrap();
    assert!(said.ended, "{said:?}");
    said.frames.into_iter().find_map(|f| match f.frame {
        CrewFrame::Log { name, payload } if name == SUMMARY_LOG => Some(payload),
        _ => None,
    })
}

fn is_summary(message: &Message) -> bool {
    matches!(message, Message::User { content } if content.starts_with(SUMMARY_PREFIX))
}

/// Every tool message answers a call of an earlier assistant message, and every call has its
/// result.
fn calls_paired(messages: &[Message]) -> bool {
    let mut open = std::collections::HashSet::new();
    for message in messages {
        open.extend(message.tool_calls().iter().map(|call| call.id.clone()));
        if let Message::Tool { tool_call_id, .. } = message
            && !open.remove(tool_call_id)
        {
            return false;
        }
    }
    open.is_empty()
}

/// The messages of the agent model's last request.
fn last_request(model: &ScriptedLlm) -> Vec<Message> {
    model.requests().last().unwrap().messages.to_vec()
}

#[tokio::test(start_paused = true)]
async fn past_the_share_the_oldest_turns_are_summarized_and_stay_summarized() {
    let mut setup = serve(Summaries::Answer, None).await;
    let mut client = call(&setup.crew).await;
    // The platform's history starts with a looked-up room: a tool call and its result.
    client.set_messages(vec![
        json!({"role": "user", "content": "look up room 12 please"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "find_room", "arguments": "{\"number\":12}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "room 12 is free on the 3rd floor"}),
        json!({"role": "assistant", "content": "Found: room 12 is free on the 3rd floor."}),
    ]);
    let mut turns = 1;
    // The summary lands between two turns, or as the next request comes (its log is then among
    // that turn's frames).
    let mut logged = None;
    while setup.summary_requests.lock().unwrap().is_empty() {
        logged = said_summary(
            &mut client,
            &format!("Question {turns}: what about breakfast and parking?"),
        )
        .await;
        turns += 1;
        assert!(turns < 40, "no summary requested");
    }
    // The summary request: tool-less, on the cheaper model, the oldest turns as a transcript
    // (the tool call with its result), never the last two turns.
    let request = setup.summary_requests.lock().unwrap()[0].clone();
    assert!(request.tools.is_empty());
    assert_eq!(request.options.model.as_deref(), Some("small-model"));
    let transcript = request.messages.last().unwrap().text().unwrap().to_owned();
    assert!(transcript.contains("[called find_room("), "{transcript}");
    assert!(
        transcript.contains("Tool result: room 12 is free"),
        "{transcript}"
    );
    let last_question = format!("Question {}:", turns - 1);
    assert!(!transcript.contains(&last_question), "{transcript}");

    let log = match logged {
        Some(log) => log,
        None => summary_log(&mut client).await.expect("the summary lands"),
    };
    assert!(
        log["tokens_after"].as_u64() < log["tokens_before"].as_u64(),
        "{log:?}"
    );
    assert!(log["messages"].as_u64() > Some(3), "{log:?}");

    // The next turn (the platform sends its whole history): one summary message after the
    // prompt, the last turns intact, every call with its result.
    say(&mut client, "And the checkout time?").await;
    let messages = last_request(&setup.agent_model);
    assert_eq!(messages[0], Message::system(PROMPT));
    assert_eq!(
        messages[1],
        Message::user(format!("{SUMMARY_PREFIX}{SUMMARY}"))
    );
    assert_eq!(messages.iter().filter(|m| is_summary(m)).count(), 1);
    assert!(!messages.iter().skip(2).any(|m| m.role() == Role::Tool));
    assert!(calls_paired(&messages));
    assert!(
        messages
            .iter()
            .any(|m| m.text().is_some_and(|t| t.starts_with(&last_question))),
        "the last turns are kept: {messages:?}"
    );
    assert!(
        client.messages().len() > messages.len() + 3,
        "the platform still holds every turn"
    );
    // And the turn after: still summarized, once.
    say(&mut client, "Thanks, that is all.").await;
    let messages = last_request(&setup.agent_model);
    assert_eq!(messages.iter().filter(|m| is_summary(m)).count(), 1);
    assert!(is_summary(&messages[1]));

    // The platform changes its history: the summary no longer applies, and is dropped.
    client.set_messages(vec![json!({"role": "user", "content": "A new start."})]);
    say(&mut client, "Hello again").await;
    let messages = last_request(&setup.agent_model);
    assert!(!messages.iter().any(is_summary), "{messages:?}");
    assert_eq!(messages[0], Message::system(PROMPT));
    assert!(setup.cancelled.try_recv().is_err());
    client.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_summary_leaves_truncation_as_before_and_the_call_goes_on() {
    let limits = ContextLimits::default().with_max_tokens(500);
    let setup = serve(Summaries::Fail, Some(limits)).await;
    let mut client = call(&setup.crew).await;
    say(&mut client, "My name is Ada.").await;
    for turn in 0..30 {
        say(
            &mut client,
            &format!("Question {turn}: what about breakfast and parking?"),
        )
        .await;
    }
    assert!(!setup.summary_requests.lock().unwrap().is_empty());
    // Every turn answered; the context bounded by its limits, oldest first, as before.
    let messages = last_request(&setup.agent_model);
    assert_eq!(messages[0], Message::system(PROMPT));
    assert!(!messages.iter().any(is_summary));
    assert!(
        !messages.iter().any(|m| m.text() == Some("My name is Ada.")),
        "the oldest turn was truncated"
    );
    assert_eq!(
        messages.last().and_then(Message::text),
        Some("Question 29: what about breakfast and parking?")
    );
    client.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_over_long_summary_is_dropped_and_the_call_goes_on() {
    let setup = serve(Summaries::TooLong, None).await;
    let mut client = call(&setup.crew).await;
    for turn in 0..20 {
        let logged = said_summary(
            &mut client,
            &format!("Question {turn}: what about breakfast and parking?"),
        )
        .await;
        assert!(logged.is_none(), "no summary lands: {logged:?}");
    }
    assert!(!setup.summary_requests.lock().unwrap().is_empty());
    let messages = last_request(&setup.agent_model);
    assert!(!messages.iter().any(is_summary));
    assert_eq!(messages.len(), 1 + 20 * 2 - 1, "every turn kept, as before");
    client.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn one_summary_at_a_time_and_the_call_end_cancels_it() {
    let mut setup = serve(Summaries::Hang, None).await;
    let mut client = call(&setup.crew).await;
    for turn in 0..20 {
        say(
            &mut client,
            &format!("Question {turn}: what about breakfast and parking?"),
        )
        .await;
    }
    // Past the share after every one of the last turns, and still one request.
    assert_eq!(setup.summary_requests.lock().unwrap().len(), 1);
    assert!(setup.cancelled.try_recv().is_err(), "still running");
    client.close().await.unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(60), setup.cancelled.recv()).await,
        Ok(Some(())),
        "the call's end cancels the summary"
    );
}

#[tokio::test(start_paused = true)]
async fn a_crew_without_a_summarizer_never_asks_for_one_nor_logs_one() {
    let model = Arc::new(ScriptedLlm::from_fn(|_| Reply::text("Noted.")));
    let agent = Agent::builder(Arc::clone(&model))
        .prompt(PROMPT)
        .build()
        .unwrap();
    let crew = TestCrew::serve(agent).await.unwrap();
    let mut client = call(&crew).await;
    for turn in 0..30 {
        let summary = client
            .user_turn(format!(
                "Question {turn}: what about breakfast and parking?"
            ))
            .unwrap()
            .finish()
            .await
            .unwrap();
        assert!(
            !summary
                .frames
                .iter()
                .any(|f| matches!(&f.frame, CrewFrame::Log { .. })),
            "{summary:?}"
        );
    }
    assert_eq!(
        model.requests().last().unwrap().messages.len(),
        1 + 30 * 2 - 1
    );
    client.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_router_node_summarizes_its_long_call_too() {
    use crewline::router::{DeterministicRouter, SubAgent};

    let model = Arc::new(ScriptedLlm::from_fn(|_| {
        Reply::text("Noted, thank you. Is there anything else I can do for you today?")
    }));
    let (cancelled, _) = mpsc::unbounded_channel();
    let summarizer = Summarizer::new(Arc::new(SummaryModel {
        mode: Summaries::Answer,
        requests: Arc::new(Mutex::new(Vec::new())),
        cancelled,
    }))
    .budget(400)
    .at_share(0.6)
    .keep_last(2);
    let llm = Arc::clone(&model);
    let crew = TestCrew::serve(move |_setup: SessionSetup| {
        let router = DeterministicRouter::builder("desk", Arc::clone(&llm) as Arc<dyn LlmClient>)
            .sub_agent(SubAgent::new("desk", PROMPT))
            .build()
            .unwrap();
        let mut crew = Crew::new();
        crew.add_node(
            OutputNode::new("router", router)
                .log_usage(true)
                .summarize(summarizer.clone()),
        );
        crew
    })
    .await
    .unwrap();
    let mut client = call(&crew).await;
    // The summary lands between two turns, or as the next request comes (its log is then
    // among that turn's frames): either way before the turn's request is answered.
    let mut landed = false;
    for turn in 0..20 {
        landed = said_summary(
            &mut client,
            &format!("Question {turn}: what about breakfast and parking?"),
        )
        .await
        .is_some();
        if landed {
            break;
        }
    }
    assert!(landed, "the summary landed");
    say(&mut client, "And the checkout time?").await;
    let messages = last_request(&model);
    assert_eq!(messages[0], Message::system(PROMPT));
    assert!(is_summary(&messages[1]), "{messages:?}");
    client.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_summary_request_is_counted_in_what_the_call_cost() {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (cancelled, _cancels) = mpsc::unbounded_channel();
    let summary_model = Arc::new(SummaryModel {
        mode: Summaries::Answer,
        requests: Arc::clone(&requests),
        cancelled,
    });
    // Only the summary model has a price: what the call cost is its summary.
    let prices: crewline::llm::PriceTable = "small-model=1,0.5,2".parse().unwrap();
    let agent = Agent::builder(ScriptedLlm::from_fn(|_: &ChatRequest| {
        Reply::text("Noted, thank you. Is there anything else I can do for you today?")
    }))
    .prompt(PROMPT)
    .log_usage(true)
    .prices(prices)
    .summarize(
        Summarizer::new(summary_model)
            .model("small-model")
            .budget(400)
            .at_share(0.6)
            .keep_last(2),
    )
    .build()
    .unwrap();
    let crew = TestCrew::serve(agent).await.unwrap();
    let mut client = call(&crew).await;
    let mut log = None;
    let mut turns = 0;
    while log.is_none() {
        turns += 1;
        assert!(turns < 40, "no summary landed");
        log = said_summary(
            &mut client,
            &format!("Question {turns}: what about breakfast and parking?"),
        )
        .await;
        if log.is_none() && !requests.lock().unwrap().is_empty() {
            log = summary_log(&mut client).await;
        }
    }
    let log = log.unwrap();
    // The summary request's tokens, priced by the agent's table for the summary's model.
    assert!(
        log["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{log:?}"
    );
    assert!(log["cost"].is_string(), "{log:?}");
    assert_eq!(log["call"]["summaries"], 1, "{log:?}");
    assert_eq!(log["call"]["cost"], log["cost"], "{log:?}");

    // The next turn's running total still holds it.
    let said = client
        .user_turn("And the checkout time?")
        .unwrap()
        .finish()
        .await
        .unwrap();
    let (_, usage) = said
        .logs
        .iter()
        .find(|(name, _)| name == "llm_usage")
        .unwrap();
    assert_eq!(usage["call"]["summaries"], 1, "{usage:?}");
    assert_eq!(usage["call"]["cost"], log["cost"], "{usage:?}");
}
