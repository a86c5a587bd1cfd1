//! Reads one streamed answer from async-openai's event stream: each event's raw JSON through
//! the default client's chunk reader and decoder, under the same time limits.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use ::async_openai::{error::OpenAIError, types::stream::StreamResponse};
use futures::{Stream, StreamExt};
use serde_json::value::RawValue;
use tokio::time::{Instant, Sleep};

use super::error::{Scrubber, mid_stream};
use crate::{
    AnswerLimits, ErrorDetail, LlmError, StreamItem,
    openai::{Decoder, Flow, Pending, decode_chunk, snippet},
};

/// How long the rest of an answer (usage, `[DONE]`) may take once the model has sent its
/// `finish_reason`: the default client's grace, for the same reason (a server that holds the
/// connection open must not cost the turn its tool calls).
const FINISH_GRACE: Duration = Duration::from_millis(300);

/// The time limits of one answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// For the first token, counted from the request.
    pub(super) first_byte: Duration,
    /// Between two chunks that carry something.
    pub(super) idle: Duration,
    /// The bounds of the whole answer.
    pub(super) answer: AnswerLimits,
}

/// One streamed answer. Dropping it drops async-openai's event stream, whose reader task then
/// stops and closes the connection.
pub(super) struct Reader {
    /// The events; `None` once the answer is over (finished, failed, timed out).
    events: Option<StreamResponse<Box<RawValue>>>,
    decoder: Decoder,
    pending: Pending,
    /// Until the first chunk that carries something, the first-byte deadline.
    first_event_deadline: Option<Instant>,
    /// Once the model has finished, when the answer ends at the latest.
    finish_deadline: Option<Instant>,
    /// The current wait's time limit; one timer for the whole answer.
    timer: Pin<Box<Sleep>>,
    /// Whether `timer` is set for the current wait (time the caller spends between items
    /// never counts as the server's).
    waiting: bool,
    limits: Limits,
    started: Instant,
    scrubber: Scrubber,
    span: tracing::Span,
}

impl Reader {
    /// A reader of `events`, an answer asked for at `started`.
    pub(super) fn new(
        events: StreamResponse<Box<RawValue>>,
        limits: Limits,
        started: Instant,
        scrubber: Scrubber,
        span: tracing::Span,
    ) -> Self {
        let deadline = started + limits.first_byte;
        Self {
            events: Some(events),
            decoder: Decoder::with_limits(limits.answer),
            pending: Pending::new(),
            first_event_deadline: Some(deadline),
            finish_deadline: None,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            waiting: false,
            limits,
            started,
            scrubber,
            span,
        }
    }

    /// Ends the answer with `error` and lets the connection go at once.
    fn stop(&mut self, error: LlmError) {
        tracing::warn!(%error, "the stream failed");
        self.events = None;
        self.pending.push_back(Err(error));
    }

    /// Reads one event's JSON.
    fn on_event(&mut self, data: &RawValue) {
        if let Some(error) = super::limit::cut_error(data.get()) {
            // The answer's body was cut at a limit (see `AnswerBodyLimit`).
            self.stop(error);
            return;
        }
        let chunk = match decode_chunk(data.get().as_bytes()) {
            Ok(chunk) => chunk,
            Err(err) => {
                let message = format!(
                    "a stream event is not a JSON chunk ({err}): {}",
                    snippet(data.get(), 300)
                );
                self.stop(LlmError::InvalidResponse(ErrorDetail::caused_by(
                    message, err,
                )));
                return;
            }
        };
        if self.decoder.push(chunk, &mut self.pending) == Flow::Stop {
            tracing::warn!("the answer stopped mid-stream: a server error, or past a limit");
            self.events = None;
            return;
        }
        // As in the default client: only a chunk that carries something ends the wait.
        if self.decoder.take_progress() {
            self.waiting = false;
            if self.first_event_deadline.take().is_some() {
                let ms = self.started.elapsed().as_millis() as u64;
                // On the request's span (entered while the reader is polled), for traces.
                tracing::Span::current().record("time_to_first_token_ms", ms);
                tracing::debug!(time_to_first_token_ms = ms, "first token received");
            }
            if self.finish_deadline.is_none() && self.decoder.finished() {
                self.finish_deadline = Some(Instant::now() + FINISH_GRACE);
            }
        }
    }

    /// The next item: a pending one, else what the next events yield.
    fn poll_events(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<StreamItem, LlmError>>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Poll::Ready(Some(item.map_err(|e| self.scrubber.error(e))));
            }
            let Some(events) = self.events.as_mut() else {
                return Poll::Ready(None);
            };
            if !self.waiting {
                self.waiting = true;
                let mut deadline = self
                    .first_event_deadline
                    .unwrap_or_else(|| Instant::now() + self.limits.idle);
                if let Some(finish) = self.finish_deadline {
                    deadline = deadline.min(finish);
                }
                self.timer.as_mut().reset(deadline);
            }
            match events.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(data))) => self.on_event(&data),
                Poll::Ready(Some(Err(error))) => self.on_error(error),
                // `[DONE]` or the body's end: async-openai does not say which, and neither
                // matters once the model has finished.
                Poll::Ready(None) => {
                    self.events = None;
                    self.decoder.end(&mut self.pending);
                }
                Poll::Pending => {
                    if self.timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    if self.decoder.finished() {
                        tracing::debug!(
                            "no [DONE] after the finish reason; ending the answer without it"
                        );
                        self.events = None;
                        continue;
                    }
                    let timeout = LlmError::Timeout(match self.first_event_deadline {
                        Some(_) => self.limits.first_byte,
                        None => self.limits.idle,
                    });
                    self.stop(timeout);
                }
            }
        }
    }

    /// An error async-openai's event stream reported.
    fn on_error(&mut self, error: OpenAIError) {
        if let Some(error) = mid_stream(error) {
            self.stop(error);
        }
    }
}

impl Stream for Reader {
    type Item = Result<StreamItem, LlmError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let span = std::mem::replace(&mut this.span, tracing::Span::none());
        let polled = span.in_scope(|| this.poll_events(cx));
        this.span = span;
        polled
    }
}
