//! A background call: answered "started" at once, run on as a task of the session, its result
//! handed to the session when it lands ([`ToolNotice::Landed`](crate::ToolNotice::Landed)).
//!
//! The order that makes it run once across a crash: the start is recorded (the session's
//! [`BackgroundRecord`](crate::BackgroundRecord), the call's checkpoint in a shared store)
//! and only then is the task spawned. A replica killed between the two has started nothing.

use std::time::Duration;

use crewline_core::{ToolCall, ToolErrorKind, ToolFailure, ToolResult, error_chain};
use serde_json::{Value, json};

use super::{guarded_call, human_duration};
use crate::{
    catalog::Entry,
    executor::{IdempotencyKey, ToolCallError, limits, progress::ToolNotices},
};

/// What the model reads when a background call has started.
pub(crate) const STARTED_MESSAGE: &str = "Started in the background; its result will come in a \
     later message. Tell the caller it is under way and carry on with the conversation.";

/// What the model reads for a second identical call in the same session.
const ALREADY_STARTED_MESSAGE: &str = "This call was already started in this conversation and \
     runs once; its result comes (or came) in its own message. Do not call it again.";

/// What the model reads for a call that an earlier connection of the call started: the line
/// dropped, which cancelled it, maybe after it took effect.
const STARTED_BEFORE_MESSAGE: &str = "This call was started before the line dropped, which \
     stopped it; whether it took effect is not known, so it is not run again. Tell the caller \
     it may not have gone through and offer to check by other means.";

/// What the model reads for a call that an earlier connection of the call started and saw
/// land: it ran, and its result was (or is being) told.
const ALREADY_DONE_MESSAGE: &str = "This call already ran to completion earlier in this \
     conversation, before the line dropped; its result was given then (or comes in its own \
     message). It is not run again.";

/// What the model reads when the start of a background call could not be recorded.
const UNRECORDED_MESSAGE: &str = "This call was not started: the record that makes it run only \
     once could not be written. Nothing was done; try again in a moment.";

/// Starts `call` of `entry` as a task of the session `notices` serves, under `limit`, once its
/// start is recorded; the model reads that it started (or why it did not).
pub(crate) async fn start(
    notices: &ToolNotices,
    entry: &Entry,
    call: &ToolCall,
    arguments: Value,
    limit: Duration,
    max_result_bytes: Option<usize>,
) -> Result<Value, ToolCallError> {
    if notices.is_ended() {
        return Err(ToolCallError::new(
            ToolErrorKind::Cancelled,
            "the call has ended; nothing more runs in the background",
        ));
    }
    // One run per tool and arguments per session: a model that asks again (or a replay of the
    // conversation) must not book twice.
    let key = format!(
        "{}:{}",
        call.name,
        crate::executor::fingerprint::arguments_hash(&arguments)
    );
    let Some(slot) = notices.background_slot() else {
        return Err(limits::exceeded(
            "too many tasks already run in the background; wait for one to finish and try again",
        ));
    };
    match notices.first_start(&key) {
        Some(true) => {}
        Some(false) if notices.is_inherited(&key) && notices.has_landed(&key) => {
            return Ok(json!({"status": "already_done", "message": ALREADY_DONE_MESSAGE}));
        }
        Some(false) if notices.is_inherited(&key) => {
            return Ok(json!({"status": "outcome_unknown", "message": STARTED_BEFORE_MESSAGE}));
        }
        Some(false) => {
            return Ok(json!({"status": "already_started", "message": ALREADY_STARTED_MESSAGE}));
        }
        None => {
            return Err(limits::exceeded(
                "this call started all the background tasks it may; answer without one",
            ));
        }
    }
    // Record first, then start: a crash after this write leaves a record a resume reads (the
    // call answers `outcome_unknown` there); a crash before it has started nothing.
    if let Err(error) = notices.record_started().await {
        notices.forget_start(&key);
        tracing::warn!(tool = %call.name, error = %error_chain(error.as_ref()), "background call not started: its start could not be recorded");
        return Err(
            ToolCallError::new(ToolErrorKind::ToolError, UNRECORDED_MESSAGE)
                .with_detail(error_chain(error.as_ref())),
        );
    }
    let ended = notices.ended().clone();
    let notices = notices.clone();
    let call = call.clone();
    let tool = guarded_call(entry, arguments);
    tokio::spawn(async move {
        let _slot = slot;
        let running = IdempotencyKey::lazily(notices.scope(&call.id, &call.name, tool));
        let outcome = tokio::select! {
            biased;
            // Dropping the tool's future is what stops it: the session ended.
            () = ended.cancelled() => {
                tracing::debug!(tool = %call.name, "background call cancelled by the end of the call");
                return;
            }
            done = tokio::time::timeout(limit, running) => done,
        };
        let outcome = match outcome {
            Ok(Ok(value)) => within_size(value, max_result_bytes),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(ToolCallError::new(
                ToolErrorKind::Timeout,
                format!("the tool did not finish within {}", human_duration(limit)),
            )),
        };
        if let Err(error) = &outcome {
            tracing::warn!(tool = %call.name, kind = %error.kind, "background call failed");
        }
        let result = ToolResult::new(&call, outcome.map_err(ToolFailure::from));
        notices.mark_landed(&key);
        notices.landed(result).await;
    });
    Ok(json!({"status": "started", "message": STARTED_MESSAGE}))
}

/// `value`, unless it is over the executor's result size limit.
fn within_size(value: Value, max: Option<usize>) -> Result<Value, ToolCallError> {
    match max {
        Some(max) if crate::executor::result_size::result_size(&value, max).is_none() => Err(
            crate::executor::result_size::oversize(max, "a background result".to_owned()),
        ),
        _ => Ok(value),
    }
}
