//! Reads one streamed answer: server-sent events split, decoded and timed in the task that
//! polls it.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::{
    OpenAiClient,
    decode::{Decoder, Flow, Pending},
    http,
    key::ApiKey,
    sse::{EventKind, SseError, SseParser},
};
use crate::{ErrorDetail, LlmError, StreamItem, transport::deadline::Deadlines};

/// How long the rest of the HTTP body may take after `[DONE]` before the connection is closed.
///
/// The answer is complete at `[DONE]`, but an HTTP/1.1 connection only goes back to the pool
/// once its body has been read to the end, and servers often send the body's last bytes in a
/// write of their own. A body dropped before that closes the connection, and the next turn
/// pays a new TCP (and TLS) handshake. The answer ends for the caller at once either way; the
/// body's end is awaited in the background (see [`Reader::poll_drain`]).
const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// What a stream's line may hold beyond the largest event: its field name, `data: `.
const LINE_OVERHEAD: usize = "data: ".len();

/// Reads one streamed answer, in the task that polls it: server-sent events are parsed and
/// decoded as they are asked for. Dropping it mid-answer (barge-in), or an error, drops the
/// HTTP body, which closes the connection at once; after `[DONE]` the body is read to its
/// end so the connection can be reused.
pub(super) struct Reader<B> {
    /// The answer's body; `None` once the answer is over (finished, failed, timed out).
    body: Option<B>,
    /// Whether `[DONE]` has been read and only the body's end is left (see [`DRAIN_GRACE`]).
    draining: bool,
    /// Splits the body into events.
    sse: SseParser,
    decoder: Decoder,
    pending: Pending,
    /// The first-byte, idle and finish-grace limits (the async-openai reader's too).
    deadlines: Deadlines,
    max_event_bytes: usize,
    api_key: ApiKey,
    span: tracing::Span,
}

impl<B> Reader<B> {
    /// A reader of `body`, an answer `client` asked for at `started`, under its time limits.
    pub(super) fn new(
        body: B,
        client: &OpenAiClient,
        started: Instant,
        span: tracing::Span,
    ) -> Self {
        Self {
            body: Some(body),
            draining: false,
            // A line holds its field name too: `data: ` and a value of the largest event.
            sse: SseParser::new(
                client.max_event_bytes.saturating_add(LINE_OVERHEAD),
                client.max_event_bytes,
            ),
            decoder: Decoder::with_limits(client.answer_limits),
            pending: Pending::new(),
            deadlines: Deadlines::new(started, client.first_byte_timeout, client.idle_timeout),
            max_event_bytes: client.max_event_bytes,
            api_key: client.api_key.clone(),
            span,
        }
    }

    /// Ends the answer with `item` and lets the connection go at once.
    fn stop(&mut self, item: Result<StreamItem, LlmError>) {
        self.body = None;
        self.pending.push_back(item);
    }

    /// Reads the event the parser just returned.
    fn on_event(&mut self, kind: EventKind) {
        let data = self.sse.data();
        if data == "[DONE]" {
            self.on_end();
            self.draining = true;
            return;
        }
        match kind {
            EventKind::Keepalive => return,
            EventKind::Error => {
                self.decoder.push_error_event(data, &mut self.pending);
                tracing::warn!("the server reported an error mid-stream");
                self.body = None;
                return;
            }
            EventKind::Other => {}
        }
        match http::event_chunk(data) {
            Ok(None) => {}
            Ok(Some(chunk)) => {
                if self.decoder.push(chunk, &mut self.pending) == Flow::Stop {
                    tracing::warn!(
                        "the answer stopped mid-stream: a server error, or past a limit"
                    );
                    self.body = None;
                    return;
                }
                // Only a chunk that carries something ends this wait: a server sending empty
                // deltas (a role, vendor bookkeeping, blank events) is as silent to the caller
                // as one sending nothing, and before the first token it is still thinking,
                // under the first-byte limit.
                if self.decoder.take_progress() {
                    self.deadlines.progress(self.decoder.finished());
                }
            }
            Err(error) => {
                tracing::warn!(error = %crewline_core::ErrorChain(&error), "the stream failed");
                self.stop(Err(error));
            }
        }
    }

    /// The server closed the stream (or sent `[DONE]`).
    fn on_end(&mut self) {
        self.decoder.end(&mut self.pending);
        tracing::debug!(
            elapsed_ms = self.deadlines.started().elapsed().as_millis() as u64,
            finished = self.decoder.finished(),
            "stream ended"
        );
    }
}

impl<B> Stream for Reader<B>
where
    B: Stream<Item = Result<bytes::Bytes, http::HttpError>> + Unpin + Send + 'static,
{
    type Item = Result<StreamItem, LlmError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // The span is taken out while it is entered, so the reader can be borrowed mutably.
        let span = std::mem::replace(&mut this.span, tracing::Span::none());
        let polled = span.in_scope(|| this.poll_events(cx));
        this.span = span;
        polled
    }
}

impl<B> Reader<B>
where
    B: Stream<Item = Result<bytes::Bytes, http::HttpError>> + Unpin + Send + 'static,
{
    /// The next item: a pending one, else what the next events yield.
    fn poll_events(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<StreamItem, LlmError>>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Poll::Ready(Some(item.map_err(|e| self.api_key.scrub_error(e))));
            }
            if self.draining {
                return self.poll_drain(cx);
            }
            if self.body.is_none() {
                return Poll::Ready(None);
            }
            match self.sse.next_event() {
                Ok(Some(kind)) => {
                    self.on_event(kind);
                    continue;
                }
                Ok(None) => {}
                Err(error) => {
                    let error = match error {
                        SseError::NotUtf8(cause) => LlmError::StreamCut(ErrorDetail::caused_by(
                            format!("stream failed: {error}"),
                            cause,
                        )),
                        // The limit the caller set (a line may hold a field name beyond it).
                        SseError::LineTooLong(_) => LlmError::TooLarge {
                            what: "a line of the stream",
                            limit: self.max_event_bytes,
                        },
                        SseError::EventTooLarge(_) => LlmError::TooLarge {
                            what: "an event of the stream",
                            limit: self.max_event_bytes,
                        },
                    };
                    tracing::warn!(error = %crewline_core::ErrorChain(&error), "the stream failed");
                    self.stop(Err(error));
                    continue;
                }
            }
            let Some(body) = self.body.as_mut() else {
                return Poll::Ready(None);
            };
            self.deadlines.arm();
            match body.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(bytes))) => self.sse.push(&bytes),
                Poll::Ready(Some(Err(error))) => {
                    let error = http::stream_error(error);
                    tracing::warn!(error = %crewline_core::ErrorChain(&error), "the stream failed");
                    self.stop(Err(error));
                }
                Poll::Ready(None) => {
                    self.body = None;
                    self.on_end();
                }
                Poll::Pending => {
                    if !self.deadlines.poll_expired(cx) {
                        return Poll::Pending;
                    }
                    if self.decoder.finished() {
                        // Everything the caller needs is out; only bookkeeping is missing.
                        tracing::debug!(
                            "no [DONE] after the finish reason; ending the answer without it"
                        );
                        self.body = None;
                        continue;
                    }
                    let timeout = self.deadlines.timeout();
                    tracing::warn!(error = %timeout, "the stream stalled");
                    self.stop(Err(timeout));
                }
            }
        }
    }

    /// Ends the answer after `[DONE]`: the body is read to its end, so the connection goes
    /// back to the pool, at once when its end is already there, otherwise by a task of its
    /// own for at most [`DRAIN_GRACE`], so the caller never waits for it.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<StreamItem, LlmError>>> {
        while let Some(body) = self.body.as_mut() {
            match body.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(_)) | None) => self.body = None,
                Poll::Pending => {
                    if let (Some(mut body), Ok(runtime)) =
                        (self.body.take(), tokio::runtime::Handle::try_current())
                    {
                        runtime.spawn(async move {
                            let rest = async { while let Some(Ok(_)) = body.next().await {} };
                            if tokio::time::timeout(DRAIN_GRACE, rest).await.is_err() {
                                tracing::debug!(
                                    "the body did not end after [DONE]; closing the connection"
                                );
                            }
                        });
                    }
                }
            }
        }
        Poll::Ready(None)
    }
}

#[cfg(test)]
mod tests;
