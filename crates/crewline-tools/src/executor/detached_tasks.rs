//! Who waits for the tools a session's calls leave running: the [`DetachedTasks`] of whoever
//! serves the session, carried on its [`SessionScope`](super::SessionScope).

use std::{fmt, future::Future};

use tokio_util::task::TaskTracker;

/// The detached (non-cancellable) tool tasks of the calls one owner serves: a crew server, or
/// whoever else mints the sessions' scopes
/// ([`SessionScope::with_detached_tasks`](crate::SessionScope::with_detached_tasks)).
///
/// Its owner's shutdown waits for them ([`wait`](Self::wait), within its deadline) before the
/// runtime is dropped, so that a transfer is not cut half-way; the tasks of another owner in
/// the same process are not its to wait for. Cloning shares the set. It accepts tasks for as
/// long as it lives: `wait` completes whenever none is running.
///
/// # Examples
///
/// ```
/// use crewline_tools::{DetachedTasks, SessionScope};
///
/// let tasks = DetachedTasks::new();
/// // Every call of this session tracks its detached tools in `tasks`.
/// let scope = SessionScope::new().with_detached_tasks(tasks.clone());
/// # let _ = scope;
/// assert!(tasks.is_empty());
/// ```
#[derive(Clone)]
pub struct DetachedTasks(TaskTracker);

impl DetachedTasks {
    /// An empty set.
    pub fn new() -> Self {
        let tracker = TaskTracker::new();
        // Closed from the start: `wait` completes as soon as no task is running, however
        // many more may come later.
        tracker.close();
        Self(tracker)
    }

    /// Completes once none of the set's tasks is running.
    pub async fn wait(&self) {
        self.0.wait().await;
    }

    /// How many of the set's tasks are running.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none of the set's tasks is running.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Default for DetachedTasks {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for DetachedTasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DetachedTasks")
            .field("running", &self.len())
            .finish()
    }
}

impl DetachedTasks {
    /// Runs `task` as one of the set's.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.0.spawn(task);
    }
}
