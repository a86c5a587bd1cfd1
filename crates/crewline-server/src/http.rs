//! The HTTP routes: `/ws`, `/`, `/health`, `/ready`, `/metrics`, and the reference's 404.
//!
//! Authentication is not checked here: the server's auth layer (crewline-auth) wraps every
//! route; `/health` and `/ready` are its open paths, and both say less to a caller without a
//! [`Principal`]: no load (how many calls are live tells a stranger when the crew is busy).

use std::sync::Arc;

use axum::{
    Extension, Json, Router,
    extract::{State, WebSocketUpgrade, ws::rejection::WebSocketUpgradeRejection},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use crewline_auth::Principal;
use crewline_http::ConnectionReads;
use futures::FutureExt;
use serde::Serialize;
use tracing::Instrument;

use crate::{
    metrics::{HandshakeFailure, METRICS_CONTENT_TYPE},
    state::{Readiness, Service},
};

/// The socket's read buffer. tungstenite's default (128 KiB) is zero-filled up front and again
/// on every read, which costs 128 KiB of resident memory per call and a large memset per
/// frame. Platform frames are small (a request with a short conversation is 1-3 KiB), and a
/// larger frame grows the buffer to fit once its header is read, so 4 KiB costs a long
/// conversation at most one more read while every idle call keeps 4 KiB less.
const READ_BUFFER_BYTES: usize = 4 * 1024;
/// How many outbound bytes are gathered before a socket write: half tungstenite's default
/// (128 KiB), several hundred answer chunks, so a burst of them is still one write.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;
/// Room for the pongs a platform may be owed: the ping cap for the write timeout's 5 s is
/// 500 pongs of at most 127 bytes, 62 KiB.
const PONG_BYTES: usize = 128 * 1024;
/// The most bytes a call's socket may hold unsent: one gathered write, the largest outbound
/// frame, and the pongs owed. tungstenite's default is no limit, and a platform that pinged
/// without reading made it queue a pong per ping without end (issue 30: 1.4 GiB in 10 s).
/// The writer never queues more than one gathered write and one frame ahead of the socket;
/// a pong past the cap is not queued (tungstenite keeps the latest one only), and a frame
/// past it fails the call's next write: the platform has stopped reading.
const MAX_WRITE_BUFFER_BYTES: usize =
    WRITE_BUFFER_BYTES + crate::connection::MAX_OUTBOUND_FRAME_BYTES + PONG_BYTES;

/// The platform's WebSocket path (the only one that accepts `?token=`).
pub(crate) const WS_PATH: &str = "/ws";

/// The routes over `service`.
pub(crate) fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/", get(root))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route(WS_PATH, get(websocket))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(service)
}

#[derive(Serialize)]
struct RootBody {
    status: &'static str,
    ready: bool,
    active_sessions: usize,
}

#[derive(Serialize)]
struct StatusBody {
    status: &'static str,
    active_sessions: usize,
}

#[derive(Serialize)]
struct Detail<T> {
    detail: T,
}

#[derive(Serialize)]
struct NotReady {
    status: &'static str,
    reason: String,
}

fn detail(status: StatusCode, message: &'static str) -> Response {
    (status, Json(Detail { detail: message })).into_response()
}

async fn root(State(service): State<Arc<Service>>) -> Response {
    service.start_dry_run();
    let state = &service.state;
    Json(RootBody {
        status: "running",
        ready: state.readiness() == Readiness::Ready && !state.is_draining(),
        active_sessions: state.metrics.active_sessions(),
    })
    .into_response()
}

async fn health(
    State(service): State<Arc<Service>>,
    caller: Option<Extension<Principal>>,
) -> Response {
    service.start_dry_run();
    if caller.is_none() {
        // A stranger (the layer lets it through `/health` without a credential): alive, and
        // nothing of the load. With authentication off every caller is `anonymous`, and gets
        // the reference's body.
        return Json(BareStatus { status: "ok" }).into_response();
    }
    Json(StatusBody {
        status: "ok",
        active_sessions: service.state.metrics.active_sessions(),
    })
    .into_response()
}

/// `/ready`'s status alone, for a caller without a credential.
#[derive(Serialize)]
struct BareStatus {
    status: &'static str,
}

async fn ready(
    State(service): State<Arc<Service>>,
    caller: Option<Extension<Principal>>,
) -> Response {
    service.start_dry_run();
    let state = &service.state;
    if caller.is_none() {
        // A stranger (the layer lets it through `/ready` without a credential) learns whether
        // to route traffic here, nothing of the setup's error or the load.
        let (code, status) = if state.is_draining() {
            (StatusCode::SERVICE_UNAVAILABLE, "draining")
        } else if state.readiness() == Readiness::Ready {
            (StatusCode::OK, "ready")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "not_ready")
        };
        return (code, Json(BareStatus { status })).into_response();
    }
    let reason = if state.is_draining() {
        "draining: the server is shutting down".to_owned()
    } else {
        match state.readiness() {
            Readiness::Ready => {
                return Json(StatusBody {
                    status: "ready",
                    active_sessions: state.metrics.active_sessions(),
                })
                .into_response();
            }
            Readiness::Pending => "the dry run of the crew's setup has not finished".to_owned(),
            Readiness::Failed(reason) => reason,
        }
    };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(Detail {
            detail: NotReady {
                status: "not_ready",
                reason,
            },
        }),
    )
        .into_response()
}

async fn metrics(State(service): State<Arc<Service>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(METRICS_CONTENT_TYPE),
        )],
        service.state.metrics.render(),
    )
        .into_response()
}

async fn not_found() -> Response {
    detail(StatusCode::NOT_FOUND, "Not Found")
}

async fn method_not_allowed() -> Response {
    detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

async fn websocket(
    State(service): State<Arc<Service>>,
    headers: HeaderMap,
    reads: Option<Extension<ConnectionReads>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    service.start_dry_run();
    // A plain GET is not a call; the reference answers 404 there too.
    let Ok(upgrade) = upgrade else {
        return not_found().await;
    };
    let state = &service.state;
    if !service.config.origins.admits(&headers) {
        state.metrics.handshake_failed(HandshakeFailure::Forbidden);
        // Not at warn: each refusal is counted, and a page could send them in a loop.
        tracing::debug!("refused a call from a web page of an origin not allowed");
        return detail(
            StatusCode::FORBIDDEN,
            "this page's origin may not open calls on this crew (see CrewServer::allow_origin, \
             --allow-origin)",
        );
    }
    if state.is_draining() {
        state.metrics.handshake_failed(HandshakeFailure::Draining);
        return detail(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down; no new calls",
        );
    }
    // Counted from now to the call's end (also when the upgrade fails), before any memory
    // is spent on the call.
    let Some(admitted) = state.admit_call(service.config.limits.max_sessions) else {
        state.metrics.handshake_failed(HandshakeFailure::Full);
        // Not at warn: a flood of refused calls must not flood the log too (it is counted).
        tracing::debug!("refused a call: max_sessions calls are in progress");
        let mut response = detail(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is at its limit of calls; try again later",
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    };
    // Tracked from now, so that a drain waits for a call whose upgrade is under way.
    let tracked = state.calls.token();
    let id = state.next_session_id();
    let span = tracing::info_span!("session", id, call_id = tracing::field::Empty);
    let limit = service.config.max_frame_bytes;
    let on_failure_span = span.clone();
    upgrade
        .max_frame_size(limit)
        .max_message_size(limit)
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(WRITE_BUFFER_BYTES)
        .max_write_buffer_size(MAX_WRITE_BUFFER_BYTES)
        .on_failed_upgrade(move |error| {
            on_failure_span.in_scope(|| tracing::debug!(error = %crewline::types::ErrorChain(&error), "WebSocket upgrade failed"));
        })
        .on_upgrade(move |socket| {
            // From here on the connection's reads count against the server's budget of
            // unfinished messages (crewline's listener counts them; a router served by another
            // server has no count, and only the per-call cap holds).
            let reads =
                reads.map(|Extension(reads)| reads.arm(Arc::clone(&service.message_budget)));
            // Made here and mapped, not awaited in an `async` block: a block that took the
            // socket, or the call's future, would keep a second copy of its bytes in the call's
            // task all call long (see `connection::run`).
            crate::connection::run(socket, service, reads)
                .map(move |()| drop((tracked, admitted)))
                .instrument(span)
        })
}
