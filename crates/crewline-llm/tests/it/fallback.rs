//! `FallbackLlm` over scripted fake providers: failover before any text (also after partial
//! tool calls), the after-text policies, the circuit breaker, the retry budget and hedging,
//! all on tokio's paused clock.
#![allow(clippy::unwrap_used)] // A test fails loudly on what it did not expect.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{Message, Role, ToolCall};
use crewline_llm::{
    AfterText, BreakerConfig, BreakerState, ChatRequest, FallbackLlm, FinishReason, Hedge,
    LlmClient, LlmError, LlmStream, RetryBudget, SharedBreakers, StreamItem, collect,
};
use futures::StreamExt;

/// One step of a fake provider's answer.
#[derive(Clone)]
enum Step {
    Item(StreamItem),
    Fail(LlmError),
    Wait(Duration),
}

/// What a fake provider does with one request.
#[derive(Clone)]
enum Answer {
    /// `stream_chat` fails.
    Refuse(LlmError),
    /// `stream_chat` waits this long, then streams the steps.
    Stream(Duration, Vec<Step>),
}

/// A provider answering from a script, recording requests and the streams dropped unfinished.
#[derive(Default)]
struct Fake {
    answers: Mutex<VecDeque<Answer>>,
    /// The answer once the script is used up.
    otherwise: Mutex<Option<Answer>>,
    requests: Mutex<Vec<ChatRequest>>,
    /// Requests dropped before their answer ended (cancelled by the caller).
    dropped: Arc<AtomicUsize>,
}

impl Fake {
    fn new(answers: impl IntoIterator<Item = Answer>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into_iter().collect()),
            ..Self::default()
        })
    }

    fn always(answer: Answer) -> Arc<Self> {
        let fake = Self::new([]);
        *fake.otherwise.lock().unwrap() = Some(answer);
        fake
    }

    fn requests(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    fn last_request(&self) -> ChatRequest {
        self.requests
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }

    fn dropped(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }
}

/// Counts a request as dropped unless it was marked done.
struct DropWatch {
    dropped: Arc<AtomicUsize>,
    done: bool,
}

impl DropWatch {
    fn finish(&mut self) {
        self.done = true;
    }
}

impl Drop for DropWatch {
    fn drop(&mut self) {
        if !self.done {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl LlmClient for Fake {
    async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError> {
        self.requests.lock().unwrap().push(request);
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .or_else(|| self.otherwise.lock().unwrap().clone())
            .expect("a scripted answer");
        let mut watch = DropWatch {
            dropped: Arc::clone(&self.dropped),
            done: false,
        };
        match answer {
            Answer::Refuse(error) => {
                watch.finish();
                Err(error)
            }
            Answer::Stream(wait, steps) => {
                tokio::time::sleep(wait).await;
                let steps: VecDeque<Step> = steps.into();
                Ok(
                    futures::stream::unfold((steps, watch), |(mut steps, mut watch)| async move {
                        loop {
                            match steps.pop_front() {
                                None => {
                                    watch.finish();
                                    return None;
                                }
                                Some(Step::Wait(wait)) => tokio::time::sleep(wait).await,
                                Some(Step::Item(item)) => return Some((Ok(item), (steps, watch))),
                                Some(Step::Fail(error)) => {
                                    watch.finish();
                                    return Some((Err(error), (steps, watch)));
                                }
                            }
                        }
                    })
                    .boxed(),
                )
            }
        }
    }
}

fn text(t: &str) -> Step {
    Step::Item(StreamItem::Text(t.to_owned()))
}

fn finish() -> Step {
    Step::Item(StreamItem::Finish(FinishReason::Stop))
}

fn says(t: &str) -> Answer {
    Answer::Stream(Duration::ZERO, vec![text(t), finish()])
}

fn calls(calls: Vec<ToolCall>) -> Step {
    Step::Item(StreamItem::ToolCalls(calls))
}

fn cut() -> Step {
    Step::Fail(LlmError::StreamCut("connection reset".into()))
}

fn status(status: u16) -> LlmError {
    LlmError::Api {
        status: Some(status),
        message: "no".into(),
        retry_after: None,
    }
}

fn connect_error() -> LlmError {
    LlmError::Connect("connection refused".into())
}

fn ask() -> ChatRequest {
    ChatRequest::new(vec![Message::user("What's the weather in Paris?")])
}

fn two(first: &Arc<Fake>, second: &Arc<Fake>) -> crewline_llm::FallbackBuilder {
    FallbackLlm::builder()
        .provider("first", Arc::clone(first) as Arc<dyn LlmClient>)
        .provider("second", Arc::clone(second) as Arc<dyn LlmClient>)
}

/// Every item of one turn.
async fn turn(llm: &FallbackLlm) -> Result<Vec<StreamItem>, LlmError> {
    let mut stream = llm.stream_chat(ask()).await?;
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push(item?);
    }
    Ok(items)
}

fn spoken(items: &[StreamItem]) -> String {
    items
        .iter()
        .filter_map(|item| match item {
            StreamItem::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn provider(items: &[StreamItem]) -> Option<&str> {
    items.iter().rev().find_map(|item| match item {
        StreamItem::Provider(name) => Some(&**name),
        _ => None,
    })
}

#[tokio::test(start_paused = true)]
async fn connect_errors_and_5xx_fail_over_to_the_next_provider() {
    for error in [connect_error(), status(503), status(500)] {
        let first = Fake::new([Answer::Refuse(error)]);
        let second = Fake::new([says("Sunny.")]);
        let llm = two(&first, &second).build().unwrap();
        let items = turn(&llm).await.unwrap();
        assert_eq!(spoken(&items), "Sunny.");
        assert_eq!(provider(&items), Some("second"));
        let stats = llm.stats();
        assert_eq!((stats[0].failures, stats[0].failovers), (1, 1));
        assert_eq!((stats[1].requests, stats[1].answered), (1, 1));
    }
}

#[tokio::test(start_paused = true)]
async fn a_bad_request_is_not_retried_on_another_provider() {
    let first = Fake::new([Answer::Refuse(status(400))]);
    let second = Fake::new([says("never")]);
    let llm = two(&first, &second).build().unwrap();
    let error = turn(&llm).await.unwrap_err();
    assert!(
        matches!(
            error,
            LlmError::Api {
                status: Some(400),
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(second.requests(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_429_skips_its_provider_until_its_retry_after() {
    let first = Fake::new([
        Answer::Refuse(LlmError::Api {
            status: Some(429),
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(30)),
        }),
        says("first again"),
    ]);
    let second = Fake::always(says("from second"));
    let llm = two(&first, &second).build().unwrap();
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "from second");
    // Within the Retry-After, the first provider is not asked at all.
    tokio::time::advance(Duration::from_secs(29)).await;
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "from second");
    assert_eq!(first.requests(), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "first again");
    assert_eq!(first.requests(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_provider_silent_past_the_first_byte_timeout_is_dropped_and_the_next_answers() {
    // Headers come at once, then nothing for a minute.
    let first = Fake::new([Answer::Stream(
        Duration::ZERO,
        vec![Step::Wait(Duration::from_secs(60)), text("late"), finish()],
    )]);
    let second = Fake::new([says("Sunny.")]);
    let llm = two(&first, &second)
        .first_byte_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let items = turn(&llm).await.unwrap();
    assert_eq!(spoken(&items), "Sunny.");
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert_eq!(first.dropped(), 1, "the silent request is cancelled");
}

#[tokio::test(start_paused = true)]
async fn tool_calls_of_a_provider_that_breaks_before_finishing_are_never_seen() {
    let half = ToolCall::new("call_a", "transfer_money", r#"{"amount": 100"#);
    let whole = ToolCall::new("call_b", "transfer_money", r#"{"amount": 100}"#);
    // The first provider hands out its calls, then breaks before its finish reason.
    let first = Fake::new([Answer::Stream(
        Duration::ZERO,
        vec![calls(vec![half]), cut()],
    )]);
    let second = Fake::new([Answer::Stream(
        Duration::ZERO,
        vec![
            calls(vec![whole.clone()]),
            Step::Item(StreamItem::Finish(FinishReason::ToolCalls)),
        ],
    )]);
    let llm = two(&first, &second).build().unwrap();
    let items = turn(&llm).await.unwrap();
    let seen: Vec<&ToolCall> = items
        .iter()
        .filter_map(|item| match item {
            StreamItem::ToolCalls(calls) => Some(calls),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(seen, vec![&whole], "only the second provider's call runs");
    assert_eq!(provider(&items), Some("second"));
    // The second provider got the tools' request as it was.
    assert_eq!(second.last_request().messages, ask().messages);
}

#[tokio::test(start_paused = true)]
async fn a_failure_after_the_finish_reason_keeps_the_whole_answer() {
    let call = ToolCall::new("c1", "lookup", "{}");
    let first = Fake::new([Answer::Stream(
        Duration::ZERO,
        vec![
            calls(vec![call.clone()]),
            Step::Item(StreamItem::Finish(FinishReason::ToolCalls)),
            cut(),
        ],
    )]);
    let second = Fake::new([says("never")]);
    let llm = two(&first, &second).build().unwrap();
    let answer = collect(llm.stream_chat(ask()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(answer.tool_calls, vec![call]);
    assert_eq!(second.requests(), 0);
}

#[tokio::test(start_paused = true)]
async fn after_text_end_speaks_its_line_and_finishes() {
    let first = Fake::new([Answer::Stream(
        Duration::ZERO,
        vec![text("The weather in Paris "), cut()],
    )]);
    let second = Fake::new([says("never")]);
    let llm = two(&first, &second)
        .after_text(AfterText::End {
            line: "Sorry, the line dropped.".into(),
        })
        .build()
        .unwrap();
    let items = turn(&llm).await.unwrap();
    assert_eq!(
        spoken(&items),
        "The weather in Paris Sorry, the line dropped."
    );
    assert_eq!(items.last(), Some(&StreamItem::Finish(FinishReason::Stop)));
    assert_eq!(second.requests(), 0);
}

#[tokio::test(start_paused = true)]
async fn after_text_continue_goes_on_without_repeating_what_was_said() {
    let first = Fake::new([Answer::Stream(
        Duration::ZERO,
        vec![text("The weather in "), text("Paris "), cut()],
    )]);
    // The second model repeats the start despite being asked not to: it is cut.
    let second = Fake::new([Answer::Stream(
        Duration::ZERO,
        vec![text("The weather in Pa"), text("ris is sunny."), finish()],
    )]);
    let llm = two(&first, &second)
        .after_text(AfterText::Continue)
        .build()
        .unwrap();
    let items = turn(&llm).await.unwrap();
    assert_eq!(spoken(&items), "The weather in Paris is sunny.");
    assert_eq!(provider(&items), Some("second"));
    let request = second.last_request();
    let n = request.messages.len();
    assert_eq!(request.messages[n - 2].role(), Role::Assistant);
    assert_eq!(
        request.messages[n - 2].text(),
        Some("The weather in Paris ")
    );
    assert_eq!(request.messages[n - 1].role(), Role::User);
    assert!(
        request.messages[n - 1]
            .text()
            .unwrap()
            .contains("without repeating")
    );
}

#[tokio::test(start_paused = true)]
async fn a_continuation_that_does_not_repeat_is_spoken_whole() {
    let first = Fake::new([Answer::Stream(Duration::ZERO, vec![text("It is "), cut()])]);
    let second = Fake::new([says("sunny today.")]);
    let llm = two(&first, &second)
        .after_text(AfterText::Continue)
        .build()
        .unwrap();
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "It is sunny today.");
}

#[tokio::test(start_paused = true)]
async fn the_breaker_skips_a_dead_provider_then_probes_it_after_the_cool_down() {
    let first = Fake::always(Answer::Refuse(connect_error()));
    let second = Fake::always(says("backup"));
    let llm = two(&first, &second)
        .breaker(BreakerConfig {
            consecutive_failures: 3,
            cool_down: Duration::from_secs(5),
            ..BreakerConfig::default()
        })
        .build()
        .unwrap();
    for _ in 0..3 {
        assert_eq!(spoken(&turn(&llm).await.unwrap()), "backup");
    }
    assert_eq!(llm.stats()[0].breaker, BreakerState::Open);
    // Open: the dead provider is not asked, so it costs no time.
    for _ in 0..10 {
        turn(&llm).await.unwrap();
    }
    assert_eq!(first.requests(), 3);
    assert_eq!(llm.stats()[0].skipped, 10);
    // After the cool-down, one probe; it fails, so the breaker opens again.
    tokio::time::advance(Duration::from_secs(5)).await;
    turn(&llm).await.unwrap();
    turn(&llm).await.unwrap();
    assert_eq!(first.requests(), 4);
    assert_eq!(llm.stats()[0].breaker, BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_successful_probe_closes_the_breaker() {
    let first = Fake::new([
        Answer::Refuse(connect_error()),
        Answer::Refuse(connect_error()),
        says("recovered"),
        says("recovered"),
    ]);
    let second = Fake::always(says("backup"));
    let llm = two(&first, &second)
        .breaker(BreakerConfig {
            consecutive_failures: 2,
            cool_down: Duration::from_secs(5),
            ..BreakerConfig::default()
        })
        .build()
        .unwrap();
    turn(&llm).await.unwrap();
    turn(&llm).await.unwrap();
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "backup");
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "recovered");
    assert_eq!(llm.stats()[0].breaker, BreakerState::Closed);
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "recovered");
}

#[tokio::test(start_paused = true)]
async fn the_retry_budget_stops_failovers_beyond_its_share() {
    let first = Fake::always(Answer::Refuse(status(503)));
    let second = Fake::always(says("backup"));
    let llm = two(&first, &second)
        .breaker(BreakerConfig::disabled())
        .retry_budget(RetryBudget {
            ratio: 0.0,
            min_retries: 3,
            window: Duration::from_secs(10),
        })
        .build()
        .unwrap();
    let mut answered = 0;
    let mut failed = 0;
    for _ in 0..10 {
        match turn(&llm).await {
            Ok(items) if spoken(&items) == "backup" => answered += 1,
            Err(LlmError::Api {
                status: Some(503), ..
            }) => failed += 1,
            other => panic!("{:?}", other.map(|items| spoken(&items))),
        }
    }
    assert_eq!((answered, failed), (3, 7));
    assert_eq!(second.requests(), 3);
    // The window slides: failovers are allowed again.
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "backup");
}

#[tokio::test(start_paused = true)]
async fn a_hedge_starts_the_next_provider_and_drops_the_slow_one() {
    let first = Fake::new([Answer::Stream(
        Duration::from_secs(3),
        vec![text("slow"), finish()],
    )]);
    let second = Fake::new([says("fast")]);
    let llm = two(&first, &second)
        .hedge(Hedge::Fixed(Duration::from_millis(500)))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let items = turn(&llm).await.unwrap();
    assert_eq!(spoken(&items), "fast");
    assert_eq!(provider(&items), Some("second"));
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert_eq!(first.dropped(), 1, "the loser's request is cancelled");
    let stats = llm.stats();
    assert_eq!(stats[1].hedges_won, 1);
    assert_eq!(stats[0].cancelled, 1);
    assert_eq!(
        stats[0].failures, 0,
        "a slow provider that lost did not fail"
    );
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_keeps_losing_to_hedges_is_skipped_for_its_cool_down() {
    // Up but slow (3 s to its first token): each turn is heard at the hedge budget, and after
    // five such turns the slow provider is not asked at all, so turns pay no budget and no
    // hedge until a probe after the cool-down.
    let first = Fake::always(Answer::Stream(
        Duration::from_secs(3),
        vec![text("slow"), finish()],
    ));
    let second = Fake::always(says("fast"));
    let llm = two(&first, &second)
        .hedge(Hedge::Fixed(Duration::from_millis(500)))
        .breaker(BreakerConfig {
            consecutive_failures: 5,
            cool_down: Duration::from_secs(5),
            ..BreakerConfig::default()
        })
        .build()
        .unwrap();
    for _ in 0..5 {
        let started = tokio::time::Instant::now();
        assert_eq!(spoken(&turn(&llm).await.unwrap()), "fast");
        assert_eq!(started.elapsed(), Duration::from_millis(500));
    }
    assert_eq!(llm.stats()[0].breaker, BreakerState::Open);
    for _ in 0..3 {
        let started = tokio::time::Instant::now();
        assert_eq!(spoken(&turn(&llm).await.unwrap()), "fast");
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "no wait for the slow provider"
        );
    }
    assert_eq!(first.requests(), 5);
    // The probe after the cool-down is still slow: heard at the hedge budget, open again.
    tokio::time::advance(Duration::from_secs(5)).await;
    turn(&llm).await.unwrap();
    assert_eq!(first.requests(), 6);
    assert_eq!(llm.stats()[0].breaker, BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_slow_provider_whose_hedges_the_budget_refuses_is_still_skipped() {
    // No hedge is allowed (a spent budget), so a turn waits on the slow provider; each that
    // is still silent at the hedge budget counts against its breaker then. The third opens
    // it: that turn moves to the next provider at once, and the turns after it go there
    // first.
    let first = Fake::always(Answer::Stream(
        Duration::from_secs(3),
        vec![text("slow"), finish()],
    ));
    let second = Fake::always(says("fast"));
    let llm = two(&first, &second)
        .hedge(Hedge::Fixed(Duration::from_millis(500)))
        .retry_budget(RetryBudget {
            min_retries: 0,
            ratio: 0.0,
            ..RetryBudget::default()
        })
        .breaker(BreakerConfig {
            consecutive_failures: 3,
            cool_down: Duration::from_secs(30),
            ..BreakerConfig::default()
        })
        .build()
        .unwrap();
    for _ in 0..2 {
        assert_eq!(spoken(&turn(&llm).await.unwrap()), "slow");
    }
    let started = tokio::time::Instant::now();
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "fast");
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert_eq!(llm.stats()[0].breaker, BreakerState::Open);
    assert_eq!(first.dropped(), 1, "the slow request was dropped");
    let started = tokio::time::Instant::now();
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "fast");
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no wait for the slow provider"
    );
    assert_eq!(first.requests(), 3);
}

#[tokio::test(start_paused = true)]
async fn turns_waiting_on_a_provider_whose_circuit_opens_move_on_at_once() {
    // A burst of turns reaches a provider that just turned slow, and the retry budget
    // refuses every hedge: when the breaker opens (at the hedge budget, from the turns'
    // own silence), every turn still waiting moves to the next provider, instead of
    // waiting out the slow one (3 s here, up to the first-byte timeout in general).
    let first = Fake::always(Answer::Stream(
        Duration::from_secs(3),
        vec![text("slow"), finish()],
    ));
    let second = Fake::always(says("fast"));
    let llm = two(&first, &second)
        .hedge(Hedge::Fixed(Duration::from_millis(500)))
        .retry_budget(RetryBudget {
            min_retries: 0,
            ratio: 0.0,
            ..RetryBudget::default()
        })
        .breaker(BreakerConfig {
            consecutive_failures: 5,
            cool_down: Duration::from_secs(30),
            ..BreakerConfig::default()
        })
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let turns = futures::future::join_all((0..20).map(|_| async {
        let items = turn(&llm).await.unwrap();
        (spoken(&items), started.elapsed())
    }))
    .await;
    for (said, took) in turns {
        assert_eq!(said, "fast");
        assert_eq!(
            took,
            Duration::from_millis(500),
            "moved at the hedge budget"
        );
    }
    let stats = llm.stats();
    assert_eq!(stats[0].breaker, BreakerState::Open);
    assert_eq!((stats[0].failovers, stats[0].cancelled), (20, 20));
    assert_eq!(first.dropped(), 20, "every slow request was dropped");
    assert_eq!(
        second.requests(),
        20,
        "one request per turn moved: no hedges"
    );
}

#[tokio::test(start_paused = true)]
async fn when_the_first_provider_answers_first_the_hedge_is_dropped() {
    let first = Fake::new([Answer::Stream(
        Duration::from_secs(1),
        vec![text("first"), finish()],
    )]);
    let second = Fake::new([Answer::Stream(
        Duration::from_secs(5),
        vec![text("hedge"), finish()],
    )]);
    let llm = two(&first, &second)
        .hedge(Hedge::Fixed(Duration::from_millis(500)))
        .build()
        .unwrap();
    let items = turn(&llm).await.unwrap();
    assert_eq!(spoken(&items), "first");
    assert_eq!(second.requests(), 1);
    assert_eq!(second.dropped(), 1);
    let stats = llm.stats();
    assert_eq!((stats[1].hedges_lost, stats[1].cancelled), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn without_hedging_a_slow_provider_is_waited_for() {
    let first = Fake::new([Answer::Stream(
        Duration::from_secs(3),
        vec![text("slow"), finish()],
    )]);
    let second = Fake::new([says("fast")]);
    let llm = two(&first, &second).build().unwrap();
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "slow");
    assert_eq!(second.requests(), 0);
}

#[tokio::test(start_paused = true)]
async fn held_tool_calls_are_capped() {
    let many: Vec<ToolCall> = (0..200)
        .map(|i| ToolCall::new(format!("c{i}"), "lookup", "{}"))
        .collect();
    let first = Fake::new([Answer::Stream(Duration::ZERO, vec![calls(many), finish()])]);
    let second = Fake::new([says("never")]);
    let llm = two(&first, &second).build().unwrap();
    let mut stream = llm.stream_chat(ask()).await.unwrap();
    let mut error = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(StreamItem::ToolCalls(_)) => panic!("calls over the cap were handed out"),
            Ok(_) => {}
            Err(e) => error = Some(e),
        }
    }
    assert!(
        matches!(error, Some(LlmError::TooManyToolCalls { limit: 128 })),
        "{error:?}"
    );
    assert_eq!(second.requests(), 0);
}

#[tokio::test(start_paused = true)]
async fn when_every_provider_fails_the_turn_ends_with_the_last_error() {
    let first = Fake::new([Answer::Refuse(connect_error())]);
    let second = Fake::new([Answer::Refuse(status(502))]);
    let llm = two(&first, &second).build().unwrap();
    let error = turn(&llm).await.unwrap_err();
    assert!(
        matches!(
            error,
            LlmError::Api {
                status: Some(502),
                ..
            }
        ),
        "{error:?}"
    ); // A failover is counted when the next provider is asked: the last one had none to go to.
    let stats = llm.stats();
    assert_eq!((stats[0].failovers, stats[1].failovers), (1, 0));
    assert_eq!((stats[0].failures, stats[1].failures), (1, 1));
}

#[test]
fn a_fallback_client_needs_a_provider() {
    assert!(matches!(
        FallbackLlm::builder().build(),
        Err(LlmError::Config(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_p95_hedge_follows_the_providers_measured_first_delta_times() {
    // 20 answers at 100 ms teach the client the first provider's p95; then it stalls.
    let mut answers: Vec<Answer> = (0..20)
        .map(|_| Answer::Stream(Duration::from_millis(100), vec![text("quick"), finish()]))
        .collect();
    answers.push(Answer::Stream(
        Duration::from_secs(4),
        vec![text("stalled"), finish()],
    ));
    let first = Fake::new(answers);
    let second = Fake::always(says("hedged"));
    let llm = two(&first, &second)
        .hedge(Hedge::P95 {
            floor: Duration::from_millis(50),
        })
        .build()
        .unwrap();
    for _ in 0..20 {
        assert_eq!(spoken(&turn(&llm).await.unwrap()), "quick");
    }
    // Not hedged while its times were measured.
    assert_eq!(second.requests(), 0);
    let started = tokio::time::Instant::now();
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "hedged");
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(100),
        "hedged at the p95"
    );
    assert_eq!(first.dropped(), 1);
}

#[tokio::test(start_paused = true)]
async fn hedges_spend_the_retry_budget() {
    let first = Fake::always(Answer::Stream(
        Duration::from_secs(1),
        vec![text("slow"), finish()],
    ));
    let second = Fake::always(says("hedged"));
    let llm = two(&first, &second)
        .hedge(Hedge::Fixed(Duration::from_millis(200)))
        .retry_budget(RetryBudget {
            ratio: 0.0,
            min_retries: 2,
            window: Duration::from_secs(60),
        })
        // A breaker that stays closed: an opened one would move the turns without a hedge.
        .breaker(BreakerConfig::disabled())
        .build()
        .unwrap();
    let heard: Vec<String> = futures::future::join_all((0..5).map(|_| turn(&llm)))
        .await
        .into_iter()
        .map(|items| spoken(&items.unwrap()))
        .collect();
    assert_eq!(heard.iter().filter(|h| *h == "hedged").count(), 2);
    assert_eq!(second.requests(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_always_breaks_after_its_first_item_opens_its_breaker() {
    // It starts answering (reasoning) every time, then breaks: never a whole answer.
    let first = Fake::always(Answer::Stream(
        Duration::ZERO,
        vec![
            Step::Item(StreamItem::Reasoning("Let me think".into())),
            cut(),
        ],
    ));
    let second = Fake::always(says("backup"));
    let llm = two(&first, &second)
        .breaker(BreakerConfig {
            consecutive_failures: 3,
            ..BreakerConfig::default()
        })
        .build()
        .unwrap();
    for _ in 0..10 {
        assert_eq!(spoken(&turn(&llm).await.unwrap()), "backup");
    }
    assert_eq!(first.requests(), 3);
    assert_eq!(llm.stats()[0].breaker, BreakerState::Open);
}

/// Breakers shared in memory, as a Redis store shares them between replicas.
#[derive(Default)]
struct MemoryBreakers {
    open: Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
}

#[async_trait]
impl SharedBreakers for MemoryBreakers {
    async fn opened(
        &self,
        provider: &str,
        cool_down: Duration,
    ) -> Result<(), crewline_llm::fallback::ShareError> {
        let until = tokio::time::Instant::now() + cool_down;
        self.open.lock().unwrap().insert(provider.to_owned(), until);
        Ok(())
    }

    async fn open_for(
        &self,
        providers: &[String],
    ) -> Result<Vec<Option<Duration>>, crewline_llm::fallback::ShareError> {
        let now = tokio::time::Instant::now();
        let open = self.open.lock().unwrap();
        Ok(providers
            .iter()
            .map(|p| {
                open.get(p)
                    .and_then(|until| until.checked_duration_since(now))
            })
            .collect())
    }
}

#[tokio::test(start_paused = true)]
async fn a_circuit_one_replica_opened_is_skipped_by_the_others() {
    let store: Arc<dyn SharedBreakers> = Arc::new(MemoryBreakers::default());
    let dead = Fake::always(Answer::Refuse(connect_error()));
    let backup = Fake::always(says("backup"));
    let replica = |store: &Arc<dyn SharedBreakers>| {
        two(&dead, &backup)
            .breaker(BreakerConfig {
                consecutive_failures: 3,
                cool_down: Duration::from_secs(30),
                ..BreakerConfig::default()
            })
            .shared_breakers(Arc::clone(store))
            .build()
            .unwrap()
    };
    let one = replica(&store);
    let two_ = replica(&store);
    // The second replica starts following the store with its first turn (before any failure).
    turn(&two_).await.unwrap();
    for _ in 0..3 {
        turn(&one).await.unwrap();
    }
    assert_eq!(dead.requests(), 4);
    // Within a poll, the other replica has the circuit open too: no failure of its own.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    for _ in 0..5 {
        assert_eq!(spoken(&turn(&two_).await.unwrap()), "backup");
    }
    assert_eq!(dead.requests(), 4);
    assert_eq!(two_.stats()[0].breaker, BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_turn_waiting_on_a_provider_another_replica_found_dead_moves_on() {
    // Replica two waits on a provider that has gone silent (its hedge refused by a spent
    // budget, its own breaker far from opening); replica one finds the same provider dead.
    // Once the shared circuit reaches two, its waiting turn moves to the backup.
    let store: Arc<dyn SharedBreakers> = Arc::new(MemoryBreakers::default());
    let dead = Fake::always(Answer::Refuse(connect_error()));
    let silent = Fake::always(Answer::Stream(
        Duration::from_secs(30),
        vec![text("late"), finish()],
    ));
    let backup = Fake::always(says("backup"));
    let one = two(&dead, &backup)
        .breaker(BreakerConfig {
            consecutive_failures: 3,
            cool_down: Duration::from_secs(30),
            ..BreakerConfig::default()
        })
        .shared_breakers(Arc::clone(&store))
        .build()
        .unwrap();
    let two_ = two(&silent, &backup)
        .hedge(Hedge::Fixed(Duration::from_millis(200)))
        .retry_budget(RetryBudget {
            min_retries: 0,
            ratio: 0.0,
            ..RetryBudget::default()
        })
        .first_byte_timeout(Duration::from_secs(60))
        .breaker(BreakerConfig::disabled())
        .shared_breakers(Arc::clone(&store))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let waiting = tokio::spawn(async move { turn(&two_).await.map(|items| spoken(&items)) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        turn(&one).await.unwrap();
    }
    assert_eq!(waiting.await.unwrap().unwrap(), "backup");
    assert!(
        started.elapsed()
            <= Duration::from_millis(300) + crewline_llm::fallback::SHARED_BREAKERS_POLL,
        "moved within a poll of the circuit opening, not after {:?}",
        started.elapsed()
    );
    assert_eq!(silent.dropped(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_last_provider_up_is_never_shut_for_being_slow() {
    // The first provider is dead (its breaker open); the second has a slow moment (a stall
    // of the crew's own process looks the same): a burst of 20 turns all pass the hedge
    // budget on it. Shutting it would leave no provider, and the turns after the burst would
    // fail on the dead one; it stays up and every turn is answered.
    let dead = Fake::always(Answer::Refuse(connect_error()));
    let second = Fake::new(
        (0..20).map(|_| Answer::Stream(Duration::from_millis(800), vec![text("late"), finish()])),
    );
    *second.otherwise.lock().unwrap() = Some(says("on time"));
    let llm = two(&dead, &second)
        .hedge(Hedge::Fixed(Duration::from_millis(500)))
        .breaker(BreakerConfig {
            consecutive_failures: 3,
            cool_down: Duration::from_secs(30),
            ..BreakerConfig::default()
        })
        .build()
        .unwrap();
    for _ in 0..3 {
        assert_eq!(spoken(&turn(&llm).await.unwrap()), "late");
    }
    assert_eq!(llm.stats()[0].breaker, BreakerState::Open);
    let burst = futures::future::join_all((0..17).map(|_| turn(&llm))).await;
    for items in burst {
        assert_eq!(spoken(&items.unwrap()), "late");
    }
    assert_eq!(llm.stats()[1].breaker, BreakerState::Closed);
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "on time");
}

#[tokio::test(start_paused = true)]
async fn with_every_circuit_open_a_turn_still_tries_each_provider() {
    // Both circuits opened by real failures; the second has since recovered. A turn tries
    // the first anyway (the breakers no longer tell where to go), and when it fails, the
    // second: the caller is answered instead of losing the turn with a provider untried.
    let dead = Fake::always(Answer::Refuse(connect_error()));
    let second = Fake::new((0..3).map(|_| Answer::Refuse(status(503))));
    *second.otherwise.lock().unwrap() = Some(says("back"));
    let llm = two(&dead, &second)
        .breaker(BreakerConfig {
            consecutive_failures: 3,
            cool_down: Duration::from_secs(30),
            ..BreakerConfig::default()
        })
        .retry_budget(RetryBudget::unlimited())
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(turn(&llm).await.is_err());
    }
    let stats = llm.stats();
    assert_eq!(
        (stats[0].breaker, stats[1].breaker),
        (BreakerState::Open, BreakerState::Open)
    );
    assert_eq!(spoken(&turn(&llm).await.unwrap()), "back");
    assert_eq!(llm.stats()[1].breaker, BreakerState::Closed);
}
