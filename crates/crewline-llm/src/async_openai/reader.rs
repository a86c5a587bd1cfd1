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
use tokio::time::Instant;

use super::error::{Scrubber, mid_stream};
use crate::{
    AnswerLimits, ErrorDetail, LlmError, StreamItem,
    openai::{Decoder, Flow, Pending, decode_chunk, snippet},
    transport::deadline::Deadlines,
};

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
    /// The first-byte, idle and finish-grace limits (the default reader's too).
    deadlines: Deadlines,
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
        Self {
            events: Some(events),
            decoder: Decoder::with_limits(limits.answer),
            pending: Pending::new(),
            deadlines: Deadlines::new(started, limits.first_byte, limits.idle),
            scrubber,
            span,
        }
    }

    /// Ends the answer with `error` and lets the connection go at once.
    fn stop(&mut self, error: LlmError) {
        tracing::warn!(error = %crewline_core::ErrorChain(&error), "the stream failed");
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
            self.deadlines.progress(self.decoder.finished());
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
            self.deadlines.arm();
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
                    if !self.deadlines.poll_expired(cx) {
                        return Poll::Pending;
                    }
                    if self.decoder.finished() {
                        tracing::debug!(
                            "no [DONE] after the finish reason; ending the answer without it"
                        );
                        self.events = None;
                        continue;
                    }
                    let timeout = self.deadlines.timeout();
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
