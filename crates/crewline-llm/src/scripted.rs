//! A deterministic, offline chat model.
//!
//! [`ScriptedLlm`] streams the way a real OpenAI model does — text in word-sized pieces, tool
//! calls as deltas put together by the [`ToolCallAssembler`], a finish reason and token usage —
//! so code tested against it behaves the same against a real server.

use std::{
    collections::VecDeque,
    fmt,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{Message, ToolCall};
use futures::{StreamExt, stream};
use serde_json::Value;

use crate::{
    AnswerLimits, ChatRequest, FinishReason, LlmClient, LlmError, LlmStream, StreamItem,
    ToolCallAssembler, ToolCallDelta, ToolChoice, Usage,
};

/// What a scripted model says when told not to call tools but scripted to call some.
const NO_TOOLS_FALLBACK: &str = "I wasn't able to finish that with my tools.";

/// Why a scripted model gave no reply (the cause of an [`LlmError::Other`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// Every scripted reply has been played.
    #[error("scripted model: script exhausted after {played} replies")]
    Exhausted {
        /// How many replies were played.
        played: usize,
    },
    /// The model had no reply to give.
    #[error("scripted model: no reply")]
    NoReply,
}

/// One scripted answer.
///
/// # Examples
///
/// ```
/// use crewline_llm::{ChatRequest, LlmClient, LlmError, Reply, ScriptedLlm, StreamItem};
/// use futures::StreamExt;
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LlmError> {
/// let model = ScriptedLlm::new([
///     // Two calls in one turn, in this order.
///     Reply::tool_calls([("get_weather", json!({"city": "Paris"})), ("get_time", json!(null))]),
///     // A server that breaks off mid-answer.
///     Reply::CutAfter("It is sunny".into()),
///     // A server that refuses before the first byte.
///     Reply::Fail(LlmError::Timeout(std::time::Duration::from_secs(30))),
/// ]);
///
/// let calls = model.chat(ChatRequest::default()).await?.tool_calls;
/// assert_eq!(calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["get_weather", "get_time"]);
/// assert_eq!(calls[1].arguments, "{}");
///
/// let items: Vec<_> = model.stream_chat(ChatRequest::default()).await?.collect().await;
/// assert!(matches!(&items[0], Ok(StreamItem::Text(t)) if t == "It "));
/// assert!(matches!(items.last(), Some(Err(LlmError::StreamCut(_)))));
///
/// assert!(matches!(model.chat(ChatRequest::default()).await, Err(LlmError::Timeout(_))));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub enum Reply {
    /// Stream this text in chunks.
    Text(String),
    /// Optionally say `text`, then call these tools (name, arguments).
    ToolCalls {
        /// Text spoken before the calls (may be empty).
        text: String,
        /// The calls, as (tool name, arguments).
        calls: Vec<(String, Value)>,
    },
    /// Fail before the first byte with this error.
    Fail(LlmError),
    /// Stream this text, then break off with [`LlmError::StreamCut`].
    CutAfter(String),
}

impl Reply {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(text.into())
    }

    /// A call of one tool with these arguments (`null` is sent as `{}`).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::tool_calls([(name, arguments)])
    }

    /// Calls of several tools, in this order.
    pub fn tool_calls<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> Self {
        Self::ToolCalls {
            text: String::new(),
            calls: calls
                .into_iter()
                .map(|(name, args)| (name.into(), args))
                .collect(),
        }
    }

    /// This reply saying `text` (before its tool calls, if any); a `Fail` is unchanged.
    pub fn with_text(self, text: impl Into<String>) -> Self {
        let text = text.into();
        match self {
            Self::Text(_) => Self::Text(text),
            Self::ToolCalls { calls, .. } => Self::ToolCalls { text, calls },
            Self::CutAfter(_) => Self::CutAfter(text),
            fail @ Self::Fail(_) => fail,
        }
    }
}

type Responder = dyn Fn(&ChatRequest) -> Reply + Send + Sync;

/// Where the replies come from.
enum Source {
    /// A fixed script, played in order.
    Script,
    /// A function of each request.
    Function(Box<Responder>),
}

/// State shared by every clone of one model.
struct Shared {
    source: Source,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Replies not played yet (script models only).
    script: VecDeque<Reply>,
    /// Scripted replies handed out so far.
    played: usize,
    /// The latest requests received, oldest first (at most [`REQUEST_LOG_LIMIT`]).
    requests: VecDeque<ChatRequest>,
    /// How many requests were received in all.
    received: usize,
}

/// How many requests a [`ScriptedLlm`] remembers for [`ScriptedLlm::requests`]; older ones are
/// forgotten so a long-running demo or load test does not grow without bound.
pub const REQUEST_LOG_LIMIT: usize = 256;

/// How text is cut into [`StreamItem::Text`] pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunking {
    /// One piece per word, each with the whitespace that follows it.
    Words,
    /// Pieces of this many chars; 0 sends the whole text at once.
    Chars(usize),
}

/// A deterministic, offline model: plays a script of [`Reply`]s, or answers with a function
/// of the request.
///
/// Clones share the script and the request log; the streaming settings belong to each handle.
///
/// # Examples
///
/// A script of one tool call and the answer after it, as the tool loop would drive it:
///
/// ```
/// use crewline_core::Message;
/// use crewline_llm::{ChatRequest, LlmClient, Reply, ScriptError, ScriptedLlm};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedLlm::new([
///     Reply::tool_call("get_weather", json!({"city": "Paris"})).with_text("Let me check."),
///     Reply::text("It is sunny in Paris."),
/// ]);
///
/// let mut messages = vec![Message::user("Weather in Paris?")];
/// let first = model.chat(ChatRequest::new(messages.clone())).await?;
/// assert_eq!(first.content, "Let me check.");
/// let call = &first.tool_calls[0];
/// assert_eq!(call.name, "get_weather");
/// assert_eq!(call.parse_arguments()?, json!({"city": "Paris"}));
///
/// messages.push(Message::assistant_with_tools(first.content, first.tool_calls.clone()));
/// messages.push(Message::tool(&call.id, r#"{"sky": "sunny"}"#));
/// let second = model.chat(ChatRequest::new(messages)).await?;
/// assert_eq!(second.content, "It is sunny in Paris.");
///
/// // What the model was sent is kept for assertions.
/// let requests = model.requests();
/// assert_eq!(ScriptedLlm::last_tool_results(&requests[1]), [r#"{"sky": "sunny"}"#]);
/// assert_eq!(model.remaining(), Some(0));
///
/// // Past the end of its script the model fails, with a typed cause.
/// let error = model.chat(ChatRequest::default()).await.unwrap_err();
/// let cause = std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source())
///     .find_map(|e| e.downcast_ref::<ScriptError>());
/// assert_eq!(cause, Some(&ScriptError::Exhausted { played: 2 }));
/// # Ok(()) }
/// ```
///
/// A model that answers from the request, e.g. with the tool result it was given:
///
/// ```
/// use crewline_core::Message;
/// use crewline_llm::{ChatRequest, LlmClient, Reply, ScriptedLlm};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), crewline_llm::LlmError> {
/// let model = ScriptedLlm::from_fn(|request| match ScriptedLlm::last_tool_results(request)[..] {
///     [result] => Reply::text(format!("The tool said {result}.")),
///     _ => Reply::text("Hello!"),
/// });
/// let messages = vec![Message::user("Hi"), Message::tool("call_1", "42")];
/// assert_eq!(model.chat(ChatRequest::new(messages)).await?.content, "The tool said 42.");
/// assert_eq!(model.remaining(), None);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ScriptedLlm {
    shared: Arc<Shared>,
    chunk_delay: Duration,
    chunking: Chunking,
}

impl ScriptedLlm {
    /// A model that answers the requests with these replies, one each, in order.
    pub fn new(replies: impl IntoIterator<Item = Reply>) -> Self {
        let state = State {
            script: replies.into_iter().collect(),
            ..State::default()
        };
        Self::with_source(Source::Script, state)
    }

    /// A model that answers each request with `respond(request)`, e.g. reading tool results.
    pub fn from_fn(respond: impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static) -> Self {
        Self::with_source(Source::Function(Box::new(respond)), State::default())
    }

    fn with_source(source: Source, state: State) -> Self {
        Self {
            shared: Arc::new(Shared {
                source,
                state: Mutex::new(state),
            }),
            chunk_delay: Duration::ZERO,
            chunking: Chunking::Words,
        }
    }

    /// This model pausing `delay` before each streamed item, like a real model's pace.
    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// This model streaming text in pieces of `chars` chars (0: all at once) instead of words.
    pub fn with_chunk_chars(mut self, chars: usize) -> Self {
        self.chunking = Chunking::Chars(chars);
        self
    }

    /// The requests received so far, in order (the latest [`REQUEST_LOG_LIMIT`] of them).
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.lock().requests.iter().cloned().collect()
    }

    /// The replies left in the script; `None` for a [`from_fn`](Self::from_fn) model.
    pub fn remaining(&self) -> Option<usize> {
        match self.shared.source {
            Source::Script => Some(self.lock().script.len()),
            Source::Function(_) => None,
        }
    }

    /// The contents of the tool messages that end `request`: the results of the latest round
    /// of tool calls (empty if the last message is not a tool result).
    pub fn last_tool_results(request: &ChatRequest) -> Vec<&str> {
        let mut results: Vec<&str> = request
            .messages
            .iter()
            .rev()
            .map_while(|message| match message {
                Message::Tool { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        results.reverse();
        results
    }

    /// What the caller said last in `request`: its latest user message (`None` when it has
    /// none), what a scripted model's function usually answers.
    ///
    /// ```
    /// use crewline_llm::{ChatRequest, ScriptedLlm};
    /// use crewline_core::Message;
    ///
    /// let request = ChatRequest::new(vec![Message::user("Hi"), Message::assistant("Hello!")]);
    /// assert_eq!(ScriptedLlm::last_user_text(&request), Some("Hi"));
    /// ```
    pub fn last_user_text(request: &ChatRequest) -> Option<&str> {
        request
            .messages
            .iter()
            .rev()
            .find_map(|message| match message {
                Message::User { content } => Some(content.as_str()),
                _ => None,
            })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves the log usable; keep serving tests.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Logs `request` and picks its reply; returns the reply and the 1-based request number.
    fn next_reply(&self, request: &ChatRequest) -> (Result<Reply, LlmError>, usize) {
        let (scripted, turn) = {
            let mut state = self.lock();
            if state.requests.len() == REQUEST_LOG_LIMIT {
                state.requests.pop_front();
            }
            state.requests.push_back(request.clone());
            state.received += 1;
            let turn = state.received;
            let scripted = match self.shared.source {
                Source::Script => match state.script.pop_front() {
                    Some(reply) => {
                        state.played += 1;
                        Some(Ok(reply))
                    }
                    None => Some(Err(LlmError::other(ScriptError::Exhausted {
                        played: state.played,
                    }))),
                },
                Source::Function(_) => None,
            };
            (scripted, turn)
        };
        // The function runs outside the lock so it may itself look at `requests()`.
        let reply = match (scripted, &self.shared.source) {
            (Some(reply), _) => reply,
            (None, Source::Function(respond)) => Ok(respond(request)),
            (None, Source::Script) => Err(LlmError::other(ScriptError::NoReply)),
        };
        (reply, turn)
    }

    /// The items a real model would stream for `reply`.
    fn items_for(
        &self,
        reply: Reply,
        request: &ChatRequest,
        turn: usize,
    ) -> Vec<Result<StreamItem, LlmError>> {
        let mut items = Vec::new();
        let (text, calls, cut) = match reply {
            Reply::Text(text) => (text, Vec::new(), false),
            Reply::CutAfter(text) => (text, Vec::new(), true),
            Reply::ToolCalls { text, calls } => {
                if request.tool_choice == Some(ToolChoice::None) && !calls.is_empty() {
                    // Told not to call tools, a real model answers in words.
                    let text = if text.is_empty() {
                        NO_TOOLS_FALLBACK.to_owned()
                    } else {
                        text
                    };
                    (text, Vec::new(), false)
                } else {
                    (text, calls, false)
                }
            }
            // Handled before streaming starts; kept total so no input can panic.
            Reply::Fail(error) => return vec![Err(error)],
        };
        items.extend(
            chunk_text(&text, self.chunking)
                .into_iter()
                .map(|piece| Ok(StreamItem::Text(piece))),
        );
        if cut {
            items.push(Err(LlmError::StreamCut(
                format!("scripted cut after {} chars", text.chars().count()).into(),
            )));
            return items;
        }
        let calls = assemble_calls(&calls, turn);
        let mut completion_chars = text.chars().count();
        if calls.is_empty() {
            items.push(Ok(StreamItem::Finish(FinishReason::Stop)));
        } else {
            completion_chars += calls.iter().map(call_chars).sum::<usize>();
            items.push(Ok(StreamItem::ToolCalls(calls)));
            items.push(Ok(StreamItem::Finish(FinishReason::ToolCalls)));
        }
        items.push(Ok(StreamItem::Usage(usage(request, completion_chars))));
        items
    }
}

#[async_trait]
impl LlmClient for ScriptedLlm {
    fn model_id(&self) -> Option<&str> {
        // The label its usage is counted under, beside real models' names.
        Some("scripted")
    }

    async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError> {
        let (reply, turn) = self.next_reply(&request);
        let reply = match reply? {
            Reply::Fail(error) => return Err(error),
            reply => reply,
        };
        let items = self.items_for(reply, &request, turn);
        let delay = self.chunk_delay;
        // Everything is computed up front and the stream only owns the items (and a sleep),
        // so dropping it stops it at once: there is no task to outlive it.
        if delay.is_zero() {
            Ok(stream::iter(items).boxed())
        } else {
            Ok(stream::iter(items)
                .then(move |item| async move {
                    tokio::time::sleep(delay).await;
                    item
                })
                .boxed())
        }
    }
}

impl fmt::Debug for ScriptedLlm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        let mut debug = f.debug_struct("ScriptedLlm");
        match self.shared.source {
            Source::Script => debug.field("remaining", &state.script.len()),
            Source::Function(_) => debug.field("responder", &"<fn>"),
        };
        debug
            .field("requests", &state.received)
            .field("chunk_delay", &self.chunk_delay)
            .field("chunking", &self.chunking)
            .finish()
    }
}

/// `text` cut into the pieces a model would stream; they concatenate to `text` exactly.
fn chunk_text(text: &str, chunking: Chunking) -> Vec<String> {
    match chunking {
        Chunking::Chars(0) if !text.is_empty() => vec![text.to_owned()],
        Chunking::Chars(0) => Vec::new(),
        Chunking::Chars(size) => {
            let chars: Vec<char> = text.chars().collect();
            chars.chunks(size).map(|c| c.iter().collect()).collect()
        }
        Chunking::Words => {
            let mut pieces = Vec::new();
            let mut current = String::new();
            let mut after_space = false;
            let mut has_word = false;
            for c in text.chars() {
                // A new piece starts at each word that follows whitespace, so every piece is a
                // word plus the whitespace after it (leading whitespace joins the first word).
                let space = c.is_whitespace();
                if after_space && !space && has_word {
                    pieces.push(std::mem::take(&mut current));
                    has_word = false;
                }
                after_space = space;
                has_word |= !space;
                current.push(c);
            }
            if !current.is_empty() {
                pieces.push(current);
            }
            pieces
        }
    }
}

/// The calls as OpenAI streams them, put back together by the [`ToolCallAssembler`].
///
/// Each call opens with a delta carrying index, id, name and empty arguments; its arguments
/// follow in fragments. The first two calls open in the same chunk and their fragments
/// alternate, so the scripted model exercises the same assembly paths as a real server.
fn assemble_calls(calls: &[(String, Value)], turn: usize) -> Vec<ToolCall> {
    let mut heads = Vec::with_capacity(calls.len());
    let mut fragments = Vec::with_capacity(calls.len());
    for (k, (name, arguments)) in calls.iter().enumerate() {
        let index = u32::try_from(k).unwrap_or(u32::MAX);
        heads.push(
            ToolCallDelta::at(index)
                .id(format!("call_{turn}_{k}"))
                .name(name.clone())
                .arguments(""),
        );
        let json = match arguments {
            Value::Null => "{}".to_owned(),
            other => other.to_string(),
        };
        fragments.push(
            split_fragments(&json)
                .into_iter()
                .map(|piece| ToolCallDelta::at(index).arguments(piece))
                .collect::<Vec<_>>(),
        );
    }
    let mut chunks: Vec<Vec<ToolCallDelta>> = Vec::new();
    let mut heads = heads.into_iter();
    let mut fragments = fragments.into_iter();
    // The first two calls: heads in one chunk, then their fragments alternating.
    chunks.push(heads.by_ref().take(2).collect());
    let first: Vec<_> = fragments.by_ref().take(2).collect();
    let longest = first.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..longest {
        for call in &first {
            if let Some(delta) = call.get(i) {
                chunks.push(vec![delta.clone()]);
            }
        }
    }
    // Any further calls, one after the other.
    for (head, rest) in heads.zip(fragments) {
        chunks.push(vec![head]);
        chunks.extend(rest.into_iter().map(|delta| vec![delta]));
    }
    // The script is the test author's, not a peer's: no limit, so a script can hand the
    // tool loop an answer past any (the loop holds its own limits).
    let mut assembler = ToolCallAssembler::with_limits(AnswerLimits::unbounded());
    for chunk in chunks {
        if let Err(error) = assembler.push_all(chunk) {
            tracing::warn!(error = %crewline_core::ErrorChain(&error), "a scripted answer could not be assembled");
        }
    }
    assembler.finish()
}

/// Arguments JSON in about three fragments, cut on char boundaries.
fn split_fragments(json: &str) -> Vec<String> {
    let chars: Vec<char> = json.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn call_chars(call: &ToolCall) -> usize {
    call.name.chars().count() + call.arguments.chars().count()
}

/// Deterministic usage: about one token per four chars, as a rough English average.
fn usage(request: &ChatRequest, completion_chars: usize) -> Usage {
    let prompt_chars: usize = request
        .messages
        .iter()
        .map(|m| {
            m.text().map_or(0, |t| t.chars().count())
                + m.tool_calls().iter().map(call_chars).sum::<usize>()
        })
        .sum();
    let tokens = |chars: usize| u32::try_from(chars.div_ceil(4)).unwrap_or(u32::MAX);
    let prompt_tokens = tokens(prompt_chars);
    let completion_tokens = tokens(completion_chars);
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens.saturating_add(completion_tokens),
        reasoning_tokens: 0,
        cached_tokens: 0,
    }
}
