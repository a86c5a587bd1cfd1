//! The time limits of one streamed answer, shared by both clients' readers: the first token
//! within the first-byte limit, then no silence longer than the idle limit, and once the
//! model has finished, at most [`FINISH_GRACE`] for the rest.

use std::{pin::Pin, task::Context, time::Duration};

use tokio::time::{Instant, Sleep};

use crate::LlmError;

/// How long the rest of an answer (its usage, `[DONE]`, the body's end) may take once the
/// model has sent its `finish_reason`; past it the answer ends as it is, without an error.
///
/// The answer is complete at the finish reason: what follows is bookkeeping, which a healthy
/// server sends at once. A server (or proxy) that holds the connection open instead must not
/// cost the turn an idle timeout and, with it, the tool calls the model asked for.
pub(crate) const FINISH_GRACE: Duration = Duration::from_millis(300);

/// The deadline of the current wait for a chunk, with one timer reused for the whole answer
/// (no allocation per chunk).
pub(crate) struct Deadlines {
    /// Until the first chunk that carries something arrives, the deadline left over from the
    /// first-byte limit.
    first_event: Option<Instant>,
    /// Once the model has finished, when the answer ends at the latest.
    finish: Option<Instant>,
    /// The time limit of the current wait.
    timer: Pin<Box<Sleep>>,
    /// Whether `timer` is set for the current wait (a wait starts when a chunk is needed,
    /// so time the caller spends between items never counts as the server's).
    waiting: bool,
    first_byte: Duration,
    idle: Duration,
    started: Instant,
}

impl Deadlines {
    /// The limits of an answer asked for at `started`.
    pub(crate) fn new(started: Instant, first_byte: Duration, idle: Duration) -> Self {
        let deadline = started + first_byte;
        Self {
            first_event: Some(deadline),
            finish: None,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            waiting: false,
            first_byte,
            idle,
            started,
        }
    }

    /// Starts the wait for the next chunk, unless one is under way.
    #[inline]
    pub(crate) fn arm(&mut self) {
        if self.waiting {
            return;
        }
        self.waiting = true;
        let mut deadline = self
            .first_event
            .unwrap_or_else(|| Instant::now() + self.idle);
        if let Some(finish) = self.finish {
            deadline = deadline.min(finish);
        }
        self.timer.as_mut().reset(deadline);
    }

    /// A chunk that carries something arrived (`finished`: the model has sent its finish
    /// reason): the wait is over; the first one is recorded on the current span.
    #[inline]
    pub(crate) fn progress(&mut self, finished: bool) {
        self.waiting = false;
        if self.first_event.take().is_some() {
            let ms = self.started.elapsed().as_millis() as u64;
            // On the request's span (entered while the reader is polled), for traces.
            tracing::Span::current().record("time_to_first_token_ms", ms);
            tracing::debug!(time_to_first_token_ms = ms, "first token received");
        }
        if finished && self.finish.is_none() {
            self.finish = Some(Instant::now() + FINISH_GRACE);
        }
    }

    /// Whether the current wait's deadline has passed (else `cx` is woken when it does).
    #[inline]
    pub(crate) fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.timer.as_mut().poll(cx).is_ready()
    }

    /// The error of a wait that ran out: the first-byte limit before the first token, the
    /// idle limit after.
    pub(crate) fn timeout(&self) -> LlmError {
        LlmError::Timeout(match self.first_event {
            Some(_) => self.first_byte,
            None => self.idle,
        })
    }

    /// When the answer was asked for.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }
}

impl std::fmt::Debug for Deadlines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadlines")
            .field("first_event", &self.first_event)
            .field("finish", &self.finish)
            .field("waiting", &self.waiting)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::{future::poll_fn, task::Poll};

    use super::*;

    /// Whether the current wait has run out, polled once.
    async fn expired(deadlines: &mut Deadlines) -> bool {
        poll_fn(|cx| Poll::Ready(deadlines.poll_expired(cx))).await
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_byte_limit_then_the_idle_limit_then_the_finish_grace() {
        let first_byte = Duration::from_secs(30);
        let idle = Duration::from_secs(10);
        let mut deadlines = Deadlines::new(Instant::now(), first_byte, idle);
        deadlines.arm();
        tokio::time::advance(first_byte - Duration::from_millis(1)).await;
        assert!(!expired(&mut deadlines).await);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(expired(&mut deadlines).await);
        assert!(matches!(deadlines.timeout(), LlmError::Timeout(d) if d == first_byte));

        deadlines.progress(false);
        deadlines.arm();
        tokio::time::advance(idle - Duration::from_millis(1)).await;
        assert!(!expired(&mut deadlines).await);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(expired(&mut deadlines).await);
        assert!(matches!(deadlines.timeout(), LlmError::Timeout(d) if d == idle));

        deadlines.progress(true);
        deadlines.arm();
        tokio::time::advance(FINISH_GRACE).await;
        assert!(
            expired(&mut deadlines).await,
            "the grace, not the idle limit"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn time_between_waits_is_not_the_servers() {
        let mut deadlines = Deadlines::new(
            Instant::now(),
            Duration::from_secs(1),
            Duration::from_secs(1),
        );
        deadlines.arm();
        deadlines.progress(false);
        // The caller takes its time before asking for the next chunk.
        tokio::time::advance(Duration::from_secs(5)).await;
        deadlines.arm();
        assert!(!expired(&mut deadlines).await);
    }
}
