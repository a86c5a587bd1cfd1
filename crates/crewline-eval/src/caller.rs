//! The simulated caller: a model plays the caller from a persona and a goal, one turn at a
//! time, reading what the crew said.

use std::sync::Arc;

use crewline::{
    llm::{ChatRequest, LlmClient, RequestOptions},
    types::Message,
};

use crate::{judge, scenario::CallerSpec};

/// What the caller's model writes when the caller is done (goal reached or given up).
pub const END_MARK: &str = "[END]";
/// The most characters of one simulated caller turn said to the crew.
pub const MAX_CALLER_CHARS: usize = 1000;
/// The most tokens the caller's model is asked to answer in.
const MAX_CALLER_TOKENS: u32 = 200;

/// What the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Says this, and goes on.
    Say(String),
    /// Says this (perhaps nothing) and is done.
    End(String),
}

/// A model playing the caller.
#[derive(Clone)]
pub(crate) struct SimulatedCaller {
    client: Arc<dyn LlmClient>,
    instructions: String,
}

impl std::fmt::Debug for SimulatedCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedCaller").finish_non_exhaustive()
    }
}

impl SimulatedCaller {
    /// The caller `spec` describes, on its model.
    pub(crate) fn new(spec: &CallerSpec) -> Result<Self, String> {
        let instructions = format!(
            "You are playing a caller on a phone call with a voice agent, to test the agent. \
             Stay in your role; never say you are an AI or a test.\n\
             Who you are: {}\nYour goal: {}\n\
             Each message of yours is what you say next on the phone: one or two short spoken \
             sentences, no stage directions, no quotes. When your goal is reached, or the \
             agent cannot help, say a short goodbye and end your message with {END_MARK}.",
            spec.persona.trim(),
            spec.goal.trim()
        );
        Ok(Self {
            client: judge::client(&spec.llm, "simulated caller")?,
            instructions,
        })
    }

    /// What the caller says next, after `history`: each turn's (caller's words, crew's reply).
    pub(crate) async fn next(&self, history: &[(String, String)]) -> Result<Next, String> {
        let mut messages = vec![
            Message::system(self.instructions.clone()),
            Message::user("(The agent has picked up the phone.)"),
        ];
        for (said, heard) in history {
            messages.push(Message::assistant(said.clone()));
            messages.push(Message::user(if heard.trim().is_empty() {
                "(The agent said nothing.)".to_owned()
            } else {
                heard.clone()
            }));
        }
        let request = ChatRequest::new(messages).with_options(RequestOptions {
            max_tokens: Some(MAX_CALLER_TOKENS),
            ..RequestOptions::default()
        });
        let answer = self.client.chat(request).await.map_err(|error| {
            format!(
                "the simulated caller could not be asked: {}",
                crate::error_chain(&error)
            )
        })?;
        Ok(read_next(&answer.content))
    }
}

/// The caller's next move from its model's answer: the end mark makes it the last.
pub(crate) fn read_next(answer: &str) -> Next {
    let ended = answer.contains(END_MARK);
    let words = answer.replace(END_MARK, " ");
    let words = words.split_whitespace().collect::<Vec<_>>().join(" ");
    let words: String = words.chars().take(MAX_CALLER_CHARS).collect();
    if ended || words.is_empty() {
        Next::End(words)
    } else {
        Next::Say(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_mark_ends_the_call_and_is_not_said() {
        assert_eq!(
            read_next("What's the weather  in Paris?"),
            Next::Say("What's the weather in Paris?".to_owned())
        );
        assert_eq!(
            read_next("Thanks, bye! [END]"),
            Next::End("Thanks, bye!".to_owned())
        );
        assert_eq!(read_next("[END]"), Next::End(String::new()));
        assert_eq!(read_next("   "), Next::End(String::new()));
        let long = "a".repeat(MAX_CALLER_CHARS * 2);
        assert!(matches!(read_next(&long), Next::Say(w) if w.len() == MAX_CALLER_CHARS));
    }
}
