//! Running a tool call (or any future) from synchronous code.

/// Why [`run_sync`] could not give the future's output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunSyncError {
    /// No runtime could be built.
    #[error("could not start a runtime for the tool call")]
    Runtime(#[from] std::io::Error),
    /// The future panicked.
    #[error("the tool call panicked")]
    Panicked,
}

/// Runs `future` to completion from synchronous code.
///
/// With no runtime on this thread, on a new current-thread runtime. Inside a runtime (where
/// blocking on it would deadlock or panic), on a separate thread with its own runtime while
/// this thread waits. The future must not depend on being polled by the caller's runtime.
///
/// Cancelling whatever waits on this call does not stop that thread: the tool's timeout does.
pub fn run_sync<F>(future: F) -> Result<F::Output, RunSyncError>
where
    F: Future + Send,
    F::Output: Send,
{
    fn block_on<F: Future>(future: F) -> Result<F::Output, RunSyncError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(runtime.block_on(future))
    }
    if tokio::runtime::Handle::try_current().is_err() {
        return block_on(future);
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| block_on(future))
            .join()
            .map_err(|_| RunSyncError::Panicked)?
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn run_sync_works_without_a_runtime() {
        let out = run_sync(async { 1 + 1 }).ok();
        assert_eq!(out, Some(2));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn run_sync_inside_a_runtime_does_not_deadlock() {
        let out = run_sync(async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            3
        })
        .ok();
        assert_eq!(out, Some(3));
    }
}
