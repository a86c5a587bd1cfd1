//! The HTTP stack under `OpenAiClient`: hyper-util's pooled client (the default), against the
//! mock model and against servers that refuse or never accept a connection. Which stack a
//! proxy variable selects is tested with the selection function itself (`openai/http.rs`), so
//! no test here touches the process's environment.

use std::time::Duration;

use crewline_core::Message;
use crewline_llm::{ChatRequest, LlmClient, LlmError, OpenAiClient, StreamItem};
use crewline_testkit::mock_llm::{
    MockLlm,
    raw::{After, RawReply as Reply},
};
use futures::StreamExt;
use serde_json::{Value, json};

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Hello?")])
}

fn content(text: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
}

fn finish(reason: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

/// Whether the environment names a proxy, in which case clients take the reqwest path.
fn proxy_in_env() -> bool {
    [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ]
    .iter()
    .any(|name| std::env::var_os(name).is_some())
}

fn client(base_url: &str) -> OpenAiClient {
    OpenAiClient::builder()
        .model("gpt-test")
        .api_key("sk-test-0123456789")
        .base_url(base_url)
        .read_env(false)
        .max_retries(0)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .expect("client")
}

#[tokio::test]
async fn the_hyper_client_streams_the_mock_models_answer_and_reuses_its_connection() {
    let answer = || {
        Reply::chunks(
            &[content("Sunny "), content("in Oslo."), finish("stop")],
            After::DoneKeepAlive,
        )
    };
    let server = MockLlm::raw(vec![answer(), answer()])
        .start()
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = client(&server.base_url());
    if !proxy_in_env() {
        let debug = format!("{client:?}");
        assert!(debug.contains("http: Hyper"), "{debug}");
    }

    for _ in 0..2 {
        let items: Vec<_> = tokio::time::timeout(
            Duration::from_secs(20),
            client.stream_chat(hello()).await.expect("stream").collect(),
        )
        .await
        .expect("the stream ends");
        let text: String = items
            .iter()
            .filter_map(|item| match item.as_ref().expect("no error item") {
                StreamItem::Text(piece) => Some(piece.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "Sunny in Oslo.");
        // The body's end comes after `[DONE]`; the connection goes back to the pool then.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.mock().request_count(), 2);
    assert_eq!(
        server.mock().connections(),
        1,
        "the second turn reused the connection"
    );
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error_that_says_so() {
    // A port that was just free: nothing listens there any more.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);

    let err = client(&format!("http://{addr}/v1"))
        .stream_chat(hello())
        .await
        .err()
        .expect("an error");

    assert!(matches!(err, LlmError::Connect(_)), "{err:?}");
    let message = err.to_string().to_lowercase();
    assert!(
        message.starts_with("could not reach the llm server")
            && message.contains("connection refused"),
        "{err}"
    );
}

/// A listener whose accept queue is full: the kernel drops further SYNs, so a connect to it
/// neither succeeds nor fails until its timeout. Holds the sockets that fill the queue.
struct NeverAccepts {
    addr: std::net::SocketAddr,
    _listener: tokio::net::TcpListener,
    _queued: Vec<tokio::net::TcpStream>,
}

async fn never_accepts() -> NeverAccepts {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("address"))
        .expect("bind");
    let listener = socket.listen(1).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let mut queued = Vec::new();
    // Fill the queue: connects succeed until it is full, then hang.
    for _ in 0..16 {
        match tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(stream)) => queued.push(stream),
            _ => break,
        }
    }
    NeverAccepts {
        addr,
        _listener: listener,
        _queued: queued,
    }
}

#[tokio::test]
async fn a_connection_not_made_in_time_is_a_connect_error_naming_the_limit() {
    let server = never_accepts().await;

    let err = client(&format!("http://{}/v1", server.addr))
        .stream_chat(hello())
        .await
        .err()
        .expect("an error");

    assert!(matches!(err, LlmError::Connect(_)), "{err:?}");
    assert!(
        err.to_string().contains("no connection within 300ms"),
        "{err}"
    );
}
