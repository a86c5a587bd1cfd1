//! An `LlmError` keeps its causes: code that inspects a failure can walk `source()` down to
//! the error that started it.

use std::error::Error as _;

use crewline_core::Message;
use crewline_llm::{ChatRequest, LlmClient, LlmError, OpenAiClient};

#[tokio::test]
async fn a_refused_connection_keeps_the_io_error_as_its_cause() {
    // Bound but never listening: connecting is refused, and no other test can take the port
    // meanwhile (a port freed by dropping a listener could be reused by a concurrent test's server).
    let refusing = tokio::net::TcpSocket::new_v4().expect("socket");
    refusing.bind(([127, 0, 0, 1], 0).into()).expect("bind");
    let addr = refusing.local_addr().expect("addr");
    let client = OpenAiClient::builder()
        .model("gpt-test")
        .api_key("sk-test-key")
        .base_url(format!("http://{addr}/v1"))
        .read_env(false)
        .max_retries(0)
        .build()
        .expect("client");

    let err = client
        .stream_chat(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .err()
        .expect("an error");

    assert!(matches!(err, LlmError::Connect(_)), "{err:?}");
    let causes: Vec<&(dyn std::error::Error + 'static)> =
        std::iter::successors(err.source(), |e| (*e).source()).collect();
    assert!(
        causes
            .iter()
            .any(|e| e.is::<hyper_util::client::legacy::Error>()),
        "the transport's error is in the chain: {causes:?}"
    );
    let io = causes
        .iter()
        .find_map(|e| e.downcast_ref::<std::io::Error>())
        .expect("the chain reaches the socket's error");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
}
