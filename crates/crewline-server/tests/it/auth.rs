//! The auth layer over every route: merged routes, `/`, `/metrics` and unknown paths need the
//! token; `/health` and `/ready` are open and tell a stranger their status only; an empty token and an
//! unauthenticated non-loopback address refuse to start.

use crate::common;

use std::{io, net::SocketAddr, time::Duration};

use axum::{Extension, routing::get};
use common::*;
use crewline::{Crew, SessionSetup};
use crewline_server::{
    Credential, CrewServer, DEFAULT_BIND, HandshakeFailure, Principal, ServerError,
};
use tokio::net::TcpListener;

const TOKEN: &str = "crew-token-auth-9d1c";

/// A merged route that answers with the name of the credential that let the request in.
fn who_route() -> axum::Router {
    axum::Router::new().route(
        "/who",
        get(|Extension(who): Extension<Principal>| async move { who.name().to_owned() }),
    )
}

async fn get_as(addr: SocketAddr, path: &str, token: &str) -> HttpResponse {
    http_request(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Connection: close\r\n\r\n"
        ),
    )
    .await
}

#[tokio::test]
async fn every_route_but_health_and_ready_needs_the_token_merged_ones_included() {
    let server = TestServer::ready(
        CrewServer::new(echo_setup)
            .auth_token(TOKEN)
            .merge(who_route()),
    )
    .await;
    for path in [
        "/who",
        "/",
        "/metrics",
        "/nowhere",
        "/ws",
        "/who?token=crew-token-auth-9d1c",
    ] {
        let response = server.get(path).await;
        assert_eq!(response.status, 401, "{path}: {}", response.body);
        assert_eq!(
            response.header("www-authenticate"),
            Some("Bearer"),
            "{path}"
        );
        assert_eq!(response.body, r#"{"detail":"Unauthorized"}"#, "{path}");
        let wrong = get_as(server.addr, path, "crew-token-auth-9d1").await;
        assert_eq!(wrong.status, 401, "{path}");
    }
    // Only the WebSocket path counts a refused handshake (no token, then a wrong one).
    assert_eq!(
        server
            .handle
            .metrics()
            .handshake_failures(HandshakeFailure::Unauthorized),
        2
    );
    assert_eq!(server.get("/health").await.status, 200);

    let who = get_as(server.addr, "/who", TOKEN).await;
    assert_eq!((who.status, who.body.as_str()), (200, "default"));
    assert_eq!(get_as(server.addr, "/metrics", TOKEN).await.status, 200);
    assert_eq!(get_as(server.addr, "/", TOKEN).await.status, 200);
    assert_eq!(get_as(server.addr, "/nowhere", TOKEN).await.status, 404);
}

#[tokio::test]
async fn several_named_credentials_each_reach_the_handler_by_name() {
    let server = TestServer::ready(
        CrewServer::new(echo_setup)
            .auth_token(TOKEN)
            .credential(Credential::new("ops", "ops-secret-1").expect("a credential"))
            .merge(who_route()),
    )
    .await;
    assert_eq!(
        get_as(server.addr, "/who", "ops-secret-1").await.body,
        "ops"
    );
    assert_eq!(get_as(server.addr, "/who", TOKEN).await.body, "default");
}

async fn failing_setup(_: SessionSetup) -> Result<Crew, io::Error> {
    Err(io::Error::other(
        "database password rejected for user crew_admin",
    ))
}

#[tokio::test]
async fn ready_tells_a_stranger_the_status_and_nothing_of_the_setup_error() {
    let server = TestServer::start(CrewServer::new(failing_setup).auth_token(TOKEN)).await;
    let addr = server.addr;
    eventually("the dry run to fail", || async move {
        get_as(addr, "/ready", TOKEN)
            .await
            .body
            .contains("crew_admin")
    })
    .await;
    let stranger = server.get("/ready").await;
    assert_eq!(stranger.status, 503);
    assert_eq!(stranger.body, r#"{"status":"not_ready"}"#);
    let insider = get_as(addr, "/ready", TOKEN).await;
    assert_eq!(insider.status, 503);
    assert!(
        insider.body.contains("database password rejected"),
        "{}",
        insider.body
    );
}

#[tokio::test]
async fn ready_answers_a_stranger_ready_without_the_load() {
    let server = TestServer::ready(CrewServer::new(echo_setup).auth_token(TOKEN)).await;
    let stranger = server.get("/ready").await;
    assert_eq!(
        (stranger.status, stranger.body.as_str()),
        (200, r#"{"status":"ready"}"#)
    );
    let insider = get_as(server.addr, "/ready", TOKEN).await;
    assert_eq!(insider.body, r#"{"status":"ready","active_sessions":0}"#);
}

#[tokio::test]
async fn health_shows_the_load_to_the_token_holder_only() {
    let server = TestServer::ready(CrewServer::new(echo_setup).auth_token(TOKEN)).await;
    let stranger = server.get("/health").await;
    assert_eq!(
        (stranger.status, stranger.body.as_str()),
        (200, r#"{"status":"ok"}"#)
    );
    let insider = get_as(server.addr, "/health", TOKEN).await;
    assert_eq!(insider.body, r#"{"status":"ok","active_sessions":0}"#);
    // Without authentication, everyone gets the reference's body.
    let open = TestServer::ready(CrewServer::new(echo_setup)).await;
    assert_eq!(
        open.get("/health").await.body,
        r#"{"status":"ok","active_sessions":0}"#
    );
}

#[tokio::test]
async fn an_empty_token_is_a_configuration_error_when_serving_starts() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let error = CrewServer::new(echo_setup)
        .auth_token("")
        .serve(listener)
        .await
        .expect_err("an empty token must not serve");
    assert!(
        matches!(
            error,
            ServerError::Auth {
                setting: "auth_token",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("auth_token"), "{error}");
}

#[tokio::test]
async fn the_router_of_a_server_with_an_empty_token_refuses_everyone() {
    let app = CrewServer::new(echo_setup).auth_token("").router();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    assert_eq!(http_get(addr, "/ws?token=").await.status, 401);
    assert_eq!(get_as(addr, "/metrics", "").await.status, 401);
}

/// What `serving` returns, failing the test if it is still serving after a few seconds: a server
/// that does not refuse serves until stopped, and the suite must fail, not hang.
async fn refused<T>(serving: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), serving)
        .await
        .expect("the server started serving instead of refusing")
}

#[tokio::test]
async fn a_non_loopback_address_without_a_credential_refuses_to_start() {
    // `run` checks before it binds: nothing listens on the open address, even for a moment.
    let error = refused(
        CrewServer::new(echo_setup)
            .bind(SocketAddr::from(([0, 0, 0, 0], 0)))
            .run(),
    )
    .await
    .expect_err("must refuse");
    let message = error.to_string();
    assert!(
        matches!(error, ServerError::Unauthenticated { .. }),
        "{error:?}"
    );
    for setting in [
        "auth_token",
        "CREWLINE_AUTH_TOKEN",
        "allow_unauthenticated",
        "0.0.0.0",
    ] {
        assert!(message.contains(setting), "{setting} not in: {message}");
    }
    // A listener bound beyond loopback is refused before its first accept.
    let listener = TcpListener::bind("0.0.0.0:0").await.expect("bind");
    let error = refused(CrewServer::new(echo_setup).serve(listener))
        .await
        .expect_err("must refuse");
    assert!(
        matches!(error, ServerError::Unauthenticated { .. }),
        "{error:?}"
    );
}

#[test]
fn the_default_address_is_loopback() {
    assert!(DEFAULT_BIND.ip().is_loopback(), "{DEFAULT_BIND}");
    assert_eq!(DEFAULT_BIND.port(), 8080);
}
