use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, value::RawValue};

use crate::Timestamp;

/// One protocol event: what happened and when.
///
/// # Examples
///
/// A platform frame in, the crew's answer out:
///
/// ```
/// use crewline_protocol::{Event, EventBody, decode, encode};
///
/// let frame = br#"{"type": "system.llm.request", "timestamp": 1767225600.5,
///     "messages": [{"role": "user", "content": "Hi"}], "extra_params": {}}"#;
/// let event = decode(frame)?;
/// assert_eq!(event.body.type_name(), "system.llm.request");
/// let EventBody::LlmRequest(request) = &event.body else { panic!("not a request") };
/// let messages = request.messages.as_ref().map(|m| m.as_json());
/// assert_eq!(messages, Some(r#"[{"role":"user","content":"Hi"}]"#)); // JSON text, to echo back
///
/// let answer = Event::with_timestamp(
///     "2026-01-01T00:00:00",
///     EventBody::ResponseChunk { text: "Hello!".into() },
/// );
/// let bytes = encode(&answer);
/// assert_eq!(decode(&bytes)?, answer); // what is encoded decodes back the same
/// assert!(!answer.is_interrupt());
/// assert!(decode(br#"{"type": "system.control.interrupt", "timestamp": 0}"#)?.is_interrupt());
/// # Ok::<(), crewline_protocol::DecodeError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When it happened.
    pub timestamp: Timestamp,
    /// What happened.
    pub body: EventBody,
}

/// What an event says, by type.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
// `SystemInit` is the big variant (a few hundred bytes with serde_json's ordered maps), but it
// arrives once per call; boxing it would change a type other crates build and match on, to
// save a memcpy that costs far less than encoding the frame.
#[allow(clippy::large_enum_variant)]
pub enum EventBody {
    /// `system.init`: the platform's handshake, always the first frame.
    SystemInit(SystemInit),
    /// `system.user.joined`.
    UserJoined,
    /// `system.user.started_speaking`.
    UserStartedSpeaking,
    /// `system.user.stopped_speaking`.
    UserStoppedSpeaking,
    /// `system.llm.request`: the platform asks for an LLM turn.
    LlmRequest(LlmRequest),
    /// `system.control.interrupt`: the caller barged in.
    Interrupt,
    /// `system.output_agent.update_settings` (deprecated: parsed, not acted on).
    UpdateSettings {
        /// The new settings.
        settings: Map<String, Value>,
    },
    /// `agent.transcript.update`: a message to add to the conversation.
    TranscriptUpdate(TranscriptUpdate),
    /// `agent.ready`: the crew's handshake answer.
    AgentReady,
    /// `agent.error`.
    AgentError(AgentError),
    /// `agent.llm.response.start`.
    ResponseStart {
        /// The id of the turn, also used as `turn_id` in tool logs.
        request_id: Option<String>,
    },
    /// `agent.llm.response.chunk`.
    ResponseChunk {
        /// A piece of the answer.
        text: String,
    },
    /// `agent.llm.response.end`.
    ResponseEnd,
    /// `agent.speak`: out-of-turn speech.
    Speak {
        /// What to say.
        text: String,
    },
    /// `agent.end_call`.
    EndCall,
    /// `agent.transfer_call`.
    TransferCall(TransferCall),
    /// `agent.log`: an entry on the call's event timeline.
    Log {
        /// The entry's name (e.g. `tool_call_start`).
        name: String,
        /// Its data.
        payload: Map<String, Value>,
    },
    /// `agent.control.mute_user`.
    MuteUser,
    /// `agent.control.unmute_user`.
    UnmuteUser,
    /// `agent.control.interrupt`: the crew asks the platform to stop speaking.
    AgentInterrupt,
}

/// The `system.init` handshake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemInit {
    /// The platform's protocol version.
    pub version: String,
    /// Who is calling and how.
    pub session_context: SessionContext,
    /// Settings for the output node.
    #[serde(default)]
    pub output_agent_settings: Option<OutputAgentSettings>,
}

/// The call's context, from the handshake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionContext {
    /// Per-call variables (the ones the agent prompt is rendered from).
    #[serde(default)]
    pub initial_variables: Map<String, Value>,
    /// The channel.
    pub conversation_type: ConversationType,
    /// The caller's identity on telephony; `None` on web calls and chat.
    #[serde(default)]
    pub caller: Option<Caller>,
}

/// The channel of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConversationType {
    /// An inbound phone call.
    #[serde(rename = "telephonyInbound")]
    TelephonyInbound,
    /// An outbound phone call.
    #[serde(rename = "telephonyOutbound")]
    TelephonyOutbound,
    /// A text chat.
    #[serde(rename = "chat")]
    Chat,
    /// A call from a web page.
    #[serde(rename = "webcall")]
    Webcall,
    /// A supervisor agent.
    #[serde(rename = "supervisor_agent")]
    SupervisorAgent,
}

/// The caller's identity on a phone call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Caller {
    /// The caller's number.
    #[serde(default)]
    pub user_number: Option<String>,
    /// The number dialled.
    #[serde(default)]
    pub agent_number: Option<String>,
    /// `inbound` or `outbound`.
    #[serde(default)]
    pub direction: Option<String>,
    /// The platform's call id.
    #[serde(default)]
    pub call_id: Option<String>,
    /// Any other keys the platform sends, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Settings of the output node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputAgentSettings {
    /// Whether the caller may interrupt the agent.
    #[serde(default = "yes")]
    pub interruptible: bool,
    /// Any other keys the platform sends, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn yes() -> bool {
    true
}

impl Default for OutputAgentSettings {
    fn default() -> Self {
        Self {
            interruptible: true,
            extra: Map::new(),
        }
    }
}

/// `system.llm.request`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LlmRequest {
    /// The platform's authoritative conversation, as OpenAI chat messages (kept as the JSON
    /// text that was sent: see [`Messages`]).
    #[serde(default)]
    pub messages: Option<Messages>,
    /// Extra parameters for the model.
    #[serde(default)]
    pub extra_params: Map<String, Value>,
}

/// The conversation of a `system.llm.request`: a JSON array of OpenAI chat messages, kept as
/// JSON text (the platform's, or its compact form after decoding a whole event).
///
/// A request carries the whole conversation and the output node echoes it back; keeping the
/// text means it is neither built into a tree of JSON values on the way in nor re-encoded on
/// the way out. Read it typed with [`Messages::parse`] or as values with [`Messages::values`].
///
/// # Examples
///
/// ```
/// use crewline_core::Message;
/// use crewline_protocol::Messages;
///
/// let messages = Messages::from_json(r#"[{"role": "user", "content": "Hi"}, {"role": "alien"}]"#)?;
/// let read: Vec<Result<Message, _>> = messages.parse()?.collect();
/// assert_eq!(read[0].as_ref().ok(), Some(&Message::user("Hi")));
/// assert!(read[1].is_err()); // one odd message does not hide the others
/// assert!(Messages::from_json(r#"{"role": "user"}"#).is_err()); // must be an array
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Messages(Box<RawValue>);

impl Messages {
    /// The conversation made of `messages`.
    pub fn from_values(messages: &[Value]) -> Self {
        // A slice of values always serializes to valid JSON; the `null` fallback (read as no
        // conversation) is never taken.
        let raw =
            serde_json::value::to_raw_value(messages).unwrap_or_else(|_| RawValue::NULL.to_owned());
        Self(raw)
    }

    /// The conversation in `json`, which must be a JSON array.
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        let raw: Box<RawValue> = serde_json::from_str(json)?;
        Self::from_raw(raw)
    }

    pub(crate) fn from_raw(raw: Box<RawValue>) -> Result<Self, serde_json::Error> {
        if raw.get().trim_start().starts_with('[') {
            Ok(Self(raw))
        } else {
            Err(serde::de::Error::invalid_type(
                serde::de::Unexpected::Other("a JSON value that is not an array"),
                &"an array of messages",
            ))
        }
    }

    /// The JSON text of the array.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// The messages as JSON values.
    pub fn values(&self) -> Result<Vec<Value>, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// Each message read as a `T` (a message that does not fit is an `Err` in its place, so
    /// one odd message does not hide the others).
    pub fn parse<'a, T: serde::de::DeserializeOwned + 'a>(
        &'a self,
    ) -> Result<impl ExactSizeIterator<Item = Result<T, serde_json::Error>> + 'a, serde_json::Error>
    {
        // One pass over the text when every message reads (nearly always); only a conversation
        // with an odd message is split into items and read item by item.
        if let Ok(all) = serde_json::from_str::<Vec<T>>(self.0.get()) {
            return Ok(Parsed::All(all.into_iter()));
        }
        let items: Vec<&RawValue> = serde_json::from_str(self.0.get())?;
        Ok(Parsed::Each(items.into_iter()))
    }
}

/// The messages of [`Messages::parse`]: all read at once, or each item on its own.
enum Parsed<'a, T> {
    All(std::vec::IntoIter<T>),
    Each(std::vec::IntoIter<&'a RawValue>),
}

impl<T: serde::de::DeserializeOwned> Iterator for Parsed<'_, T> {
    type Item = Result<T, serde_json::Error>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::All(all) => all.next().map(Ok),
            Self::Each(items) => items.next().map(|item| serde_json::from_str(item.get())),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Self::All(all) => all.size_hint(),
            Self::Each(items) => items.size_hint(),
        }
    }
}

impl<T: serde::de::DeserializeOwned> ExactSizeIterator for Parsed<'_, T> {}

/// Equal when the JSON text is the same.
impl PartialEq for Messages {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Serialize for Messages {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Self::from_raw(raw).map_err(serde::de::Error::custom)
    }
}

/// `agent.transcript.update`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptUpdate {
    /// Who spoke.
    pub role: TranscriptRole,
    /// What was said.
    pub content: String,
}

/// Who spoke, in a transcript update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TranscriptRole {
    /// The caller.
    User,
    /// The agent.
    Assistant,
}

/// `agent.error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentError {
    /// What went wrong.
    pub message: String,
    /// Whether the call can go on.
    #[serde(default)]
    pub severity: Severity,
    /// Details (`node_name`, `error_class`, `traceback` for node errors).
    #[serde(default)]
    pub payload: Map<String, Value>,
}

/// How bad an `agent.error` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The call goes on.
    #[default]
    Warning,
    /// The turn (or call) failed.
    Fatal,
}

/// `agent.transfer_call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferCall {
    /// Where to transfer the call.
    pub transfer_call_number: String,
    /// How.
    #[serde(default)]
    pub transfer_options: TransferOptions,
    /// What the caller hears while waiting.
    #[serde(default)]
    pub on_hold_music: Option<HoldMusic>,
}

/// How a call is transferred.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TransferOptions {
    /// Cold or warm.
    #[serde(default, rename = "type")]
    pub kind: TransferType,
    /// What the receiving agent hears privately (warm transfer).
    #[serde(default, alias = "privateHandoffOption")]
    pub private_handoff_option: Option<HandoffOption>,
    /// What both sides hear (warm transfer).
    #[serde(default, alias = "publicHandoffOption")]
    pub public_handoff_option: Option<HandoffOption>,
}

/// Cold or warm transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferType {
    /// Hand the call over at once.
    #[default]
    ColdTransfer,
    /// Brief the receiving agent first.
    WarmTransfer,
}

/// A hand-off message for a warm transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffOption {
    /// Generated from a prompt, or said as is.
    #[serde(rename = "type")]
    pub kind: HandoffKind,
    /// The prompt or the text.
    pub prompt: String,
}

/// How a hand-off message is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HandoffKind {
    /// Generated from the prompt.
    Prompt,
    /// Said as written.
    Static,
}

/// What the caller hears on hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldMusic {
    /// A ringtone.
    Ringtone,
    /// Relaxing sounds.
    RelaxingSound,
    /// Uplifting beats.
    UpliftingBeats,
    /// Silence.
    None,
}

impl Event {
    /// An event stamped with the current local time, in the reference's format.
    pub fn now(body: EventBody) -> Self {
        Self {
            timestamp: Timestamp::now(),
            body,
        }
    }

    /// An event with a given timestamp (e.g. one forwarded with its original timestamp).
    pub fn with_timestamp(timestamp: impl Into<Timestamp>, body: EventBody) -> Self {
        Self {
            timestamp: timestamp.into(),
            body,
        }
    }

    /// Whether this is the platform's barge-in (`system.control.interrupt`), which must
    /// overtake queued events.
    pub fn is_interrupt(&self) -> bool {
        matches!(self.body, EventBody::Interrupt)
    }
}

impl EventBody {
    /// The wire `type` of this event, e.g. `agent.llm.response.chunk`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::SystemInit(_) => "system.init",
            Self::UserJoined => "system.user.joined",
            Self::UserStartedSpeaking => "system.user.started_speaking",
            Self::UserStoppedSpeaking => "system.user.stopped_speaking",
            Self::LlmRequest(_) => "system.llm.request",
            Self::Interrupt => "system.control.interrupt",
            Self::UpdateSettings { .. } => "system.output_agent.update_settings",
            Self::TranscriptUpdate(_) => "agent.transcript.update",
            Self::AgentReady => "agent.ready",
            Self::AgentError(_) => "agent.error",
            Self::ResponseStart { .. } => "agent.llm.response.start",
            Self::ResponseChunk { .. } => "agent.llm.response.chunk",
            Self::ResponseEnd => "agent.llm.response.end",
            Self::Speak { .. } => "agent.speak",
            Self::EndCall => "agent.end_call",
            Self::TransferCall(_) => "agent.transfer_call",
            Self::Log { .. } => "agent.log",
            Self::MuteUser => "agent.control.mute_user",
            Self::UnmuteUser => "agent.control.unmute_user",
            Self::AgentInterrupt => "agent.control.interrupt",
        }
    }
}

impl AgentError {
    /// An error with an empty payload.
    pub fn new(message: impl Into<String>, severity: Severity) -> Self {
        Self {
            message: message.into(),
            severity,
            payload: Map::new(),
        }
    }
}
