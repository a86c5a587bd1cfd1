//! The call's controls: speech out of turn, hanging up, transferring.

use std::sync::{Arc, Mutex, PoisonError};

use crewline_protocol::{
    Event, EventBody, HoldMusic, SessionContext, SystemInit, TransferCall, TransferOptions,
};
use crewline_tools::SessionScope;
use tokio::sync::mpsc;

/// A hand-off that ends the crew's part in the call.
#[derive(Debug, Clone, PartialEq)]
pub enum Handoff {
    /// `agent.end_call`.
    EndCall,
    /// `agent.transfer_call`.
    Transfer(TransferCall),
}

impl Handoff {
    pub(crate) fn into_body(self) -> EventBody {
        match self {
            Self::EndCall => EventBody::EndCall,
            Self::Transfer(transfer) => EventBody::TransferCall(transfer),
        }
    }
}

/// Why a call control could not act.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallControlError {
    /// The call already ended or was transferred.
    #[error("the call was already handed off (ended or transferred)")]
    HandedOff,
    /// The session is over (the platform hung up).
    #[error("the session has ended")]
    SessionEnded,
}

/// The controls of one call, shared by its nodes and tools (cheap to clone).
///
/// Hand-offs requested while an output node is generating (typically from a tool) are held
/// until the generation completes: an interrupted generation's hand-off is never sent.
#[derive(Clone)]
pub struct CallControl {
    inner: Arc<Inner>,
}

struct Inner {
    init: SystemInit,
    /// Names this call in the executor: its cached results, approvals and running
    /// non-cancellable tools are its own.
    scope: SessionScope,
    outbound: mpsc::Sender<Box<Event>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Generations in progress (by turn id) that hold hand-offs back.
    generating: Option<String>,
    /// A hand-off requested during the current generation.
    pending: Option<Handoff>,
    /// A hand-off was sent: the crew stops answering.
    handed_off: bool,
}

impl CallControl {
    /// Controls for a call that sends its events to `outbound` (the platform).
    pub(crate) fn new(init: SystemInit, outbound: mpsc::Sender<Box<Event>>) -> Self {
        Self {
            inner: Arc::new(Inner {
                init,
                scope: SessionScope::new(),
                outbound,
                state: Mutex::new(State::default()),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The call's context from the handshake.
    pub fn session_context(&self) -> &SessionContext {
        &self.inner.init.session_context
    }

    /// The handshake itself.
    pub fn init(&self) -> &SystemInit {
        &self.inner.init
    }

    /// The call's session scope, minted once per call: pass it on every tool call's context
    /// (`CallContext::with_scope`, [`ToolLoop::with_scope`](crate::ToolLoop::with_scope)) so
    /// nothing the executor keeps for this caller reaches another.
    pub fn scope(&self) -> &SessionScope {
        &self.inner.scope
    }

    /// Whether the call was ended or transferred.
    pub fn is_handed_off(&self) -> bool {
        self.state().handed_off
    }

    /// Whether a hand-off was asked for: already sent, or held until the current generation
    /// completes. An agent stops speaking once this is true.
    pub fn handoff_requested(&self) -> bool {
        let state = self.state();
        state.handed_off || state.pending.is_some()
    }

    /// Says `text` to the caller now, outside a turn (`agent.speak`).
    pub async fn speak(&self, text: impl Into<String>) -> Result<(), CallControlError> {
        self.send(EventBody::Speak { text: text.into() }).await
    }

    /// Hangs up after the current turn (`agent.end_call`).
    pub async fn end_call(&self) -> Result<(), CallControlError> {
        self.hand_off(Handoff::EndCall).await
    }

    /// Transfers the call after the current turn (`agent.transfer_call`).
    pub async fn transfer_call(
        &self,
        number: impl Into<String>,
        options: TransferOptions,
        on_hold_music: Option<HoldMusic>,
    ) -> Result<(), CallControlError> {
        self.hand_off(Handoff::Transfer(TransferCall {
            transfer_call_number: number.into(),
            transfer_options: options,
            on_hold_music,
        }))
        .await
    }

    /// Mutes the caller's microphone on the platform.
    pub async fn mute_user(&self) -> Result<(), CallControlError> {
        self.send(EventBody::MuteUser).await
    }

    /// Unmutes the caller's microphone on the platform.
    pub async fn unmute_user(&self) -> Result<(), CallControlError> {
        self.send(EventBody::UnmuteUser).await
    }

    async fn hand_off(&self, handoff: Handoff) -> Result<(), CallControlError> {
        {
            let mut state = self.state();
            if state.handed_off {
                return Err(CallControlError::HandedOff);
            }
            if state.generating.is_some() {
                // Held until the generation completes; the last request wins.
                state.pending = Some(handoff);
                return Ok(());
            }
            state.handed_off = true;
        }
        self.send_raw(handoff.into_body()).await
    }

    async fn send(&self, body: EventBody) -> Result<(), CallControlError> {
        if self.is_handed_off() {
            return Err(CallControlError::HandedOff);
        }
        self.send_raw(body).await
    }

    async fn send_raw(&self, body: EventBody) -> Result<(), CallControlError> {
        self.inner
            .outbound
            .send(Box::new(Event::now(body)))
            .await
            .map_err(|_| CallControlError::SessionEnded)
    }

    /// Marks the start of a generation: hand-offs are held from now on.
    pub(crate) fn begin_generation(&self, turn_id: &str) {
        let mut state = self.state();
        state.generating = Some(turn_id.to_owned());
        state.pending = None;
    }

    /// Ends a generation; returns the held hand-off to send if it completed, dropping it if
    /// it was interrupted.
    pub(crate) fn finish_generation(&self, completed: bool) -> Option<Handoff> {
        let mut state = self.state();
        state.generating = None;
        let pending = state.pending.take();
        match pending {
            Some(handoff) if completed && !state.handed_off => {
                state.handed_off = true;
                Some(handoff)
            }
            _ => None,
        }
    }
}

impl std::fmt::Debug for CallControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallControl")
            .field(
                "conversation_type",
                &self.inner.init.session_context.conversation_type,
            )
            .field("handed_off", &self.is_handed_off())
            .finish()
    }
}
