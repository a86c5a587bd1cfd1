//! The call stage, the last: the tool itself, under its time limit and the cancellation tokens
//! of its run and of its call.
//!
//! A cancellable tool runs in the caller's future, and dropping that future (a barge-in, a
//! timeout, a token) stops it; a non-cancellable one runs as a task of its own that only its
//! end stops (see [`in_flight`](super::in_flight)).
//!
//! Error kinds: [`ToolErrorKind::Timeout`], [`ToolErrorKind::Cancelled`], and the tool's own
//! ([`ToolErrorKind::ToolError`], a panic's included: [`PANIC_MESSAGE`]).

mod background;
mod stage;

use std::{panic::AssertUnwindSafe, sync::Arc, time::Duration};

use crewline_core::{ToolCall, ToolErrorKind};
use futures::{FutureExt, future::Either};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub(crate) use self::stage::Invoke;
use super::{
    CallContext, IdempotencyKey, PANIC_MESSAGE, ToolCallError,
    cut_short::{CutShort, KeepIfDropped},
};
use crate::catalog::Entry;

/// How the call itself ended.
enum Raced {
    Done(Result<Value, ToolCallError>),
    TimedOut,
    Cancelled(CancelledBy),
    /// Cut short (cancelled or timed out), and its tool said what that means.
    Said(Result<Value, ToolCallError>),
}

/// Which token cancelled a call.
enum CancelledBy {
    Run,
    Call,
}

/// Completes when the call's own token fires; never without one.
async fn call_cancelled(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// The tool's call with its arguments, a panic caught and turned into a `ToolError`.
pub(super) fn guarded_call(
    entry: &Entry,
    arguments: Value,
) -> impl Future<Output = Result<Value, ToolCallError>> + Send + 'static {
    let tool = Arc::clone(&entry.tool);
    // The future is created inside the guarded block too, so a hand-written `call` that
    // panics before returning its future is caught as well.
    AssertUnwindSafe(async move { tool.call(arguments).await })
        .catch_unwind()
        .map(|done| match done {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(ToolCallError::from(error)),
            Err(payload) => Err(ToolCallError::new(ToolErrorKind::ToolError, PANIC_MESSAGE)
                .with_detail(format!(
                    "panic: {}",
                    crewline_core::panic_message(payload.as_ref())
                ))),
        })
}

/// A cancellable tool's call: runs it under `limit` and the run's and the call's tokens.
async fn call_tool(
    entry: &Entry,
    call: &ToolCall,
    arguments: Value,
    limit: Duration,
    context: &CallContext,
) -> Raced {
    let handle = CutShort::default();
    // If this future is dropped half-way (a barge-in dropped the turn), what the tool said
    // being cut short means is kept for `interrupted`.
    let mut kept = KeepIfDropped {
        calls: &context.cut,
        call: &call.id,
        handle: handle.clone(),
        finished: false,
    };
    // A key of its own, minted only if the tool asks for it (no store is involved).
    let guarded = IdempotencyKey::lazily(handle.clone().scope(guarded_call(entry, arguments)));
    // Its progress goes to the session, when the session takes it (one allocation, the id and
    // name; the handle itself only if the tool asks for it).
    let guarded = match context.scope.tool_notices() {
        Some(notices) => Either::Left(notices.scope(&call.id, &call.name, guarded)),
        None => Either::Right(guarded),
    };
    // Dropping the tool's future is what stops it, on timeout and on cancellation alike.
    let raced = tokio::select! {
        biased;
        () = context.run.token().cancelled() => Raced::Cancelled(CancelledBy::Run),
        () = call_cancelled(context.call_token.as_ref()) => Raced::Cancelled(CancelledBy::Call),
        done = tokio::time::timeout(limit, guarded) => done.map_or(Raced::TimedOut, Raced::Done),
    };
    kept.finished = true;
    // The tool's future is dropped by now: what its drop said counts too.
    match raced {
        Raced::Cancelled(_) | Raced::TimedOut => handle.take().map_or(raced, Raced::Said),
        done => done,
    }
}

/// A duration as the model reads it ("5s", "250ms").
fn human_duration(duration: Duration) -> String {
    if duration.as_millis().is_multiple_of(1000) {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_secs(5)), "5s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250ms");
    }
}
