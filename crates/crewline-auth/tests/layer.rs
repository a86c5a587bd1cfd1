//! The layer over a small app: who gets in, in which form, and what the handler sees.

#![allow(clippy::unwrap_used)]

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use axum::{
    Extension, Router,
    body::Body,
    extract::RawQuery,
    http::{Request, StatusCode, header},
    routing::get,
};
use crewline_auth::{ANONYMOUS, Auth, Credential, CredentialError, Principal};
use tower::ServiceExt;

fn app(auth: &Auth) -> Router {
    Router::new()
        .route(
            "/who",
            get(|Extension(who): Extension<Principal>| async move { who.name().to_owned() }),
        )
        .route(
            "/ws",
            get(|RawQuery(query): RawQuery| async move { query.unwrap_or_default() }),
        )
        .route(
            "/ready",
            get(|who: Option<Extension<Principal>>| async move {
                if who.is_some() { "details" } else { "status" }
            }),
        )
        .layer(auth.layer())
}

fn two_keys() -> Auth {
    Auth::required([
        Credential::new("platform", "p-secret").unwrap(),
        Credential::new("ops", "o-secret").unwrap(),
    ])
    .query_token_on("/ws")
    .open_path("/ready")
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, String, Option<String>) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let challenge = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .map(|value| value.to_str().unwrap().to_owned());
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap(), challenge)
}

fn get_with(uri: &str, authorization: Option<&str>) -> Request<Body> {
    let mut request = Request::get(uri);
    if let Some(value) = authorization {
        request = request.header(header::AUTHORIZATION, value);
    }
    request.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn each_bearer_names_its_credential_and_others_get_a_401_challenge() {
    let app = app(&two_keys());
    let (status, body, _) = send(&app, get_with("/who", Some("Bearer p-secret"))).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "platform"));
    let (status, body, _) = send(&app, get_with("/who", Some("bearer  o-secret "))).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ops"));
    for refused in [
        None,
        Some("Bearer wrong"),
        Some("Basic p-secret"),
        Some("Bearer "),
    ] {
        let (status, body, challenge) = send(&app, get_with("/who", refused)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused:?}");
        assert_eq!(body, r#"{"detail":"Unauthorized"}"#);
        assert_eq!(challenge.as_deref(), Some("Bearer"));
    }
    // An unknown path is refused too: a stranger learns nothing of the routes.
    let (status, _, _) = send(&app, get_with("/nowhere", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_query_token_works_only_where_enabled_and_never_reaches_the_handler() {
    let app = app(&two_keys());
    let (status, body, _) = send(&app, get_with("/ws?a=1&token=p-secret&b=2", None)).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "a=1&b=2"));
    // Percent-encoded, as a platform may send it.
    let auth = Auth::required([Credential::new("k", "a+b/c").unwrap()]).query_token_on("/ws");
    let (status, body, _) = send(&self::app(&auth), get_with("/ws?token=a%2Bb%2Fc", None)).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, ""));
    // Elsewhere the query form is refused.
    let (status, _, _) = send(&app, get_with("/who?token=p-secret", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = send(&app, get_with("/ws?token=wrong", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_open_path_answers_strangers_but_tells_them_apart() {
    let app = app(&two_keys());
    let (status, body, _) = send(&app, get_with("/ready", None)).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "status"));
    let (_, body, _) = send(&app, get_with("/ready", Some("Bearer wrong"))).await;
    assert_eq!(body, "status");
    let (_, body, _) = send(&app, get_with("/ready", Some("Bearer o-secret"))).await;
    assert_eq!(body, "details");
}

#[tokio::test]
async fn an_extra_header_carries_the_secret_as_is() {
    let auth = Auth::required([Credential::new("client", "k-1").unwrap()])
        .header(header::HeaderName::from_static("apikey"));
    let app = app(&auth);
    let request = Request::get("/who")
        .header("apikey", "k-1")
        .body(Body::empty())
        .unwrap();
    let (status, body, _) = send(&app, request).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "client"));
    let request = Request::get("/who")
        .header("apikey", "")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, request).await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn with_no_credential_required_is_nobody_admitted() {
    let app = app(&Auth::required([]));
    assert_eq!(
        send(&app, get_with("/who", Some("Bearer "))).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(&app, get_with("/who", None)).await.0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn unauthenticated_admits_everyone_as_anonymous() {
    let app = app(&Auth::unauthenticated());
    let (status, body, _) = send(&app, get_with("/who", None)).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, ANONYMOUS));
}

#[tokio::test]
async fn refusals_are_reported_by_path_only() {
    let refused = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&refused);
    let auth = two_keys().on_unauthorized(move |path| {
        assert_eq!(path, "/ws");
        seen.fetch_add(1, Ordering::SeqCst);
    });
    let app = app(&auth);
    send(&app, get_with("/ws?token=wrong", None)).await;
    send(&app, get_with("/ws?token=p-secret", None)).await;
    assert_eq!(refused.load(Ordering::SeqCst), 1);
}

#[test]
fn an_empty_secret_or_name_is_a_typed_error_and_debug_hides_the_secret() {
    assert_eq!(
        Credential::new("platform", "").unwrap_err(),
        CredentialError::EmptySecret {
            name: "platform".to_owned()
        }
    );
    assert_eq!(
        Credential::new("", "x").unwrap_err(),
        CredentialError::EmptyName
    );
    let credential = Credential::new("platform", "p-secret-value").unwrap();
    let shown = format!("{credential:?} {:?}", two_keys());
    assert!(!shown.contains("p-secret"), "{shown}");
    assert!(shown.contains("platform"), "{shown}");
}

fn request(uri: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::get(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn one_request_is_one_guess_different_secrets_together_are_a_400() {
    let auth = two_keys().header(header::HeaderName::from_static("apikey"));
    let app = app(&auth);
    // Each pairs wrong guesses with the right secret: none of them is tried.
    let several = [
        request("/ws?token=wrong&token=p-secret", &[]),
        request("/ws?token=wrong", &[("authorization", "Bearer p-secret")]),
        request("/ws?token=p-secret", &[("authorization", "Bearer wrong")]),
        request(
            "/who",
            &[
                ("authorization", "Bearer wrong"),
                ("authorization", "Bearer p-secret"),
            ],
        ),
        request(
            "/who",
            &[
                ("authorization", "Basic d3Jvbmc="),
                ("authorization", "Bearer p-secret"),
            ],
        ),
        request(
            "/who",
            &[("apikey", "wrong"), ("authorization", "Bearer p-secret")],
        ),
        request("/ws?token=&token=p-secret", &[]),
    ];
    for request in several {
        let uri = request.uri().clone();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{uri}");
        assert_eq!(response.headers()[header::CONNECTION], "close", "{uri}");
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert!(String::from_utf8_lossy(&body).contains("more than one credential"));
    }
    // The same secret in two places is one: a client that sends both headers gets in.
    let both = request(
        "/who",
        &[("apikey", "o-secret"), ("authorization", "Bearer o-secret")],
    );
    let (status, body, _) = send(&app, both).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ops"));
    // On an open path, several secrets make a stranger, not a caller.
    let open = request(
        "/ready",
        &[
            ("authorization", "Bearer wrong"),
            ("authorization", "Bearer o-secret"),
        ],
    );
    assert_eq!(send(&app, open).await.1, "status");
}

#[tokio::test]
async fn a_refusal_closes_its_connection() {
    let app = app(&two_keys());
    let response = app
        .oneshot(get_with("/who", Some("Bearer wrong")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(response.headers()[header::CONNECTION], "close");
}
