//! Which failures move a turn to the next provider, and what happens once text was spoken.

use std::{sync::Arc, time::Duration};

use crewline_core::Message;

use crate::{ChatRequest, LlmError};

/// What a turn does when its provider fails after the caller already heard some of its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterText {
    /// End the turn with `line`, spoken after what was said (then the turn finishes
    /// normally): the caller hears a short excuse instead of silence. An empty line ends
    /// the turn quietly.
    End {
        /// The words spoken to end the turn.
        line: String,
    },
    /// Ask the next provider to go on from what was said: the spoken text is added as the
    /// assistant's message, then a user message asking to continue without repeating it; any
    /// repeat of it at the start of the new answer is cut. With no provider left, the turn
    /// ends with the failure.
    Continue,
}

/// The line [`AfterText::default`] speaks.
pub const DEFAULT_AFTER_TEXT_LINE: &str =
    " Sorry, I lost my train of thought. Could you say that again?";

impl Default for AfterText {
    fn default() -> Self {
        Self::End {
            line: DEFAULT_AFTER_TEXT_LINE.to_owned(),
        }
    }
}

/// The instruction sent with a continuation.
const CONTINUE_INSTRUCTION: &str = "Your previous answer was cut off after the words above. \
     Continue it from exactly where it stopped, without repeating anything already said.";

/// The request that asks the next provider to go on after `spoken`.
pub(super) fn continuation(request: &ChatRequest, spoken: &str) -> ChatRequest {
    let mut request = request.clone();
    let messages = Arc::make_mut(&mut request.messages);
    messages.push(Message::assistant(spoken));
    // A user message, not a system one: many chat templates (Mistral's, Llama's) refuse a
    // system message after the first, and want user and assistant to alternate.
    messages.push(Message::user(CONTINUE_INSTRUCTION));
    request
}

/// How a provider's failure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// The provider is unwell: try the next one, and count it against the provider's breaker.
    Provider,
    /// The provider is rate-limiting: try the next one, and skip this one for a while.
    RateLimited(Option<Duration>),
    /// The request or the answer is at fault (a bad request, an answer over the limits): any
    /// provider would fail it too, so the turn ends with it.
    Request,
}

/// How `error` counts.
pub(super) fn classify(error: &LlmError) -> Failure {
    match error {
        LlmError::Connect(_)
        | LlmError::Timeout(_)
        | LlmError::StreamCut(_)
        | LlmError::InvalidResponse(_)
        // A client of the team's own (a vendor SDK): its failures are taken as the provider's.
        | LlmError::Other(_) => Failure::Provider,
        LlmError::Api { status: Some(429), .. } => Failure::RateLimited(error.retry_after()),
        // An error event mid-stream (no status), a 5xx, or a provider that refuses this
        // provider's key or model (401, 403, 404): another provider can answer.
        LlmError::Api {
            status: None | Some(401 | 403 | 404 | 408 | 409 | 500..=599),
            ..
        } => Failure::Provider,
        LlmError::Api { .. }
        | LlmError::MissingApiKey
        | LlmError::Config(_)
        | LlmError::TooLarge { .. }
        | LlmError::TooManyToolCalls { .. } => Failure::Request,
    }
}
