//! The HTTP sessions of an [`McpServer`](super::McpServer): rmcp's in-memory sessions, counted
//! and capped, so that a client opening session after session gets a 503 instead of taking
//! the process's memory (20,000 sessions held 1.1 GiB before the cap).

use std::sync::{
    Arc,
    atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
};

use futures::Stream;
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::{
        WorkerTransport,
        streamable_http_server::session::{
            RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
            local::{
                LocalSessionManager, LocalSessionManagerError, LocalSessionWorker, SessionError,
            },
        },
    },
};

/// The sessions open across every router of one server, and how many were refused.
#[derive(Debug, Default)]
pub(super) struct SessionCount {
    open: AtomicUsize,
    refused: AtomicU64,
}

impl SessionCount {
    /// Sessions open now.
    pub(super) fn open(&self) -> usize {
        self.open.load(Relaxed)
    }

    /// Sessions refused at the cap since the start.
    pub(super) fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Takes one of `max` places; `false` (and counted as refused) when all are taken.
    fn take(&self, max: usize) -> bool {
        let taken = self
            .open
            .fetch_update(Relaxed, Relaxed, |open| (open < max).then_some(open + 1))
            .is_ok();
        if !taken {
            self.refused.fetch_add(1, Relaxed);
        }
        taken
    }

    fn release(&self) {
        // Never below zero: each release follows exactly one `take`.
        let _ = self
            .open
            .fetch_update(Relaxed, Relaxed, |open| open.checked_sub(1));
    }
}

/// Why a session could not be created or used.
#[derive(Debug, thiserror::Error)]
pub(super) enum CappedError {
    /// Every session place is taken.
    #[error("too many MCP sessions open (at most {max}); retry later")]
    Full {
        /// The cap.
        max: usize,
    },
    /// rmcp's session manager failed.
    #[error("MCP session failed")]
    Local(#[from] LocalSessionManagerError),
}

/// rmcp's [`LocalSessionManager`] with a cap on open sessions and their count.
pub(super) struct CappedSessions {
    inner: LocalSessionManager,
    max: usize,
    count: Arc<SessionCount>,
}

impl CappedSessions {
    /// Sessions idle for `idle_timeout` are closed; at most `max` are open at once across
    /// every manager sharing `count`.
    pub(super) fn new(
        max: usize,
        idle_timeout: std::time::Duration,
        count: Arc<SessionCount>,
    ) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(idle_timeout);
        Self { inner, max, count }
    }
}

impl SessionManager for CappedSessions {
    type Error = CappedError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if !self.count.take(self.max) {
            tracing::warn!(
                max = self.max,
                "MCP session refused: the session cap is reached"
            );
            return Err(CappedError::Full { max: self.max });
        }
        match self.inner.create_session().await {
            Ok(created) => Ok(created),
            Err(error) => {
                self.count.release();
                Err(error.into())
            }
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        // A session is closed twice (a `DELETE`, then its worker ending): only the call that
        // removes it from the map frees its place.
        let removed = self.inner.sessions.write().await.remove(id);
        let Some(handle) = removed else {
            return Ok(());
        };
        self.count.release();
        match handle.close().await {
            // The worker already exited (idle timeout): nothing left to clean up.
            Ok(()) | Err(SessionError::SessionServiceTerminated) => Ok(()),
            Err(error) => Err(LocalSessionManagerError::from(error).into()),
        }
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        _id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // No session store is configured: a session is never restored (nor uncounted).
        Ok(RestoreOutcome::NotSupported)
    }
}
