//! A call's frames after its handshake: read, counted against its limits, dispatched to
//! the session, until something ends the call.

use std::{pin::Pin, time::Duration};

use axum::extract::ws::{Message, close_code};
use crewline::{CallControl, Session, protocol::Severity, session::DispatchError};
use crewline_http::OverBudget;
use futures::StreamExt;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use super::{
    BUDGET_CLOSE, Connection, FLOOD_CLOSE, IDLE_CLOSE, MAX_CONTROL_FRAMES_PER_SECOND,
    SHUTDOWN_CLOSE, SUPERSEDED_CLOSE,
    end::{End, too_big_message},
    truncate,
    writer::WriterEnd,
};
use crate::metrics::{ErrorKind, FrameDrop};

/// What keeps a call open between frames: its idle clock, its count of control frames, and
/// the signals that end it from outside.
struct Watch {
    /// Moved only when it fires early: one clock read per frame.
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
    last_inbound: Instant,
    control: ControlFrames,
    /// The server's drain deadline.
    close_calls: CancellationToken,
    /// A newer connection of the same call on this replica.
    superseded: Option<CancellationToken>,
    /// The call's controls: a newer connection on another replica.
    call: CallControl,
}

/// What one read does to the call.
enum Read {
    /// The call goes on.
    Go,
    /// The call ends.
    End(End),
    /// The platform broke a limit: the call is refused with a close of its own.
    Refuse(Refusal),
}

/// A limit the platform broke, which ends its call at once.
enum Refusal {
    /// A frame or message over the size limit: its size and the limit.
    TooBig(usize, usize),
    /// The read would have overdrawn the server's budget of unfinished messages.
    OverBudget(OverBudget),
    /// More pings and pongs a second than [`MAX_CONTROL_FRAMES_PER_SECOND`].
    ControlFlood,
}

impl Connection {
    /// Reads and dispatches frames until the call ends, then stops everything.
    pub(super) async fn run_session(&mut self, session: Session) -> End {
        let mut watch = self.watch(&session);
        let end = loop {
            let read = match self.next_inbound(&mut watch).await {
                Err(end) => Read::End(end),
                Ok(None) => Read::End(End::PeerClosed),
                Ok(Some(Err(error))) => self.read_failed(error),
                Ok(Some(Ok(message))) => self.take_message(&message, &session, &mut watch),
            };
            match read {
                Read::Go => {}
                Read::End(end) => break end,
                Read::Refuse(refusal) => return Box::pin(self.refuse(session, refusal)).await,
            }
        };
        // The way out runs once per call: on the heap, its state does not stay in every
        // connected call's task.
        Box::pin(self.finish_session(session, end)).await
    }

    fn watch(&self, session: &Session) -> Watch {
        let idle_timeout = self.service.config.limits.idle_timeout;
        let last_inbound = Instant::now();
        Watch {
            idle: Box::pin(tokio::time::sleep_until(last_inbound + idle_timeout)),
            idle_timeout,
            last_inbound,
            control: ControlFrames::new(),
            close_calls: self.service.state.close_calls.clone(),
            superseded: self
                .live
                .as_ref()
                .map(|entry| entry.live.superseded.clone()),
            call: session.call().clone(),
        }
    }

    /// Waits for the next read of the socket, or for what ends the call first: the drain
    /// deadline, a newer connection, the writer's end, the idle timeout.
    async fn next_inbound(
        &mut self,
        watch: &mut Watch,
    ) -> Result<Option<Result<Message, axum::Error>>, End> {
        loop {
            let next = tokio::select! {
                biased;
                () = watch.close_calls.cancelled() => return Err(End::ShuttingDown),
                () = wait_cancelled(watch.superseded.as_ref()) => return Err(End::Superseded),
                () = watch.call.superseded() => return Err(End::Superseded),
                ended = &mut self.writer, if !self.writer_done => {
                    self.writer_done = true;
                    return Err(self.writer_ended(ended));
                }
                () = watch.idle.as_mut() => {
                    let deadline = watch.last_inbound + watch.idle_timeout;
                    if deadline > Instant::now() {
                        watch.idle.as_mut().reset(deadline);
                        continue;
                    }
                    return Err(self.idle(watch.idle_timeout));
                }
                next = self.stream.next() => next,
            };
            watch.last_inbound = Instant::now();
            return Ok(next);
        }
    }

    /// The writer stopped: a write timed out (the platform stopped reading) or the socket broke.
    fn writer_ended(&self, ended: Result<WriterEnd, tokio::task::JoinError>) -> End {
        let metrics = &self.service.state.metrics;
        if let Ok(WriterEnd::TimedOut) = ended {
            metrics.error(ErrorKind::WriteTimeout);
            let timeout = self.service.config.limits.write_timeout;
            match self.service.state.call_logs.due(|l| &l.write_timeout) {
                Some(calls) => tracing::warn!(
                    calls,
                    ?timeout,
                    "a socket write timed out: the platform stopped reading; ending the call"
                ),
                None => tracing::debug!(?timeout, "a socket write timed out"),
            }
            return End::WriteTimeout;
        }
        metrics.error(ErrorKind::Socket);
        End::SocketError
    }

    /// No frame nor pong for `timeout`: a half-open connection.
    fn idle(&self, timeout: Duration) -> End {
        self.service.state.metrics.error(ErrorKind::IdleTimeout);
        match self.service.state.call_logs.due(|l| &l.idle) {
            Some(calls) => tracing::warn!(
                calls,
                ?timeout,
                "no frame or pong from the platform in time: closing a half-open call"
            ),
            None => tracing::debug!(?timeout, "idle timeout"),
        }
        End::Idle
    }

    /// A read of the socket failed.
    fn read_failed(&self, error: axum::Error) -> Read {
        match read_failure(error) {
            ReadFailure::TooBig(size, max) => Read::Refuse(Refusal::TooBig(size, max)),
            ReadFailure::OverBudget(over) => Read::Refuse(Refusal::OverBudget(over)),
            ReadFailure::Socket => {
                self.service.state.metrics.error(ErrorKind::Socket);
                Read::End(End::SocketError)
            }
        }
    }

    /// Takes one message: data goes to the session, control frames are counted.
    fn take_message(&self, message: &Message, session: &Session, watch: &mut Watch) -> Read {
        let bytes: &[u8] = match message {
            Message::Binary(bytes) => bytes,
            Message::Text(text) => text.as_str().as_bytes(),
            Message::Close(frame) => {
                tracing::debug!(code = frame.as_ref().map(|f| f.code), "the platform closed");
                return Read::End(End::PeerClosed);
            }
            // Pongs are answered by the WebSocket layer as pings are read.
            Message::Ping(_) | Message::Pong(_) => {
                if self.control_frame(message, &mut watch.control, watch.last_inbound) {
                    return Read::Refuse(Refusal::ControlFlood);
                }
                return Read::Go;
            }
        };
        self.message_done();
        self.dispatch(session, bytes);
        Read::Go
    }

    /// Decodes one data frame and hands its event to the session; a frame that is not an
    /// event is dropped, counted and logged.
    fn dispatch(&self, session: &Session, bytes: &[u8]) {
        let error = match crewline::protocol::decode(bytes) {
            Ok(event) => {
                match session.dispatch_frame(event, bytes.len()) {
                    Ok(()) => {}
                    // The session counts and logs what it drops; the platform is told, since
                    // the event is lost.
                    Err(error @ (DispatchError::Full(_) | DispatchError::OverBudget { .. })) => {
                        self.send_error(error.to_string(), "inbox_full", Severity::Warning);
                    }
                    Err(error) => {
                        tracing::debug!(error = %crewline::types::ErrorChain(&error), "event not delivered");
                    }
                }
                return;
            }
            Err(error) => error,
        };
        let kind = error.kind();
        self.service
            .state
            .metrics
            .frame_dropped(FrameDrop::from(kind));
        let kind = kind.as_str();
        let error = truncate(&crewline::types::error_chain(&error), 200).into_owned();
        match self.service.state.call_logs.due(|l| &l.bad_frame) {
            Some(frames) => tracing::warn!(
                frames,
                kind,
                bytes = bytes.len(),
                %error,
                "dropped an inbound frame"
            ),
            None => {
                tracing::debug!(kind, bytes = bytes.len(), %error, "dropped an inbound frame");
            }
        }
    }

    /// Ends a call whose platform broke a limit: the session stops, the platform reads why,
    /// and the socket is closed without reading on (that would read the flood on).
    async fn refuse(&mut self, session: Session, refusal: Refusal) -> End {
        let (message, reason, close, end) = match refusal {
            Refusal::TooBig(size, max) => {
                self.service.state.metrics.frame_dropped(FrameDrop::TooBig);
                match self.service.state.call_logs.due(|l| &l.too_big) {
                    Some(calls) => {
                        tracing::warn!(calls, size, max, "frame too large: closing the call")
                    }
                    None => tracing::debug!(size, max, "frame too large: closing the call"),
                }
                session.shutdown().await;
                self.send_error(too_big_message(size, max), "too_big", Severity::Fatal);
                // A frame too large is the platform's to see: its close is awaited.
                self.close(close_code::SIZE, "frame too large").await;
                return End::TooBig;
            }
            Refusal::OverBudget(over) => {
                self.over_budget(over);
                // The socket is not read any more: its stream ended with the refused read.
                (
                    budget_message(over),
                    "message_budget",
                    BUDGET_CLOSE,
                    End::MessageBudget,
                )
            }
            Refusal::ControlFlood => (
                flood_message(),
                "control_flood",
                FLOOD_CLOSE,
                End::ControlFlood,
            ),
        };
        session.shutdown().await;
        self.send_error(message, reason, Severity::Fatal);
        self.send_close(close.0, close.1).await;
        end
    }

    /// The call ended: the session stops, the call's live entry is released, and the socket
    /// is closed as the reason for the end says.
    async fn finish_session(&mut self, session: Session, end: End) -> End {
        session.shutdown().await;
        if let Some(entry) = &self.live {
            entry.live.ended.cancel();
        }
        match end {
            End::ShuttingDown => self.close(SHUTDOWN_CLOSE.0, SHUTDOWN_CLOSE.1).await,
            End::Superseded => {
                self.send_error(
                    "a newer connection for this call took it over; this one is closed".to_owned(),
                    "superseded",
                    Severity::Fatal,
                );
                self.send_close(SUPERSEDED_CLOSE.0, SUPERSEDED_CLOSE.1)
                    .await;
            }
            End::Idle => self.close(IDLE_CLOSE.0, IDLE_CLOSE.1).await,
            _ => self.abandon().await,
        }
        end
    }

    /// Counts a ping or pong read at `now` and has the writer flush a ping's pong; true (the
    /// flood counted and logged) when the platform is past the cap.
    pub(super) fn control_frame(
        &self,
        message: &Message,
        control: &mut ControlFrames,
        now: Instant,
    ) -> bool {
        match message {
            Message::Ping(payload) => {
                self.pongs_due.notify_one();
                self.control_frame_done(payload.len());
            }
            Message::Pong(payload) => self.control_frame_done(payload.len()),
            _ => {}
        }
        if !control.flooded(now) {
            return false;
        }
        self.service.state.metrics.error(ErrorKind::ControlFlood);
        let max_per_second = MAX_CONTROL_FRAMES_PER_SECOND;
        match self.service.state.call_logs.due(|l| &l.control_flood) {
            Some(calls) => tracing::warn!(
                calls,
                max_per_second,
                "the platform floods pings or pongs: closing the call"
            ),
            None => tracing::debug!(max_per_second, "control frame flood: closing the call"),
        }
        true
    }

    /// A whole data message arrived: its bytes are no longer pending.
    pub(super) fn message_done(&self) {
        if let Some(reads) = &self.reads {
            reads.message_done();
        }
    }

    /// A ping or pong of `payload` bytes arrived: its frame is no longer pending.
    pub(super) fn control_frame_done(&self, payload: usize) {
        if let Some(reads) = &self.reads {
            reads.control_frame_done(payload);
        }
    }

    /// Counts and logs a read refused by the server's budget of unfinished messages.
    pub(super) fn over_budget(&self, over: OverBudget) {
        self.service.state.metrics.error(ErrorKind::MessageBudget);
        match self.service.state.call_logs.due(|l| &l.message_budget) {
            Some(calls) => tracing::warn!(
                calls,
                pending = over.pending,
                max_pending_bytes = over.cap,
                "the calls' unfinished messages are over the server's budget: closing the call \
                 whose read went over"
            ),
            None => tracing::debug!(
                pending = over.pending,
                "over the budget of unfinished messages"
            ),
        }
    }
}

/// Why a read of the socket failed.
pub(super) enum ReadFailure {
    /// A frame or message over the size limit: its size and the limit.
    TooBig(usize, usize),
    /// The read would have overdrawn the server's budget of unfinished messages.
    OverBudget(OverBudget),
    /// The connection broke.
    Socket,
}

/// Counts a platform's control frames per one-second window.
pub(super) struct ControlFrames {
    window: Instant,
    count: u32,
}

impl ControlFrames {
    pub(super) fn new() -> Self {
        Self {
            window: Instant::now(),
            count: 0,
        }
    }

    /// Counts one control frame read at `now`; true once past the cap in its window.
    fn flooded(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        self.count > MAX_CONTROL_FRAMES_PER_SECOND
    }
}

/// Waits until `token` is cancelled (forever without one).
async fn wait_cancelled(token: Option<&tokio_util::sync::CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

pub(super) fn flood_message() -> String {
    format!(
        "more than {MAX_CONTROL_FRAMES_PER_SECOND} pings or pongs in one second: \
         this server closes such calls"
    )
}

/// Why a read failed: an oversized frame or message, the budget of unfinished messages, or
/// the connection.
pub(super) fn read_failure(error: axum::Error) -> ReadFailure {
    use tungstenite::error::{CapacityError, Error};
    match error.into_inner().downcast::<Error>() {
        Ok(error) => match *error {
            Error::Capacity(CapacityError::MessageTooLong { size, max_size }) => {
                ReadFailure::TooBig(size, max_size)
            }
            Error::Io(ref io) => OverBudget::in_io_error(io)
                .map_or(ReadFailure::Socket, |over| ReadFailure::OverBudget(*over)),
            _ => ReadFailure::Socket,
        },
        Err(_) => ReadFailure::Socket,
    }
}

pub(super) fn budget_message(over: OverBudget) -> String {
    format!(
        "this server holds too many unfinished messages ({} bytes of this call's would pass \
         its budget of {} bytes); try again later",
        over.pending, over.cap
    )
}
