//! The shared listener's limits: a slow or huge request head is cut off, an idle keep-alive
//! connection closed, the connection cap holds, a stop is bounded.

use std::{convert::Infallible, net::SocketAddr, time::Duration};

use crewline_http::HttpSettings;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tokio_util::sync::CancellationToken;

/// Longer than any bound under test: a test that waits this long has failed.
const WAIT: Duration = Duration::from_secs(10);

/// Serves a one-route app with `settings` on a loopback port.
async fn serve(settings: HttpSettings) -> (SocketAddr, CancellationToken) {
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let stop = CancellationToken::new();
    tokio::spawn(crewline_http::serve(listener, app, stop.clone(), settings));
    (addr, stop)
}

/// Sends a whole `GET /` on `stream` and reads the response's status line.
async fn get(stream: &mut TcpStream, addr: SocketAddr) -> String {
    let request = format!("GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = [0u8; 12];
    tokio::time::timeout(WAIT, stream.read_exact(&mut head))
        .await
        .expect("an answer in time")
        .expect("read");
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test]
async fn half_a_request_line_is_disconnected_after_the_header_timeout() {
    let timeout = Duration::from_millis(300);
    let (addr, _stop) = serve(HttpSettings::default().header_read_timeout(timeout)).await;
    for partial in ["GET /hea", ""] {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(partial.as_bytes()).await.expect("write");
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await;
        assert!(
            closed.is_ok(),
            "a client that sent {partial:?} was still connected after {WAIT:?}"
        );
    }
    // A whole request on time is still served.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(get(&mut stream, addr).await, "HTTP/1.1 200");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let timeout = Duration::from_millis(300);
    let (addr, _stop) = serve(HttpSettings::default().header_read_timeout(timeout)).await;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    // The whole response (kept alive), then nothing more from the client: the server closes.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "an idle keep-alive connection was kept over {WAIT:?}"
    );
    assert!(
        rest.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
}

#[tokio::test]
async fn a_request_head_past_the_cap_is_refused_with_431() {
    let (addr, _stop) = serve(HttpSettings::default()).await;
    // 100 KiB of headers: under hyper's own ~400 KiB buffer, over the 64 KiB cap.
    let cookie = "c".repeat(100 * 1024);
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\n\r\n");
    // The server may answer before it has read all of it.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut head = [0u8; 12];
    tokio::time::timeout(WAIT, stream.read_exact(&mut head))
        .await
        .expect("an answer in time")
        .expect("read");
    assert_eq!(&head, b"HTTP/1.1 431");
    // A request of usual size is still served.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(get(&mut stream, addr).await, "HTTP/1.1 200");
}

#[tokio::test]
async fn a_connection_past_the_cap_waits_until_one_closes() {
    let (addr, _stop) = serve(HttpSettings::default().max_connections(1)).await;
    let mut first = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(get(&mut first, addr).await, "HTTP/1.1 200");
    // The kernel completes the second handshake, but the server does not take it while the
    // first connection (kept alive) holds the only slot.
    let mut second = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    second.write_all(request.as_bytes()).await.expect("write");
    let mut head = [0u8; 12];
    let early =
        tokio::time::timeout(Duration::from_millis(300), second.read_exact(&mut head)).await;
    assert!(
        early.is_err(),
        "the second connection was served past the cap"
    );
    // Once the first closes, the second is served.
    drop(first);
    tokio::time::timeout(WAIT, second.read_exact(&mut head))
        .await
        .expect("served once a slot is free")
        .expect("read");
    assert_eq!(&head, b"HTTP/1.1 200");
}

#[tokio::test]
async fn stop_closes_the_port_and_drops_connections_after_the_grace() {
    let grace = Duration::from_millis(200);
    let endless = axum::Router::new().route(
        "/",
        axum::routing::get(|| async {
            axum::body::Body::from_stream(futures::stream::pending::<Result<String, Infallible>>())
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let stop = CancellationToken::new();
    let served = tokio::spawn(crewline_http::serve(
        listener,
        endless,
        stop.clone(),
        HttpSettings::default().shutdown_grace(grace),
    ));
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(get(&mut stream, addr).await, "HTTP/1.1 200");
    stop.cancel();
    tokio::time::timeout(WAIT, served)
        .await
        .expect("serve returns despite an endless response")
        .expect("joined")
        .expect("served");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the port is closed"
    );
}
