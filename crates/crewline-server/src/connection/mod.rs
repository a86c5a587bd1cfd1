//! One WebSocket connection: one call, one session.
//!
//! The connection's task reads frames and dispatches them; a writer task encodes the
//! session's outbound events as binary frames. Every way out (the platform hanging up, a
//! socket error, an oversized frame, the drain deadline) shuts the session down and ends
//! both tasks.
//!
//! Limits: the writer pings the platform every `ping_interval`, and a call with no inbound
//! frame (pongs included) for `idle_timeout` is a half-open connection and is closed; a socket
//! write that takes longer than `write_timeout` ends the call (the platform stopped reading).
//! A platform that sends more than [`MAX_CONTROL_FRAMES_PER_SECOND`] pings and pongs in a
//! second is closed with 1008: each ping costs a pong, and a flood of them is no keep-alive.
//! The bytes of a message not yet whole count against the server's budget of unfinished
//! messages ([`crewline_http::MessageBudget`]); the call whose read would overdraw it is closed
//! with 1013. The WARN lines a caller can cause on every call are written at most once per
//! [`crate::call_logs::CALL_LOG_INTERVAL`] for all calls, with their count.

use crewline::types::error_chain;
use std::{sync::Arc, time::Duration};

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, close_code};
use crewline::{
    Session, SessionSetup,
    protocol::{AgentError, Event, EventBody, Severity, SystemInit},
    session::Observer,
};
use crewline_http::ArmedReads;
use futures::{StreamExt, stream::SplitStream};
use serde_json::{Map, Value};
use tokio::{
    sync::{Notify, mpsc, oneshot},
    task::JoinHandle,
    time::Instant,
};
use tracing::Instrument;

mod end;
mod frames;
mod writer;

pub(crate) use self::writer::MAX_OUTBOUND_FRAME_BYTES;

use self::{
    end::{End, Failure},
    frames::{ControlFrames, ReadFailure, budget_message, flood_message, read_failure},
    writer::{Writer, WriterEnd},
};
use crate::{
    SetupError,
    metrics::{FrameDrop, HandshakeFailure},
    state::{LiveEntry, Service},
};

/// Close code and reason for a connection whose call a newer connection took over: 4409, an
/// application code after HTTP's 409 Conflict (the protocol has none of its own).
pub(crate) const SUPERSEDED_CLOSE: (u16, &str) =
    (4409, "superseded: a newer connection took this call over");
/// The longest a call store operation may hold up a handshake: a store that does not answer
/// costs the call its resume, never the call.
///
/// 3 s: a Redis Sentinel failover took 2.3-2.6 s on loopback (docs/deploying.md); a call that
/// starts while Redis is down for longer starts 3 s late, unchecked.
const STORE_TIMEOUT: Duration = Duration::from_secs(3);
/// The first wait before a failed call store operation at a call's start is tried again.
const STORE_RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two tries.
const STORE_RETRY_MAX: Duration = Duration::from_secs(1);
/// The longest a new connection waits for the older connection of its call (on this
/// replica) to write its last checkpoint and stop.
const TAKEOVER_WAIT: Duration = Duration::from_secs(2);

/// How many outbound events may wait for the socket.
const OUTBOUND_CAPACITY: usize = 1024;
/// The longest error text put into `agent.error` or a log line.
const MAX_ERROR_TEXT: usize = 1000;
/// The most pings and pongs a platform may send in one second before its call is closed with
/// 1008. A platform pings every few seconds at most; a flood makes the server queue a pong
/// for every ping (issue 30: 7.6 M pings in 10 s), which a peer that does not read never
/// drains.
pub(crate) const MAX_CONTROL_FRAMES_PER_SECOND: u32 = 100;
/// Close code and reason for a platform past [`MAX_CONTROL_FRAMES_PER_SECOND`].
const FLOOD_CLOSE: (u16, &str) = (close_code::POLICY, "too many control frames");
/// Close code and reason for a call whose unfinished message overdrew the server's budget:
/// 1013, the server is overloaded, not this message too large.
const BUDGET_CLOSE: (u16, &str) = (close_code::AGAIN, "server busy: try again later");

/// Close code and reason at the drain deadline.
pub(super) const SHUTDOWN_CLOSE: (u16, &str) = (close_code::AWAY, "server shutting down");
/// Close code and reason for a call that answered no ping within the idle timeout (those
/// of the reference's WebSocket library).
pub(super) const IDLE_CLOSE: (u16, &str) = (close_code::ERROR, "keepalive ping timeout");

/// Serves one call on `socket` until it ends; `reads` counts the connection's unfinished
/// message against the server's budget (none when served by another listener).
///
/// The socket is split before the call's future is made: `split` moves it to the heap, and
/// a future that took it by value would keep its 368 bytes in every call's task all call long.
pub(crate) fn run(
    socket: WebSocket,
    service: Arc<Service>,
    reads: Option<ArmedReads>,
) -> impl Future<Output = ()> + Send {
    let active = service.state.metrics.call_started();
    let started = Instant::now();
    let (sink, stream) = socket.split();
    async move {
        let _active = active;
        let (outbound, events) = mpsc::channel(OUTBOUND_CAPACITY);
        let (close, close_requests) = oneshot::channel();
        let limits = &service.config.limits;
        let pongs_due = Arc::new(Notify::new());
        let writer = Writer {
            sink,
            write_timeout: limits.write_timeout,
            ping_interval: limits.ping_interval,
            pongs_due: Arc::clone(&pongs_due),
        };
        let writer = tokio::spawn(writer.run(events, close_requests).in_current_span());
        let mut connection = Connection {
            service,
            stream,
            writer,
            writer_done: false,
            close: Some(close),
            outbound,
            pongs_due,
            reads,
            live: None,
        };
        let end = connection.serve().await;
        tracing::info!(end = %end, duration = ?started.elapsed(), "call ended");
    }
}

struct Connection {
    service: Arc<Service>,
    stream: SplitStream<WebSocket>,
    writer: JoinHandle<WriterEnd>,
    writer_done: bool,
    close: Option<oneshot::Sender<CloseFrame>>,
    outbound: mpsc::Sender<Box<Event>>,
    /// Tells the writer that a ping was read and its pong is to be flushed.
    pongs_due: Arc<Notify>,
    /// The count of bytes read since the last whole message; given back as messages arrive.
    reads: Option<ArmedReads>,
    /// This connection's entry among the process's live calls (a call with a key).
    live: Option<LiveEntry>,
}

impl Connection {
    async fn serve(&mut self) -> End {
        // The handshake and the crew's setup run once: on the heap, their state does not
        // stay in every connected call's task.
        match Box::pin(self.open()).await {
            Ok(session) => self.run_session(session).await,
            Err(failure) => {
                let reason = failure.reason;
                self.service.state.metrics.handshake_failed(reason);
                Box::pin(self.fail(failure)).await;
                End::Handshake(reason)
            }
        }
    }

    /// The handshake, the crew's setup, and the session's start.
    async fn open(&mut self) -> Result<Session, Failure> {
        let state = Arc::clone(&self.service.state);
        if state.close_calls.is_cancelled() {
            return Err(Failure::shutting_down());
        }
        let init = self.handshake().await?;
        if let Some(call_id) = init
            .session_context
            .caller
            .as_ref()
            .and_then(|caller| caller.call_id.as_deref())
        {
            // The platform's id, truncated: a 1 MiB id must not go into every line of the call.
            tracing::Span::current().record("call_id", &*crewline::types::id_excerpt(call_id));
        }
        tracing::info!(
            conversation_type = ?init.session_context.conversation_type,
            version = %truncate(&init.version, 40),
            "call started"
        );

        let observer: Arc<dyn Observer> = Arc::clone(&state.metrics) as Arc<dyn Observer>;
        let crew_key = self
            .service
            .config
            .call_key
            .as_ref()
            .and_then(|key| key(&init));
        let mut setup = SessionSetup::new(init, self.outbound.clone())
            .with_observer(observer)
            .with_inbox_bytes(self.service.config.limits.inbox_bytes)
            .with_detached_tasks(state.detached.clone());
        if let Some(key) = crew_key {
            setup = setup.with_call_key(key);
        }
        if let Some(key) = setup.call().call_key().map(str::to_owned) {
            setup = Box::pin(self.take_call(&key, setup)).await;
        }
        let for_user = setup.clone();
        let crew = tokio::select! {
            () = state.close_calls.cancelled() => return Err(Failure::shutting_down()),
            crew = self.service.run_setup(move || for_user) => crew,
        };
        let crew = crew.map_err(|error| {
            tracing::error!(error = %crewline::types::ErrorChain(&error), "the crew's setup failed");
            Failure::setup(error)
        })?;
        Session::start(crew, setup).await.map_err(|error| {
            tracing::error!(error = %crewline::types::ErrorChain(&error), "the crew's graph is invalid");
            Failure::setup(SetupError::InvalidGraph(error))
        })
    }

    /// Makes this connection the call `key`'s only one: an older connection on this replica
    /// is closed (and waited for, bounded, so its last checkpoint is written), the shared
    /// store's ownership is claimed (fencing an older owner elsewhere), and the call resumes
    /// from its checkpoint if one is kept.
    async fn take_call(&mut self, key: &str, setup: SessionSetup) -> SessionSetup {
        let (entry, older) = self.service.state.take_call(key);
        self.live = Some(entry);
        if let Some(older) = older {
            tracing::info!("a newer connection for this call: closing the older one");
            if tokio::time::timeout(TAKEOVER_WAIT, older.ended.cancelled())
                .await
                .is_err()
            {
                tracing::warn!(wait = ?TAKEOVER_WAIT, "the older connection of this call did not stop in time");
            }
        }
        let Some(store) = self.service.config.call_store.clone() else {
            return setup;
        };
        // Tried again for a failover's length: a call that starts unchecked, or a reconnect
        // that misses its checkpoint, would start over after the next crash.
        let deadline = Instant::now() + STORE_TIMEOUT;
        let mut wait = STORE_RETRY_FIRST;
        let (token, json) = loop {
            let claimed = tokio::time::timeout_at(deadline, async {
                let token = store.claim(key).await?;
                let json = store.load(key).await?;
                Ok::<_, crewline::session_store::CallStoreError>((token, json))
            })
            .await;
            match claimed {
                Ok(Ok(claimed)) => break claimed,
                Ok(Err(error)) if Instant::now() + wait < deadline => {
                    tracing::debug!(error = %error_chain(&error), ?wait, "the call store failed: trying again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(STORE_RETRY_MAX);
                }
                Ok(Err(error)) => {
                    tracing::warn!(error = %error_chain(&error), "the call store failed: this call is not checkpointed");
                    return setup;
                }
                Err(_) => {
                    tracing::warn!(timeout = ?STORE_TIMEOUT, "the call store did not answer: this call is not checkpointed");
                    return setup;
                }
            }
        };
        let resumed = json.and_then(|json| match crewline::session_store::Checkpoint::from_json(&json) {
            Ok(checkpoint) => Some(checkpoint),
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "a stored checkpoint is unreadable: the call starts over");
                None
            }
        });
        if let Some(checkpoint) = &resumed {
            tracing::info!(turns = checkpoint.turns, "call resumed from its checkpoint");
        }
        setup.with_call_store(store, token, resumed)
    }

    /// Waits for the first frame, which must be `system.init`.
    async fn handshake(&mut self) -> Result<SystemInit, Failure> {
        let timeout = self.service.config.handshake_timeout;
        let deadline = Instant::now() + timeout;
        let close_calls = self.service.state.close_calls.clone();
        let mut control = ControlFrames::new();
        loop {
            let next = tokio::select! {
                () = close_calls.cancelled() => return Err(Failure::shutting_down()),
                next = tokio::time::timeout_at(deadline, self.stream.next()) => next,
            };
            let message = match next {
                Err(_) => {
                    match self.service.state.call_logs.due(|l| &l.no_init) {
                        Some(calls) => tracing::warn!(calls, ?timeout, "no system.init in time"),
                        None => tracing::debug!(?timeout, "no system.init in time"),
                    }
                    return Err(Failure::new(
                        HandshakeFailure::Timeout,
                        format!("handshake timeout: no system.init within {timeout:?}"),
                        close_code::POLICY,
                        "handshake timeout",
                    ));
                }
                Ok(None) => return Err(Failure::closed()),
                Ok(Some(Err(error))) => {
                    return Err(match read_failure(error) {
                        ReadFailure::TooBig(size, max) => {
                            self.service.state.metrics.frame_dropped(FrameDrop::TooBig);
                            match self.service.state.call_logs.due(|l| &l.too_big) {
                                Some(calls) => {
                                    tracing::warn!(calls, size, max, "handshake frame too large")
                                }
                                None => tracing::debug!(size, max, "handshake frame too large"),
                            }
                            Failure::too_big(size, max)
                        }
                        ReadFailure::OverBudget(over) => {
                            self.over_budget(over);
                            Failure::message_budget(budget_message(over), BUDGET_CLOSE)
                        }
                        ReadFailure::Socket => Failure::closed(),
                    });
                }
                Ok(Some(Ok(message))) => message,
            };
            let decoded = match &message {
                Message::Binary(bytes) => {
                    self.message_done();
                    crewline::protocol::decode(bytes)
                }
                Message::Text(text) => {
                    self.message_done();
                    crewline::protocol::decode(text.as_str().as_bytes())
                }
                Message::Close(_) => return Err(Failure::closed()),
                Message::Ping(_) | Message::Pong(_) => {
                    if self.control_frame(&message, &mut control, Instant::now()) {
                        return Err(Failure::control_flood(flood_message(), FLOOD_CLOSE));
                    }
                    continue;
                }
            };
            return match decoded {
                Ok(Event {
                    body: EventBody::SystemInit(init),
                    ..
                }) => Ok(init),
                Ok(event) => {
                    let got = event.body.type_name();
                    match self.service.state.call_logs.due(|l| &l.not_init) {
                        Some(calls) => {
                            tracing::warn!(calls, got, "the first frame is not system.init")
                        }
                        None => tracing::debug!(got, "the first frame is not system.init"),
                    }
                    Err(Failure::new(
                        HandshakeFailure::NotInit,
                        format!("expected system.init as the first frame, got {got}"),
                        close_code::POLICY,
                        "expected system.init first",
                    ))
                }
                Err(error) => {
                    let error = truncate(&crewline::types::error_chain(&error), MAX_ERROR_TEXT)
                        .into_owned();
                    match self.service.state.call_logs.due(|l| &l.bad_init) {
                        Some(calls) => {
                            tracing::warn!(calls, %error, "the first frame is not a valid system.init")
                        }
                        None => {
                            tracing::debug!(%error, "the first frame is not a valid system.init")
                        }
                    }
                    Err(Failure::new(
                        HandshakeFailure::BadFrame,
                        format!("expected system.init as the first frame: {error}"),
                        close_code::POLICY,
                        "invalid handshake",
                    ))
                }
            };
        }
    }

    /// Queues an `agent.error` for the platform.
    fn send_error(&self, message: String, reason: &str, severity: Severity) {
        let mut payload = Map::new();
        payload.insert("reason".to_owned(), Value::String(reason.to_owned()));
        let event = Event::now(EventBody::AgentError(AgentError {
            message: truncate(&message, MAX_ERROR_TEXT).into_owned(),
            severity,
            payload,
        }));
        if self.outbound.try_send(Box::new(event)).is_err() {
            tracing::debug!("agent.error not queued: the outbound queue is full or closed");
        }
    }

    /// Tells the platform why the call cannot go on, then closes.
    async fn fail(&mut self, failure: Failure) {
        match failure.message {
            Some(message) => {
                self.send_error(message, failure.reason.as_str(), Severity::Fatal);
                if failure.await_close {
                    self.close(failure.code, failure.close_reason).await;
                } else {
                    self.send_close(failure.code, failure.close_reason).await;
                }
            }
            None => self.abandon().await,
        }
    }

    /// Sends queued events and a close frame, then waits for the platform's close: all of it
    /// within the close timeout, which bounds how long a drain waits after its deadline.
    async fn close(&mut self, code: u16, reason: &'static str) {
        let deadline = self.send_close(code, reason).await;
        // Read until the platform answers the close (or goes away).
        let drained = tokio::time::timeout_at(deadline, async {
            while let Some(Ok(_)) = self.stream.next().await {}
        })
        .await;
        if drained.is_err() {
            tracing::debug!("the platform did not answer the close frame in time");
        }
    }

    /// Sends queued events and a close frame within the close timeout; returns its deadline.
    async fn send_close(&mut self, code: u16, reason: &'static str) -> Instant {
        let deadline = Instant::now() + self.service.config.close_timeout;
        if let Some(close) = self.close.take() {
            let _ = close.send(CloseFrame {
                code,
                reason: Utf8Bytes::from_static(reason),
            });
        }
        self.join_writer(deadline).await;
        deadline
    }

    /// Ends a call whose platform is gone: no frames to send, finish the closing handshake.
    async fn abandon(&mut self) {
        self.close.take();
        if !self.writer_done {
            self.writer.abort();
            let _ = (&mut self.writer).await;
            self.writer_done = true;
        }
        // Flushes a pending reply to the platform's close frame, if any.
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            while let Some(Ok(_)) = self.stream.next().await {}
        })
        .await;
    }

    /// Waits for the writer to finish, aborting it at `deadline`.
    async fn join_writer(&mut self, deadline: Instant) {
        if self.writer_done {
            return;
        }
        if tokio::time::timeout_at(deadline, &mut self.writer)
            .await
            .is_err()
        {
            tracing::debug!("the writer did not finish in time: aborting it");
            self.writer.abort();
            let _ = (&mut self.writer).await;
        }
        self.writer_done = true;
    }
}

/// At most `max` bytes of `text`, cut at a char boundary, with `…` when cut.
fn truncate(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end]).into()
}
