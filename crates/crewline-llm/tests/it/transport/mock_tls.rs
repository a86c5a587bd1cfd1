//! The mock model's own HTTPS (`MockLlm::serve_tls`, `crewline mock-llm --tls-cert --tls-key`):
//! what the load runs put crewline and the floor against. Both HTTP versions through both
//! clients, the connection counts a load run reports, the `down` fault over TLS, and a stalled
//! handshake that holds up no one.

use std::time::Duration;

use crewline_core::Message;
use crewline_llm::{ChatRequest, LlmClient, LlmError, OpenAiClient};
use crewline_testkit::mock_llm::{
    Fault, HANDSHAKE_TIMEOUT, MockLlm, MockTls, RunningMockLlm, TlsError,
};
use futures::StreamExt;

use super::{
    server::TestCa,
    tls::{said, sunny},
};

/// `mock` served over TLS on 127.0.0.1 with a certificate for localhost from `ca`, read from
/// PEM as the command line reads it.
async fn serve(mock: &MockLlm, ca: &TestCa) -> RunningMockLlm {
    let (chain, key) = ca.leaf_pem(&["localhost"]);
    let tls = MockTls::from_pem(chain.as_bytes(), key.as_bytes()).expect("the PEM files");
    mock.spawn_tls("127.0.0.1:0".parse().expect("an address"), &tls)
        .await
        .expect("the mock over TLS")
}

/// crewline's default client for `running`, trusting `ca`, HTTP/2 offered when `http2`.
fn client(running: &RunningMockLlm, ca: &TestCa, http2: bool) -> OpenAiClient {
    running
        .client_builder()
        .model("m")
        .max_retries(0)
        .connect_timeout(Duration::from_secs(5))
        .add_root_certificate(ca.pem())
        .http2(http2)
        .build()
        .expect("a client")
}

#[tokio::test]
async fn the_mock_serves_https_over_http1_and_http2_and_counts_each() {
    let ca = TestCa::new("crewline test CA");
    let mock = sunny();
    let running = serve(&mock, &ca).await;
    assert!(running.base_url().starts_with("https://localhost:"));

    let http1 = client(&running, &ca, false);
    assert_eq!(said(&http1).await.expect("an answer"), "Sunny in Paris.");
    let stats = mock.stats();
    assert_eq!((stats.connections_http1, stats.connections_h2), (1, 0));

    let http2 = client(&running, &ca, true);
    // The first request settles HTTP/2 by ALPN (requests racing it would each open a
    // connection: the pool learns the protocol from the handshake), then streams share it.
    said(&http2).await.expect("an answer");
    let answers = futures::future::join_all((0..5).map(|_| said(&http2))).await;
    for answer in answers {
        assert_eq!(answer.expect("an answer"), "Sunny in Paris.");
    }
    let stats = mock.stats();
    assert_eq!(
        (stats.connections_http1, stats.connections_h2),
        (1, 1),
        "five streams on one HTTP/2 connection"
    );
    assert_eq!(stats.connections, 2);
    assert_eq!(stats.connections_open, 2, "both clients keep theirs");
    assert_eq!(stats.requests, 7);
    assert_eq!(stats.tls_handshakes_failed, 0);

    // A client that goes away closes its connections; the mock counts them closed.
    drop((http1, http2));
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while mock.stats().connections_open > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(closed.await.is_ok(), "{:?}", mock.stats());
    assert_eq!(mock.stats().connections_open_peak, 2);
}

#[cfg(feature = "async-openai")]
#[tokio::test]
async fn the_async_openai_client_streams_from_the_mock_over_https() {
    let ca = TestCa::new("crewline test CA");
    let mock = sunny();
    let running = serve(&mock, &ca).await;
    let client = super::tls::async_openai_client::client(&running.base_url(), Some(&ca));
    assert_eq!(said(&client).await.expect("an answer"), "Sunny in Paris.");
    assert_eq!(mock.stats().connections_http1, 1);
}

#[tokio::test]
async fn the_down_fault_resets_tls_connections_open_and_new() {
    let ca = TestCa::new("crewline test CA");
    let mock = sunny();
    let running = serve(&mock, &ca).await;
    let client = client(&running, &ca, true);
    said(&client).await.expect("an answer");

    // A request asking for `down` on the open connection: it is reset mid-request.
    let request = ChatRequest::new(vec![Message::user("Weather? [[mock:down]]")]);
    let failed = match client.stream_chat(request).await {
        Err(error) => error,
        Ok(mut stream) => loop {
            match stream.next().await {
                Some(Err(error)) => break error,
                Some(Ok(_)) => {}
                None => panic!("the answer ended whole"),
            }
        },
    };
    assert!(
        matches!(failed, LlmError::Connect(_) | LlmError::StreamCut(_)),
        "{failed:?}"
    );

    // The whole server down: new connections are reset before any handshake.
    running.set_fault(Some(Fault::Down));
    let fresh = self::client(&running, &ca, false);
    let error = said(&fresh).await.expect_err("a server that is down");
    assert!(matches!(error, LlmError::Connect(_)), "{error:?}");
    assert!(mock.stats().connections_reset >= 1, "{:?}", mock.stats());

    // Back up: the same client answers again.
    running.set_fault(None);
    assert_eq!(said(&fresh).await.expect("an answer"), "Sunny in Paris.");
}

#[tokio::test]
async fn a_stalled_handshake_holds_up_no_other_connection_and_is_dropped() {
    let ca = TestCa::new("crewline test CA");
    let mock = sunny();
    let running = serve(&mock, &ca).await;
    // A peer that connects and never says hello.
    let mut stalled = tokio::net::TcpStream::connect(running.addr())
        .await
        .expect("a connection");
    // Handshakes run on their own tasks: a client arriving after it is answered meanwhile.
    let client = client(&running, &ca, false);
    assert_eq!(said(&client).await.expect("an answer"), "Sunny in Paris.");
    // After the handshake timeout the stalled connection is closed by the mock.
    let mut byte = [0_u8; 1];
    let closed = tokio::time::timeout(
        HANDSHAKE_TIMEOUT + Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut stalled, &mut byte),
    )
    .await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "the stalled connection stayed open: {closed:?}"
    );
    assert_eq!(mock.stats().tls_handshakes_failed, 1);
}

#[test]
fn pem_without_a_certificate_or_a_key_is_refused_naming_which() {
    let ca = TestCa::new("crewline test CA");
    let (chain, key) = ca.leaf_pem(&["localhost"]);
    let no_cert = MockTls::from_pem(b"", key.as_bytes());
    assert!(
        matches!(
            no_cert,
            Err(TlsError::Pem {
                what: "certificate",
                ..
            })
        ),
        "{no_cert:?}"
    );
    let no_key = MockTls::from_pem(chain.as_bytes(), b"");
    assert!(
        matches!(no_key, Err(TlsError::Pem { what: "key", .. })),
        "{no_key:?}"
    );
    let missing = MockTls::from_pem_files(
        std::path::Path::new("/nonexistent/cert.pem"),
        std::path::Path::new("/nonexistent/key.pem"),
    );
    assert!(matches!(missing, Err(TlsError::Read { .. })), "{missing:?}");
}
