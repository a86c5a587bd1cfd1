use super::*;
use crate::openai::builder::test_builder as builder;
use crate::transport::deadline::FINISH_GRACE;
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

/// A reader over an answer whose SSE body comes in `parts`, each after `delay` (counted
/// from when the reader asks for it), then stalls for ever.
fn reader(
    parts: Vec<&'static str>,
    delay: Duration,
) -> Reader<impl Stream<Item = Result<bytes::Bytes, http::HttpError>> + Unpin> {
    let body = futures::stream::iter(parts)
        .then(move |part| async move {
            tokio::time::sleep(delay).await;
            Ok::<_, http::HttpError>(bytes::Bytes::from_static(part.as_bytes()))
        })
        .chain(futures::stream::pending());
    reader_over(Box::pin(body))
}

/// A reader over `body`, as `stream_chat` builds it.
fn reader_over<B>(body: B) -> Reader<B> {
    Reader::new(body, &test_client(), Instant::now(), tracing::Span::none())
}

/// A client with the tests' short time limits.
fn test_client() -> OpenAiClient {
    builder()
        .first_byte_timeout(FIRST_BYTE)
        .idle_timeout(IDLE)
        .build()
        .expect("client")
}

const FIRST_BYTE: Duration = Duration::from_secs(3);
const IDLE: Duration = Duration::from_secs(5);
const TEXT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n";
const STOP: &str = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";

#[tokio::test(start_paused = true)]
async fn done_ends_the_answer_and_keepalives_and_comments_are_skipped() {
    let mut reader = reader(
        vec![
            ": ping\n\n",
            "event: keepalive\ndata: {\"choices\":[{\"delta\":{\"content\":\"no\"}}]}\n\n",
            TEXT,
            STOP,
            "data: [DONE]\n\n",
            TEXT,
        ],
        Duration::ZERO,
    );
    let mut items = Vec::new();
    while let Some(item) = reader.next().await {
        items.push(item.expect("no error"));
    }
    assert_eq!(
        items,
        vec![
            StreamItem::Text("Hi".into()),
            StreamItem::Finish(crate::FinishReason::Stop)
        ]
    );
    assert!(reader.body.is_none(), "the body is let go at [DONE]");
}

/// A body that records when it has been read to its end and when it is dropped.
struct Watched<S> {
    inner: S,
    ended: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
}

impl<S: Stream + Unpin> Stream for Watched<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let polled = self.inner.poll_next_unpin(cx);
        if let Poll::Ready(None) = polled {
            self.ended.store(true, Ordering::SeqCst);
        }
        polled
    }
}

impl<S> Drop for Watched<S> {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// A reader over `[TEXT, STOP, [DONE]]`, then `rest`, with the body's end and drop watched.
fn watched_answer(
    rest: impl Stream<Item = Result<bytes::Bytes, http::HttpError>> + Send + 'static,
) -> (
    Reader<impl Stream<Item = Result<bytes::Bytes, http::HttpError>> + Unpin + Send + 'static>,
    Arc<AtomicBool>,
    Arc<AtomicBool>,
) {
    let ended = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let answer = futures::stream::iter([TEXT, STOP, "data: [DONE]\n\n"])
        .map(|part| Ok::<_, http::HttpError>(bytes::Bytes::from_static(part.as_bytes())))
        .chain(rest);
    let body = Watched {
        inner: Box::pin(answer),
        ended: ended.clone(),
        dropped: dropped.clone(),
    };
    (reader_over(body), ended, dropped)
}

/// The answer's items, checking that none waits for the body after `[DONE]`.
async fn items_at_once(
    answer: &mut (impl Stream<Item = Result<StreamItem, LlmError>> + Unpin),
) -> Vec<StreamItem> {
    let started = Instant::now();
    let mut items = Vec::new();
    while let Some(item) = answer.next().await {
        items.push(item.expect("no error"));
    }
    assert_eq!(started.elapsed(), Duration::ZERO, "the answer ends at once");
    items
}

#[tokio::test(start_paused = true)]
async fn after_done_the_body_is_read_to_its_end_without_holding_up_the_answer() {
    let expected = vec![
        StreamItem::Text("Hi".into()),
        StreamItem::Finish(crate::FinishReason::Stop),
    ];

    // The body's end is already there: read at once, so the connection can be reused.
    let (mut answer, ended, dropped) = watched_answer(futures::stream::empty());
    assert_eq!(items_at_once(&mut answer).await, expected);
    assert!(ended.load(Ordering::SeqCst) && dropped.load(Ordering::SeqCst));

    // Its end comes 50 ms later, after more bytes: the answer still ends at once, and the
    // rest is read in the background.
    let late = futures::stream::once(async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(bytes::Bytes::from_static(b"data: {\"late\": true}\n\n"))
    });
    let (mut answer, ended, _) = watched_answer(late);
    assert_eq!(items_at_once(&mut answer).await, expected);
    drop(answer);
    assert!(!ended.load(Ordering::SeqCst));
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(
        ended.load(Ordering::SeqCst),
        "read to its end after the answer"
    );

    // It never ends: let go (the connection closed) after the grace, without an error.
    let (mut answer, ended, dropped) = watched_answer(futures::stream::pending());
    assert_eq!(items_at_once(&mut answer).await, expected);
    drop(answer);
    tokio::time::sleep(DRAIN_GRACE - Duration::from_millis(10)).await;
    assert!(!dropped.load(Ordering::SeqCst));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(dropped.load(Ordering::SeqCst) && !ended.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn done_before_a_finish_reason_is_a_cut() {
    let mut reader = reader(vec![TEXT, "data: [DONE]\n\n"], Duration::ZERO);
    assert_eq!(
        reader.next().await.expect("item").expect("text"),
        StreamItem::Text("Hi".into())
    );
    let cut = reader.next().await.expect("item");
    assert!(matches!(cut, Err(LlmError::StreamCut(_))), "{cut:?}");
    assert!(reader.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn time_the_caller_spends_between_items_is_not_the_servers() {
    // Each event takes 60 % of the idle limit once asked for; the caller dawdles for three
    // idle limits between items. Only the server's time counts.
    let mut reader = reader(vec![TEXT, TEXT, STOP, "data: [DONE]\n\n"], IDLE * 3 / 5);
    let mut items = Vec::new();
    while let Some(item) = reader.next().await {
        items.push(item.expect("no timeout"));
        tokio::time::sleep(IDLE * 3).await;
    }
    assert_eq!(items.len(), 3, "{items:?}");
}

#[tokio::test(start_paused = true)]
async fn a_silent_server_times_out_first_byte_then_idle() {
    let mut silent = reader(vec![], Duration::ZERO);
    let timeout = silent.next().await.expect("item");
    assert!(
        matches!(timeout, Err(LlmError::Timeout(d)) if d == FIRST_BYTE),
        "{timeout:?}"
    );
    assert!(silent.next().await.is_none());
    assert!(silent.body.is_none(), "the body is let go on a timeout");

    let mut stalled = reader(vec![TEXT], Duration::ZERO);
    assert!(stalled.next().await.expect("item").is_ok());
    let timeout = stalled.next().await.expect("item");
    assert!(
        matches!(timeout, Err(LlmError::Timeout(d)) if d == IDLE),
        "{timeout:?}"
    );
    assert!(stalled.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_stream_silent_mid_answer_ends_within_seconds_by_default() {
    // The client's own defaults: a live call's.
    let client = builder().build().expect("client");
    let mut reader = client_reader_with_gaps(&client, vec![(Duration::ZERO, TEXT)]);
    assert!(reader.next().await.expect("item").is_ok());
    let started = Instant::now();
    let timeout = reader.next().await.expect("item");
    assert!(matches!(timeout, Err(LlmError::Timeout(_))), "{timeout:?}");
    assert!(
        started.elapsed() <= Duration::from_secs(10),
        "silence lasted {:?} before the turn ended",
        started.elapsed()
    );
    assert!(reader.next().await.is_none());
}

/// The chunks of a model answer that calls `lookup` with `{"q":1}` and finishes.
const TOOL_CALL: [&str; 3] = [
    "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"function\":{\"name\":\"lookup\",\"arguments\":\"{\\\"q\\\"\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n",
    "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
];

#[tokio::test(start_paused = true)]
async fn a_finished_answer_on_a_connection_left_open_ends_cleanly_after_a_grace() {
    // Tool calls and their finish reason, then nothing: no usage, no [DONE], no end.
    let mut reader = reader(TOOL_CALL.to_vec(), Duration::ZERO);
    let mut items = Vec::new();
    let mut finished_at = None;
    while let Some(item) = reader.next().await {
        let item = item.expect("no error");
        if matches!(item, StreamItem::Finish(_)) {
            finished_at = Some(Instant::now());
        }
        items.push(item);
    }
    let waited = finished_at.expect("a finish").elapsed();
    assert_eq!(
        items,
        vec![
            StreamItem::ToolCalls(vec![crewline_core::ToolCall::new(
                "call_1",
                "lookup",
                r#"{"q":1}"#
            )]),
            StreamItem::Finish(crate::FinishReason::ToolCalls),
        ]
    );
    assert!(waited <= FINISH_GRACE && waited < IDLE, "{waited:?}");
    assert!(reader.body.is_none(), "the connection is let go");

    // Usage that comes within the grace is still read.
    let usage =
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n";
    let mut reader = reader_with_gaps(vec![
        (Duration::ZERO, TEXT),
        (Duration::ZERO, STOP),
        (FINISH_GRACE / 2, usage),
    ]);
    let mut items = Vec::new();
    while let Some(item) = reader.next().await {
        items.push(item.expect("no error"));
    }
    assert_eq!(items.len(), 3, "{items:?}");
    assert!(matches!(items[2], StreamItem::Usage(_)), "{items:?}");
}

/// A reader over an answer whose parts each come after their own delay, then stalls.
fn reader_with_gaps(
    parts: Vec<(Duration, &'static str)>,
) -> Reader<impl Stream<Item = Result<bytes::Bytes, http::HttpError>> + Unpin> {
    client_reader_with_gaps(&test_client(), parts)
}

/// The same, for `client`.
fn client_reader_with_gaps(
    client: &OpenAiClient,
    parts: Vec<(Duration, &'static str)>,
) -> Reader<impl Stream<Item = Result<bytes::Bytes, http::HttpError>> + Unpin + use<>> {
    let body = futures::stream::iter(parts)
        .then(|(delay, part)| async move {
            tokio::time::sleep(delay).await;
            Ok::<_, http::HttpError>(bytes::Bytes::from_static(part.as_bytes()))
        })
        .chain(futures::stream::pending());
    Reader::new(
        Box::pin(body),
        client,
        Instant::now(),
        tracing::Span::none(),
    )
}

const EMPTY_DELTA: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{}}]}\n\n";
const ROLE: &str =
    "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";

#[tokio::test(start_paused = true)]
async fn empty_deltas_do_not_keep_a_silent_stream_alive() {
    // Text, then only empty deltas, each within the idle limit of the last: the caller
    // hears nothing, so the idle limit counts from the text.
    let mut parts = vec![(Duration::ZERO, TEXT)];
    parts.extend([(IDLE / 2, EMPTY_DELTA), (IDLE / 2, ROLE)].repeat(10));
    let mut reader = reader_with_gaps(parts);
    assert!(reader.next().await.expect("item").is_ok());
    let started = Instant::now();
    let timeout = reader.next().await.expect("item");
    assert!(
        matches!(timeout, Err(LlmError::Timeout(d)) if d == IDLE),
        "{timeout:?}"
    );
    assert_eq!(started.elapsed(), IDLE);
}

#[tokio::test(start_paused = true)]
async fn a_role_chunk_before_the_model_thinks_leaves_it_the_first_byte_limit() {
    // A reasoning model: the role at once, its first token 20 s later. The first-byte
    // limit, not the idle one, covers its thinking.
    let client = builder()
        .first_byte_timeout(Duration::from_secs(30))
        .idle_timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let mut reader = client_reader_with_gaps(
        &client,
        vec![
            (Duration::ZERO, ROLE),
            (Duration::from_secs(20), TEXT),
            (Duration::ZERO, STOP),
            (Duration::ZERO, "data: [DONE]\n\n"),
        ],
    );
    let mut items = Vec::new();
    while let Some(item) = reader.next().await {
        items.push(item.expect("no timeout"));
    }
    assert_eq!(items.len(), 2, "{items:?}");

    // It still has to start within that limit.
    let mut reader = client_reader_with_gaps(
        &client,
        vec![(Duration::ZERO, ROLE), (Duration::from_secs(40), TEXT)],
    );
    let timeout = reader.next().await.expect("item");
    assert!(
        matches!(timeout, Err(LlmError::Timeout(d)) if d == Duration::from_secs(30)),
        "{timeout:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_oversized_line_or_event_ends_the_answer_with_too_large() {
    let client = builder().max_event_bytes(1024).build().expect("client");
    let long = format!("data: {}", "x".repeat(2000));
    let parts = vec![TEXT.to_owned(), long.clone()];
    let body = futures::stream::iter(parts)
        .map(|part| Ok::<_, http::HttpError>(bytes::Bytes::from(part)))
        .chain(futures::stream::pending());
    let mut reader = Reader::new(
        Box::pin(body),
        &client,
        Instant::now(),
        tracing::Span::none(),
    );
    assert!(reader.next().await.expect("item").is_ok());
    let error = reader.next().await.expect("item").expect_err("too large");
    assert!(
        matches!(error, LlmError::TooLarge { limit: 1024, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("1024-byte limit"), "{error}");
    assert!(reader.next().await.is_none());
    assert!(reader.body.is_none(), "the connection is let go");
}

#[tokio::test(start_paused = true)]
async fn a_blank_event_does_not_count_as_the_first_one() {
    // The blank event arrives in time, but no chunk does: the first-byte limit still holds.
    let mut reader = reader(vec!["data:  \n\n"], Duration::from_secs(1));
    let timeout = reader.next().await.expect("item");
    assert!(
        matches!(timeout, Err(LlmError::Timeout(d)) if d == FIRST_BYTE),
        "{timeout:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn garbage_events_end_the_answer_without_the_key() {
    let mut reader = reader(
        vec![TEXT, "data: <html>sk-secret-123456</html>\n\n", TEXT],
        Duration::ZERO,
    );
    assert!(reader.next().await.expect("item").is_ok());
    let error = reader.next().await.expect("item").expect_err("garbage");
    assert!(matches!(error, LlmError::InvalidResponse(_)), "{error:?}");
    assert!(!error.to_string().contains("sk-secret"), "{error}");
    assert!(reader.next().await.is_none());
}
