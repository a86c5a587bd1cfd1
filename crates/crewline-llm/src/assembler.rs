//! Assembles streamed tool-call deltas into whole tool calls.
//!
//! Servers stream a tool call in pieces: the OpenAI shape is one delta with `index`, `id` and
//! `name`, then argument fragments that carry only the `index`. Compatible servers vary, so the
//! [`ToolCallAssembler`] accepts any mix of the shapes below and never panics.
//!
//! # Rules
//!
//! - **Which call a delta belongs to.** `index` is the primary key; indexes need not start at 0
//!   or be dense, and several calls may share one chunk. If the index belongs to a call that
//!   already has a *different* id, the server is reusing the index (some send every call with
//!   index 0): the delta goes to the call with that id if one with the same index is known,
//!   else it opens a new call. A delta without an index goes to the call with its id; with an
//!   id never seen it opens a new call; with neither it continues the call the previous delta
//!   went to (or opens one). Empty `id` strings count as absent. A delta without an id that
//!   names a tool and whose arguments open a JSON value, for a call that is already whole (a
//!   name, and arguments that parse as complete JSON), starts a new call: some relays send
//!   every whole call at index 0 with an empty id.
//! - **Empty deltas** (no id, no name, no argument text) carry nothing and are ignored; they do
//!   not open a call.
//! - **Ids** may arrive in any delta of a call; the first one wins. Calls without an id get
//!   `call_<n>` (`n` = the call's 0-based position), with a suffix if that is taken. Ids in the
//!   output are unique: a call repeating an earlier call's id gets a synthesised one, so every
//!   tool result can be matched to one call.
//! - **Names** may arrive in any delta, in pieces. A piece equal to the whole name so far is a
//!   resend (some servers repeat the name on every delta) and is ignored; any other piece is
//!   appended.
//! - **Arguments** are the fragments concatenated byte for byte; empty (or all-whitespace)
//!   arguments become `{}`.
//! - **Calls without a name** are kept, with an empty name, and logged: the tool registry
//!   answers them with `UnknownTool`, so the model learns from its mistake rather than the call
//!   vanishing silently.
//! - **Order** is the order in which calls first appeared.
//! - **Limits** ([`AnswerLimits`]): a delta that would open one call more than
//!   `max_tool_calls`, take one call past `max_call_bytes` or all of them past
//!   `max_answer_bytes` (ids, names and arguments as kept) fails the answer: `push` returns
//!   the error, every call held so far is let go, and every later `push` returns it again.
//!   Bytes are counted as kept, so a name resent on every delta costs nothing.

use std::collections::{HashMap, HashSet};

use crewline_core::ToolCall;

use crate::{AnswerLimits, LlmError};

/// One tool-call fragment from one streamed chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCallDelta {
    /// The call's position in the turn, when the server sent one.
    pub index: Option<u32>,
    /// The call's id, when this fragment carries it.
    pub id: Option<String>,
    /// The tool name, when this fragment carries it (possibly in pieces).
    pub name: Option<String>,
    /// A piece of the arguments' JSON text.
    pub arguments: Option<String>,
}

impl ToolCallDelta {
    /// A delta for the call at `index`, with no content yet.
    pub fn at(index: u32) -> Self {
        Self {
            index: Some(index),
            ..Self::default()
        }
    }

    /// This delta with the call's id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// This delta with (a piece of) the tool name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// This delta with a piece of the arguments' JSON text.
    pub fn arguments(mut self, arguments: impl Into<String>) -> Self {
        self.arguments = Some(arguments.into());
        self
    }
}

/// One call being assembled.
#[derive(Debug, Default)]
struct Partial {
    index: Option<u32>,
    id: Option<String>,
    name: String,
    arguments: String,
}

impl Partial {
    /// The bytes this call holds, as [`AnswerLimits::max_call_bytes`] counts them.
    fn bytes(&self) -> usize {
        self.id.as_ref().map_or(0, String::len) + self.name.len() + self.arguments.len()
    }

    /// Whether a delta without an id, naming a tool and bringing `arguments`, is the start
    /// of another call: this one is whole (a name, and arguments that are a complete JSON
    /// value) and the delta's arguments open a new JSON value, which cannot continue it.
    fn starts_anew(&self, arguments: &str) -> bool {
        if self.name.is_empty() || !arguments.trim_start().starts_with(['{', '[']) {
            return false;
        }
        // The cheap test first, so fragments of one call never parse its arguments: they
        // can only be whole once they end in `}` or `]`.
        let whole = self.arguments.trim_end();
        whole.ends_with(['}', ']']) && serde_json::from_str::<serde::de::IgnoredAny>(whole).is_ok()
    }
}

/// Puts streamed [`ToolCallDelta`]s together into [`ToolCall`]s (see the module docs for the
/// rules).
///
/// # Examples
///
/// Two calls streamed in pieces, their fragments interleaved, as OpenAI sends them:
///
/// ```
/// use crewline_llm::{ToolCallAssembler, ToolCallDelta};
///
/// let mut calls = ToolCallAssembler::new();
/// calls.push_all([
///     ToolCallDelta::at(0).id("call_a").name("get_weather").arguments(""),
///     ToolCallDelta::at(1).id("call_b").name("get_time"),
///     ToolCallDelta::at(0).arguments(r#"{"city":"#),
///     ToolCallDelta::at(0).arguments(r#" "Paris"}"#),
/// ])?;
/// assert_eq!(calls.len(), 2);
///
/// let calls = calls.finish();
/// assert_eq!(calls[0].name, "get_weather");
/// assert_eq!(calls[0].arguments, r#"{"city": "Paris"}"#);
/// assert_eq!((calls[1].id.as_str(), calls[1].arguments.as_str()), ("call_b", "{}"));
/// # Ok::<(), crewline_llm::LlmError>(())
/// ```
///
/// An answer past its [`AnswerLimits`] fails as soon as it is:
///
/// ```
/// use crewline_llm::{AnswerLimits, LlmError, ToolCallAssembler, ToolCallDelta};
///
/// let limits = AnswerLimits { max_tool_calls: 2, ..AnswerLimits::default() };
/// let mut calls = ToolCallAssembler::with_limits(limits);
/// calls.push(ToolCallDelta::at(0).name("a"))?;
/// calls.push(ToolCallDelta::at(1).name("b"))?;
/// let third = calls.push(ToolCallDelta::at(2).name("c"));
/// assert!(matches!(third, Err(LlmError::TooManyToolCalls { limit: 2 })));
/// assert!(calls.is_empty(), "nothing of the answer is kept");
/// # Ok::<(), LlmError>(())
/// ```
#[derive(Debug, Default)]
pub struct ToolCallAssembler {
    calls: Vec<Partial>,
    /// The call each index currently stands for (an index may be reused, see the rules).
    by_index: HashMap<u32, usize>,
    /// The call of each id, first call wins.
    by_id: HashMap<String, usize>,
    /// The call the previous delta went to.
    last: Option<usize>,
    limits: AnswerLimits,
    /// The bytes all calls hold (ids, names, arguments).
    bytes: usize,
    /// The limit the answer broke, once it has (every later push returns it).
    failed: Option<LlmError>,
}

impl ToolCallAssembler {
    /// An assembler with no calls yet, under the default [`AnswerLimits`].
    pub fn new() -> Self {
        Self::default()
    }

    /// An assembler with no calls yet, under `limits`.
    pub fn with_limits(limits: AnswerLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// The bytes the calls hold so far (ids, names and arguments, as the limits count them).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds one fragment; fails, letting every call go, once the answer is past a limit
    /// (see the module docs).
    pub fn push(&mut self, delta: ToolCallDelta) -> Result<(), LlmError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let id = delta.id.filter(|id| !id.is_empty());
        let name = delta.name.filter(|name| !name.is_empty());
        let arguments = delta.arguments.filter(|args| !args.is_empty());
        if id.is_none() && name.is_none() && arguments.is_none() {
            return Ok(());
        }
        let Some(mut position) = self.resolve(delta.index, id.as_deref()) else {
            return self.fail(self.too_many());
        };
        if id.is_none()
            && name.is_some()
            && let Some(arguments) = arguments.as_deref()
            && self
                .calls
                .get(position)
                .is_some_and(|call| call.starts_anew(arguments))
        {
            position = match self.open(delta.index) {
                Some(position) => position,
                None => return self.fail(self.too_many()),
            };
        }
        self.last = Some(position);
        let Some(call) = self.calls.get_mut(position) else {
            return Ok(()); // `resolve` only returns positions of existing calls.
        };
        // What this delta adds to the call, counted before anything is kept.
        let id = id.filter(|_| call.id.is_none());
        let name = name.filter(|name| *name != call.name);
        let added = id.as_ref().map_or(0, String::len)
            + name.as_ref().map_or(0, String::len)
            + arguments.as_ref().map_or(0, String::len);
        if call.bytes().saturating_add(added) > self.limits.max_call_bytes {
            let limit = self.limits.max_call_bytes;
            return self.fail(LlmError::TooLarge {
                what: "a tool call",
                limit,
            });
        }
        if self.bytes.saturating_add(added) > self.limits.max_answer_bytes {
            let limit = self.limits.max_answer_bytes;
            return self.fail(LlmError::TooLarge {
                what: "the answer",
                limit,
            });
        }
        self.bytes += added;
        if let Some(id) = id {
            call.id = Some(id.clone());
            self.by_id.entry(id).or_insert(position);
        }
        if let Some(name) = name {
            call.name.push_str(&name);
        }
        if let Some(arguments) = arguments {
            call.arguments.push_str(&arguments);
        }
        Ok(())
    }

    /// Adds fragments in order, stopping at the first that fails.
    pub fn push_all(
        &mut self,
        deltas: impl IntoIterator<Item = ToolCallDelta>,
    ) -> Result<(), LlmError> {
        deltas.into_iter().try_for_each(|delta| self.push(delta))
    }

    /// The error of a call opened past the count limit.
    fn too_many(&self) -> LlmError {
        LlmError::TooManyToolCalls {
            limit: self.limits.max_tool_calls,
        }
    }

    /// Fails the answer with `error`: every call held is let go, and every later push
    /// returns the same error.
    fn fail(&mut self, error: LlmError) -> Result<(), LlmError> {
        self.calls = Vec::new();
        self.by_index = HashMap::new();
        self.by_id = HashMap::new();
        self.last = None;
        self.bytes = 0;
        self.failed = Some(error.clone());
        Err(error)
    }

    /// The limit the answer broke, if it did.
    pub fn failed(&self) -> Option<&LlmError> {
        self.failed.as_ref()
    }

    /// Whether no call has been started.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The number of calls started so far.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// The assembled calls, in the order they first appeared.
    pub fn finish(self) -> Vec<ToolCall> {
        let real_ids: HashSet<&str> = self.calls.iter().filter_map(|c| c.id.as_deref()).collect();
        // Ids handed out so far; synthesised ones must avoid every real id of the turn too.
        let mut used: HashSet<String> = HashSet::with_capacity(self.calls.len());
        let mut out = Vec::with_capacity(self.calls.len());
        for (position, call) in self.calls.iter().enumerate() {
            let id = match &call.id {
                Some(id) if !used.contains(id) => id.clone(),
                original => {
                    let id = synthesise_id(position, |c| used.contains(c) || real_ids.contains(c));
                    if let Some(original) = original {
                        tracing::warn!(
                            original = %original,
                            replacement = %id,
                            "tool call repeats an earlier call's id; gave it a fresh one"
                        );
                    }
                    id
                }
            };
            used.insert(id.clone());
            if call.name.is_empty() {
                tracing::warn!(
                    id = %id,
                    "tool call without a name; keeping it so the model hears UnknownTool"
                );
            }
            let arguments = if call.arguments.trim().is_empty() {
                String::from("{}")
            } else {
                call.arguments.clone()
            };
            out.push(ToolCall::new(id, call.name.clone(), arguments));
        }
        out
    }

    /// The position of the call a delta with this index and id belongs to, opening one if
    /// needed; `None` when that would open one call more than the limit.
    fn resolve(&mut self, index: Option<u32>, id: Option<&str>) -> Option<usize> {
        let known = id.and_then(|id| self.by_id.get(id).copied());
        let Some(index) = index else {
            return match (known, id) {
                (Some(position), _) => Some(position),
                (None, Some(_)) => self.open(None),
                (None, None) => match self.last {
                    Some(position) => Some(position),
                    None => self.open(None),
                },
            };
        };
        let index_of = |position: usize| self.calls.get(position).and_then(|c| c.index);
        match self.by_index.get(&index).copied() {
            Some(current) => {
                let current_id = self.calls.get(current).and_then(|c| c.id.as_deref());
                match (id, current_id) {
                    (Some(new), Some(old)) if new != old => match known {
                        // A fragment of an earlier call sent under the same (reused) index.
                        Some(position) if index_of(position) == Some(index) => {
                            self.by_index.insert(index, position);
                            Some(position)
                        }
                        // The server reuses the index for another call.
                        _ => self.open(Some(index)),
                    },
                    _ => Some(current),
                }
            }
            None => match known {
                // A call first seen without an index now gets one.
                Some(position) if index_of(position).is_none() => {
                    if let Some(call) = self.calls.get_mut(position) {
                        call.index = Some(index);
                    }
                    self.by_index.insert(index, position);
                    Some(position)
                }
                _ => self.open(Some(index)),
            },
        }
    }

    /// Opens a new call and returns its position; `None` when the answer already holds
    /// [`AnswerLimits::max_tool_calls`].
    fn open(&mut self, index: Option<u32>) -> Option<usize> {
        let position = self.calls.len();
        if position >= self.limits.max_tool_calls {
            return None;
        }
        self.calls.push(Partial {
            index,
            ..Partial::default()
        });
        if let Some(index) = index {
            self.by_index.insert(index, position);
        }
        Some(position)
    }
}

/// `call_<position>`, or `call_<position>_<k>` for the first `k` that is free.
fn synthesise_id(position: usize, taken: impl Fn(&str) -> bool) -> String {
    let base = format!("call_{position}");
    if !taken(&base) {
        return base;
    }
    // Terminates: each candidate is distinct and only finitely many ids are taken.
    (1_usize..)
        .map(|k| format!("{base}_{k}"))
        .find(|candidate| !taken(candidate))
        .unwrap_or(base)
}
