//! A slow tool, through the real server on a paused clock: progress spoken between sentences
//! (never over the caller) or only logged, and a background tool that answers "started" at
//! once, whose result the model tells the caller when it lands; it runs once, a barge-in does
//! not stop it, and the end of the call does.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use crewline::{
    llm::ChatRequest,
    prelude::*,
    protocol::{ConversationType, EventBody},
    tool::Progress,
    types::Role,
};
use crewline_testkit::{
    PlatformClient, ScriptedLlm, ScriptedReply as Reply, TestCrew,
    platform::{CrewFrame, PlatformConfig, ToolOutcome},
};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

/// How long the slow tools take (on the paused clock).
const SLOW: Duration = Duration::from_secs(20);
/// What the model says when told a background result.
const TOLD: &str = "Good news: your table for 2 is booked, reference T-42.";

/// The tools: a search that reports progress, a booking that runs in the background.
#[derive(Default)]
struct Desk {
    bookings: AtomicUsize,
    /// Set when a booking's future was dropped before it finished.
    cancelled: AtomicBool,
}

/// Sets the flag when dropped before `done`: what a tool sees of its cancellation.
struct Unfinished<'a> {
    cancelled: &'a AtomicBool,
    done: bool,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.cancelled.store(true, Ordering::SeqCst);
        }
    }
}

#[tools]
impl Desk {
    /// Search the menu.
    #[function_tool]
    async fn search_menu(&self, dish: String) -> Result<String, ToolError> {
        if let Some(progress) = Progress::current() {
            progress.say("Still looking through the menu...");
        }
        tokio::time::sleep(SLOW).await;
        Ok(format!("{dish}: available"))
    }

    /// Check the stock of a dish (logs its progress only).
    #[function_tool]
    async fn check_stock(&self, dish: String) -> Result<String, ToolError> {
        if let Some(progress) = Progress::current() {
            progress.log(format!("asking the kitchen about {dish}"));
        }
        tokio::time::sleep(SLOW).await;
        Ok("12 left".to_owned())
    }

    /// Pay the deposit (never cut off half-way).
    #[function_tool(cancellable = false)]
    async fn pay_deposit(&self, amount: u32) -> Result<String, ToolError> {
        if let Some(progress) = Progress::current() {
            progress.say("Still talking to the bank...");
        }
        tokio::time::sleep(SLOW).await;
        Ok(format!("{amount} paid"))
    }

    /// Text the booking's reference to the caller.
    #[function_tool]
    async fn send_confirmation(&self, reference: String) -> Result<String, ToolError> {
        Ok(format!("confirmation {reference} sent"))
    }

    /// Book a table.
    #[function_tool(background, timeout_ms = 120000)]
    async fn book_table(&self, people: u32) -> Result<String, ToolError> {
        self.bookings.fetch_add(1, Ordering::SeqCst);
        let mut unfinished = Unfinished {
            cancelled: &self.cancelled,
            done: false,
        };
        tokio::time::sleep(SLOW).await;
        unfinished.done = true;
        Ok(format!("table for {people} booked, reference T-42"))
    }
}

/// The model: calls the tool the caller names, then answers from what it reads.
fn model() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().unwrap();
        let text = last.text().unwrap_or_default();
        match last.role() {
            Role::System if text.contains("T-42") => Reply::text(TOLD),
            Role::Tool if text.contains("\"started\"") => {
                Reply::text("I'm booking it now. Anything else meanwhile?")
            }
            Role::Tool if text.contains("already_started") => {
                Reply::text("That booking is already under way.")
            }
            Role::Tool => Reply::text(format!("Here you go: {text}.")),
            _ if text.contains("menu") => {
                Reply::tool_call("search_menu", json!({"dish": "soup"})).with_text("Let me look. ")
            }
            _ if text.contains("stock") => Reply::tool_call("check_stock", json!({"dish": "soup"})),
            _ if text.contains("deposit") => {
                Reply::tool_call("pay_deposit", json!({"amount": 20})).with_text("Sure. ")
            }
            _ if text.contains("book") => Reply::tool_call("book_table", json!({"people": 2})),
            _ => Reply::text("Sure."),
        }
    })
}

async fn serve() -> (TestCrew, Arc<Desk>, ScriptedLlm) {
    let desk = Arc::new(Desk::default());
    let model = model();
    let agent = Agent::builder(model.clone())
        .prompt("You are a restaurant line.")
        .tools(Arc::clone(&desk))
        .build()
        .unwrap();
    (TestCrew::serve(agent).await.unwrap(), desk, model)
}

async fn call(crew: &TestCrew) -> PlatformClient {
    let config = PlatformConfig {
        conversation_type: ConversationType::TelephonyInbound,
        ..crew.config()
    };
    PlatformClient::connect(config).await.unwrap()
}

/// One out-of-turn frame as a word.
fn word(frame: CrewFrame) -> String {
    match frame {
        CrewFrame::Log { name, payload } => format!("log:{name}:{}", summary(&payload)),
        CrewFrame::Speak { text } => format!("speak:{text}"),
        CrewFrame::ToolStart(log) => format!("tool_start:{}", log.name),
        CrewFrame::ToolEnd(log) => {
            format!("tool_end:{}:{}", log.name, log.response.unwrap_or_default())
        }
        other => other.wire_type().to_owned(),
    }
}

fn summary(payload: &Map<String, Value>) -> String {
    match (payload.get("text"), payload.get("response")) {
        (Some(text), _) => format!("{}:{}", text.as_str().unwrap(), payload["spoken"]),
        (None, Some(response)) => response.as_str().unwrap_or_default().to_owned(),
        _ => String::new(),
    }
}

/// The `status` a background call answered with.
fn status(outcome: &ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Ok(response) => response["status"].as_str().unwrap_or_default().to_owned(),
        other => format!("{other:?}"),
    }
}

/// What the crew says out of turn within `wait`.
async fn heard(client: &mut PlatformClient, wait: Duration) -> Vec<String> {
    let deadline = Instant::now() + wait;
    let mut heard = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(frame) = client.recv_idle(left).await.unwrap() else {
            return heard;
        };
        heard.push(word(frame.frame));
    }
}

#[tokio::test(start_paused = true)]
async fn progress_is_spoken_after_the_sentence_while_the_tool_runs() {
    let (crew, _desk, _model) = serve().await;
    let mut client = call(&crew).await;
    let summary = client
        .user_turn("Is the soup on the menu?")
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(summary.text, "Let me look. Here you go: soup: available.");
    assert_eq!(summary.speeches, ["Still looking through the menu..."]);
    // In order: the sentence, the tool's start, its progress said, its end.
    let order: Vec<&str> = summary.wire_types();
    let speak = order.iter().position(|t| *t == "agent.speak").unwrap();
    let first_chunk = order
        .iter()
        .position(|t| *t == "agent.llm.response.chunk")
        .unwrap();
    assert!(first_chunk < speak, "{order:?}");
    let progress = summary
        .logs
        .iter()
        .find(|(name, _)| name == "tool_progress")
        .unwrap();
    assert_eq!(progress.1["function_name"], "search_menu");
    assert_eq!(progress.1["spoken"], true);
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_cannot_be_cancelled_reports_progress_too() {
    let (crew, _desk, _model) = serve().await;
    let mut client = call(&crew).await;
    let summary = client
        .user_turn("Can I pay the deposit?")
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(summary.speeches, ["Still talking to the bank..."]);
    assert_eq!(summary.text, "Sure. Here you go: 20 paid.");
}

#[tokio::test(start_paused = true)]
async fn log_only_progress_reaches_the_log_and_is_not_said() {
    let (crew, _desk, _model) = serve().await;
    let mut client = call(&crew).await;
    let summary = client
        .user_turn("How much soup is in stock?")
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert!(summary.speeches.is_empty(), "{summary:?}");
    let progress = summary
        .logs
        .iter()
        .find(|(name, _)| name == "tool_progress")
        .unwrap();
    assert_eq!(progress.1["text"], "asking the kitchen about soup");
    assert_eq!(progress.1["spoken"], false);
}

#[tokio::test(start_paused = true)]
async fn a_background_tool_answers_at_once_and_its_result_is_told_when_it_lands() {
    let (crew, desk, model) = serve().await;
    let mut client = call(&crew).await;
    let started = Instant::now();
    let summary = client
        .user_turn("Please book a table for two.")
        .unwrap()
        .finish()
        .await
        .unwrap();
    // The conversation goes on: the turn ends before the booking does.
    assert_eq!(summary.text, "I'm booking it now. Anything else meanwhile?");
    assert!(started.elapsed() < SLOW, "{:?}", started.elapsed());
    assert_eq!(status(&summary.tools[0].outcome), "started");

    // Another turn while it runs.
    let summary = client.user_turn("Thanks").unwrap().finish().await.unwrap();
    assert_eq!(summary.text, "Sure.");

    // When it lands, the model is asked to tell the caller, and it is said.
    assert_eq!(
        heard(&mut client, SLOW * 2).await,
        [
            "log:tool_background:table for 2 booked, reference T-42".to_owned(),
            format!("speak:{TOLD}"),
        ]
    );
    let asked = model.requests().last().unwrap().clone();
    let note = asked.messages.last().unwrap();
    assert_eq!(note.role(), Role::System);
    assert!(note.text().unwrap().contains("book_table"), "{note:?}");
    assert_eq!(desk.bookings.load(Ordering::SeqCst), 1);
    assert!(!desk.cancelled.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn the_turn_that_tells_a_result_logs_its_tools_and_counts_its_usage() {
    // Told a landed booking, this model first texts the reference, then says it.
    let model = ScriptedLlm::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().unwrap();
        let text = last.text().unwrap_or_default();
        match last.role() {
            Role::System if text.contains("T-42") => {
                Reply::tool_call("send_confirmation", json!({"reference": "T-42"}))
            }
            Role::Tool if text.contains("\"started\"") => Reply::text("I'm booking it now."),
            Role::Tool => Reply::text(TOLD),
            _ => Reply::tool_call("book_table", json!({"people": 2})),
        }
    });
    let agent = Agent::builder(model)
        .prompt("You are a restaurant line.")
        .tools(Arc::new(Desk::default()))
        .log_usage(true)
        .build()
        .unwrap();
    let crew = TestCrew::serve(agent).await.unwrap();
    let mut client = call(&crew).await;
    let summary = client
        .user_turn("Please book a table for two.")
        .unwrap()
        .finish()
        .await
        .unwrap();
    let turns_of = |payload: &Map<String, Value>| payload["call"]["turns"].as_u64().unwrap();
    let booked = summary
        .logs
        .iter()
        .find(|(name, _)| name == "llm_usage")
        .unwrap();
    assert_eq!(turns_of(&booked.1), 1);

    // When the booking lands: its log, the telling turn's tool logs, its usage, its words.
    let deadline = Instant::now() + SLOW * 2;
    let mut heard = Vec::new();
    let mut told_usage = None;
    while let Some(frame) = client
        .recv_idle(deadline.saturating_duration_since(Instant::now()))
        .await
        .unwrap()
    {
        if let CrewFrame::Log { name, payload } = &frame.frame
            && name == "llm_usage"
        {
            told_usage = Some(payload.clone());
        }
        heard.push(word(frame.frame));
    }
    assert_eq!(
        heard,
        [
            "log:tool_background:table for 2 booked, reference T-42".to_owned(),
            "tool_start:send_confirmation".to_owned(),
            "tool_end:send_confirmation:\"confirmation T-42 sent\"".to_owned(),
            "log:llm_usage:".to_owned(),
            format!("speak:{TOLD}"),
        ]
    );
    // The telling turn is in the call's tally.
    assert_eq!(turns_of(&told_usage.unwrap()), 2);
}

#[tokio::test(start_paused = true)]
async fn a_late_result_waits_while_the_caller_speaks() {
    let (crew, _desk, _model) = serve().await;
    let mut client = call(&crew).await;
    client
        .user_turn("Please book a table for two.")
        .unwrap()
        .finish()
        .await
        .unwrap();
    client.send(EventBody::UserStartedSpeaking).unwrap();
    // The booking lands while the caller speaks: nothing is said over them.
    assert_eq!(heard(&mut client, SLOW * 3).await, Vec::<String>::new());
    client.send(EventBody::UserStoppedSpeaking).unwrap();
    assert_eq!(
        heard(&mut client, Duration::from_secs(1)).await,
        [
            "log:tool_background:table for 2 booked, reference T-42".to_owned(),
            format!("speak:{TOLD}"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_background_tool_runs_once_and_a_barge_in_does_not_stop_it() {
    let (crew, desk, _model) = serve().await;
    let mut client = call(&crew).await;
    client
        .user_turn("Please book a table for two.")
        .unwrap()
        .finish()
        .await
        .unwrap();
    // The caller barges in on a reply, and asks again: the same booking is not made twice.
    let mut turn = client.user_turn("Tell me about the menu").unwrap();
    turn.next().await.unwrap();
    turn.interrupt().await.unwrap();
    let summary = client
        .user_turn("Did you book a table for two?")
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(summary.text, "That booking is already under way.");
    assert_eq!(status(&summary.tools[0].outcome), "already_started");
    let said = heard(&mut client, SLOW * 2).await;
    assert!(said.contains(&format!("speak:{TOLD}")), "{said:?}");
    assert_eq!(desk.bookings.load(Ordering::SeqCst), 1);
    assert!(!desk.cancelled.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn the_end_of_the_call_cancels_a_background_tool() {
    let (crew, desk, _model) = serve().await;
    let mut client = call(&crew).await;
    client
        .user_turn("Please book a table for two.")
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(desk.bookings.load(Ordering::SeqCst), 1);
    client.close().await.unwrap();
    // The session's end drops the booking's future: it never finishes.
    for _ in 0..100 {
        if desk.cancelled.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(desk.cancelled.load(Ordering::SeqCst));
}
