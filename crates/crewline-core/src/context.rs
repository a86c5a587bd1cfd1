use std::{collections::HashMap, fmt, sync::Arc};

use crate::{Message, Role};

/// Counts the tokens of a text as a model's tokenizer does (e.g. `crewline-llm`'s
/// `TiktokenCounter`, behind its `tiktoken` feature); a [`Context`] without one estimates
/// from bytes ([`ESTIMATE_BYTES_PER_TOKEN`]).
pub trait TokenCounter: Send + Sync + fmt::Debug {
    /// The tokens of `text`.
    fn count(&self, text: &str) -> usize;

    /// What it counts by, for logs (e.g. `o200k_base`).
    fn name(&self) -> &str;
}

/// Bytes per token of the estimate a [`Context`] makes without a [`TokenCounter`].
///
/// OpenAI's rule of thumb for English: on a phone call's transcript full of numbers and dates,
/// `o200k_base` measured 3.84 bytes a token (`benches/context_tokens.rs`), plain prose runs
/// nearer 4.5, so the estimate is within a few percent either way, and the per-message
/// overhead ([`MESSAGE_OVERHEAD_TOKENS`], one more than OpenAI's 3) adds a margin. It matters
/// little once the model server reports usage: the estimate then covers only the messages
/// since its last request. Text in scripts of several bytes a character (Cyrillic, CJK) is
/// counted low: give such crews a tokenizer.
pub const ESTIMATE_BYTES_PER_TOKEN: usize = 4;

/// Tokens a message costs beyond its text (its role and separators): OpenAI's chat format
/// spends 3 to 4.
pub const MESSAGE_OVERHEAD_TOKENS: usize = 4;

/// The byte estimate as a [`TokenCounter`]: [`ESTIMATE_BYTES_PER_TOKEN`] bytes a token.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByteEstimate;

impl TokenCounter for ByteEstimate {
    fn count(&self, text: &str) -> usize {
        text.len().div_ceil(ESTIMATE_BYTES_PER_TOKEN)
    }

    fn name(&self) -> &str {
        "bytes/4"
    }
}

/// How much of a conversation a [`Context`] keeps: past any bound, the oldest turns go.
///
/// The defaults hold a long phone call whole: 1 000 messages is an hour or more of turns
/// (an exchange every few seconds, tool calls included), and 512 KiB of text is about 128k
/// tokens, the context window of common models: a longer prompt would fail at the model
/// anyway, and costs latency on every turn before it does. Tokens are not bounded by default
/// (the bytes bound them already); set [`max_tokens`](Self::max_tokens) to bound them as the
/// model counts them ([`Context::with_token_counter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextLimits {
    /// Most messages kept, system prompts included (default 1 000).
    pub max_messages: usize,
    /// Most bytes of text kept: contents, tool calls' names and arguments, ids (default
    /// 512 KiB).
    pub max_bytes: usize,
    /// Most tokens kept, as [`Context::tokens`] counts them (default: no bound).
    pub max_tokens: usize,
}

impl Default for ContextLimits {
    fn default() -> Self {
        Self {
            max_messages: 1_000,
            max_bytes: 512 << 10,
            max_tokens: usize::MAX,
        }
    }
}

impl ContextLimits {
    /// No bound: the context grows without limit (for contexts built in one go, offline).
    pub fn unbounded() -> Self {
        Self {
            max_messages: usize::MAX,
            max_bytes: usize::MAX,
            max_tokens: usize::MAX,
        }
    }

    /// These limits with at most `tokens` tokens.
    #[must_use]
    pub fn with_max_tokens(mut self, tokens: usize) -> Self {
        self.max_tokens = tokens;
        self
    }
}

/// The conversation an agent keeps across turns.
///
/// System prompts are the agent's own: [`Context::replace`] swaps the conversation turns for
/// the platform's authoritative copy but keeps them.
///
/// It is bounded ([`ContextLimits`]): when an addition takes it past a bound, the oldest
/// turns are dropped first. System prompts are never dropped; an assistant message with tool
/// calls goes together with the tool results that follow it, so no tool result is left
/// without its call; the newest turn always stays, even when it alone is over a bound.
///
/// Each message is measured once, when it comes in: its bytes and its tokens (by the
/// context's [`TokenCounter`], else estimated from its bytes). [`Context::replace`] keeps the
/// counts of the messages it already holds, so a platform that resends the whole call every
/// turn costs a tokenizer only the new messages.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Shared with the model requests made from it (copied only when one is still alive at
    /// the next change), so a request does not copy the whole conversation every turn.
    messages: Arc<Vec<Message>>,
    /// Each message's measure, in the order of `messages`.
    sizes: Vec<Size>,
    limits: ContextLimits,
    /// The bytes of `messages`, as [`ContextLimits::max_bytes`] counts them.
    bytes: usize,
    /// The tokens of `messages` as measured (the sum of `sizes`).
    tokens: usize,
    /// The model's tokenizer, when known.
    counter: Option<Arc<dyn TokenCounter>>,
    /// What the model server said the first messages came to.
    reported: Option<Reported>,
}

/// The prompt tokens a model server reported for the first `messages` messages, which were
/// measured as `estimated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reported {
    messages: usize,
    tokens: usize,
    estimated: usize,
}

/// One message's measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Size {
    bytes: usize,
    tokens: usize,
    /// [`Message::digest`], with a tokenizer only (to find the message's count again).
    digest: u64,
}

impl PartialEq for Context {
    /// Equal messages and limits (the counts follow from them).
    fn eq(&self, other: &Self) -> bool {
        self.messages == other.messages && self.limits == other.limits
    }
}

/// The bytes a message holds, as [`ContextLimits::max_bytes`] counts them.
fn size_of(message: &Message) -> usize {
    let text = message.text().map_or(0, str::len);
    let calls: usize = message
        .tool_calls()
        .iter()
        .map(|call| call.id.len() + call.name.len() + call.arguments.len())
        .sum();
    let id = match message {
        Message::Tool { tool_call_id, .. } => tool_call_id.len(),
        _ => 0,
    };
    text + calls + id
}

/// Measures one message: by `counter` when there is one, else by its bytes.
fn measure(counter: Option<&dyn TokenCounter>, message: &Message) -> Size {
    let bytes = size_of(message);
    let (tokens, digest) = match counter {
        None => (bytes.div_ceil(ESTIMATE_BYTES_PER_TOKEN), 0),
        Some(counter) => {
            let text = message.text().map_or(0, |text| counter.count(text));
            let calls: usize = message
                .tool_calls()
                .iter()
                .map(|call| counter.count(&call.name) + counter.count(&call.arguments))
                .sum();
            (text + calls, message.digest())
        }
    };
    Size {
        bytes,
        tokens: tokens + MESSAGE_OVERHEAD_TOKENS,
        digest,
    }
}

impl Context {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// A context that starts with one system prompt.
    pub fn with_system(prompt: impl Into<String>) -> Self {
        Self::from(vec![Message::system(prompt)])
    }

    /// This context with `limits` instead of the defaults.
    #[must_use]
    pub fn with_limits(mut self, limits: ContextLimits) -> Self {
        self.set_limits(limits);
        self
    }

    /// Changes the bounds; the oldest turns go at once if the context is past them.
    pub fn set_limits(&mut self, limits: ContextLimits) {
        self.limits = limits;
        self.trim();
    }

    /// The bounds.
    pub fn limits(&self) -> ContextLimits {
        self.limits
    }

    /// This context counting tokens by `counter` (the model's tokenizer).
    #[must_use]
    pub fn with_token_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.set_token_counter(Some(counter));
        self
    }

    /// Counts tokens by `counter` from now on (`None`: the byte estimate); every message is
    /// measured again.
    pub fn set_token_counter(&mut self, counter: Option<Arc<dyn TokenCounter>>) {
        self.counter = counter;
        self.reported = None;
        let counter = self.counter.as_deref();
        self.sizes = self.messages.iter().map(|m| measure(counter, m)).collect();
        self.total();
        self.trim();
    }

    /// The tokenizer tokens are counted by, if any (else they are estimated from bytes).
    pub fn token_counter(&self) -> Option<&Arc<dyn TokenCounter>> {
        self.counter.as_ref()
    }

    /// Appends one message.
    pub fn add(&mut self, message: Message) {
        self.push(message);
        self.trim();
    }

    /// Appends several messages in order.
    pub fn add_many(&mut self, messages: impl IntoIterator<Item = Message>) {
        for message in messages {
            self.push(message);
        }
        self.trim();
    }

    fn push(&mut self, message: Message) {
        let size = measure(self.counter.as_deref(), &message);
        self.bytes += size.bytes;
        self.tokens += size.tokens;
        self.sizes.push(size);
        Arc::make_mut(&mut self.messages).push(message);
    }

    /// Replaces the conversation with `messages`, keeping this context's system prompts.
    ///
    /// System messages in `messages` are dropped: the agent's prompt is not the platform's to
    /// change. Messages the context already holds keep their token counts (found by content):
    /// only new ones are measured.
    pub fn replace(&mut self, messages: impl IntoIterator<Item = Message>) {
        let messages = messages.into_iter();
        let old = std::mem::take(&mut self.messages);
        let old_sizes = std::mem::take(&mut self.sizes);
        let room = self.prompts() + messages.size_hint().0;
        let mut list = Vec::with_capacity(room);
        let mut sizes = Vec::with_capacity(room);
        for (message, size) in old.iter().zip(&old_sizes) {
            if message.role() == Role::System {
                list.push(message.clone());
                sizes.push(*size);
            }
        }
        let counter = self.counter.as_deref();
        // With a tokenizer, the counts of the messages held already (by digest): hashing a
        // message is a pass over its bytes, tokenizing it many.
        let known: HashMap<u64, usize> = match counter {
            Some(_) => old_sizes
                .iter()
                .map(|size| (size.digest, size.tokens))
                .collect(),
            None => HashMap::new(),
        };
        for message in messages {
            if message.role() == Role::System {
                continue;
            }
            let size = match counter {
                Some(_) => {
                    let digest = message.digest();
                    match known.get(&digest) {
                        Some(&tokens) => Size {
                            bytes: size_of(&message),
                            tokens,
                            digest,
                        },
                        None => measure(counter, &message),
                    }
                }
                None => measure(None, &message),
            };
            list.push(message);
            sizes.push(size);
        }
        // The server's count holds while the messages it counted are the same.
        self.reported = self.reported.filter(|r| {
            list.get(..r.messages)
                .is_some_and(|new| old.get(..r.messages) == Some(new))
        });
        self.messages = Arc::new(list);
        self.sizes = sizes;
        self.total();
        self.trim();
    }

    /// How many system prompts lead the conversation (a guess of the room to keep for them).
    fn prompts(&self) -> usize {
        self.messages
            .iter()
            .take_while(|m| m.role() == Role::System)
            .count()
    }

    /// Drops every message but the system prompts.
    pub fn clear_turns(&mut self) {
        let mut index = 0;
        let sizes = &mut self.sizes;
        let messages = Arc::make_mut(&mut self.messages);
        sizes.retain(|_| {
            index += 1;
            messages[index - 1].role() == Role::System
        });
        messages.retain(|m| m.role() == Role::System);
        self.reported = None;
        self.total();
    }

    /// The messages in order.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The messages as a shared list, cheap to clone: what a model request carries.
    pub fn shared_messages(&self) -> Arc<Vec<Message>> {
        Arc::clone(&self.messages)
    }

    /// The number of messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether there are no messages.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The last message, if any.
    pub fn last(&self) -> Option<&Message> {
        self.messages.last()
    }

    /// The bytes of text the context holds, as [`ContextLimits::max_bytes`] counts them.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The tokens the context holds: what the model server last reported for the messages
    /// its request carried ([`report_prompt_tokens`](Self::report_prompt_tokens)), and the
    /// messages since as counted (or estimated).
    pub fn tokens(&self) -> usize {
        match self.reported {
            Some(r) => self
                .tokens
                .saturating_sub(r.estimated)
                .saturating_add(r.tokens),
            None => self.tokens,
        }
    }

    /// The tokens of the message at `index` as counted (or estimated), if there is one.
    pub fn message_tokens(&self, index: usize) -> Option<usize> {
        self.sizes.get(index).map(|size| size.tokens)
    }

    /// Takes the model server's count of a request's prompt: its first `messages` messages
    /// came to `tokens` (tool definitions included). It replaces their count in
    /// [`tokens`](Self::tokens) until one of them changes or goes.
    pub fn report_prompt_tokens(&mut self, messages: usize, tokens: usize) {
        if messages == 0 || messages > self.sizes.len() {
            return;
        }
        let estimated = self.sizes[..messages].iter().map(|s| s.tokens).sum();
        self.reported = Some(Reported {
            messages,
            tokens,
            estimated,
        });
    }

    fn total(&mut self) {
        self.bytes = self.sizes.iter().map(|s| s.bytes).sum();
        self.tokens = self.sizes.iter().map(|s| s.tokens).sum();
    }

    fn over(&self, count: usize, bytes: usize, tokens: usize) -> bool {
        count > self.limits.max_messages
            || bytes > self.limits.max_bytes
            || tokens > self.limits.max_tokens
    }

    /// Drops the oldest turns, a turn at a time, while the context is past a bound.
    ///
    /// A turn is one message, or an assistant message with tool calls and the tool results
    /// that follow it (system messages among them stay). The newest turn is never dropped.
    fn trim(&mut self) {
        if !self.over(self.messages.len(), self.bytes, self.tokens()) {
            return;
        }
        let len = self.messages.len();
        let is_system = |i: usize| self.messages[i].role() == Role::System;
        let mut drop = vec![false; len];
        let (mut count, mut bytes, mut tokens) = (len, self.bytes, self.tokens);
        // The server's count is kept while none of the messages it counted goes.
        let mut reported = self.reported;
        let now = |tokens: usize, reported: Option<Reported>| match reported {
            Some(r) => tokens.saturating_sub(r.estimated).saturating_add(r.tokens),
            None => tokens,
        };
        let mut next = 0;
        while self.over(count, bytes, now(tokens, reported)) {
            let Some(start) = (next..len).find(|&i| !is_system(i)) else {
                break;
            };
            let mut end = start + 1;
            if !self.messages[start].tool_calls().is_empty() {
                while end < len && matches!(self.messages[end].role(), Role::Tool | Role::System) {
                    end += 1;
                }
            }
            if !(end..len).any(|i| !is_system(i)) {
                // The newest turn stays: the model must see what it is answering.
                break;
            }
            if reported.is_some_and(|r| start < r.messages) {
                reported = None;
            }
            for (i, dropped) in drop.iter_mut().enumerate().take(end).skip(start) {
                if !is_system(i) {
                    *dropped = true;
                    count -= 1;
                    bytes -= self.sizes[i].bytes;
                    tokens -= self.sizes[i].tokens;
                }
            }
            next = end;
        }
        let mut index = 0;
        self.sizes.retain(|_| {
            index += 1;
            !drop[index - 1]
        });
        let mut index = 0;
        Arc::make_mut(&mut self.messages).retain(|_| {
            index += 1;
            !drop[index - 1]
        });
        self.bytes = bytes;
        self.tokens = tokens;
        self.reported = reported;
    }
}

impl From<Vec<Message>> for Context {
    fn from(messages: Vec<Message>) -> Self {
        let mut context = Self {
            sizes: messages.iter().map(|m| measure(None, m)).collect(),
            messages: Arc::new(messages),
            ..Self::default()
        };
        context.total();
        context.trim();
        context
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_keeps_own_system_prompts_and_drops_incoming_ones() {
        let mut context = Context::with_system("You are Ava.");
        context.add(Message::user("old"));
        context.replace(vec![
            Message::system("You are someone else."),
            Message::user("hi"),
            Message::assistant("hello"),
        ]);
        assert_eq!(
            context.messages(),
            &[
                Message::system("You are Ava."),
                Message::user("hi"),
                Message::assistant("hello")
            ]
        );
    }

    #[test]
    fn add_many_appends_in_order() {
        let mut context = Context::new();
        context.add_many([Message::user("a"), Message::user("b")]);
        assert_eq!(context.len(), 2);
        assert_eq!(context.last(), Some(&Message::user("b")));
    }

    use crate::ToolCall;

    /// Every tool message answers a call of an earlier assistant message in `messages`.
    fn no_orphaned_tool_results(messages: &[Message]) -> bool {
        let mut calls = std::collections::HashSet::new();
        messages.iter().all(|message| {
            calls.extend(message.tool_calls().iter().map(|call| call.id.clone()));
            match message {
                Message::Tool { tool_call_id, .. } => calls.contains(tool_call_id),
                _ => true,
            }
        })
    }

    #[test]
    fn a_shared_list_is_the_conversation_when_it_was_taken_whatever_comes_after() {
        let mut context = Context::from(vec![Message::system("You are Ava."), Message::user("Hi")]);
        let request = context.shared_messages();
        assert!(
            Arc::ptr_eq(&request, &context.shared_messages()),
            "shared, not copied"
        );

        context.add(Message::assistant("Hello!"));
        context.replace([Message::user("Bye")]);

        assert_eq!(
            *request,
            [Message::system("You are Ava."), Message::user("Hi")]
        );
        assert_eq!(
            context.messages(),
            [Message::system("You are Ava."), Message::user("Bye")]
        );
    }

    fn small(max_messages: usize, max_bytes: usize) -> Context {
        Context::with_system("You are Ava.").with_limits(ContextLimits {
            max_messages,
            max_bytes,
            max_tokens: usize::MAX,
        })
    }

    fn tool_turn(id: &str) -> [Message; 3] {
        [
            Message::assistant_with_tools("", vec![ToolCall::new(id, "lookup", "{}")]),
            Message::tool(id, "result"),
            Message::assistant("done"),
        ]
    }

    #[test]
    fn a_flood_of_transcripts_stays_under_the_default_bound_and_keeps_the_prompt() {
        let mut context = Context::with_system("You are Ava.");
        for i in 0..5_000 {
            context.add(Message::user(format!("transcript {i}")));
        }
        assert_eq!(context.len(), ContextLimits::default().max_messages);
        assert_eq!(context.messages()[0], Message::system("You are Ava."));
        // The newest turns are the ones kept.
        assert_eq!(context.last(), Some(&Message::user("transcript 4999")));

        let mut context = Context::with_system("You are Ava.");
        let line = "x".repeat(10_000);
        for _ in 0..500 {
            context.add(Message::user(line.clone()));
        }
        assert!(context.bytes() <= ContextLimits::default().max_bytes);
        assert_eq!(context.messages()[0], Message::system("You are Ava."));
    }

    #[test]
    fn a_tool_call_and_its_results_are_dropped_together() {
        // System + 3-message tool turn = 4; one more message is over the bound of 4.
        let mut context = small(4, usize::MAX);
        context.add_many(tool_turn("call_1"));
        context.add(Message::user("next"));
        assert_eq!(
            context.messages(),
            &[
                Message::system("You are Ava."),
                Message::assistant("done"),
                Message::user("next"),
            ],
            "the call and its result went together, leaving room to spare"
        );
        assert!(no_orphaned_tool_results(context.messages()));
    }

    #[test]
    fn a_recent_tool_call_keeps_its_results_while_older_turns_go() {
        let mut context = small(6, usize::MAX);
        for i in 0..10 {
            context.add(Message::user(format!("u{i}")));
            context.add(Message::assistant(format!("a{i}")));
            context.add_many(tool_turn(&format!("call_{i}")));
            assert!(context.len() <= 6);
            assert!(no_orphaned_tool_results(context.messages()));
            assert_eq!(context.messages()[0].role(), Role::System);
        }
        let last = tool_turn("call_9");
        assert_eq!(&context.messages()[context.len() - 3..], &last);
    }

    #[test]
    fn a_replaced_conversation_is_bounded_oldest_first() {
        let mut context = small(usize::MAX, 200);
        let mut incoming = vec![Message::tool("ghost", "a result whose call is gone")];
        for i in 0..20 {
            incoming.push(Message::user(format!("turn {i} with some words in it")));
        }
        context.replace(incoming);
        assert!(context.bytes() <= 200);
        assert!(no_orphaned_tool_results(context.messages()));
        assert_eq!(context.messages()[0], Message::system("You are Ava."));
        assert_eq!(
            context.last(),
            Some(&Message::user("turn 19 with some words in it"))
        );
    }

    #[test]
    fn the_newest_turn_stays_even_when_it_alone_is_over_the_bound() {
        let mut context = small(usize::MAX, 10);
        context.add(Message::user("old"));
        context.add(Message::user("a very long thing the caller just said"));
        assert_eq!(
            context.messages(),
            &[
                Message::system("You are Ava."),
                Message::user("a very long thing the caller just said"),
            ]
        );
    }

    /// Counts words, and how many texts it was asked to count.
    #[derive(Debug, Default)]
    struct Words(std::sync::atomic::AtomicUsize);

    impl TokenCounter for Words {
        fn count(&self, text: &str) -> usize {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            text.split_whitespace().count()
        }

        fn name(&self) -> &str {
            "words"
        }
    }

    #[test]
    fn tokens_are_estimated_from_bytes_or_counted_by_the_tokenizer_per_message() {
        // 23 bytes: 6 tokens at 4 bytes a token, plus the message's overhead.
        let estimated = Context::from(vec![Message::user("the weather in Paris?!!")]);
        assert_eq!(estimated.tokens(), 6 + MESSAGE_OVERHEAD_TOKENS);
        let counted = estimated.with_token_counter(Arc::new(Words::default()));
        assert_eq!(counted.tokens(), 4 + MESSAGE_OVERHEAD_TOKENS);
        assert_eq!(counted.message_tokens(0), Some(4 + MESSAGE_OVERHEAD_TOKENS));
    }

    #[test]
    fn replace_counts_only_the_messages_it_did_not_hold() {
        let words = Arc::new(Words::default());
        let mut context = Context::with_system("You are Ava.").with_token_counter(words.clone());
        let mut history = Vec::new();
        for i in 0..50 {
            history.push(Message::user(format!("question {i}")));
            history.push(Message::assistant(format!("answer {i}")));
            let before = words.0.load(std::sync::atomic::Ordering::Relaxed);
            context.replace(history.clone());
            let counted = words.0.load(std::sync::atomic::Ordering::Relaxed) - before;
            assert_eq!(counted, 2, "turn {i}: only the new messages are tokenized");
        }
        assert_eq!(
            context.tokens(),
            (1 + 100) * MESSAGE_OVERHEAD_TOKENS + 3 + 100 * 2
        );
        // A context past a token bound drops its oldest turns; the counts stay right.
        context.set_limits(ContextLimits::default().with_max_tokens(60));
        assert!(context.tokens() <= 60, "{}", context.tokens());
        let sum: usize = (0..context.len())
            .filter_map(|i| context.message_tokens(i))
            .sum();
        assert_eq!(context.tokens(), sum);
        assert_eq!(context.messages()[0], Message::system("You are Ava."));
        assert_eq!(context.last(), Some(&Message::assistant("answer 49")));
    }

    #[test]
    fn the_servers_count_replaces_the_estimate_of_what_it_counted_until_that_changes() {
        let mut context = Context::with_system("You are Ava.");
        context.add(Message::user("hello"));
        let estimate = context.tokens();
        // The request carried both messages (and tools): the server counted 120.
        context.report_prompt_tokens(2, 120);
        assert_eq!(context.tokens(), 120);
        context.add(Message::assistant("Hi!"));
        let answer = context.message_tokens(2).unwrap_or_default();
        assert_eq!(context.tokens(), 120 + answer);
        // The platform resends the same history: the count holds.
        context.replace([Message::user("hello"), Message::assistant("Hi!")]);
        assert_eq!(context.tokens(), 120 + answer);
        // A history that differs in what was counted: the estimate again.
        context.replace([Message::user("bye"), Message::assistant("Hi!")]);
        assert_ne!(context.tokens(), 120 + answer);
        assert!(context.tokens() < estimate + answer + 10);
    }
}
