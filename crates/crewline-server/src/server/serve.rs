//! Serving: the HTTP/1 accept loop (on the caller's runtime or on worker threads), the
//! graceful drain, and the shutdown signal.

use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    ServerError,
    state::{Config, Service},
};

/// Connections allowed beyond `max_sessions`: the requests that are not calls (`/health`,
/// `/metrics`, merged routes such as `/mcp`) and the calls refused with 503 once full.
const CONNECTIONS_BEYOND_SESSIONS: usize = 1_024;

/// How the HTTP connections are served: the shared listener's settings, from the server's.
#[derive(Debug, Clone, Copy)]
pub(super) struct HttpSettings(crewline_http::HttpSettings);

impl HttpSettings {
    pub(super) fn new(config: &Config) -> Self {
        Self(
            crewline_http::HttpSettings::default()
                .header_read_timeout(config.limits.header_read_timeout)
                .shutdown_grace(crate::limits::HTTP_SHUTDOWN_GRACE)
                .max_connections(
                    config
                        .limits
                        .max_sessions
                        .saturating_add(CONNECTIONS_BEYOND_SESSIONS),
                ),
        )
    }

    /// The settings of one of `threads` worker runtimes: each accepts on its own, so each gets
    /// its share of the connection cap, and together they hold no more than the whole.
    fn per_worker(self, threads: usize) -> Self {
        let whole = self.0.max_connections;
        Self(self.0.max_connections(whole.div_ceil(threads.max(1))))
    }
}

/// Serves `app` on `listener` until `stop` fires, with the shared listener
/// ([`crewline_http::serve`]: header-read timeout, connection cap, bounded shutdown).
pub(super) async fn serve_http(
    listener: TcpListener,
    app: axum::Router,
    stop: CancellationToken,
    settings: HttpSettings,
) -> std::io::Result<()> {
    crewline_http::serve(listener, app, stop, settings.0).await
}

/// Serves `app` on `threads` threads, each with a single-threaded runtime accepting from
/// `listener`; the returned task ends when every thread has.
pub(super) fn serve_on_workers(
    listener: TcpListener,
    app: axum::Router,
    threads: usize,
    stop: CancellationToken,
    settings: HttpSettings,
) -> std::io::Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    // Out of the caller's runtime, so that each worker registers its own copy with its own
    // event loop; the kernel hands each new connection to one of them.
    let listener = listener.into_std()?;
    let settings = settings.per_worker(threads);
    let mut workers = Vec::with_capacity(threads);
    for index in 0..threads {
        let started = listener.try_clone().and_then(|listener| {
            let app = app.clone();
            let stop = stop.clone();
            let span = tracing::info_span!("worker", index);
            std::thread::Builder::new()
                .name(format!("crewline-worker-{index}"))
                .spawn(move || {
                    let _entered = span.enter();
                    let stopped = stop.clone();
                    let served = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .and_then(|runtime| {
                            // The listener registers with the event loop of the runtime it is
                            // made in, so it is made inside this one.
                            runtime.block_on(async move {
                                serve_http(
                                    TcpListener::from_std(listener)?,
                                    app,
                                    stopped,
                                    settings,
                                )
                                .await
                            })
                        });
                    if let Err(error) = &served {
                        tracing::error!(error = %crewline::types::ErrorChain(error), "a worker runtime stopped serving; stopping the others");
                        stop.cancel();
                    }
                    served
                })
        });
        match started {
            Ok(worker) => workers.push(worker),
            Err(error) => {
                // The workers already started have no connection yet; stop them.
                stop.cancel();
                return Err(error);
            }
        }
    }
    Ok(tokio::task::spawn_blocking(move || {
        let mut result = Ok(());
        for worker in workers {
            let served = worker
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a worker thread panicked")));
            if result.is_ok() {
                result = served;
            }
        }
        result
    }))
}

pub(super) fn join_result(
    result: Result<std::io::Result<()>, tokio::task::JoinError>,
) -> Result<(), ServerError> {
    match result {
        Ok(served) => served.map_err(ServerError::Io),
        Err(error) => Err(ServerError::Task(error)),
    }
}

/// Refuses new calls, waits for live ones up to the drain timeout, then closes them.
pub(super) async fn drain(service: &Service) {
    let deadline = tokio::time::Instant::now() + service.config.drain_timeout;
    let state = &service.state;
    state.start_draining();
    state.calls.close();
    let live = state.metrics.active_sessions();
    tracing::info!(
        live,
        timeout = ?service.config.drain_timeout,
        "draining: new calls are refused, live calls may finish"
    );
    if tokio::time::timeout(service.config.drain_timeout, state.calls.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            live = state.metrics.active_sessions(),
            "drain timeout: closing the live calls"
        );
        state.close_calls.cancel();
        // Each call shuts its session down and runs a closing handshake within the close
        // timeout; the second is for the sessions' shutdown and the scheduler.
        let grace = service.config.close_timeout + Duration::from_secs(1);
        if tokio::time::timeout(grace, state.calls.wait())
            .await
            .is_err()
        {
            tracing::error!(
                live = state.metrics.active_sessions(),
                "some calls did not close in time; leaving them behind"
            );
        }
    }
    // A non-cancellable tool (a payment) runs on after its call ended: give it what is left
    // of the drain deadline, so the runtime does not drop it half-way. Only this server's:
    // another server in the process drains its own.
    let detached = &state.detached;
    if tokio::time::timeout_at(deadline, detached.wait())
        .await
        .is_err()
    {
        tracing::error!(
            running = detached.len(),
            "drain deadline: non-cancellable tools left running"
        );
    }
    tracing::info!("drained");
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM: what [`CrewServer::run`](super::CrewServer::run)
/// drains on, for a command that serves something beside the crew.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %crewline::types::ErrorChain(&error), "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(error = %crewline::types::ErrorChain(&error), "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use crewline::{Crew, SessionSetup};

    use super::*;
    use crate::CrewServer;

    async fn setup(_setup: SessionSetup) -> Result<Crew, Infallible> {
        Ok(Crew::new())
    }

    #[test]
    fn worker_runtimes_share_one_connection_cap() {
        let server = CrewServer::new(setup).max_sessions(1_000);
        let settings = HttpSettings::new(&server.config);
        assert_eq!(
            settings.0.max_connections,
            1_000 + CONNECTIONS_BEYOND_SESSIONS
        );
        // Four workers hold 4 x 506 = 2,024 at most, not 4 x 2,024.
        assert_eq!(settings.per_worker(4).0.max_connections, 506);
    }
}
