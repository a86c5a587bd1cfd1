//! What the server's routes and calls share: settings, readiness, the live calls, metrics.

use std::{
    future::Future,
    net::SocketAddr,
    panic::AssertUnwindSafe,
    pin::Pin,
    sync::{
        Arc, OnceLock, RwLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use crewline::{Crew, SessionSetup, tool::DetachedTasks};
use crewline_http::MessageBudget;
use futures::FutureExt;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{BoxError, Metrics, SetupError, limits::Limits};

/// The wait before the dry run is tried again after its first failure; it doubles after
/// each further failure.
const DRY_RUN_FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two dry runs.
const DRY_RUN_MAX_RETRY: Duration = Duration::from_secs(30);

/// The boxed future of a crew's setup code.
pub(crate) type SetupFuture = Pin<Box<dyn Future<Output = Result<Crew, BoxError>> + Send>>;

/// A crew's setup code, type-erased.
pub(crate) type SetupFn = dyn Fn(SessionSetup) -> SetupFuture + Send + Sync;

/// The server's settings.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) bind: SocketAddr,
    pub(crate) max_frame_bytes: usize,
    pub(crate) handshake_timeout: Duration,
    pub(crate) drain_timeout: Duration,
    pub(crate) setup_timeout: Duration,
    pub(crate) close_timeout: Duration,
    /// Serve calls on this many single-threaded runtimes of the server's own (`None`: on the
    /// runtime that calls `serve`).
    pub(crate) worker_runtimes: Option<usize>,
    /// Calls, silent and stalled sockets, queued input, request headers.
    pub(crate) limits: Limits,
    /// The browser origins allowed on `/ws` beyond the crew's own and loopback pages.
    pub(crate) origins: crate::origin::Origins,
    /// Where calls checkpoint and who owns each (shared by replicas): `None`, calls resume
    /// nothing after a reconnect (run-once still follows the call id within this process).
    pub(crate) call_store: Option<Arc<dyn crewline::session_store::CallStore>>,
    /// The key naming a call whose handshake has no call id.
    pub(crate) call_key: Option<Arc<CallKeyFn>>,
}

/// The crew's key for a call whose platform gives no call id.
pub(crate) type CallKeyFn = dyn Fn(&crewline::protocol::SystemInit) -> Option<String> + Send + Sync;

/// The live calls of this process by key: a second connection for a call closes the first.
#[derive(Default)]
pub(crate) struct LiveCalls {
    calls: std::sync::Mutex<std::collections::HashMap<Arc<str>, LiveCall>>,
    next: AtomicU64,
}

/// One live connection of a call.
#[derive(Clone)]
pub(crate) struct LiveCall {
    id: u64,
    /// Cancelled when a newer connection takes the call over.
    pub(crate) superseded: CancellationToken,
    /// Cancelled once the connection has shut its session down (its last checkpoint written).
    pub(crate) ended: CancellationToken,
}

/// A connection's entry in [`LiveCalls`], removed when dropped (if still its own).
pub(crate) struct LiveEntry {
    calls: Arc<State>,
    key: Arc<str>,
    pub(crate) live: LiveCall,
}

impl Drop for LiveEntry {
    fn drop(&mut self) {
        self.live.ended.cancel();
        let mut calls = self
            .calls
            .live_calls
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if calls
            .get(&self.key)
            .is_some_and(|live| live.id == self.live.id)
        {
            calls.remove(&self.key);
        }
    }
}

impl State {
    /// Registers a connection for the call `key`; returns its entry and the connection it
    /// took the call from, if one was live (already told to close).
    pub(crate) fn take_call(self: &Arc<Self>, key: &str) -> (LiveEntry, Option<LiveCall>) {
        let live = LiveCall {
            id: self.live_calls.next.fetch_add(1, Ordering::Relaxed),
            superseded: CancellationToken::new(),
            ended: CancellationToken::new(),
        };
        let key: Arc<str> = key.into();
        let older = self
            .live_calls
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(Arc::clone(&key), live.clone());
        if let Some(older) = &older {
            older.superseded.cancel();
        }
        let entry = LiveEntry {
            calls: Arc::clone(self),
            key,
            live,
        };
        (entry, older)
    }
}

/// Whether the crew's setup code is known to work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// The dry run has not finished yet.
    Pending,
    /// The dry run succeeded.
    Ready,
    /// The dry run failed; the reason is shown on `/ready`.
    Failed(String),
}

/// State that lives as long as the server and is shared with [`ServerHandle`]s.
///
/// [`ServerHandle`]: crate::ServerHandle
pub(crate) struct State {
    pub(crate) metrics: Arc<Metrics>,
    readiness: RwLock<Readiness>,
    dry_run_started: AtomicBool,
    draining: AtomicBool,
    /// Asks a running `serve` to begin its drain (as its shutdown signal does).
    pub(crate) shutdown_requested: CancellationToken,
    /// Fired at the drain deadline: every live call closes with 1001.
    pub(crate) close_calls: CancellationToken,
    /// Every accepted call, to wait for them at shutdown.
    pub(crate) calls: TaskTracker,
    /// The non-cancellable tools this server's calls left running, to wait for at shutdown
    /// (those of another server in the process are its own).
    pub(crate) detached: DetachedTasks,
    /// Calls admitted under `max_sessions`, from the upgrade request to the call's end.
    admitted: AtomicUsize,
    next_session: AtomicU64,
    /// The bytes of unfinished inbound messages all calls hold: one budget per server, made
    /// with the `max_pending_bytes` of the first `serve` or `router`.
    message_budget: OnceLock<Arc<MessageBudget>>,
    /// Rate limits for the WARN lines a caller can cause on every call.
    pub(crate) call_logs: crate::call_logs::CallLogs,
    /// The live calls by key.
    pub(crate) live_calls: LiveCalls,
}

impl State {
    pub(crate) fn new() -> Self {
        Self {
            metrics: Arc::new(Metrics::new()),
            readiness: RwLock::new(Readiness::Pending),
            dry_run_started: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            shutdown_requested: CancellationToken::new(),
            close_calls: CancellationToken::new(),
            calls: TaskTracker::new(),
            detached: DetachedTasks::new(),
            admitted: AtomicUsize::new(0),
            next_session: AtomicU64::new(1),
            message_budget: OnceLock::new(),
            call_logs: crate::call_logs::CallLogs::default(),
            live_calls: LiveCalls::default(),
        }
    }

    /// The server's budget of unfinished inbound messages, made with a cap of `cap` bytes if
    /// there is none yet.
    pub(crate) fn message_budget(&self, cap: usize) -> Arc<MessageBudget> {
        Arc::clone(self.message_budget.get_or_init(|| MessageBudget::new(cap)))
    }

    /// The bytes of unfinished messages charged to the budget now (0 before serving).
    pub(crate) fn pending_message_bytes(&self) -> usize {
        self.message_budget.get().map_or(0, |budget| budget.used())
    }

    pub(crate) fn readiness(&self) -> Readiness {
        self.readiness
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_readiness(&self, readiness: Readiness) {
        *self
            .readiness
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = readiness;
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    pub(crate) fn next_session_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// Admits one more call unless `max` are already admitted; the call counts until the
    /// returned guard is dropped.
    pub(crate) fn admit_call(self: &Arc<Self>, max: usize) -> Option<AdmittedCall> {
        // Checked and counted in one step, so that concurrent upgrades cannot overshoot.
        self.admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |admitted| {
                (admitted < max).then_some(admitted + 1)
            })
            .ok()?;
        Some(AdmittedCall {
            state: Arc::clone(self),
        })
    }
}

/// One call counted against `max_sessions`, from its upgrade request to its end.
pub(crate) struct AdmittedCall {
    state: Arc<State>,
}

impl Drop for AdmittedCall {
    fn drop(&mut self) {
        self.state.admitted.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The settings, the setup code and the state: what the routes and calls run on.
pub(crate) struct Service {
    pub(crate) config: Config,
    pub(crate) setup: Arc<SetupFn>,
    pub(crate) state: Arc<State>,
    /// The server's budget of unfinished inbound messages (the state's).
    pub(crate) message_budget: Arc<MessageBudget>,
}

impl Service {
    /// Starts the startup dry run in the background, once; needs a Tokio runtime.
    ///
    /// A failed dry run is tried again after 1 s, then after waits doubling up to 30 s, until
    /// one succeeds: a database that was not up at start makes the server unready until it
    /// is, not until a restart.
    pub(crate) fn start_dry_run(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.state.dry_run_started.swap(true, Ordering::AcqRel) {
            return;
        }
        // Weak, so that retries stop once nothing serves this service any more.
        let service = Arc::downgrade(self);
        runtime.spawn(async move {
            let mut wait = DRY_RUN_FIRST_RETRY;
            loop {
                let Some(service) = service.upgrade() else {
                    return;
                };
                let result = service
                    .run_setup(SessionSetup::dry_run)
                    .await
                    .and_then(|crew| crew.validate().map_err(SetupError::from));
                let error = match result {
                    Ok(()) => {
                        tracing::info!("dry run of the crew's setup succeeded: ready");
                        service.state.set_readiness(Readiness::Ready);
                        return;
                    }
                    Err(error) => error,
                };
                tracing::error!(error = %crewline::types::ErrorChain(&error), retry_in = ?wait, "dry run of the crew's setup failed: not ready");
                service
                    .state
                    .set_readiness(Readiness::Failed(crewline::types::error_chain(&error)));
                if service.state.is_draining() {
                    return;
                }
                let stop = service.state.shutdown_requested.clone();
                drop(service);
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(DRY_RUN_MAX_RETRY);
            }
        });
    }

    /// Runs the setup code on the setup `make_setup` builds, with the setup timeout; errors
    /// and panics (also in `make_setup`) become [`SetupError`]s.
    pub(crate) async fn run_setup(
        &self,
        make_setup: impl FnOnce() -> SessionSetup + Send,
    ) -> Result<Crew, SetupError> {
        let setup_fn = Arc::clone(&self.setup);
        let run = AssertUnwindSafe(async move { setup_fn(make_setup()).await }).catch_unwind();
        match tokio::time::timeout(self.config.setup_timeout, run).await {
            Err(_) => Err(SetupError::TimedOut(self.config.setup_timeout)),
            Ok(Err(panic)) => Err(SetupError::Panicked(
                crewline::types::panic_message(panic.as_ref()).to_owned(),
            )),
            Ok(Ok(Err(error))) => Err(SetupError::Failed(error)),
            Ok(Ok(Ok(crew))) => Ok(crew),
        }
    }
}
