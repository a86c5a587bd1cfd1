use crate::{Message, Role};

/// The conversation an agent keeps across turns.
///
/// System prompts are the agent's own: [`Context::replace`] swaps the conversation turns for
/// the platform's authoritative copy but keeps them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    messages: Vec<Message>,
}

impl Context {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// A context that starts with one system prompt.
    pub fn with_system(prompt: impl Into<String>) -> Self {
        Self {
            messages: vec![Message::system(prompt)],
        }
    }

    /// Appends one message.
    pub fn add(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// Appends several messages in order.
    pub fn add_many(&mut self, messages: impl IntoIterator<Item = Message>) {
        self.messages.extend(messages);
    }

    /// Replaces the conversation with `messages`, keeping this context's system prompts.
    ///
    /// System messages in `messages` are dropped: the agent's prompt is not the platform's to
    /// change.
    pub fn replace(&mut self, messages: impl IntoIterator<Item = Message>) {
        self.messages.retain(|m| m.role() == Role::System);
        self.messages
            .extend(messages.into_iter().filter(|m| m.role() != Role::System));
    }

    /// Drops every message but the system prompts.
    pub fn clear_turns(&mut self) {
        self.messages.retain(|m| m.role() == Role::System);
    }

    /// The messages in order.
    pub fn messages(&self) -> &[Message] {
        &self.messages
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
}

impl From<Vec<Message>> for Context {
    fn from(messages: Vec<Message>) -> Self {
        Self { messages }
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
}
