//! The playground's router without a browser: content types, the security headers on every
//! answer, `/config.json`, a 404, the loopback checks.

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use crewline_playground::{CONTENT_SECURITY_POLICY, Playground, PlaygroundError};
use http_body_util::BodyExt;
use tower::ServiceExt;

async fn get(playground: &Playground, path: &str, host: &str) -> axum::response::Response {
    let request = Request::get(path)
        .header(header::HOST, host)
        .body(Body::empty())
        .expect("a request");
    playground
        .router()
        .oneshot(request)
        .await
        .expect("the router answers")
}

async fn body_text(response: axum::response::Response) -> String {
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

fn assert_security_headers(response: &axum::response::Response, path: &str) {
    let headers = response.headers();
    assert_eq!(
        headers[header::CONTENT_SECURITY_POLICY],
        CONTENT_SECURITY_POLICY,
        "{path}"
    );
    assert_eq!(headers[header::CACHE_CONTROL], "no-store", "{path}");
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
    assert_eq!(headers[header::REFERRER_POLICY], "no-referrer", "{path}");
}

#[tokio::test]
async fn each_asset_is_served_with_its_content_type_and_the_security_headers() {
    let playground = Playground::new("ws://127.0.0.1:8080/ws");
    for (path, content_type, needle) in [
        (
            "/",
            "text/html; charset=utf-8",
            "<title>crewline playground</title>",
        ),
        (
            "/index.html",
            "text/html; charset=utf-8",
            "data-testid=\"connect\"",
        ),
        ("/playground.css", "text/css; charset=utf-8", ".tool-bar"),
        (
            "/playground.js",
            "text/javascript; charset=utf-8",
            "system.llm.request",
        ),
        (
            "/sentence.js",
            "text/javascript; charset=utf-8",
            "SentenceAggregator",
        ),
    ] {
        let response = get(&playground, path, "127.0.0.1:7000").await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            content_type,
            "{path}"
        );
        assert_security_headers(&response, path);
        let body = body_text(response).await;
        assert!(body.contains(needle), "{path} lacks {needle}");
    }
}

#[test]
fn the_content_security_policy_allows_nothing_inline_and_nothing_foreign() {
    let policy = CONTENT_SECURITY_POLICY;
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src ws: wss: 'self'",
        "img-src 'self' data:",
        "frame-ancestors 'none'",
    ] {
        assert!(policy.contains(directive), "{directive} in {policy}");
    }
    assert!(!policy.contains("unsafe"), "{policy}");
}

#[test]
fn the_page_has_no_inline_script_or_style_and_loads_nothing_foreign() {
    let page = crewline_playground::INDEX_HTML;
    assert!(!page.contains("<script>"), "scripts come from files");
    assert!(!page.contains("style="), "styles come from the stylesheet");
    assert!(!page.contains("<style"), "styles come from the stylesheet");
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no foreign assets"
    );
    for script in [
        crewline_playground::PLAYGROUND_JS,
        crewline_playground::SENTENCE_JS,
    ] {
        assert!(!script.contains("import "), "no modules to fetch");
        assert!(!script.contains("eval("), "no eval");
    }
}

#[tokio::test]
async fn config_json_tells_the_page_the_crew_url_and_token() {
    let playground = Playground::new("ws://127.0.0.1:9000/ws").token("s3cret");
    let response = get(&playground, "/config.json", "localhost:7000").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
    assert_security_headers(&response, "/config.json");
    let config: serde_json::Value = serde_json::from_str(&body_text(response).await).expect("JSON");
    assert_eq!(
        config,
        serde_json::json!({"crew_url": "ws://127.0.0.1:9000/ws", "token": "s3cret"})
    );

    let open = Playground::new("ws://127.0.0.1:9000/ws");
    let config: serde_json::Value =
        serde_json::from_str(&body_text(get(&open, "/config.json", "127.0.0.1:7000").await).await)
            .expect("JSON");
    assert_eq!(config["token"], serde_json::Value::Null);
}

#[tokio::test]
async fn an_unknown_path_is_a_404_with_the_same_headers() {
    let playground = Playground::new("ws://127.0.0.1:8080/ws");
    let response = get(&playground, "/nope.js", "127.0.0.1:7000").await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    assert_security_headers(&response, "/nope.js");
}

#[tokio::test]
async fn a_host_that_is_not_loopback_is_refused_so_a_rebound_name_cannot_read_the_token() {
    let playground = Playground::new("ws://127.0.0.1:8080/ws").token("s3cret");
    let response = get(&playground, "/config.json", "attacker.example:7000").await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_security_headers(&response, "/config.json");
    assert!(!body_text(response).await.contains("s3cret"));
}

#[tokio::test]
async fn serve_refuses_a_listener_beyond_loopback_and_serves_on_loopback() {
    // 0.0.0.0 is not loopback: refused before serving anything.
    if let Ok(open) = tokio::net::TcpListener::bind("0.0.0.0:0").await {
        let error = Playground::new("ws://127.0.0.1:8080/ws")
            .serve(open)
            .await
            .expect_err("refused");
        assert!(matches!(error, PlaygroundError::NotLoopback(_)), "{error}");
        assert!(error.to_string().contains("loopback only"), "{error}");
    }

    let listener = crewline_playground::listen(0).await.expect("a free port");
    let addr = listener.local_addr().expect("an address");
    assert!(addr.ip().is_loopback());
    let serving = tokio::spawn(Playground::new("ws://127.0.0.1:8080/ws").serve(listener));
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"GET /config.json HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .expect("writes");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("reads");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("ws://127.0.0.1:8080/ws"), "{answer}");
    assert_eq!(
        crewline_playground::page_url(addr),
        format!("http://{addr}/")
    );
    serving.abort();
}

#[tokio::test]
async fn a_client_that_sends_half_a_request_line_is_disconnected_after_the_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let wait = std::time::Duration::from_secs(10);
    let listener = crewline_playground::listen(0).await.expect("a free port");
    let addr = listener.local_addr().expect("an address");
    let serving = tokio::spawn(
        Playground::new("ws://127.0.0.1:8080/ws")
            .header_read_timeout(std::time::Duration::from_millis(300))
            .serve(listener),
    );
    for partial in ["GET /conf", ""] {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        stream.write_all(partial.as_bytes()).await.expect("writes");
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(wait, stream.read_to_end(&mut rest)).await;
        assert!(
            closed.is_ok(),
            "a client that sent {partial:?} was still connected after {wait:?}"
        );
    }
    serving.abort();
}

#[test]
fn debug_output_redacts_the_token() {
    let playground = Playground::new("ws://127.0.0.1:8080/ws").token("s3cret");
    let debug = format!("{playground:?}");
    assert!(!debug.contains("s3cret"), "{debug}");
    assert!(debug.contains("redacted"), "{debug}");
}
