//! A platform client: plays the voice platform's part against a crew over a real WebSocket
//! ([`PlatformClient::connect`]), or in this process with no socket
//! ([`PlatformClient::in_process`]). Below it, [`raw`] is the same socket with no protocol on
//! top (raw frames, close codes), and [`http`] a raw HTTP/1.1 client for the server's other
//! routes.
//!
//! It does what the platform (and the reference's `agent-crew chat`) does: the `system.init`
//! handshake, one `agent.transcript.update` plus one `system.llm.request` per user turn with
//! the whole conversation it keeps (the platform's conversation is the authoritative one), and
//! the assistant's transcript after each answer. It reads the crew's frames on a task of its
//! own and stamps each on arrival, so the latencies it reports do not depend on how fast the
//! caller consumes them.
//!
//! ```no_run
//! use crewline_testkit::platform::{PlatformClient, PlatformConfig};
//!
//! # async fn run() -> Result<(), crewline_testkit::platform::PlatformError> {
//! let mut client = PlatformClient::connect(PlatformConfig::new("ws://127.0.0.1:8080/ws")).await?;
//! let mut turn = client.user_turn("What's the weather in Paris?")?;
//! while let Some(frame) = turn.next().await? {
//!     tracing::info!(?frame, "crew frame");
//! }
//! let summary = turn.finish().await?;
//! tracing::info!(ttfc = ?summary.time_to_first_chunk, text = %summary.text, "turn done");
//! # Ok(()) }
//! ```

mod frame;
pub mod http;
mod in_process;
pub mod raw;
mod socket;
mod turn;

use std::{collections::VecDeque, sync::Arc, time::Duration};

use crewline::{
    protocol::{
        self, Caller, ConversationType, Event, EventBody, OutputAgentSettings, SessionContext,
        SystemInit, TranscriptRole, TranscriptUpdate,
    },
    session::CrewSetup,
};
use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio::{
    sync::{OwnedSemaphorePermit, mpsc},
    task::JoinHandle,
    time::Instant,
};
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};

pub use frame::{CrewFrame, ReceivedFrame, ToolLog};
pub(crate) use in_process::{SetupFn, shared as shared_setup};
pub use socket::open_socket;
pub use socket::{INBOUND_BYTES, MAX_MESSAGE_BYTES, MAX_TURN_BYTES};
use socket::{read_frames, write_frames};
pub use turn::{InterruptReport, ToolActivity, ToolOutcome, Turn, TurnFrame, TurnSummary};

/// Which way a frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapDirection {
    /// From the crew.
    In,
    /// To the crew.
    Out,
}

/// Sees every frame a call sends and receives, its bytes as they went over the socket; see
/// [`PlatformClient::connect_tapped`]. Called on the client's reader and writer tasks: keep
/// it quick.
#[derive(Clone)]
pub struct FrameTap(Arc<SeeFrame>);

/// What a [`FrameTap`] calls with each frame.
type SeeFrame = dyn Fn(TapDirection, &[u8]) + Send + Sync;

impl FrameTap {
    /// A tap calling `see` with each frame.
    pub fn new(see: impl Fn(TapDirection, &[u8]) + Send + Sync + 'static) -> Self {
        Self(Arc::new(see))
    }

    fn see(&self, direction: TapDirection, bytes: &[u8]) {
        (self.0)(direction, bytes);
    }
}

impl std::fmt::Debug for FrameTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameTap")
    }
}

/// How many received frames may wait for the caller before the reader stops reading.
const INBOUND_CAPACITY: usize = 4096;

/// How long each step of a session may take before the client gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP connect plus the WebSocket upgrade.
    pub connect: Duration,
    /// From sending `system.init` to `agent.ready`.
    pub ready: Duration,
    /// The longest silence within a turn (a slow model or tool must fit in it).
    pub frame: Duration,
    /// The longest whole turn, from the request to `end`.
    pub turn: Duration,
    /// After an interrupted turn's `end`, how long to keep listening for leaked chunks.
    pub leak_window: Duration,
    /// How long `close` waits for the crew to acknowledge the close.
    pub close: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            ready: Duration::from_secs(15),
            frame: Duration::from_secs(60),
            turn: Duration::from_secs(180),
            leak_window: Duration::from_millis(300),
            close: Duration::from_secs(5),
        }
    }
}

/// Who the client says it is in `system.init`, and how it talks.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformConfig {
    /// The crew's WebSocket address, e.g. `ws://127.0.0.1:8080/ws`.
    pub url: String,
    /// Shared secret, sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// The protocol version announced in `system.init`.
    pub version: String,
    /// The channel of the call.
    pub conversation_type: ConversationType,
    /// The call's variables (the ones the agent prompt is rendered from).
    pub initial_variables: Map<String, Value>,
    /// The caller's identity (telephony).
    pub caller: Option<Caller>,
    /// Whether the output agent may be interrupted.
    pub interruptible: bool,
    /// Whether to send `system.user.joined` after the handshake, as the platform does.
    pub send_user_joined: bool,
    /// How long each step may take.
    pub timeouts: Timeouts,
}

impl PlatformConfig {
    /// A web call to `url` with no variables, interruptible, with default timeouts.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            token: None,
            version: "1.0".to_owned(),
            conversation_type: ConversationType::Webcall,
            initial_variables: Map::new(),
            caller: None,
            interruptible: true,
            send_user_joined: true,
            timeouts: Timeouts::default(),
        }
    }

    /// The `system.init` event this configuration sends.
    pub fn init_event(&self) -> Event {
        Event::now(EventBody::SystemInit(SystemInit {
            version: self.version.clone(),
            session_context: SessionContext {
                initial_variables: self.initial_variables.clone(),
                conversation_type: self.conversation_type,
                caller: self.caller.clone(),
            },
            output_agent_settings: Some(OutputAgentSettings {
                interruptible: self.interruptible,
                extra: Map::new(),
            }),
        }))
    }
}

/// Why the platform client failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlatformError {
    /// The URL is not a `ws://host[:port]/path` address.
    #[error("invalid crew URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The TCP connection or the WebSocket upgrade failed.
    #[error("could not connect to {url}")]
    Connect {
        /// The URL.
        url: String,
        /// The underlying error.
        #[source]
        source: Box<tungstenite::Error>,
    },
    /// The server answered the upgrade with an HTTP error (e.g. 401 for a wrong token).
    #[error("the crew refused the connection with HTTP {status}")]
    Refused {
        /// The HTTP status.
        status: u16,
    },
    /// A wait took longer than its timeout.
    #[error("timed out after {} ms waiting for {waiting_for}", after.as_millis())]
    Timeout {
        /// What the client was waiting for.
        waiting_for: &'static str,
        /// How long it waited.
        after: Duration,
    },
    /// The crew answered the handshake with `agent.error`.
    #[error("the crew rejected the handshake: {message}")]
    Rejected {
        /// The crew's error message.
        message: String,
    },
    /// The connection ended.
    #[error("the crew closed the connection{}", close_detail(*.code, reason))]
    Closed {
        /// The close code, if a close frame was received.
        code: Option<u16>,
        /// The close reason (may be empty).
        reason: String,
    },
    /// The crew already ended or transferred the call; it will not answer further turns.
    #[error("the crew has ended or transferred the call")]
    HandedOff,
    /// The crew sent more than [`MAX_TURN_BYTES`] in one turn.
    #[error("the crew sent more than {limit} bytes in one turn; the turn was abandoned")]
    TurnTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A frame the raw socket did not expect (a text frame where events are binary, bytes
    /// that are not JSON).
    #[error("expected {expected}, got {got}")]
    UnexpectedFrame {
        /// What the socket waited for.
        expected: &'static str,
        /// What came instead.
        got: String,
    },
}

fn close_detail(code: Option<u16>, reason: &str) -> String {
    match (code, reason.is_empty()) {
        (None, _) => " without a close frame".to_owned(),
        (Some(code), true) => format!(" (code {code})"),
        (Some(code), false) => format!(" (code {code}: {reason})"),
    }
}

/// What the reader task hands to the client.
// Nearly every item is a `Frame`, moved once through the channel: boxing it would only add
// an allocation per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A decoded frame, when it arrived, its size on the wire, and its share of the reader's
    /// byte budget (given back when the item is dropped: once the client has taken it).
    Frame(Instant, Event, usize, Option<OwnedSemaphorePermit>),
    /// A frame that is not a protocol event.
    Undecodable(String),
    /// The socket ended.
    Closed { code: Option<u16>, reason: String },
}

/// What [`PlatformClient::accept`] made of a reader item.
// Short-lived and mostly `Frame`; boxing would only add an allocation per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Accepted {
    /// A crew frame.
    Frame(ReceivedFrame),
    /// An echo of a platform event; `interrupt` when it echoes `system.control.interrupt`.
    Echo { interrupt: bool },
    /// Not a protocol event.
    Skipped,
}

/// Counts of frames the client received but did not hand to a turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Echoes of the client's own (platform) events, recognised and skipped.
    pub echoes: usize,
    /// Frames that were not protocol events (logged and skipped).
    pub undecodable: usize,
    /// Chunks that arrived outside any turn (after an `end`, before the next `start`).
    pub stray_chunks: usize,
    /// Frames outside a turn dropped, oldest first, because more than [`INBOUND_BYTES`] of
    /// them waited for a [`PlatformClient::recv_idle`] that never came.
    pub dropped_out_of_turn: usize,
}

/// How a call was handed off by the crew.
#[derive(Debug, Clone, PartialEq)]
pub enum Handoff {
    /// `agent.end_call`.
    EndCall,
    /// `agent.transfer_call` to this number.
    Transfer(String),
}

/// A connected platform session with a crew: one call.
///
/// # Examples
///
/// One turn against a crew, frame by frame, as the platform sees it:
///
/// ```
/// # use std::sync::Arc;
/// # use crewline::{Crew, agent::LoopAgent, crew::OutputNode, SessionSetup, ToolLoop};
/// # use crewline::{llm::{Reply, ScriptedLlm}, tool::ToolRegistry};
/// # fn setup(_: &SessionSetup) -> Result<Crew, std::io::Error> {
/// #     let llm = ScriptedLlm::new([Reply::text("Hello! How can I help?")]);
/// #     let agent = LoopAgent::new("Be brief.", ToolLoop::new(Arc::new(llm), Arc::new(ToolRegistry::new())));
/// #     let mut crew = Crew::new();
/// #     crew.add_node(OutputNode::new("assistant", agent));
/// #     Ok(crew)
/// # }
/// use crewline_testkit::{PlatformClient, TestCrew};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let crew = TestCrew::serve(setup).await?; // or any `ws://host:port/ws`
/// let mut client = PlatformClient::connect(crew.config()).await?;
///
/// let mut turn = client.user_turn("Hi")?;
/// let mut chunks = 0;
/// while let Some(frame) = turn.next().await? {
///     chunks += usize::from(frame.frame.wire_type() == "agent.llm.response.chunk");
/// }
/// let summary = turn.finish().await?;
/// assert_eq!(summary.text, "Hello! How can I help?");
/// assert_eq!(summary.chunks, chunks);
/// assert_eq!(summary.wire_types().first(), Some(&"agent.llm.response.start"));
/// assert!(summary.time_to_first_chunk.is_some());
///
/// // The client keeps the conversation, as the platform does.
/// assert_eq!(client.messages().len(), 2); // the user's words and the answer
/// client.close().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PlatformClient {
    outbound: mpsc::UnboundedSender<WsMessage>,
    inbound: mpsc::Receiver<Inbound>,
    reader: JoinHandle<()>,
    timeouts: Timeouts,
    /// The conversation as the platform knows it: user and assistant turns.
    messages: Vec<Value>,
    /// Crew frames that arrived outside a turn, for [`PlatformClient::recv_idle`].
    out_of_turn: VecDeque<ReceivedFrame>,
    /// The wire bytes of `out_of_turn`, kept under [`INBOUND_BYTES`].
    out_of_turn_bytes: usize,
    /// A turn was started and has not seen its `end` yet.
    turn_open: bool,
    handoff: Option<Handoff>,
    closed: Option<(Option<u16>, String)>,
    stats: ClientStats,
}

impl Drop for PlatformClient {
    fn drop(&mut self) {
        // Nobody reads any more. The writer ends by itself: the queue closes with the client,
        // and it then sends a close frame (bounded by `WRITE_TIMEOUT`).
        self.reader.abort();
    }
}

impl PlatformClient {
    /// Connects, sends `system.init` (and `system.user.joined`), and waits for `agent.ready`.
    pub async fn connect(config: PlatformConfig) -> Result<Self, PlatformError> {
        Self::connect_with(config, None).await
    }

    async fn connect_with(
        config: PlatformConfig,
        tap: Option<FrameTap>,
    ) -> Result<Self, PlatformError> {
        let timeouts = config.timeouts;
        let socket = tokio::time::timeout(timeouts.connect, open_socket(&config))
            .await
            .map_err(|_| PlatformError::Timeout {
                waiting_for: "the WebSocket connection",
                after: timeouts.connect,
            })??;
        let (sink, stream) = socket.split();
        let (in_tx, in_rx) = mpsc::channel(INBOUND_CAPACITY);
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        // Detached: it ends when the queue closes or the socket fails (see `write_frames`).
        tokio::spawn(write_frames(sink, out_rx, tap.clone()));
        let reader = tokio::spawn(read_frames(stream, in_tx, INBOUND_BYTES, tap));
        Self::open(config, out_tx, in_rx, reader).await
    }

    /// [`PlatformClient::connect`], showing `tap` every frame the call sends and receives, as
    /// it goes over the socket (e.g. to record the call, as `crewline chat --record` does).
    pub async fn connect_tapped(
        config: PlatformConfig,
        tap: FrameTap,
    ) -> Result<Self, PlatformError> {
        Self::connect_with(config, Some(tap)).await
    }

    /// Starts a call to the crew `setup` builds, in this process: no socket, no port. The
    /// call's session runs here, fed the frames a socket would carry (`config.url` is not
    /// used); everything else (the handshake, turns, timeouts, hand-offs, closing) is as for
    /// [`PlatformClient::connect`].
    ///
    /// `setup` is what a [`CrewServer`](crewline_server::CrewServer) would call for the
    /// call; an error or a panic in it rejects the handshake as the server does.
    pub async fn in_process<M>(
        config: PlatformConfig,
        setup: impl CrewSetup<M>,
    ) -> Result<Self, PlatformError> {
        Self::connect_in_process(config, in_process::shared(setup)).await
    }

    /// [`PlatformClient::in_process`] with the setup already shared.
    pub(crate) async fn connect_in_process(
        config: PlatformConfig,
        setup: SetupFn,
    ) -> Result<Self, PlatformError> {
        let (in_tx, in_rx) = mpsc::channel(INBOUND_CAPACITY);
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let call = tokio::spawn(in_process::run_call(setup, out_rx, in_tx));
        Self::open(config, out_tx, in_rx, call).await
    }

    /// The handshake over a connected transport: `outbound` carries the client's frames,
    /// `inbound` the crew's, and `reader` is the task feeding `inbound` (aborted on drop).
    async fn open(
        config: PlatformConfig,
        outbound: mpsc::UnboundedSender<WsMessage>,
        inbound: mpsc::Receiver<Inbound>,
        reader: JoinHandle<()>,
    ) -> Result<Self, PlatformError> {
        let mut client = Self {
            outbound,
            inbound,
            reader,
            timeouts: config.timeouts,
            messages: Vec::new(),
            out_of_turn: VecDeque::new(),
            out_of_turn_bytes: 0,
            turn_open: false,
            handoff: None,
            closed: None,
            stats: ClientStats::default(),
        };
        client.send_event(config.init_event())?;
        client.wait_ready().await?;
        if config.send_user_joined {
            client.send(EventBody::UserJoined)?;
        }
        Ok(client)
    }

    async fn wait_ready(&mut self) -> Result<(), PlatformError> {
        let deadline = Instant::now() + self.timeouts.ready;
        loop {
            let item =
                self.recv_until(deadline, "agent.ready")
                    .await?
                    .ok_or(PlatformError::Timeout {
                        waiting_for: "agent.ready",
                        after: self.timeouts.ready,
                    })?;
            match item {
                Inbound::Frame(_, event, _, _) => match event.body {
                    EventBody::AgentReady => return Ok(()),
                    EventBody::AgentError(error) => {
                        return Err(PlatformError::Rejected {
                            message: error.message,
                        });
                    }
                    other => {
                        tracing::debug!(?other, "frame before agent.ready, skipped");
                    }
                },
                Inbound::Undecodable(error) => {
                    self.stats.undecodable += 1;
                    tracing::warn!(%error, "undecodable frame during the handshake");
                }
                Inbound::Closed { code, reason } => {
                    self.closed = Some((code, reason.clone()));
                    return Err(PlatformError::Closed { code, reason });
                }
            }
        }
    }

    /// Sends one event of the platform as a binary frame, stamped now.
    pub fn send(&self, body: EventBody) -> Result<(), PlatformError> {
        self.send_event(Event::now(body))
    }

    /// Sends one event as a binary frame, keeping its timestamp.
    pub fn send_event(&self, event: Event) -> Result<(), PlatformError> {
        // The reference platform sends binary frames.
        self.outbound
            .send(WsMessage::Binary(protocol::encode(&event).into()))
            .map_err(|_| self.closed_error())
    }

    fn closed_error(&self) -> PlatformError {
        let (code, reason) = self.closed.clone().unwrap_or((None, String::new()));
        PlatformError::Closed { code, reason }
    }

    /// Starts a user turn: sends `agent.transcript.update` (user) and `system.llm.request` with
    /// the whole conversation, then returns the turn, whose frames arrive with
    /// [`Turn::next`].
    ///
    /// A previous turn dropped before its `end` is abandoned: its frames still buffered are
    /// discarded (chunks among them count as stray), and its answer is not added to the
    /// conversation.
    pub fn user_turn(&mut self, text: impl Into<String>) -> Result<Turn<'_>, PlatformError> {
        if self.handoff.is_some() {
            return Err(PlatformError::HandedOff);
        }
        if let Some((code, reason)) = self.closed.clone() {
            return Err(PlatformError::Closed { code, reason });
        }
        if self.turn_open {
            self.discard_buffered();
        }
        let text = text.into();
        self.send(EventBody::TranscriptUpdate(TranscriptUpdate {
            role: TranscriptRole::User,
            content: text.clone(),
        }))?;
        self.messages
            .push(json!({"role": "user", "content": &text}));
        self.send(EventBody::LlmRequest(crewline::protocol::LlmRequest {
            messages: Some(crewline::protocol::Messages::from_values(&self.messages)),
            extra_params: Map::new(),
        }))?;
        let sent_at = Instant::now();
        self.turn_open = true;
        Ok(Turn::new(self, text, sent_at))
    }

    /// Sends `system.control.interrupt` outside a turn (a turn has [`Turn::interrupt`]).
    pub fn send_interrupt(&self) -> Result<(), PlatformError> {
        self.send(EventBody::Interrupt)
    }

    /// Waits up to `wait` for a crew frame outside a turn (e.g. `agent.speak`), skipping
    /// echoes; `Ok(None)` when nothing came.
    ///
    /// Cancel-safe: a frame is never lost when the future is dropped, so this can sit in a
    /// `select!` against user input.
    pub async fn recv_idle(
        &mut self,
        wait: Duration,
    ) -> Result<Option<ReceivedFrame>, PlatformError> {
        if let Some(frame) = self.out_of_turn.pop_front() {
            self.out_of_turn_bytes -= frame.bytes;
            return Ok(Some(frame));
        }
        let deadline = Instant::now() + wait;
        loop {
            let Some(item) = self.recv_until(deadline, "a crew frame").await? else {
                return Ok(None);
            };
            if let Accepted::Frame(frame) = self.accept(item)? {
                if matches!(frame.frame, CrewFrame::Chunk { .. }) {
                    self.stats.stray_chunks += 1;
                }
                return Ok(Some(frame));
            }
        }
    }

    /// The conversation as the platform holds it (OpenAI chat messages).
    pub fn messages(&self) -> &[Value] {
        &self.messages
    }

    /// Replaces the conversation (e.g. to start a turn with a prepared history).
    pub fn set_messages(&mut self, messages: Vec<Value>) {
        self.messages = messages;
    }

    /// The crew's hand-off, once it ended or transferred the call.
    pub fn handoff(&self) -> Option<&Handoff> {
        self.handoff.as_ref()
    }

    /// Frames received but not handed to a turn.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// Whether the socket has ended.
    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    /// Closes the call (close code 1000) and waits for the crew to close its side.
    pub async fn close(mut self) -> Result<(), PlatformError> {
        if self.closed.is_some() {
            return Ok(());
        }
        // If the writer is gone the socket is already dead; waiting below still settles it.
        let _ = self.outbound.send(WsMessage::Close(None));
        let deadline = Instant::now() + self.timeouts.close;
        loop {
            match self.recv_until(deadline, "the close handshake").await {
                Ok(None) => {
                    return Err(PlatformError::Timeout {
                        waiting_for: "the close handshake",
                        after: self.timeouts.close,
                    });
                }
                // Closed either way: by the handshake, or by the socket ending.
                Ok(Some(Inbound::Closed { .. })) | Err(PlatformError::Closed { .. }) => {
                    return Ok(());
                }
                Ok(Some(_)) => {}
                Err(error) => return Err(error),
            }
        }
    }

    /// Receives the next reader item before `deadline`; `Ok(None)` on timeout.
    ///
    /// Cancel-safe (only `mpsc::Receiver::recv` is awaited).
    async fn recv_until(
        &mut self,
        deadline: Instant,
        waiting_for: &'static str,
    ) -> Result<Option<Inbound>, PlatformError> {
        if let Some((code, reason)) = self.closed.clone() {
            return Err(PlatformError::Closed { code, reason });
        }
        match tokio::time::timeout_at(deadline, self.inbound.recv()).await {
            Err(_) => Ok(None),
            Ok(Some(item)) => Ok(Some(item)),
            Ok(None) => {
                tracing::debug!(waiting_for, "reader ended");
                self.closed = Some((None, String::new()));
                Err(self.closed_error())
            }
        }
    }

    /// Turns a reader item into a crew frame: echoes and undecodable frames are counted and
    /// skipped, a close is an error, hand-offs are remembered.
    fn accept(&mut self, item: Inbound) -> Result<Accepted, PlatformError> {
        match item {
            Inbound::Frame(at, event, bytes, _) => {
                let interrupt = matches!(event.body, EventBody::Interrupt);
                match CrewFrame::from_body(event.body) {
                    None => {
                        self.stats.echoes += 1;
                        Ok(Accepted::Echo { interrupt })
                    }
                    Some(frame) => {
                        match &frame {
                            CrewFrame::EndCall => self.handoff = Some(Handoff::EndCall),
                            CrewFrame::Transfer(transfer) => {
                                self.handoff =
                                    Some(Handoff::Transfer(transfer.transfer_call_number.clone()));
                            }
                            _ => {}
                        }
                        Ok(Accepted::Frame(ReceivedFrame { at, frame, bytes }))
                    }
                }
            }
            Inbound::Undecodable(error) => {
                self.stats.undecodable += 1;
                tracing::warn!(%error, "undecodable frame from the crew, skipped");
                Ok(Accepted::Skipped)
            }
            Inbound::Closed { code, reason } => {
                self.closed = Some((code, reason.clone()));
                Err(PlatformError::Closed { code, reason })
            }
        }
    }

    /// Keeps a frame that came outside a turn for [`PlatformClient::recv_idle`]. A caller that
    /// only takes turns never asks for them: past [`INBOUND_BYTES`] the oldest are dropped
    /// (and counted), so a long call's log events between turns cannot grow without end.
    fn keep_out_of_turn(&mut self, frame: ReceivedFrame) {
        self.out_of_turn_bytes += frame.bytes;
        self.out_of_turn.push_back(frame);
        while self.out_of_turn_bytes > INBOUND_BYTES {
            let Some(oldest) = self.out_of_turn.pop_front() else {
                break;
            };
            self.out_of_turn_bytes -= oldest.bytes;
            self.stats.dropped_out_of_turn += 1;
        }
    }

    /// Drops what an abandoned turn left in the buffer, without waiting.
    fn discard_buffered(&mut self) {
        while let Ok(item) = self.inbound.try_recv() {
            match self.accept(item) {
                Ok(Accepted::Frame(ReceivedFrame {
                    frame: CrewFrame::Chunk { .. },
                    ..
                })) => self.stats.stray_chunks += 1,
                Ok(Accepted::Frame(frame)) => self.keep_out_of_turn(frame),
                Ok(_) => {}
                // Remembered in `closed`; the next send reports it.
                Err(_) => break,
            }
        }
        self.turn_open = false;
    }

    /// Adds the assistant's answer to the conversation and tells the crew, as the platform
    /// does once the answer was spoken.
    fn commit_assistant(&mut self, text: &str) -> Result<(), PlatformError> {
        self.turn_open = false;
        if text.is_empty() {
            return Ok(());
        }
        self.messages
            .push(json!({"role": "assistant", "content": text}));
        self.send(EventBody::TranscriptUpdate(TranscriptUpdate {
            role: TranscriptRole::Assistant,
            content: text.to_owned(),
        }))
    }
}
