//! The in-process transport: a call's [`Session`] run in this process and fed the frames a
//! socket would carry, with no socket and no port.
//!
//! It does for one call what the crew server's connection does: the first frame must be
//! `system.init`; the crew's setup runs on it (an error or a panic rejects the handshake with
//! the server's `agent.error` and close code); the session starts and sends `agent.ready`;
//! then every client frame is decoded and dispatched, and every event the crew sends is
//! encoded and decoded on its way back, so an in-process test also checks the wire encoding
//! and its records match a socket test's. What the server adds around a call (auth, limits,
//! pings, drain) is not here: test those with [`TestCrew::serve`](crate::TestCrew::serve).

use std::{panic::AssertUnwindSafe, sync::Arc, time::Duration};

use crewline::{
    Crew, Session, SessionSetup,
    protocol::{self, AgentError, Event, EventBody, Severity, SystemInit},
    session::{CrewSetup, DispatchError},
};
use crewline_server::{BoxError, SetupError};
use futures::{FutureExt, future::BoxFuture};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use super::{Inbound, socket::decode};

/// A crew's setup function, shared by the calls of one [`TestCrew`](crate::TestCrew).
pub(crate) type SetupFn =
    Arc<dyn Fn(SessionSetup) -> BoxFuture<'static, Result<Crew, BoxError>> + Send + Sync>;

/// How many of the crew's events may wait for the client (the server's outbound queue).
const OUTBOUND_CAPACITY: usize = 1024;

/// The close codes the server uses (RFC 6455).
const NORMAL: u16 = 1000;
const POLICY: u16 = 1008;
const ERROR: u16 = 1011;

/// How long a crew's session may take to stop once the call has ended.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(5);

/// Runs one call: the handshake from the client's first frame, then the session until the
/// client closes or goes away.
pub(super) async fn run_call(
    setup: SetupFn,
    mut from_client: mpsc::UnboundedReceiver<WsMessage>,
    to_client: mpsc::Sender<Inbound>,
) {
    let init = match handshake(&mut from_client).await {
        Ok(init) => init,
        Err(Some(refusal)) => return refusal.send(&to_client).await,
        Err(None) => return,
    };
    let (outbound, events) = mpsc::channel(OUTBOUND_CAPACITY);
    let session_setup = SessionSetup::new(init, outbound);
    let session = match start(&setup, session_setup).await {
        Ok(session) => session,
        Err(refusal) => return refusal.send(&to_client).await,
    };
    // Both directions at once, as the server's reader and writer tasks: a client that does
    // not read the crew's frames yet can still interrupt it.
    let closed = tokio::select! {
        closed = dispatch(&session, &mut from_client, &to_client) => closed,
        () = forward(events, &to_client) => false,
    };
    if tokio::time::timeout(SHUTDOWN_BOUND, session.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("the crew's session did not stop in time");
    }
    if closed {
        // The server's WebSocket layer answers the platform's close frame with its own.
        let _ = to_client
            .send(Inbound::Closed {
                code: Some(NORMAL),
                reason: String::new(),
            })
            .await;
    }
}

/// Why a call was refused: the `agent.error` and the close frame the server would send.
struct Refusal {
    message: String,
    reason: &'static str,
    code: u16,
    close_reason: &'static str,
}

impl Refusal {
    async fn send(self, to_client: &mpsc::Sender<Inbound>) {
        let mut payload = Map::new();
        payload.insert("reason".to_owned(), Value::String(self.reason.to_owned()));
        let error = Event::now(EventBody::AgentError(AgentError {
            message: self.message,
            severity: Severity::Fatal,
            payload,
        }));
        if to_client
            .send(decode(&protocol::encode(&error)))
            .await
            .is_ok()
        {
            let _ = to_client
                .send(Inbound::Closed {
                    code: Some(self.code),
                    reason: self.close_reason.to_owned(),
                })
                .await;
        }
    }

    fn setup(error: &SetupError) -> Self {
        let (reason, close_reason) = match error {
            SetupError::Panicked(_) => ("setup_panicked", "crew setup failed"),
            SetupError::InvalidGraph(_) => ("invalid_graph", "invalid crew"),
            _ => ("setup_failed", "crew setup failed"),
        };
        Self {
            message: crewline::types::error_chain(error),
            reason,
            code: ERROR,
            close_reason,
        }
    }
}

/// Waits for the client's `system.init`; `Err(None)` when the client left first.
async fn handshake(
    from_client: &mut mpsc::UnboundedReceiver<WsMessage>,
) -> Result<SystemInit, Option<Refusal>> {
    let bytes = loop {
        match from_client.recv().await {
            Some(WsMessage::Binary(bytes)) => break bytes.to_vec(),
            Some(WsMessage::Text(text)) => break text.as_bytes().to_vec(),
            Some(WsMessage::Close(_)) | None => return Err(None),
            Some(_) => {}
        }
    };
    match protocol::decode(&bytes) {
        Ok(Event {
            body: EventBody::SystemInit(init),
            ..
        }) => Ok(init),
        Ok(event) => Err(Some(Refusal {
            message: format!(
                "expected system.init as the first frame, got {}",
                event.body.type_name()
            ),
            reason: "not_init",
            code: POLICY,
            close_reason: "expected system.init first",
        })),
        Err(error) => Err(Some(Refusal {
            message: format!(
                "expected system.init as the first frame: {}",
                crewline::types::ErrorChain(&error)
            ),
            reason: "bad_frame",
            code: POLICY,
            close_reason: "invalid handshake",
        })),
    }
}

/// Runs the crew's setup (catching a panic, as the server does) and starts the session.
async fn start(setup: &SetupFn, session_setup: SessionSetup) -> Result<Session, Refusal> {
    let for_user = session_setup.clone();
    let built = AssertUnwindSafe(async move { setup(for_user).await })
        .catch_unwind()
        .await;
    let crew = match built {
        Ok(Ok(crew)) => crew,
        Ok(Err(error)) => return Err(Refusal::setup(&SetupError::Failed(error))),
        Err(panic) => {
            let message = crewline::types::panic_message(panic.as_ref()).to_owned();
            return Err(Refusal::setup(&SetupError::Panicked(message)));
        }
    };
    Session::start(crew, session_setup)
        .await
        .map_err(|error| Refusal::setup(&SetupError::InvalidGraph(error)))
}

/// The shared form of a crew author's setup.
pub(crate) fn shared<M>(setup: impl CrewSetup<M>) -> SetupFn {
    Arc::new(move |session: SessionSetup| setup.setup(session))
}

/// Dispatches the client's frames to the session until the client closes (`true`) or goes
/// away (`false`).
async fn dispatch(
    session: &Session,
    from_client: &mut mpsc::UnboundedReceiver<WsMessage>,
    to_client: &mpsc::Sender<Inbound>,
) -> bool {
    while let Some(message) = from_client.recv().await {
        let bytes: &[u8] = match &message {
            WsMessage::Binary(bytes) => bytes,
            WsMessage::Text(text) => text.as_bytes(),
            WsMessage::Close(_) => return true,
            _ => continue,
        };
        match protocol::decode(bytes) {
            Ok(event) => match session.dispatch_frame(event, bytes.len()) {
                Ok(()) => {}
                Err(error @ (DispatchError::Full(_) | DispatchError::OverBudget { .. })) => {
                    // The server tells the platform about an event it lost.
                    let warning = Event::now(EventBody::AgentError(AgentError {
                        message: error.to_string(),
                        severity: Severity::Warning,
                        payload: Map::from_iter([(
                            "reason".to_owned(),
                            Value::String("inbox_full".to_owned()),
                        )]),
                    }));
                    if to_client
                        .send(decode(&protocol::encode(&warning)))
                        .await
                        .is_err()
                    {
                        return false;
                    }
                }
                Err(error) => {
                    tracing::debug!(error = %crewline::types::ErrorChain(&error), "event not delivered")
                }
            },
            Err(error) => {
                tracing::warn!(error = %crewline::types::ErrorChain(&error), "dropped an undecodable frame from the client")
            }
        }
    }
    false
}

/// Hands the crew's events to the client, through the wire encoding, until the client goes
/// away.
async fn forward(mut events: mpsc::Receiver<Box<Event>>, to_client: &mpsc::Sender<Inbound>) {
    while let Some(event) = events.recv().await {
        if to_client
            .send(decode(&protocol::encode(&event)))
            .await
            .is_err()
        {
            return;
        }
    }
    // Unreachable while the session's setup holds a sender: wait for the client instead.
    std::future::pending::<()>().await;
}
