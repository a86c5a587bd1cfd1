//! The HTTP routes: `/ws`, `/`, `/health`, `/ready`, `/metrics`, and the reference's 404.

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::{RawQuery, State, WebSocketUpgrade, ws::rejection::WebSocketUpgradeRejection},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use serde::Serialize;
use subtle::ConstantTimeEq;
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

/// The routes over `service`.
pub(crate) fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/", get(root))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/ws", get(websocket))
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

async fn health(State(service): State<Arc<Service>>) -> Response {
    service.start_dry_run();
    Json(StatusBody {
        status: "ok",
        active_sessions: service.state.metrics.active_sessions(),
    })
    .into_response()
}

async fn ready(State(service): State<Arc<Service>>) -> Response {
    service.start_dry_run();
    let state = &service.state;
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
    RawQuery(query): RawQuery,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    service.start_dry_run();
    // A plain GET is not a call; the reference answers 404 there too.
    let Ok(upgrade) = upgrade else {
        return not_found().await;
    };
    let state = &service.state;
    if state.is_draining() {
        state.metrics.handshake_failed(HandshakeFailure::Draining);
        return detail(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down; no new calls",
        );
    }
    if let Some(expected) = &service.config.auth_token
        && !authorized(expected, &headers, query.as_deref())
    {
        state
            .metrics
            .handshake_failed(HandshakeFailure::Unauthorized);
        tracing::warn!("refused a call: missing or wrong token");
        let mut response = detail(StatusCode::UNAUTHORIZED, "Unauthorized");
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
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
        .on_failed_upgrade(move |error| {
            on_failure_span.in_scope(|| tracing::debug!(%error, "WebSocket upgrade failed"));
        })
        .on_upgrade(move |socket| {
            async move {
                crate::connection::run(socket, service).await;
                drop((tracked, admitted));
            }
            .instrument(span)
        })
}

/// Whether the request carries `expected`, as a bearer token or `?token=`; constant time in
/// the token's bytes.
fn authorized(expected: &str, headers: &HeaderMap, query: Option<&str>) -> bool {
    let expected = expected.as_bytes();
    let matches = |given: &[u8]| bool::from(given.ct_eq(expected));
    let bearer = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .filter_map(|value| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .any(|token| matches(token.as_bytes()));
    if bearer {
        return true;
    }
    query
        .into_iter()
        .flat_map(|query| query.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .filter(|(key, _)| *key == "token")
        .any(|(_, value)| matches(&percent_decode(value)))
}

/// Decodes `%XX` escapes and `+` (as in a form-encoded query).
fn percent_decode(value: &str) -> Vec<u8> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(high), Some(low)) => {
                        out.push((high * 16 + low) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            other => out.push(other),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_handles_escapes_plus_and_truncation() {
        assert_eq!(percent_decode("a%2Bb+c"), b"a+b c");
        assert_eq!(percent_decode("abc%"), b"abc%");
        assert_eq!(percent_decode("abc%4"), b"abc%4");
        assert_eq!(percent_decode("%41"), b"A");
        assert_eq!(percent_decode("%zz"), b"%zz");
    }

    #[test]
    fn tokens_are_read_from_the_bearer_header_or_the_query() {
        let mut headers = HeaderMap::new();
        assert!(!authorized("s3cret", &headers, None));
        assert!(authorized("s3cret", &headers, Some("a=1&token=s3cret")));
        assert!(!authorized("s3cret", &headers, Some("token=s3cre")));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer s3cret"),
        );
        assert!(authorized("s3cret", &headers, None));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic s3cret"),
        );
        assert!(!authorized("s3cret", &headers, None));
    }
}
