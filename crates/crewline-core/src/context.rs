use std::sync::Arc;

use crate::{Message, Role};

/// How much of a conversation a [`Context`] keeps: past either bound, the oldest turns go.
///
/// The defaults hold a long phone call whole: 1 000 messages is an hour or more of turns
/// (an exchange every few seconds, tool calls included), and 512 KiB of text is about 128k
/// tokens, the context window of common models: a longer prompt would fail at the model
/// anyway, and costs latency on every turn before it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextLimits {
    /// Most messages kept, system prompts included (default 1 000).
    pub max_messages: usize,
    /// Most bytes of text kept: contents, tool calls' names and arguments, ids (default
    /// 512 KiB).
    pub max_bytes: usize,
}

impl Default for ContextLimits {
    fn default() -> Self {
        Self {
            max_messages: 1_000,
            max_bytes: 512 << 10,
        }
    }
}

impl ContextLimits {
    /// No bound: the context grows without limit (for contexts built in one go, offline).
    pub fn unbounded() -> Self {
        Self {
            max_messages: usize::MAX,
            max_bytes: usize::MAX,
        }
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    /// Shared with the model requests made from it (copied only when one is still alive at
    /// the next change), so a request does not copy the whole conversation every turn.
    messages: Arc<Vec<Message>>,
    limits: ContextLimits,
    /// The bytes of `messages`, as [`ContextLimits::max_bytes`] counts them.
    bytes: usize,
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

    /// Appends one message.
    pub fn add(&mut self, message: Message) {
        self.bytes += size_of(&message);
        Arc::make_mut(&mut self.messages).push(message);
        self.trim();
    }

    /// Appends several messages in order.
    pub fn add_many(&mut self, messages: impl IntoIterator<Item = Message>) {
        let list = Arc::make_mut(&mut self.messages);
        for message in messages {
            self.bytes += size_of(&message);
            list.push(message);
        }
        self.trim();
    }

    /// Replaces the conversation with `messages`, keeping this context's system prompts.
    ///
    /// System messages in `messages` are dropped: the agent's prompt is not the platform's to
    /// change.
    pub fn replace(&mut self, messages: impl IntoIterator<Item = Message>) {
        let list = Arc::make_mut(&mut self.messages);
        list.retain(|m| m.role() == Role::System);
        list.extend(messages.into_iter().filter(|m| m.role() != Role::System));
        self.recount();
        self.trim();
    }

    /// Drops every message but the system prompts.
    pub fn clear_turns(&mut self) {
        Arc::make_mut(&mut self.messages).retain(|m| m.role() == Role::System);
        self.recount();
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

    fn recount(&mut self) {
        self.bytes = self.messages.iter().map(size_of).sum();
    }

    fn over(&self, count: usize, bytes: usize) -> bool {
        count > self.limits.max_messages || bytes > self.limits.max_bytes
    }

    /// Drops the oldest turns, a turn at a time, while the context is past a bound.
    ///
    /// A turn is one message, or an assistant message with tool calls and the tool results
    /// that follow it (system messages among them stay). The newest turn is never dropped.
    fn trim(&mut self) {
        if !self.over(self.messages.len(), self.bytes) {
            return;
        }
        let len = self.messages.len();
        let is_system = |i: usize| self.messages[i].role() == Role::System;
        let mut drop = vec![false; len];
        let (mut count, mut bytes) = (len, self.bytes);
        let mut next = 0;
        while self.over(count, bytes) {
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
            for (i, dropped) in drop.iter_mut().enumerate().take(end).skip(start) {
                if !is_system(i) {
                    *dropped = true;
                    count -= 1;
                    bytes -= size_of(&self.messages[i]);
                }
            }
            next = end;
        }
        let mut index = 0;
        Arc::make_mut(&mut self.messages).retain(|_| {
            index += 1;
            !drop[index - 1]
        });
        self.bytes = bytes;
    }
}

impl From<Vec<Message>> for Context {
    fn from(messages: Vec<Message>) -> Self {
        let mut context = Self {
            messages: Arc::new(messages),
            limits: ContextLimits::default(),
            bytes: 0,
        };
        context.recount();
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
}
