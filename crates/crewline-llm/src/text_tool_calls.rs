//! Tool calls a model writes as text in its answer's content, read as tool calls.
//!
//! Some local servers (Ollama, llama.cpp, vLLM without a tool parser, LM Studio) pass a
//! model's tool-call tokens through as plain `content`. Spoken, that is the caller hearing
//! JSON. [`TextToolCalls`] wraps any [`LlmClient`] and reads such answers back into
//! [`StreamItem::ToolCalls`], in the formats asked for ([`TextToolCallFormat`]):
//!
//! - **Hermes / Qwen**: `<tool_call>{"name": .., "arguments": {..}}</tool_call>`, one or more,
//!   after any speech (the speech before a call is spoken);
//! - **Mistral**: `[TOOL_CALLS][{"name": .., "arguments": {..}}, ..]` as the whole answer;
//! - **bare JSON** (Llama 3.x): `{"name": .., "arguments" | "parameters": {..}}`, or an array
//!   of them, as the whole answer.
//!
//! Text is held back only while the start of the answer (or, for Hermes, the text from a `<`)
//! could still be a call; an answer that starts otherwise passes through at once, item for
//! item. Held text that turns out not to be a call is released unchanged; a call whose body
//! is not a call object is released as text, with a warning. Calls get fresh ids
//! (`call_text_0`, `call_text_1`, ..) and their arguments as JSON text; the answer's finish
//! reason becomes `tool_calls`.

use std::{
    collections::VecDeque,
    pin::Pin,
    task::{Context, Poll},
};

use async_trait::async_trait;
use crewline_core::ToolCall;
use futures::{Stream, StreamExt};
use serde_json::Value;

use crate::{ChatRequest, FinishReason, LlmClient, LlmError, LlmStream, StreamItem};

/// Hermes' (and Qwen's) opening tag of one call.
const HERMES_OPEN: &str = "<tool_call>";
/// Hermes' closing tag of one call.
const HERMES_CLOSE: &str = "</tool_call>";
/// Mistral's marker before its array of calls.
const MISTRAL_MARKER: &str = "[TOOL_CALLS]";
/// The most text held as a possible call. A spoken tool call is a few hundred bytes; past this
/// the text is released as speech, so a model that streams a long `{...` answer (or never
/// closes its `<tool_call>`) cannot make the node hold an unbounded buffer.
const MAX_HELD_BYTES: usize = 64 * 1024;
/// The most calls read from one answer's text (the default
/// [`AnswerLimits::max_tool_calls`](crate::AnswerLimits::max_tool_calls)): each `<tool_call>`
/// is held to [`MAX_HELD_BYTES`], but an answer may hold any number of them. Past it the
/// calls read are let go and the answer ends with [`LlmError::TooManyToolCalls`].
const MAX_TEXT_CALLS: usize = crate::AnswerLimits::DEFAULT_MAX_TOOL_CALLS;

/// A way a model writes tool calls as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TextToolCallFormat {
    /// `<tool_call>{"name": .., "arguments": {..}}</tool_call>` (Hermes, Qwen), one or more,
    /// after any speech.
    Hermes,
    /// `[TOOL_CALLS][{"name": .., "arguments": {..}}]` (Mistral) as the whole answer.
    Mistral,
    /// A bare `{"name": .., "arguments" | "parameters": ..}` object or an array of them
    /// (Llama 3.x) as the whole answer.
    BareJson,
}

impl TextToolCallFormat {
    /// Every format.
    pub const ALL: [Self; 3] = [Self::Hermes, Self::Mistral, Self::BareJson];
}

/// The formats one detector reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Formats {
    hermes: bool,
    mistral: bool,
    bare_json: bool,
}

impl Formats {
    fn of(formats: impl IntoIterator<Item = TextToolCallFormat>) -> Self {
        let mut set = Self::default();
        for format in formats {
            match format {
                TextToolCallFormat::Hermes => set.hermes = true,
                TextToolCallFormat::Mistral => set.mistral = true,
                TextToolCallFormat::BareJson => set.bare_json = true,
            }
        }
        set
    }

    fn is_empty(self) -> bool {
        self == Self::default()
    }
}

/// A model whose tool calls written as text are read as tool calls (see the module docs).
///
/// `chat` streams the answer too (the trait's default), so a whole answer is read alike.
///
/// ```
/// use crewline_llm::{
///     ChatRequest, LlmClient, Reply, ScriptedLlm, TextToolCallFormat, TextToolCalls,
/// };
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), crewline_llm::LlmError> {
/// let local = ScriptedLlm::new([Reply::text(
///     r#"<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>"#,
/// )]);
/// let model = TextToolCalls::new(local, [TextToolCallFormat::Hermes]);
/// let answer = model.chat(ChatRequest::new(vec![crewline_core::Message::user("Paris?")])).await?;
/// assert_eq!(answer.content, "");
/// assert_eq!(answer.tool_calls[0].name, "get_weather");
/// assert_eq!(answer.tool_calls[0].arguments, r#"{"city":"Paris"}"#);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TextToolCalls<C> {
    inner: C,
    formats: Formats,
}

impl<C: LlmClient> TextToolCalls<C> {
    /// `inner`, with tool calls it writes as text in any of `formats` read as tool calls.
    pub fn new(inner: C, formats: impl IntoIterator<Item = TextToolCallFormat>) -> Self {
        Self {
            inner,
            formats: Formats::of(formats),
        }
    }

    /// The wrapped model.
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

#[async_trait]
impl<C: LlmClient> LlmClient for TextToolCalls<C> {
    fn model_id(&self) -> Option<&str> {
        self.inner.model_id()
    }

    fn provider_model_id(&self, provider: &str) -> Option<&str> {
        self.inner.provider_model_id(provider)
    }

    async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError> {
        let stream = self.inner.stream_chat(request).await?;
        if self.formats.is_empty() {
            return Ok(stream);
        }
        Ok(Box::pin(Detecting {
            inner: stream,
            detector: Detector::new(self.formats),
            out: VecDeque::new(),
            done: false,
        }))
    }
}

/// An answer read through a [`Detector`]. Dropping it drops the inner stream (cancellation).
struct Detecting {
    inner: LlmStream,
    detector: Detector,
    /// Items ready to hand out, in order.
    out: VecDeque<Result<StreamItem, LlmError>>,
    /// Whether the inner stream has ended.
    done: bool,
}

impl Stream for Detecting {
    type Item = Result<StreamItem, LlmError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.out.pop_front() {
                return Poll::Ready(Some(item));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.inner.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(StreamItem::Text(text)))) => {
                    this.detector.push(text, &mut this.out);
                }
                Poll::Ready(Some(Ok(StreamItem::Finish(reason)))) => {
                    this.detector.finish(Some(reason), &mut this.out);
                }
                // Reasoning, usage and the server's own tool calls are never held.
                Poll::Ready(Some(Ok(item))) => return Poll::Ready(Some(Ok(item))),
                Poll::Ready(Some(Err(error))) => {
                    this.detector.fail(&mut this.out);
                    this.out.push_back(Err(error));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    this.detector.finish(None, &mut this.out);
                }
            }
        }
    }
}

/// Where in the answer the detector is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: the answer may be a call in any format.
    Start,
    /// Speech; with Hermes on, a `<tool_call>` may still come (`held` is a partial tag).
    Speech,
    /// Inside `<tool_call>`: `held` is the call's body so far.
    HermesBody,
    /// After a leading `[TOOL_CALLS]`: `held` is the whole answer, marker included.
    Mistral,
    /// After a leading `{` or `[`: `held` is the whole answer.
    Json,
    /// The answer is over (finished, or failed); text passes through.
    Done,
}

/// Reads one answer's text, holding back what could be a tool call.
#[derive(Debug)]
struct Detector {
    formats: Formats,
    state: State,
    /// Text held back (what it is depends on `state`).
    held: String,
    /// Whether whitespace right after a call is to be dropped (it is no speech).
    after_call: bool,
    calls: Vec<ToolCall>,
    /// Whether the answer held more than [`MAX_TEXT_CALLS`] calls (they were let go).
    too_many: bool,
}

impl Detector {
    fn new(formats: Formats) -> Self {
        Self {
            formats,
            state: State::Start,
            held: String::new(),
            after_call: false,
            calls: Vec::new(),
            too_many: false,
        }
    }

    /// Keeps `call`, unless the answer is past [`MAX_TEXT_CALLS`]: then every call is let go.
    fn keep(&mut self, call: ToolCall) {
        if self.too_many {
            return;
        }
        if self.calls.len() >= MAX_TEXT_CALLS {
            self.too_many = true;
            self.calls = Vec::new();
            return;
        }
        self.calls.push(call);
    }

    /// Reads a piece of the answer's text, releasing into `out` what is surely speech.
    fn push(&mut self, text: String, out: &mut VecDeque<Result<StreamItem, LlmError>>) {
        match self.state {
            State::Done => out.push_back(Ok(StreamItem::Text(text))),
            // Speech with nothing held and no `<` in it: handed on as it came.
            State::Speech
                if self.held.is_empty()
                    && !self.after_call
                    && !(self.formats.hermes && text.contains('<')) =>
            {
                out.push_back(Ok(StreamItem::Text(text)));
            }
            State::Start if self.held.is_empty() && !self.could_start_a_call(&text) => {
                self.state = State::Speech;
                self.push(text, out);
            }
            _ => {
                self.held.push_str(&text);
                self.advance(out);
                self.bound_held(out);
            }
        }
    }

    /// Releases held text, unchanged, once it is longer than any call ([`MAX_HELD_BYTES`]);
    /// calls already read still go out at the end.
    fn bound_held(&mut self, out: &mut VecDeque<Result<StreamItem, LlmError>>) {
        if self.held.len() <= MAX_HELD_BYTES
            || !matches!(self.state, State::HermesBody | State::Mistral | State::Json)
        {
            return;
        }
        tracing::warn!(
            held_bytes = self.held.len(),
            "text held as a possible tool call is longer than any call; speaking it as text"
        );
        let held = std::mem::take(&mut self.held);
        let text = if self.state == State::HermesBody {
            format!("{HERMES_OPEN}{held}")
        } else {
            held
        };
        release(text, out);
        self.after_call = false;
        self.state = State::Speech;
    }

    /// Whether `text`, at the start of the answer, could begin a call in an enabled format.
    fn could_start_a_call(&self, text: &str) -> bool {
        match text.trim_start().as_bytes().first() {
            // Whitespace alone says nothing yet.
            None => true,
            Some(b'<') => self.formats.hermes,
            Some(b'[') => self.formats.mistral || self.formats.bare_json,
            Some(b'{') => self.formats.bare_json,
            Some(_) => false,
        }
    }

    /// Moves on through `held` as far as it decides, releasing speech and taking calls.
    fn advance(&mut self, out: &mut VecDeque<Result<StreamItem, LlmError>>) {
        loop {
            match self.state {
                State::Start => {
                    let rest = self.held.trim_start();
                    if rest.is_empty() {
                        return;
                    }
                    if self.formats.hermes && rest.starts_with(HERMES_OPEN) {
                        // Whitespace before the first call is no speech.
                        self.held = rest[HERMES_OPEN.len()..].to_owned();
                        self.state = State::HermesBody;
                    } else if self.formats.hermes && HERMES_OPEN.starts_with(rest) {
                        return;
                    } else if self.formats.mistral
                        && (rest.starts_with(MISTRAL_MARKER) || MISTRAL_MARKER.starts_with(rest))
                    {
                        if !rest.starts_with(MISTRAL_MARKER) {
                            return;
                        }
                        self.state = State::Mistral;
                    } else if self.formats.bare_json && rest.starts_with(['{', '[']) {
                        self.state = State::Json;
                    } else {
                        self.state = State::Speech;
                    }
                }
                State::Speech => {
                    if self.after_call {
                        let rest = self.held.trim_start();
                        if rest.is_empty() {
                            self.held.clear();
                            return;
                        }
                        self.held = rest.to_owned();
                        self.after_call = false;
                    }
                    if !self.formats.hermes {
                        release(std::mem::take(&mut self.held), out);
                        return;
                    }
                    if !self.take_speech_before_tag(out) {
                        return;
                    }
                    self.state = State::HermesBody;
                }
                State::HermesBody => {
                    let Some(end) = self.held.find(HERMES_CLOSE) else {
                        return;
                    };
                    let rest = self.held.split_off(end + HERMES_CLOSE.len());
                    self.held.truncate(end);
                    let body = std::mem::replace(&mut self.held, rest);
                    // Whitespace after a call is no speech; after a malformed one it is.
                    self.after_call = self.take_hermes_call(&body, true, out);
                    self.state = State::Speech;
                }
                State::Json => {
                    if json_call_start(self.held.trim_start()) == Some(false) {
                        // `{` or `[` in speech: not a call object.
                        self.state = State::Speech;
                        continue;
                    }
                    return;
                }
                State::Mistral | State::Done => return,
            }
        }
    }

    /// In speech, releases what comes before a `<tool_call>` in `held` and returns `true`
    /// with `held` starting after the tag; or, when `held` holds no whole tag, releases what
    /// cannot begin one and keeps the rest (a partial tag) held.
    fn take_speech_before_tag(&mut self, out: &mut VecDeque<Result<StreamItem, LlmError>>) -> bool {
        let mut from = 0;
        while let Some(at) = self.held[from..].find('<').map(|at| from + at) {
            let rest = &self.held[at..];
            if rest.starts_with(HERMES_OPEN) {
                let after = self.held.split_off(at + HERMES_OPEN.len());
                self.held.truncate(at);
                release(std::mem::replace(&mut self.held, after), out);
                return true;
            }
            if HERMES_OPEN.starts_with(rest) {
                // A tag may be arriving: hold from the `<`.
                let partial = self.held.split_off(at);
                release(std::mem::replace(&mut self.held, partial), out);
                return false;
            }
            from = at + 1;
        }
        release(std::mem::take(&mut self.held), out);
        false
    }

    /// Reads one Hermes call's body: a call (`true`), or (malformed) its text released as
    /// speech.
    fn take_hermes_call(
        &mut self,
        body: &str,
        closed: bool,
        out: &mut VecDeque<Result<StreamItem, LlmError>>,
    ) -> bool {
        match serde_json::from_str::<Value>(body.trim())
            .ok()
            .and_then(|value| self.call_of(&value))
        {
            Some(call) => {
                self.keep(call);
                true
            }
            None => {
                tracing::warn!(
                    body = %body.chars().take(200).collect::<String>(),
                    "a <tool_call> in the answer's text is not a call object; speaking it as text"
                );
                let close = if closed { HERMES_CLOSE } else { "" };
                release(format!("{HERMES_OPEN}{body}{close}"), out);
                false
            }
        }
    }

    /// The call a JSON value describes (`{"name", "arguments" | "parameters"}`), with the
    /// next fresh id.
    fn call_of(&self, value: &Value) -> Option<ToolCall> {
        self.call_of_at(value, self.calls.len())
    }

    /// The call a JSON value describes, with the id of the call at `position`.
    fn call_of_at(&self, value: &Value, position: usize) -> Option<ToolCall> {
        let name = value.get("name")?.as_str().filter(|n| !n.is_empty())?;
        let arguments = match value.get("arguments").or_else(|| value.get("parameters")) {
            None | Some(Value::Null) => "{}".to_owned(),
            // Some models write the arguments as JSON text.
            Some(Value::String(text)) => {
                serde_json::from_str::<Value>(text).ok()?;
                text.clone()
            }
            Some(object @ Value::Object(_)) => object.to_string(),
            Some(_) => return None,
        };
        Some(ToolCall::new(
            format!("call_text_{position}"),
            name,
            arguments,
        ))
    }

    /// Reads a whole answer held as Mistral's or as bare JSON: all its calls, or none.
    fn take_whole_answer(&mut self, value: &Value) -> bool {
        let items = match value {
            Value::Array(items) if !items.is_empty() => items.as_slice(),
            Value::Object(_) => std::slice::from_ref(value),
            _ => return false,
        };
        let first = self.calls.len();
        let mut read = Vec::new();
        for item in items {
            match self.call_of_at(item, first + read.len()) {
                Some(call) => read.push(call),
                None => return false,
            }
        }
        for call in read {
            self.keep(call);
        }
        true
    }

    /// Ends the answer (with the server's finish `reason`, when it sent one): held text is
    /// decided, then the calls and the finish reason go out.
    fn finish(
        &mut self,
        reason: Option<FinishReason>,
        out: &mut VecDeque<Result<StreamItem, LlmError>>,
    ) {
        if self.state == State::Done {
            if let Some(reason) = reason {
                out.push_back(Ok(StreamItem::Finish(reason)));
            }
            return;
        }
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::HermesBody => {
                self.take_hermes_call(&held, false, out);
            }
            State::Mistral => {
                let body = held.trim_start()[MISTRAL_MARKER.len()..].trim();
                let read = serde_json::from_str::<Value>(body)
                    .is_ok_and(|value| self.take_whole_answer(&value));
                if !read {
                    tracing::warn!(
                        "the answer starts with [TOOL_CALLS] but holds no calls; speaking it as text"
                    );
                    release(held, out);
                }
            }
            State::Json => {
                let read = serde_json::from_str::<Value>(held.trim())
                    .is_ok_and(|value| self.take_whole_answer(&value));
                if !read {
                    tracing::debug!("the answer looked like a JSON tool call but is not one");
                    release(held, out);
                }
            }
            // Whitespace after a call, or alone, is no speech; a partial tag is.
            State::Start => {}
            State::Speech if self.after_call => {}
            State::Speech => release(held, out),
            State::Done => {}
        }
        self.state = State::Done;
        if self.too_many {
            out.push_back(Err(LlmError::TooManyToolCalls {
                limit: MAX_TEXT_CALLS,
            }));
            return;
        }
        let called = !self.calls.is_empty();
        if called {
            out.push_back(Ok(StreamItem::ToolCalls(std::mem::take(&mut self.calls))));
        }
        if let Some(reason) = reason {
            let reason = if called {
                FinishReason::ToolCalls
            } else {
                reason
            };
            out.push_back(Ok(StreamItem::Finish(reason)));
        }
    }

    /// The answer failed mid-way: held text that was never shown to be part of a call is
    /// released before the error; a call cut short is not spoken.
    fn fail(&mut self, out: &mut VecDeque<Result<StreamItem, LlmError>>) {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Speech if !self.after_call => release(held, out),
            State::Start | State::Json => release(held, out),
            State::HermesBody | State::Mistral => {
                tracing::debug!("the answer failed inside a tool call written as text");
            }
            State::Speech | State::Done => {}
        }
        self.state = State::Done;
    }
}

/// Hands `text` out as speech, if there is any.
fn release(text: String, out: &mut VecDeque<Result<StreamItem, LlmError>>) {
    if !text.is_empty() {
        out.push_back(Ok(StreamItem::Text(text)));
    }
}

/// Whether text starting with `{` or `[` begins like a call object: `Some(true)` once the
/// object's first key opens (`{"`, `[{"`), `Some(false)` as soon as it cannot, `None` while
/// too little has arrived to tell.
fn json_call_start(text: &str) -> Option<bool> {
    let mut chars = text.chars().filter(|c| !c.is_whitespace());
    let first = chars.next()?;
    let first = match first {
        '[' => match chars.next()? {
            '{' => '{',
            _ => return Some(false),
        },
        other => other,
    };
    Some(first == '{' && chars.next()? == '"')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a detector for `formats` makes of `pieces` followed by a `stop`.
    fn read(formats: &[TextToolCallFormat], pieces: &[&str]) -> Vec<StreamItem> {
        let mut detector = Detector::new(Formats::of(formats.iter().copied()));
        let mut out = VecDeque::new();
        for piece in pieces {
            detector.push((*piece).to_owned(), &mut out);
        }
        detector.finish(Some(FinishReason::Stop), &mut out);
        out.into_iter()
            .map(|item| item.expect("no error"))
            .collect()
    }

    #[test]
    fn an_answer_of_more_calls_than_the_limit_lets_them_go_and_fails() {
        // Each call is small, but their number is not: 200 Hermes calls, 100 in one JSON
        // array after 100 more. Before, all 200 were handed to the tool loop.
        let call = r#"<tool_call>{"name": "f", "arguments": {}}</tool_call>"#;
        let mut detector = Detector::new(Formats::of([TextToolCallFormat::Hermes]));
        let mut out = VecDeque::new();
        for _ in 0..200 {
            detector.push(call.to_owned(), &mut out);
        }
        assert!(detector.calls.is_empty(), "the calls are let go at once");
        detector.finish(Some(FinishReason::Stop), &mut out);
        let items: Vec<_> = out.into_iter().collect();
        assert!(
            matches!(
                &items[..],
                [Err(LlmError::TooManyToolCalls {
                    limit: MAX_TEXT_CALLS
                })]
            ),
            "{items:?}"
        );

        // Exactly the limit is fine.
        let within = read(&[TextToolCallFormat::Hermes], &vec![call; MAX_TEXT_CALLS]);
        assert_eq!(spoken_and_called(&within).1.len(), MAX_TEXT_CALLS);
    }

    /// The text and calls of `items`.
    fn spoken_and_called(items: &[StreamItem]) -> (String, Vec<ToolCall>) {
        let mut text = String::new();
        let mut calls = Vec::new();
        for item in items {
            match item {
                StreamItem::Text(t) => text.push_str(t),
                StreamItem::ToolCalls(c) => calls.extend(c.iter().cloned()),
                _ => {}
            }
        }
        (text, calls)
    }

    /// `text` cut into pieces of `size` characters (so inside markers and inside multi-byte
    /// characters' neighbours).
    fn cut(text: &str, size: usize) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars.chunks(size).map(|c| c.iter().collect()).collect()
    }

    /// Every way of cutting `text` into pieces of 1 to 7 characters, read by `formats`.
    fn every_cut(formats: &[TextToolCallFormat], text: &str) -> Vec<Vec<StreamItem>> {
        (1..=7)
            .map(|size| {
                let pieces = cut(text, size);
                let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
                read(formats, &pieces)
            })
            .collect()
    }

    #[test]
    fn hermes_calls_become_tool_calls_however_the_text_is_cut() {
        let answer = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
        for items in every_cut(&[TextToolCallFormat::Hermes], answer) {
            let (text, calls) = spoken_and_called(&items);
            assert_eq!(text, "", "{items:?}");
            assert_eq!(
                calls,
                vec![
                    ToolCall::new("call_text_0", "get_weather", r#"{"city":"Zürich"}"#),
                    ToolCall::new("call_text_1", "get_time", "{}"),
                ]
            );
            assert_eq!(
                items.last(),
                Some(&StreamItem::Finish(FinishReason::ToolCalls))
            );
        }
    }

    #[test]
    fn speech_before_a_hermes_call_is_spoken() {
        let answer = "Je regarde ça… <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
        for items in every_cut(&[TextToolCallFormat::Hermes], answer) {
            let (text, calls) = spoken_and_called(&items);
            assert_eq!(text, "Je regarde ça… ");
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].name, "get_weather");
        }
    }

    #[test]
    fn a_hermes_call_without_its_closing_tag_at_the_end_is_still_a_call() {
        let items = read(
            &[TextToolCallFormat::Hermes],
            &["<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}"],
        );
        let (text, calls) = spoken_and_called(&items);
        assert_eq!(text, "");
        assert_eq!(calls, vec![ToolCall::new("call_text_0", "f", r#"{"a":1}"#)]);
    }

    #[test]
    fn mistral_calls_become_tool_calls_however_the_text_is_cut() {
        let answer = "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Köln\"}}, {\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}]";
        for items in every_cut(&[TextToolCallFormat::Mistral], answer) {
            let (text, calls) = spoken_and_called(&items);
            assert_eq!(text, "", "{items:?}");
            assert_eq!(
                calls,
                vec![
                    ToolCall::new("call_text_0", "get_weather", r#"{"city":"Köln"}"#),
                    ToolCall::new("call_text_1", "get_time", r#"{"tz": "CET"}"#),
                ]
            );
        }
    }

    #[test]
    fn a_bare_json_call_becomes_a_tool_call_however_the_text_is_cut() {
        let answer = " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"São Paulo\"}}";
        for items in every_cut(&[TextToolCallFormat::BareJson], answer) {
            let (text, calls) = spoken_and_called(&items);
            assert_eq!(text, "");
            assert_eq!(
                calls,
                vec![ToolCall::new(
                    "call_text_0",
                    "get_weather",
                    r#"{"city":"São Paulo"}"#
                )]
            );
        }
    }

    #[test]
    fn speech_passes_through_piece_for_piece_without_being_held() {
        let formats = TextToolCallFormat::ALL;
        let mut detector = Detector::new(Formats::of(formats));
        let mut out = VecDeque::new();
        for piece in ["Il fait ", "21 °C ", "à Paris {ou presque}", " [vraiment]."] {
            detector.push(piece.to_owned(), &mut out);
            // Each piece is out as soon as it is in.
            assert_eq!(
                out.pop_front().map(|i| i.expect("text")),
                Some(StreamItem::Text(piece.to_owned()))
            );
            assert!(out.is_empty());
        }
        detector.finish(Some(FinishReason::Stop), &mut out);
        assert_eq!(
            out.into_iter().map(|i| i.expect("ok")).collect::<Vec<_>>(),
            vec![StreamItem::Finish(FinishReason::Stop)]
        );
    }

    #[test]
    fn near_misses_are_released_unchanged() {
        let answers = [
            "{laughs} Bien sûr !",
            "[Tip] Take an umbrella.",
            "<tool> is not a call, <tool_calls> neither.",
            "Speech with a < sign and <tool_cal at the end",
            "{\"note\": \"JSON, but not a call\"}",
            "[TOOL_CALLS] not JSON at all",
            "<tool_call>{\"arguments\": {}}</tool_call> and more",
            "  \n",
        ];
        for answer in answers {
            for items in every_cut(&TextToolCallFormat::ALL, answer) {
                let (text, calls) = spoken_and_called(&items);
                let expected = if answer.trim().is_empty() { "" } else { answer };
                assert_eq!(text, expected, "{items:?}");
                assert!(calls.is_empty());
                assert_eq!(items.last(), Some(&StreamItem::Finish(FinishReason::Stop)));
            }
        }
    }

    #[test]
    fn text_held_past_any_calls_length_is_released_unchanged() {
        let long = "x".repeat(MAX_HELD_BYTES + 5000);
        for answer in [
            format!("{{\"story\": \"{long}\"}}"),
            format!("[TOOL_CALLS] {long}"),
            format!(
                "<tool_call>{{\"name\": \"f\", \"arguments\": {{}}}}</tool_call><tool_call>{long}"
            ),
        ] {
            let pieces = cut(&answer, 1000);
            let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
            let items = read(&TextToolCallFormat::ALL, &pieces);
            let (text, calls) = spoken_and_called(&items);
            // Released once the bound is passed, not at the end: pieces come after it.
            let released_at = items
                .iter()
                .position(|item| matches!(item, StreamItem::Text(t) if t.len() > MAX_HELD_BYTES))
                .expect("the held text is released in one piece");
            assert!(released_at + 1 < items.len() - 1, "{} items", items.len());
            let expected = answer.replacen(
                "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
                "",
                1,
            );
            assert_eq!(text, expected);
            assert!(calls.len() <= 1);
        }
    }

    #[test]
    fn a_format_that_is_off_is_speech() {
        let answer = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
        let items = read(&[TextToolCallFormat::Mistral], &[answer]);
        assert_eq!(spoken_and_called(&items), (answer.to_owned(), Vec::new()));
    }

    #[test]
    fn json_call_start_decides_early() {
        assert_eq!(json_call_start("{"), None);
        assert_eq!(json_call_start("{ \""), Some(true));
        assert_eq!(json_call_start("[ {\"n"), Some(true));
        assert_eq!(json_call_start("{laughs"), Some(false));
        assert_eq!(json_call_start("[1"), Some(false));
    }

    #[test]
    fn held_text_that_could_be_speech_comes_out_before_an_error() {
        let mut detector = Detector::new(Formats::of(TextToolCallFormat::ALL));
        let mut out = VecDeque::new();
        detector.push("<tool".to_owned(), &mut out);
        assert!(out.is_empty(), "a possible tag is held");
        detector.fail(&mut out);
        assert_eq!(
            out.pop_front().map(|i| i.expect("text")),
            Some(StreamItem::Text("<tool".to_owned()))
        );

        // A call cut short is not spoken.
        let mut detector = Detector::new(Formats::of(TextToolCallFormat::ALL));
        let mut out = VecDeque::new();
        detector.push("<tool_call>{\"name\": \"f\"".to_owned(), &mut out);
        detector.fail(&mut out);
        assert!(out.is_empty());
    }

    /// A model whose one answer is `items`; `dropped` turns true when its stream is dropped.
    fn model_answering(
        items: Vec<Result<StreamItem, LlmError>>,
        dropped: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> crate::MockLlmClient {
        struct Guard(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Guard {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let mut model = crate::MockLlmClient::new();
        let mut items = Some(items);
        model.expect_stream_chat().returning(move |_| {
            let guard = Guard(dropped.clone());
            let items = items.take().unwrap_or_default();
            // The items, then a stream that never ends (a server still writing).
            let stream = futures::stream::iter(items)
                .chain(futures::stream::pending())
                .map(move |item| {
                    let _held = &guard;
                    item
                });
            Ok(stream.boxed())
        });
        model
    }

    fn ask() -> ChatRequest {
        ChatRequest::new(vec![crewline_core::Message::user("Paris?")])
    }

    #[tokio::test]
    async fn an_error_while_a_call_is_held_is_passed_on_and_the_call_is_not_spoken() {
        let dropped = std::sync::Arc::default();
        let cut = || Err(LlmError::StreamCut("the server went away".into()));
        let model = TextToolCalls::new(
            model_answering(
                vec![
                    Ok(StreamItem::Text("<tool_call>{\"name\":".to_owned())),
                    cut(),
                ],
                dropped,
            ),
            TextToolCallFormat::ALL,
        );
        let mut stream = model.stream_chat(ask()).await.expect("stream");
        assert!(matches!(
            stream.next().await,
            Some(Err(LlmError::StreamCut(_)))
        ));
    }

    #[tokio::test]
    async fn held_speech_comes_out_before_an_error_through_the_stream() {
        let dropped = std::sync::Arc::default();
        let items = vec![
            Ok(StreamItem::Text("{".to_owned())),
            Err(LlmError::StreamCut("the server went away".into())),
        ];
        let model = TextToolCalls::new(model_answering(items, dropped), TextToolCallFormat::ALL);
        let mut stream = model.stream_chat(ask()).await.expect("stream");
        assert_eq!(
            stream.next().await.map(|i| i.expect("text")),
            Some(StreamItem::Text("{".to_owned()))
        );
        assert!(matches!(
            stream.next().await,
            Some(Err(LlmError::StreamCut(_)))
        ));
    }

    #[tokio::test]
    async fn dropping_the_stream_while_text_is_held_drops_the_models_stream() {
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let items = vec![
            Ok(StreamItem::Text("Sure. ".to_owned())),
            Ok(StreamItem::Text("<tool_call>{".to_owned())),
        ];
        let model = TextToolCalls::new(
            model_answering(items, dropped.clone()),
            [TextToolCallFormat::Hermes],
        );
        let mut stream = model.stream_chat(ask()).await.expect("stream");
        assert_eq!(
            stream.next().await.map(|i| i.expect("text")),
            Some(StreamItem::Text("Sure. ".to_owned()))
        );
        // The call is held; the model is still writing.
        assert!(futures::poll!(stream.next()).is_pending());
        assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst));
        drop(stream);
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
    }
}
