//! Non-cancellable calls: the tool runs as a task of its own, tracked so that shutdown can
//! wait for it, and whoever of the task and its waiter is left last writes its ledger record.
//!
//! A tool with `cancellable = false` (a payment, a booking) must not be cut off half-way, so
//! neither a timeout nor a barge-in stops it: they only stop the waiting. Its outcome must still
//! reach the ledger: when the waiter is gone (it timed out, or its future was dropped by a
//! barge-in or a shutdown), the task records the real outcome itself when the tool ends; if the
//! runtime drops the task before that, it records `OutcomeUnknown` (the tool may have done part
//! of its work, so its intent stays pending in the ledger). The hand-over is one small
//! state machine under a mutex, so exactly one side records whatever the order.

use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use tracing::Instrument;

use crate::executor::{DetachedTasks, ToolCallError, error::Settled, ledger::record::Recorder};

enum State {
    /// The tool runs and its waiter waits.
    Running,
    /// The tool finished; its waiter has not taken the outcome yet.
    Finished(Settled),
    /// The waiter took the outcome, or learnt that the task was dropped: it records.
    Handed,
    /// The waiter is gone: the task records when it ends.
    Abandoned(Option<Recorder>),
}

struct Slot {
    state: Mutex<State>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is one assignment: a poisoned state is still whole.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Spawns `tool` as a task of its own, tracked in `tasks`; the returned waiter waits for its
/// outcome.
///
/// `recorder` (when there is a ledger) is how the task records the outcome if the waiter
/// leaves first.
pub(crate) fn spawn(
    tasks: &DetachedTasks,
    tool: BoxFuture<'static, Settled>,
    recorder: Option<Recorder>,
) -> Waiter {
    let slot = Arc::new(Slot {
        state: Mutex::new(State::Running),
    });
    let mut task = TaskEnd {
        slot: Arc::clone(&slot),
        done: false,
    };
    tasks.spawn(
        async move {
            let done = tool.await;
            if let Some((recorder, done)) = task.finish(done) {
                recorder.settle(done).await;
            }
        }
        .instrument(tracing::Span::current()),
    );
    Waiter {
        slot,
        recorder,
        taken: false,
    }
}

/// The task's side: hands the outcome over, or records it when the waiter is gone.
struct TaskEnd {
    slot: Arc<Slot>,
    done: bool,
}

impl TaskEnd {
    /// Hands `done` to the waiter; when the waiter is gone, returns what the task must
    /// record.
    fn finish(&mut self, done: Settled) -> Option<(Recorder, Settled)> {
        self.done = true;
        let mut state = self.slot.lock();
        match std::mem::replace(&mut *state, State::Handed) {
            State::Running => {
                *state = State::Finished(done);
                None
            }
            State::Abandoned(recorder) => {
                drop(state);
                tracing::info!("a tool finished after its caller stopped waiting");
                recorder.map(|recorder| (recorder, done))
            }
            other => {
                *state = other;
                None
            }
        }
    }
}

impl Drop for TaskEnd {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // The runtime dropped the task before the tool ended (a shutdown that did not wait).
        let mut state = self.slot.lock();
        match std::mem::replace(&mut *state, State::Handed) {
            State::Running => {}
            State::Abandoned(recorder) => {
                drop(state);
                tracing::error!("a non-cancellable tool was stopped half-way by the shutdown");
                if let Some(recorder) = recorder {
                    recorder.write(Err(ToolCallError::new(
                        crewline_core::ToolErrorKind::OutcomeUnknown,
                        "the call was cut short by a shutdown",
                    )
                    .with_detail(
                        "the runtime dropped the non-cancellable tool's task before it ended; \
                         it may have done part of its work",
                    )));
                }
            }
            other => *state = other,
        }
    }
}

/// The waiting side of a detached call.
pub(crate) struct Waiter {
    slot: Arc<Slot>,
    recorder: Option<Recorder>,
    taken: bool,
}

impl Waiter {
    /// Marks the outcome as received by the caller, who records it: the task must not.
    pub(crate) fn received(&mut self) {
        self.taken = true;
        *self.slot.lock() = State::Handed;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        // Timed out, or the caller's future was dropped: leave the record to the task, or
        // write it here if the tool ended in the meantime.
        let mut state = self.slot.lock();
        match std::mem::replace(&mut *state, State::Handed) {
            State::Running => *state = State::Abandoned(self.recorder.take()),
            State::Finished(done) => {
                drop(state);
                if let Some(recorder) = self.recorder.take() {
                    recorder.write(done);
                }
            }
            State::Handed => {
                drop(state);
                if let Some(recorder) = self.recorder.take() {
                    recorder.write(Err(ToolCallError::new(
                        crewline_core::ToolErrorKind::OutcomeUnknown,
                        "the call was cut short by a shutdown",
                    )
                    .with_detail("the runtime dropped the non-cancellable tool's task")));
                }
            }
            other @ State::Abandoned(_) => *state = other,
        }
    }
}
