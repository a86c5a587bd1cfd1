//! A silent caller: after a while of silence the agent checks whether the caller is still
//! there, and after a few unanswered checks it says goodbye and ends the call.
//!
//! The silence is read from the platform's own events: `system.user.started_speaking` and
//! `system.user.stopped_speaking`, the end of the agent's reply, and the caller joining. An
//! [`IdlePolicy`] on an agent ([`AgentBuilder::idle`](crate::agent::AgentBuilder::idle)) or on
//! an output node ([`OutputNode::idle`](crate::crew::OutputNode::idle)) turns it on; a crew
//! without one sends exactly what it sent before.
//!
//! ```
//! use std::time::Duration;
//!
//! use crewline::{idle::IdlePolicy, llm::ScriptedLlm, prelude::*};
//!
//! let agent = Agent::builder(ScriptedLlm::new([]))
//!     .prompt("You are a friendly voice assistant.")
//!     // 10 s of silence, two nudges, then goodbye and `agent.end_call`.
//!     .idle(IdlePolicy::phone_call())
//!     .build()?;
//!
//! // Or: eight seconds, one nudge the model words, then the goodbye.
//! let policy = IdlePolicy::phone_call()
//!     .silence(Duration::from_secs(8))
//!     .nudges(1)
//!     .nudge_generated("Ask in a few words whether the caller is still on the line.")
//!     .goodbye("I'll let you go now. Goodbye!");
//! assert_eq!(policy.nudge_count(), 1);
//! # Ok::<(), crewline::agent::AgentError>(())
//! ```
//!
//! The rules, for every call whose conversation type the policy covers (phone calls and web
//! calls; never a `chat`):
//! - The silence starts when the caller stops speaking, when the agent's reply ends, when a
//!   nudge has been said, and when the caller joins.
//! - It never runs while the caller speaks (`started_speaking` without its `stopped_speaking`,
//!   or a barge-in) or while a reply streams: nothing is said over either.
//! - Any caller speech (`started_speaking`, a user transcript, an LLM request) starts the
//!   count of nudges over.
//! - A nudge is `agent.speak` with the policy's text, or with what the model says to a short
//!   instruction (no tools; the fixed text if the model fails or takes longer than the
//!   silence). After [`nudge_count`](IdlePolicy::nudge_count) nudges without an answer, the
//!   goodbye is said and `agent.end_call` sent; the call then takes no more turns, as after any
//!   hand-off.
//! - Each nudge and the goodbye are preceded by an `agent.log` entry named `idle` (payload
//!   `{step: "nudge" | "goodbye", nudge, of, silence_ms}`) for the call's timeline.
//! - Like every `agent.speak` of the crew ([`CallControl::speak`](crate::CallControl::speak)),
//!   a nudge is not added to the agent's conversation: the conversation each request brings
//!   is the platform's, the authoritative one (a platform's assistant transcript of it is
//!   added as any other).
//!
//! The timer is a deadline in the output node's own task: nothing outlives the call. An
//! output node behind other nodes sees the caller's speaking events only if they forward them
//! ([`BackgroundNode::forward_events`](crate::crew::BackgroundNode::forward_events)).

use std::{fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use crewline_core::{Message, Role};
use crewline_llm::{ChatRequest, LlmClient, RequestOptions};
use crewline_protocol::{ConversationType, EventBody, TranscriptRole};
use serde_json::{Map, Value};
use tokio::time::{Instant, Sleep};

/// The silence before a nudge in [`IdlePolicy::phone_call`]: 10 s.
///
/// Counted from when the reply's text has been sent, not from when its audio ends (the crew
/// does not see playback): a two-sentence reply takes the platform's voice 4-5 s to say, so
/// the caller has had about 5 s of real silence when the nudge comes. pipecat's example waits
/// 5 s from the end of the audio, livekit-agents marks a user away after 15 s.
pub const DEFAULT_SILENCE: Duration = Duration::from_secs(10);
/// How many nudges [`IdlePolicy::phone_call`] says before the goodbye.
pub const DEFAULT_NUDGES: u32 = 2;
/// What [`IdlePolicy::phone_call`] says as a nudge.
pub const DEFAULT_NUDGE: &str = "Are you still there?";
/// What [`IdlePolicy::phone_call`] says before it ends the call.
pub const DEFAULT_GOODBYE: &str =
    "I haven't heard from you, so I'll end the call now. Thanks for calling, goodbye!";
/// The shortest silence a policy takes: a shorter one is taken as this.
pub const MIN_SILENCE: Duration = Duration::from_secs(1);
/// The most bytes of a generated nudge or goodbye that are said (cut at a character).
pub const MAX_IDLE_SPEECH_BYTES: usize = 500;

/// What the agent says at a step of the silence: a fixed text, or the model's words.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdleSpeech {
    /// These words.
    Text(String),
    /// What the model says to the conversation and this instruction (without tools).
    Generated {
        /// The instruction, added as the last system message of the request.
        instruction: String,
        /// What is said if the model fails, says nothing, or takes longer than the silence.
        fallback: String,
    },
}

impl IdleSpeech {
    /// The fixed words, or the fallback of generated ones.
    fn fallback(&self) -> &str {
        match self {
            Self::Text(text) => text,
            Self::Generated { fallback, .. } => fallback,
        }
    }
}

/// When and how an agent handles a silent caller; see the [module](self).
#[derive(Clone)]
pub struct IdlePolicy {
    silence: Duration,
    nudges: u32,
    nudge: IdleSpeech,
    goodbye: IdleSpeech,
    /// The conversation types the policy runs in.
    types: Vec<ConversationType>,
    /// The model of generated speech, and the options of its requests.
    model: Option<(Arc<dyn LlmClient>, RequestOptions)>,
}

impl fmt::Debug for IdlePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdlePolicy")
            .field("silence", &self.silence)
            .field("nudges", &self.nudges)
            .field("nudge", &self.nudge)
            .field("goodbye", &self.goodbye)
            .field("conversation_types", &self.types)
            .field("model", &self.model.is_some())
            .finish()
    }
}

impl Default for IdlePolicy {
    fn default() -> Self {
        Self::phone_call()
    }
}

impl IdlePolicy {
    /// The defaults of a live phone call: [`DEFAULT_SILENCE`], [`DEFAULT_NUDGES`] nudges of
    /// [`DEFAULT_NUDGE`], then [`DEFAULT_GOODBYE`] and `agent.end_call`; on for phone and
    /// web calls, off for `chat` and `supervisor_agent`.
    pub fn phone_call() -> Self {
        Self {
            silence: DEFAULT_SILENCE,
            nudges: DEFAULT_NUDGES,
            nudge: IdleSpeech::Text(DEFAULT_NUDGE.to_owned()),
            goodbye: IdleSpeech::Text(DEFAULT_GOODBYE.to_owned()),
            types: vec![
                ConversationType::TelephonyInbound,
                ConversationType::TelephonyOutbound,
                ConversationType::Webcall,
            ],
            model: None,
        }
    }

    /// The silence before each nudge and before the goodbye (at least [`MIN_SILENCE`]).
    pub fn silence(mut self, silence: Duration) -> Self {
        self.silence = silence.max(MIN_SILENCE);
        self
    }

    /// How many nudges are said before the goodbye (0: the goodbye after the first silence).
    pub fn nudges(mut self, nudges: u32) -> Self {
        self.nudges = nudges;
        self
    }

    /// Says `text` as each nudge.
    pub fn nudge(mut self, text: impl Into<String>) -> Self {
        self.nudge = IdleSpeech::Text(text.into());
        self
    }

    /// Has the model word each nudge, told `instruction`; the nudge's text so far (default
    /// [`DEFAULT_NUDGE`]) is said if it cannot.
    pub fn nudge_generated(mut self, instruction: impl Into<String>) -> Self {
        self.nudge = IdleSpeech::Generated {
            instruction: instruction.into(),
            fallback: self.nudge.fallback().to_owned(),
        };
        self
    }

    /// Says `text` before ending the call.
    pub fn goodbye(mut self, text: impl Into<String>) -> Self {
        self.goodbye = IdleSpeech::Text(text.into());
        self
    }

    /// Has the model word the goodbye, told `instruction`; the goodbye's text so far (default
    /// [`DEFAULT_GOODBYE`]) is said if it cannot.
    pub fn goodbye_generated(mut self, instruction: impl Into<String>) -> Self {
        self.goodbye = IdleSpeech::Generated {
            instruction: instruction.into(),
            fallback: self.goodbye.fallback().to_owned(),
        };
        self
    }

    /// The conversation types the policy runs in (default: both telephony types and
    /// `webcall`).
    pub fn conversation_types(mut self, types: impl IntoIterator<Item = ConversationType>) -> Self {
        self.types = types.into_iter().collect();
        self
    }

    /// The model that words generated nudges, with its request options: an
    /// [`Agent`](crate::Agent) sets its own; an output node of your own needs it (an `Arc`
    /// of the model the node's agent shares is a model too).
    pub fn model(mut self, model: impl LlmClient + 'static, options: RequestOptions) -> Self {
        self.model = Some((Arc::new(model), options));
        self
    }

    /// This policy with `model` for its generated speech, unless it has one already.
    pub(crate) fn or_model(mut self, model: &Arc<dyn LlmClient>, options: &RequestOptions) -> Self {
        if self.model.is_none() {
            self.model = Some((Arc::clone(model), options.clone()));
        }
        self
    }

    /// The silence before each nudge and the goodbye.
    pub fn silence_before_nudge(&self) -> Duration {
        self.silence
    }

    /// How many nudges come before the goodbye.
    pub fn nudge_count(&self) -> u32 {
        self.nudges
    }

    /// What each nudge says.
    pub fn nudge_speech(&self) -> &IdleSpeech {
        &self.nudge
    }

    /// What the goodbye says.
    pub fn goodbye_speech(&self) -> &IdleSpeech {
        &self.goodbye
    }

    /// Whether the policy runs in calls of `conversation_type`.
    pub fn applies_to(&self, conversation_type: ConversationType) -> bool {
        self.types.contains(&conversation_type)
    }
}

/// A step of the silence: a nudge (1-based) or the goodbye.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdleStep {
    Nudge(u32),
    Goodbye,
}

/// What a watch has to act on.
pub(crate) enum IdleDue {
    /// The silence is over: say the next step.
    Silence,
    /// The words of a generated step are ready (`None`: the model failed or said nothing).
    Worded(IdleStep, Option<String>),
}

type Wording = Pin<Box<dyn Future<Output = Option<String>> + Send>>;

/// One call's silence: the policy, the caller's state and the deadline.
pub(crate) struct IdleWatch {
    policy: Arc<IdlePolicy>,
    /// The caller is speaking (started without stopped, or a barge-in).
    speaking: bool,
    /// Nudges said since the caller last spoke.
    said: u32,
    /// Whether `sleep` is set for the silence.
    armed: bool,
    /// Boxed once: reset for every silence, polled in the node's loop.
    sleep: Pin<Box<Sleep>>,
    /// A generated step being worded, and which one.
    wording: Option<(IdleStep, Wording)>,
}

impl IdleWatch {
    /// A watch for a call of `conversation_type`, if `policy` runs in it.
    pub(crate) fn new(
        policy: Arc<IdlePolicy>,
        conversation_type: ConversationType,
    ) -> Option<Self> {
        if !policy.applies_to(conversation_type) {
            tracing::debug!(
                ?conversation_type,
                "idle policy off for this conversation type"
            );
            return None;
        }
        Some(Self {
            policy,
            speaking: false,
            said: 0,
            armed: false,
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            wording: None,
        })
    }

    /// Starts the silence now (unless the caller is speaking).
    fn arm(&mut self) {
        if self.speaking {
            return;
        }
        self.armed = true;
        self.sleep
            .as_mut()
            .reset(Instant::now() + self.policy.silence);
    }

    /// Stops the silence and any step being worded.
    fn disarm(&mut self) {
        self.armed = false;
        self.wording = None;
    }

    /// Takes in one of the call's events, before the node handles it.
    pub(crate) fn observe(&mut self, body: &EventBody) {
        match body {
            EventBody::UserStartedSpeaking => {
                self.speaking = true;
                self.said = 0;
                self.disarm();
            }
            EventBody::UserStoppedSpeaking => {
                self.speaking = false;
                self.arm();
            }
            // A barge-in is the caller speaking; its `stopped_speaking` (or the next request)
            // starts the silence.
            EventBody::Interrupt => {
                self.speaking = true;
                self.disarm();
            }
            // The caller's turn is over and a reply comes: nothing until it ends.
            EventBody::LlmRequest(_) => {
                self.speaking = false;
                self.said = 0;
                self.disarm();
            }
            EventBody::TranscriptUpdate(update) if update.role == TranscriptRole::User => {
                self.said = 0;
                if self.armed {
                    self.arm();
                }
            }
            EventBody::UserJoined => self.arm(),
            _ => {}
        }
    }

    /// The agent's reply has ended (answered, failed or not answered): the silence starts,
    /// unless the caller barged in.
    pub(crate) fn reply_ended(&mut self) {
        self.arm();
    }

    /// Waits for what is due: the end of the silence, or a generated step's words. Cancel
    /// safe: the deadline and the wording stay in the watch.
    pub(crate) fn poll_due(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<IdleDue> {
        use std::task::Poll;
        if let Some((step, wording)) = self.wording.as_mut() {
            let step = *step;
            return match wording.as_mut().poll(cx) {
                Poll::Ready(words) => {
                    self.wording = None;
                    Poll::Ready(IdleDue::Worded(step, words))
                }
                Poll::Pending => Poll::Pending,
            };
        }
        if !self.armed {
            return Poll::Pending;
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(IdleDue::Silence),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The silence is over and nothing of the caller's waits: the step to take now, and its
    /// fixed words (`None` when the model words it: it is being worded, see [`IdleDue`]).
    pub(crate) fn silence_over(&mut self, conversation: &[Message]) -> (IdleStep, Option<String>) {
        self.armed = false;
        let step = if self.said < self.policy.nudges {
            IdleStep::Nudge(self.said + 1)
        } else {
            IdleStep::Goodbye
        };
        let speech = match step {
            IdleStep::Nudge(_) => &self.policy.nudge,
            IdleStep::Goodbye => &self.policy.goodbye,
        };
        match (speech, &self.policy.model) {
            (IdleSpeech::Generated { instruction, .. }, Some((model, options))) => {
                let request = wording_request(conversation, instruction, options);
                let model = Arc::clone(model);
                // Bounded by the silence: a nudge later than that is worse than the fixed one.
                let within = self.policy.silence;
                self.wording = Some((
                    step,
                    Box::pin(async move {
                        match tokio::time::timeout(within, model.chat(request)).await {
                            Ok(Ok(answer)) => Some(answer.content),
                            Ok(Err(error)) => {
                                tracing::warn!(error = %crewline_core::ErrorChain(&error), "the model could not word the idle nudge: the fixed one is said");
                                None
                            }
                            Err(_) => {
                                tracing::warn!(
                                    ?within,
                                    "the model did not word the idle nudge in time: the fixed one is said"
                                );
                                None
                            }
                        }
                    }),
                ));
                (step, None)
            }
            (speech, _) => (step, Some(speech.fallback().to_owned())),
        }
    }

    /// The words to say for `step`: the model's (trimmed, bounded), else the fixed ones.
    pub(crate) fn words(&self, step: IdleStep, worded: Option<String>) -> String {
        let speech = match step {
            IdleStep::Nudge(_) => &self.policy.nudge,
            IdleStep::Goodbye => &self.policy.goodbye,
        };
        match worded.as_deref().map(str::trim).filter(|w| !w.is_empty()) {
            Some(words) => crewline_core::prefix(words, MAX_IDLE_SPEECH_BYTES).to_owned(),
            None => speech.fallback().to_owned(),
        }
    }

    /// A nudge was said: the next silence starts.
    pub(crate) fn nudged(&mut self) {
        self.said += 1;
        self.arm();
    }

    /// The `agent.log` entry that comes before `step` is said.
    pub(crate) fn log(&self, step: IdleStep) -> EventBody {
        let mut payload = Map::new();
        let (name, nudge) = match step {
            IdleStep::Nudge(n) => ("nudge", Some(n)),
            IdleStep::Goodbye => ("goodbye", None),
        };
        payload.insert("step".to_owned(), Value::from(name));
        payload.insert("nudge".to_owned(), nudge.map_or(Value::Null, Value::from));
        payload.insert("of".to_owned(), Value::from(self.policy.nudges));
        let silence_ms = u64::try_from(self.policy.silence.as_millis()).unwrap_or(u64::MAX);
        payload.insert("silence_ms".to_owned(), Value::from(silence_ms));
        EventBody::Log {
            name: "idle".to_owned(),
            payload,
        }
    }
}

/// The request that words a step: the conversation without its tool traffic, then the
/// instruction.
fn wording_request(
    conversation: &[Message],
    instruction: &str,
    options: &RequestOptions,
) -> ChatRequest {
    // No tools are offered: a conversation's tool calls and results would ask for them.
    let mut messages: Vec<Message> = conversation
        .iter()
        .filter(|message| match message.role() {
            Role::Tool => false,
            Role::Assistant => message.text().is_some_and(|text| !text.is_empty()),
            _ => true,
        })
        .map(|message| match message.role() {
            Role::Assistant => Message::assistant(message.text().unwrap_or_default()),
            _ => message.clone(),
        })
        .collect();
    messages.push(Message::system(instruction));
    let mut request = ChatRequest::new(messages);
    request.options = options.clone();
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_policy_runs_on_calls_not_chats_and_takes_no_silence_under_a_second() {
        let policy = IdlePolicy::default().silence(Duration::ZERO);
        assert_eq!(policy.silence_before_nudge(), MIN_SILENCE);
        assert!(policy.applies_to(ConversationType::TelephonyInbound));
        assert!(policy.applies_to(ConversationType::Webcall));
        assert!(!policy.applies_to(ConversationType::Chat));
        assert!(IdleWatch::new(Arc::new(policy), ConversationType::Chat).is_none());
    }

    #[tokio::test]
    async fn generated_words_are_trimmed_bounded_and_replaced_when_empty() {
        let policy = IdlePolicy::phone_call().nudge_generated("Check on the caller.");
        let watch =
            IdleWatch::new(Arc::new(policy), ConversationType::Webcall).expect("on for a web call");
        assert_eq!(
            watch.words(IdleStep::Nudge(1), Some("  Hello?  ".to_owned())),
            "Hello?"
        );
        assert_eq!(
            watch.words(IdleStep::Nudge(1), Some(" ".to_owned())),
            DEFAULT_NUDGE
        );
        assert_eq!(watch.words(IdleStep::Goodbye, None), DEFAULT_GOODBYE);
        let long = "é".repeat(MAX_IDLE_SPEECH_BYTES);
        assert!(watch.words(IdleStep::Nudge(1), Some(long)).len() <= MAX_IDLE_SPEECH_BYTES);
    }

    #[test]
    fn the_wording_request_has_no_tool_traffic_and_ends_with_the_instruction() {
        let call = crewline_core::ToolCall::new("call_1", "get_weather", "{}");
        let conversation = [
            Message::system("Be brief."),
            Message::user("Weather in Paris?"),
            Message::assistant_with_tools("", vec![call]),
            Message::tool("call_1", "18 degrees"),
            Message::assistant("It is 18 degrees."),
        ];
        let request = wording_request(
            &conversation,
            "Check on the caller.",
            &RequestOptions::default(),
        );
        let roles: Vec<Role> = request.messages.iter().map(Message::role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::System]
        );
        assert!(request.tools.is_empty());
    }
}
