//! The writer task: the session's outbound events as binary frames, pings, the close frame,
//! each socket write bounded by the write timeout.

use std::{future::Future, sync::Arc, task::Poll, time::Duration};

use axum::{
    body::Bytes,
    extract::ws::{CloseFrame, Message, WebSocket},
};
use crewline::protocol::{AgentError, Event, EventBody, Severity};
use futures::{Sink, SinkExt, stream::SplitSink};
use serde_json::{Map, Value};
use tokio::{
    sync::{Notify, mpsc, oneshot},
    time::Instant,
};

/// The largest outbound frame: 4 MiB, four times the default inbound limit. A voice platform
/// has no use for a larger event (the reference's own WebSocket library refuses frames over
/// 1 MiB), and the socket's write buffer cap is sized from it (see `crate::http`): a larger
/// frame would be refused there, and lost without a word. It is replaced by an `agent.error`
/// saying so, and the call goes on.
pub(crate) const MAX_OUTBOUND_FRAME_BYTES: usize = 4 << 20;

/// How the writer stopped.
pub(super) enum WriterEnd {
    /// It sent the close frame, or was asked to stop.
    Done,
    /// A socket write failed.
    Failed,
    /// A socket write did not complete within the write timeout.
    TimedOut,
}

/// The socket's sending half and the writer's limits.
pub(super) struct Writer<S = SplitSink<WebSocket, Message>> {
    pub(super) sink: S,
    pub(super) write_timeout: Duration,
    pub(super) ping_interval: Duration,
    /// Woken by the reader for each ping it read: the pong tungstenite queued is flushed here,
    /// under the write timeout, so that a platform that pings without reading is cut off
    /// instead of piling up pongs.
    pub(super) pongs_due: Arc<Notify>,
}

/// One socket operation (`feed`, `flush`, `send`), bounded by `timeout`.
///
/// The timer starts only when the operation has to wait: a write that completes on its first
/// poll (nearly every write to a socket with room) reads no clock and arms no timer.
/// `tokio::time::timeout` did both for every frame, ~2 % of the text path's instructions.
pub(super) async fn bounded<F>(timeout: Duration, operation: F) -> Result<(), WriterEnd>
where
    F: Future<Output = Result<(), axum::Error>>,
{
    let mut operation = std::pin::pin!(operation);
    let mut timer = std::pin::pin!(None::<tokio::time::Sleep>);
    let outcome = std::future::poll_fn(|cx| {
        if let Poll::Ready(outcome) = operation.as_mut().poll(cx) {
            return Poll::Ready(Some(outcome));
        }
        if timer.is_none() {
            timer.set(Some(tokio::time::sleep(timeout)));
        }
        match timer.as_mut().as_pin_mut() {
            Some(sleep) => sleep.poll(cx).map(|()| None),
            None => Poll::Pending,
        }
    })
    .await;
    match outcome {
        Some(Ok(())) => Ok(()),
        Some(Err(error)) => {
            tracing::debug!(error = %crewline::types::ErrorChain(&error), "socket write failed");
            Err(WriterEnd::Failed)
        }
        None => Err(WriterEnd::TimedOut),
    }
}

impl<S> Writer<S>
where
    S: Sink<Message, Error = axum::Error> + Unpin,
{
    pub(super) async fn feed(&mut self, message: Message) -> Result<(), WriterEnd> {
        bounded(self.write_timeout, self.sink.feed(message)).await
    }

    /// Queues `event` as a binary frame, or an `agent.error` in its place when it is over
    /// [`MAX_OUTBOUND_FRAME_BYTES`].
    async fn feed_event(&mut self, event: &Event) -> Result<(), WriterEnd> {
        let frame = crewline::protocol::encode(event);
        if frame.len() > MAX_OUTBOUND_FRAME_BYTES {
            let kind = event.body.type_name();
            tracing::warn!(
                kind,
                bytes = frame.len(),
                max = MAX_OUTBOUND_FRAME_BYTES,
                "an outbound event is over the frame limit: sent an agent.error instead"
            );
            return self.feed(binary(&too_large(kind, frame.len()))).await;
        }
        self.feed(Message::Binary(Bytes::from(frame))).await
    }

    pub(super) async fn flush(&mut self) -> Result<(), WriterEnd> {
        bounded(self.write_timeout, self.sink.flush()).await
    }

    pub(super) async fn send(&mut self, message: Message) -> Result<(), WriterEnd> {
        bounded(self.write_timeout, self.sink.send(message)).await
    }

    /// Encodes each event as a binary frame, and pings every ping interval; on a close
    /// request, sends what is queued and the close frame, then stops. Stops at the first
    /// socket error or write timeout.
    pub(super) async fn run(
        mut self,
        mut events: mpsc::Receiver<Box<Event>>,
        mut close: oneshot::Receiver<CloseFrame>,
    ) -> WriterEnd {
        let mut pings =
            tokio::time::interval_at(Instant::now() + self.ping_interval, self.ping_interval);
        pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let pongs_due = Arc::clone(&self.pongs_due);
        // Kept across passes, not made anew in each: a `Notified` registers with its `Notify`
        // (a lock) when first polled and leaves it (the lock again) when dropped, which the
        // loop would otherwise do on every wake-up with an empty queue.
        let mut pong = std::pin::pin!(pongs_due.notified());
        let result = loop {
            tokio::select! {
                biased;
                // The close and the pings are rare: boxed, their state does not stay in the task.
                frame = &mut close => break Box::pin(self.close(&mut events, frame)).await,
                // Before the events: a model that streams faster than the socket drains keeps
                // the queue full, and the pings that keep the call alive must still go out.
                _ = pings.tick() => {
                    let ping = Message::Ping(Bytes::new());
                    if let Err(end) = Box::pin(self.send(ping)).await {
                        break Err(end);
                    }
                }
                event = events.recv() => {
                    let Some(event) = event else {
                        // Unreachable while the connection holds a sender; wait for the close.
                        break Box::pin(self.close(&mut events, close.await)).await;
                    };
                    if let Err(end) = self.send_events(event, &mut events).await {
                        break Err(end);
                    }
                }
                // After the events, whose writes flush pongs too: polled (a lock) only when
                // the queue is empty, not once per event.
                () = &mut pong => {
                    pong.set(pongs_due.notified());
                    if let Err(end) = Box::pin(self.flush()).await {
                        break Err(end);
                    }
                }
            }
        };
        result.err().unwrap_or(WriterEnd::Done)
    }

    /// Writes `event` and the events that are ready behind it, then flushes.
    pub(super) async fn send_events(
        &mut self,
        event: Box<Event>,
        events: &mut mpsc::Receiver<Box<Event>>,
    ) -> Result<(), WriterEnd> {
        self.feed_event(&event).await?;
        if !events.is_empty() {
            return Ok(());
        }
        // The model's pieces usually arrive a few at a time, each woken separately: letting
        // the tasks that are ready run first gathers them into one socket write (one syscall
        // instead of one per frame). When nothing else is ready this costs one pass of the
        // scheduler, a few microseconds.
        tokio::task::yield_now().await;
        while let Ok(event) = events.try_recv() {
            self.feed_event(&event).await?;
        }
        self.flush().await
    }

    /// Sends what is queued, then the close frame (or only flushes, when the connection
    /// dropped its close request).
    pub(super) async fn close(
        &mut self,
        events: &mut mpsc::Receiver<Box<Event>>,
        frame: Result<CloseFrame, oneshot::error::RecvError>,
    ) -> Result<(), WriterEnd> {
        let queued = events.len();
        for _ in 0..queued {
            let Ok(event) = events.try_recv() else { break };
            self.feed_event(&event).await?;
        }
        match frame {
            Ok(frame) => {
                let close = Message::Close(Some(frame));
                if let Err(end) = self.send(close).await {
                    tracing::debug!("could not send the close frame");
                    return Err(end);
                }
                Ok(())
            }
            Err(_) => self.flush().await,
        }
    }
}

pub(super) fn binary(event: &Event) -> Message {
    Message::Binary(Bytes::from(crewline::protocol::encode(event)))
}

/// The `agent.error` sent in place of an outbound event of `bytes` bytes, over the limit.
fn too_large(kind: &str, bytes: usize) -> Event {
    let mut payload = Map::new();
    payload.insert(
        "reason".to_owned(),
        Value::String("event_too_large".to_owned()),
    );
    Event::now(EventBody::AgentError(AgentError {
        message: format!(
            "a {kind} event of {bytes} bytes is over this server's limit of \
             {MAX_OUTBOUND_FRAME_BYTES} bytes per frame; it was not sent"
        ),
        severity: Severity::Warning,
        payload,
    }))
}

#[cfg(test)]
mod tests {
    use std::{
        pin::Pin,
        sync::Mutex,
        task::{Context, ready},
    };

    use super::*;

    /// A socket that takes 1 ms per frame and records the frames.
    struct SlowSocket {
        sent: Arc<Mutex<Vec<Message>>>,
        delay: Option<Pin<Box<tokio::time::Sleep>>>,
    }

    impl Sink<Message> for SlowSocket {
        type Error = axum::Error;

        fn poll_ready(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), Self::Error>> {
            let delay = self
                .delay
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(1))));
            ready!(delay.as_mut().poll(cx));
            self.delay = None;
            Poll::Ready(Ok(()))
        }

        fn start_send(self: Pin<&mut Self>, item: Message) -> Result<(), Self::Error> {
            self.sent.lock().unwrap().push(item);
            Ok(())
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
    }

    fn event() -> Box<Event> {
        Box::new(too_large("agent.response", 1))
    }

    #[tokio::test(start_paused = true)]
    async fn pings_go_out_while_the_model_outpaces_the_socket() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let writer = Writer {
            sink: SlowSocket {
                sent: Arc::clone(&sent),
                delay: None,
            },
            write_timeout: Duration::from_secs(5),
            ping_interval: Duration::from_millis(100),
            pongs_due: Arc::new(Notify::new()),
        };
        let (outbound, events) = mpsc::channel(64);
        let (close, close_requests) = oneshot::channel();
        let writing = tokio::spawn(writer.run(events, close_requests));
        // The model: always an event waiting for the socket.
        let model = tokio::spawn(async move { while outbound.send(event()).await.is_ok() {} });

        tokio::time::sleep(Duration::from_secs(1)).await;
        let pings = sent
            .lock()
            .unwrap()
            .iter()
            .filter(|message| matches!(message, Message::Ping(_)))
            .count();
        // Ten ping intervals, the socket busy all along.
        assert!(pings >= 9, "{pings} pings in ten intervals");

        model.abort();
        let _ = close.send(CloseFrame {
            code: 1000,
            reason: "".into(),
        });
        assert!(matches!(writing.await, Ok(WriterEnd::Done)));
    }
}
