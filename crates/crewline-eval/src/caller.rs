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
/// What the caller's model writes to talk over the reply to its words (a barge-in after
/// `caller.barge_in_after_chunks` chunks).
pub const BARGE_IN_MARK: &str = "[BARGE_IN]";
/// What the caller's model writes to say nothing for a while (`caller.silence_ms`).
pub const SILENCE_MARK: &str = "[SILENCE]";
/// What the caller's model reads after it barged in: the reply as far as it got, then this.
pub(crate) const INTERRUPTED_NOTE: &str = "(You interrupted the agent here.)";
/// The most characters of one simulated caller turn said to the crew.
pub const MAX_CALLER_CHARS: usize = 1000;
/// The most tokens the caller's model is asked to answer in.
const MAX_CALLER_TOKENS: u32 = 200;

/// What the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Says this, and goes on.
    Say(String),
    /// Says this, talks over the reply to it, and goes on.
    BargeIn(String),
    /// Says nothing for a while, and goes on.
    Silence,
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
             agent cannot help, say a short goodbye and end your message with {END_MARK}. \
             To talk over the agent's answer to your words (as an impatient caller does), end \
             your message with {BARGE_IN_MARK}. To stay silent for a while (thinking, or away \
             from the phone), answer only {SILENCE_MARK}.",
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

/// The caller's next move from its model's answer: the end mark makes it the last, the
/// silence mark a silence, the barge-in mark a barge-in on the reply (the marks are not said).
pub(crate) fn read_next(answer: &str) -> Next {
    let ended = answer.contains(END_MARK);
    let silent = answer.contains(SILENCE_MARK);
    let barges_in = answer.contains(BARGE_IN_MARK);
    let words = answer
        .replace(END_MARK, " ")
        .replace(SILENCE_MARK, " ")
        .replace(BARGE_IN_MARK, " ");
    let words = words.split_whitespace().collect::<Vec<_>>().join(" ");
    let words: String = words.chars().take(MAX_CALLER_CHARS).collect();
    if ended {
        Next::End(words)
    } else if silent {
        // Silence wins over words: the caller said it would say nothing.
        Next::Silence
    } else if words.is_empty() {
        Next::End(words)
    } else if barges_in {
        Next::BargeIn(words)
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

    #[test]
    fn the_barge_in_and_silence_marks_are_moves_not_words() {
        assert_eq!(
            read_next("Tell me a story. [BARGE_IN]"),
            Next::BargeIn("Tell me a story.".to_owned())
        );
        assert_eq!(read_next("[SILENCE]"), Next::Silence);
        assert_eq!(read_next("Hmm... [SILENCE]"), Next::Silence);
        assert_eq!(read_next("[BARGE_IN]"), Next::End(String::new()));
        assert_eq!(
            read_next("Bye [BARGE_IN] [END]"),
            Next::End("Bye".to_owned())
        );
    }
}
