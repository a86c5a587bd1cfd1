//! HTTP/2 by ALPN: many calls' streams share one connection, and a stream dropped on
//! barge-in does not reset its neighbours.

use std::time::Duration;

use crewline_core::Message;
use crewline_llm::{
    ChatRequest, ConnectionCounts, FinishReason, LlmClient, OpenAiClient, StreamItem,
};
use crewline_testkit::mock_llm::{MockLlm, Script};
use futures::StreamExt;

use super::{
    server::{Offer, TestCa, TlsMock},
    tls::{client, said, sunny},
};

/// Streams at once in the connection-count tests: far more than one HTTP/1.1 connection can
/// carry.
const STREAMS: usize = 20;

/// Runs [`STREAMS`] answers at once through `client`, each fully read.
async fn concurrent_answers(client: &OpenAiClient) {
    let answers = futures::future::join_all((0..STREAMS).map(|_| said(client))).await;
    for answer in answers {
        assert_eq!(answer.expect("an answer"), "Sunny in Paris.");
    }
}

#[tokio::test]
async fn concurrent_streams_share_one_http2_connection() {
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::H2AndHttp1).await;
    let client = client(&server.base_url("localhost"), Some(&ca));
    // The first request opens the connection; then every stream shares it.
    said(&client).await.expect("an answer");
    concurrent_answers(&client).await;
    assert_eq!(server.mock.request_count(), STREAMS + 1);
    assert_eq!(
        server.connections(),
        1,
        "one connection for {STREAMS} streams"
    );
    // The client reports as much, and so does the mock (what a load run reads).
    assert_eq!(
        client.connections(),
        ConnectionCounts { opened: 1, open: 1 }
    );
    let stats = server.mock.stats();
    assert_eq!((stats.connections_h2, stats.connections_http1), (1, 0));
    assert_eq!(stats.connections_open, 1);
}

#[tokio::test]
async fn over_http1_each_concurrent_stream_takes_a_connection() {
    // The same load over HTTP/1.1 (a server that offers no h2, or the client's `http2(false)`):
    // what HTTP/2 saves.
    let ca = TestCa::new("crewline test CA");
    for (offer, http2) in [(Offer::Http1, true), (Offer::H2AndHttp1, false)] {
        let server = TlsMock::serve(sunny(), &ca, &["localhost"], offer).await;
        let client = OpenAiClient::builder()
            .model("m")
            .api_key("sk-test-tls")
            .base_url(server.base_url("localhost"))
            .read_env(false)
            .max_retries(0)
            .add_root_certificate(ca.pem())
            .http2(http2)
            .build()
            .expect("a client");
        said(&client).await.expect("an answer");
        concurrent_answers(&client).await;
        let connections = server.connections();
        assert_eq!(client.connections().opened, connections as u64);
        // Every one of them settled on HTTP/1.1 by ALPN.
        let stats = server.mock.stats();
        assert_eq!(
            (stats.connections_h2, stats.connections_http1),
            (0, connections as u64)
        );
        assert!(
            connections > 1 && connections <= STREAMS + 1,
            "{offer:?}, http2 {http2}: {connections} connections"
        );
    }
}

#[tokio::test]
async fn http2_is_off_unless_asked_for() {
    // A provider at its concurrent-stream limit would queue turns on one connection, so a
    // client built without `http2(true)` speaks HTTP/1.1 even to a server offering h2.
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::H2AndHttp1).await;
    let client = OpenAiClient::builder()
        .model("m")
        .api_key("sk-test-tls")
        .base_url(server.base_url("localhost"))
        .read_env(false)
        .max_retries(0)
        .add_root_certificate(ca.pem())
        .build()
        .expect("a client");
    said(&client).await.expect("an answer");
    concurrent_answers(&client).await;
    assert!(
        server.connections() > 1,
        "the default client shared one connection: it spoke HTTP/2"
    );
}

#[tokio::test]
async fn a_stream_dropped_on_barge_in_leaves_its_neighbour_on_the_connection_going() {
    let ca = TestCa::new("crewline test CA");
    let slow = MockLlm::new(Script::text(20, Duration::from_millis(10)));
    let server = TlsMock::serve(slow, &ca, &["localhost"], Offer::H2AndHttp1).await;
    let client = client(&server.base_url("localhost"), Some(&ca));
    let request = || ChatRequest::new(vec![Message::user("Tell me a story")]);
    let mut kept = client
        .stream_chat(request())
        .await
        .expect("the first stream");
    let mut dropped = client
        .stream_chat(request())
        .await
        .expect("the second stream");
    // Both streams are under way before one is cut.
    assert!(matches!(kept.next().await, Some(Ok(StreamItem::Text(_)))));
    assert!(matches!(
        dropped.next().await,
        Some(Ok(StreamItem::Text(_)))
    ));
    drop(dropped);
    let mut pieces = 1;
    let mut finish = None;
    while let Some(item) = kept.next().await {
        match item.expect("the kept stream goes on") {
            StreamItem::Text(_) => pieces += 1,
            StreamItem::Finish(reason) => finish = Some(reason),
            _ => {}
        }
    }
    assert_eq!(pieces, 20, "every piece of the kept answer");
    assert_eq!(finish, Some(FinishReason::Stop));
    assert_eq!(server.connections(), 1, "both streams on one connection");
    assert_eq!(server.mock.stats().connections_h2, 1);
    // The mock saw the dropped stream go (its stream reset), the kept one end whole.
    assert!(
        server.mock.wait_settled(Duration::from_secs(5)).await,
        "both requests ended"
    );
    let outcomes: Vec<String> = server
        .mock
        .requests()
        .into_iter()
        .map(|request| request.outcome)
        .collect();
    assert_eq!(outcomes.len(), 2);
    assert!(outcomes.contains(&"completed".to_owned()), "{outcomes:?}");
    assert!(
        outcomes.contains(&"client_disconnected".to_owned()),
        "{outcomes:?}"
    );
    // The connection is still good for the next turn.
    said(&client).await.expect("another answer");
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn past_the_servers_stream_limit_requests_wait_for_a_stream_on_the_connection() {
    // What a provider's `SETTINGS_MAX_CONCURRENT_STREAMS` does to a burst: hyper-util's pool
    // keeps one HTTP/2 connection, and streams past the limit queue on it (none fails).
    let ca = TestCa::new("crewline test CA");
    let slow = MockLlm::new(Script::text(5, Duration::from_millis(20)));
    let server =
        TlsMock::serve_with_streams(slow, &ca, &["localhost"], Offer::H2AndHttp1, Some(2)).await;
    let client = client(&server.base_url("localhost"), Some(&ca));
    said(&client).await.expect("an answer");
    let answers = futures::future::join_all((0..6).map(|_| said(&client))).await;
    for answer in answers {
        assert_eq!(answer.expect("an answer").matches("tok").count(), 5);
    }
    assert_eq!(
        server.connections(),
        1,
        "the burst waited on one connection"
    );
}

/// A TCP relay to `target` whose connections so far can be frozen (nothing forwarded either
/// way, sockets left open: a connection a NAT dropped without a word), new ones relayed.
struct Relay {
    addr: std::net::SocketAddr,
    frozen: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Relay {
    async fn start(target: std::net::SocketAddr) -> Self {
        use std::sync::{Arc, atomic::AtomicUsize, atomic::Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        // Connections numbered below `frozen` forward nothing.
        let frozen = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let (frozen, accepted) = (frozen.clone(), accepted.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let number = accepted.fetch_add(1, Ordering::SeqCst);
                    let Ok(upstream) = tokio::net::TcpStream::connect(target).await else {
                        continue;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (upstream_read, upstream_write) = upstream.into_split();
                    for (mut from, mut to) in [
                        (
                            Box::new(client_read) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                            Box::new(upstream_write)
                                as Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
                        ),
                        (Box::new(upstream_read) as _, Box::new(client_write) as _),
                    ] {
                        let frozen = frozen.clone();
                        tokio::spawn(async move {
                            let mut buffer = [0; 16 * 1024];
                            while let Ok(read) = from.read(&mut buffer).await {
                                if read == 0 || number < frozen.load(Ordering::SeqCst) {
                                    // Frozen: hold the socket, forward nothing more.
                                    if read > 0 {
                                        std::future::pending::<()>().await;
                                    }
                                    return;
                                }
                                if to.write_all(&buffer[..read]).await.is_err() {
                                    return;
                                }
                            }
                        });
                    }
                }
            }
        });
        Self {
            addr,
            frozen,
            accepted,
            task,
        }
    }
}

#[tokio::test]
async fn a_silently_dead_http2_connection_is_found_by_ping_and_replaced() {
    use std::sync::atomic::Ordering;
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::H2AndHttp1).await;
    let relay = Relay::start(server.addr).await;
    let idle = Duration::from_millis(300);
    let client = OpenAiClient::builder()
        .model("m")
        .api_key("sk-test-tls")
        .base_url(format!("https://localhost:{}/v1", relay.addr.port()))
        .read_env(false)
        .max_retries(0)
        .add_root_certificate(ca.pem())
        .idle_timeout(idle)
        .first_byte_timeout(Duration::from_secs(2))
        .http2(true)
        .build()
        .expect("a client");
    said(&client).await.expect("an answer");
    // The connection dies without a word; a ping goes unanswered and it is closed.
    relay
        .frozen
        .store(relay.accepted.load(Ordering::SeqCst), Ordering::SeqCst);
    tokio::time::sleep(idle * 4).await;
    // The next call opens a new connection instead of waiting on the dead one.
    assert_eq!(said(&client).await.expect("an answer"), "Sunny in Paris.");
    assert_eq!(relay.accepted.load(Ordering::SeqCst), 2);
    // The dead connection was closed, not kept.
    assert_eq!(
        client.connections(),
        ConnectionCounts { opened: 2, open: 1 }
    );
}
