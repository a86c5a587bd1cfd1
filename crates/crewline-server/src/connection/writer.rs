//! The writer task: the session's outbound events as binary frames, pings, the close frame,
//! each socket write bounded by the write timeout.

use std::{future::Future, task::Poll, time::Duration};

use axum::{
    body::Bytes,
    extract::ws::{CloseFrame, Message, WebSocket},
};
use crewline::protocol::Event;
use futures::{SinkExt, stream::SplitSink};
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

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
pub(super) struct Writer {
    pub(super) sink: SplitSink<WebSocket, Message>,
    pub(super) write_timeout: Duration,
    pub(super) ping_interval: Duration,
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
            tracing::debug!(%error, "socket write failed");
            Err(WriterEnd::Failed)
        }
        None => Err(WriterEnd::TimedOut),
    }
}

impl Writer {
    pub(super) async fn feed(&mut self, message: Message) -> Result<(), WriterEnd> {
        bounded(self.write_timeout, self.sink.feed(message)).await
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
        let result = loop {
            tokio::select! {
                biased;
                // The close and the pings are rare: boxed, their state does not stay in the task.
                frame = &mut close => break Box::pin(self.close(&mut events, frame)).await,
                event = events.recv() => {
                    let Some(event) = event else {
                        // Unreachable while the connection holds a sender; wait for the close.
                        break Box::pin(self.close(&mut events, close.await)).await;
                    };
                    if let Err(end) = self.send_events(event, &mut events).await {
                        break Err(end);
                    }
                }
                _ = pings.tick() => {
                    let ping = Message::Ping(Bytes::new());
                    if let Err(end) = Box::pin(self.send(ping)).await {
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
        let frame = binary(&event);
        self.feed(frame).await?;
        if !events.is_empty() {
            return Ok(());
        }
        // The model's pieces usually arrive a few at a time, each woken separately: letting
        // the tasks that are ready run first gathers them into one socket write (one syscall
        // instead of one per frame). When nothing else is ready this costs one pass of the
        // scheduler, a few microseconds.
        tokio::task::yield_now().await;
        while let Ok(event) = events.try_recv() {
            let frame = binary(&event);
            self.feed(frame).await?;
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
            let frame = binary(&event);
            self.feed(frame).await?;
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
