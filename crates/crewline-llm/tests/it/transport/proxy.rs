//! Proxies on the default client's one stack: an HTTP CONNECT tunnel (the proxy made by the
//! test), `NO_PROXY` exemptions, a proxy's refusal, its credentials never shown.

use std::sync::{Arc, Mutex};

use crewline_llm::{LlmError, OpenAiClient};
use crewline_testkit::mock_llm::MockLlm;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use super::{
    server::{Offer, TestCa, TlsMock},
    tls::{CHILD_REQUESTS, run_child, said, sunny},
};

/// The most a request head to the test proxy may be.
const HEAD_LIMIT: usize = 8 * 1024;

/// A tiny HTTP CONNECT proxy on 127.0.0.1: it tunnels to the host asked for (or answers
/// `refuse` when set) and keeps each CONNECT's head.
struct ConnectProxy {
    addr: std::net::SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ConnectProxy {
    async fn start(refuse: Option<&'static str>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let heads = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let heads = heads.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(tunnel(client, heads.clone(), refuse));
                }
            }
        });
        Self { addr, heads, task }
    }

    /// The heads of the CONNECT requests so far.
    fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("heads").clone()
    }
}

/// Serves one CONNECT: reads its head, connects to its target, answers 200 and copies both
/// ways until either side closes.
async fn tunnel(mut client: TcpStream, heads: Arc<Mutex<Vec<String>>>, refuse: Option<&str>) {
    let mut head = Vec::new();
    let mut buffer = [0; 1024];
    while !head.ends_with(b"\r\n\r\n") {
        let Ok(read) = client.read(&mut buffer).await else {
            return;
        };
        if read == 0 || head.len() + read > HEAD_LIMIT {
            return;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    heads.lock().expect("heads").push(head.clone());
    if let Some(answer) = refuse {
        let _ = client.write_all(answer.as_bytes()).await;
        return;
    }
    let Some(target) = head
        .strip_prefix("CONNECT ")
        .and_then(|rest| rest.split(' ').next())
    else {
        let _ = client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            .await;
        return;
    };
    let Ok(mut upstream) = TcpStream::connect(target).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_ok()
    {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}

/// A default client for `base_url` through `proxy` (except to `no_proxy`), trusting `ca`.
fn client(base_url: &str, ca: &TestCa, proxy: &str, no_proxy: &str) -> OpenAiClient {
    OpenAiClient::builder()
        .model("m")
        .api_key("sk-test-proxy")
        .base_url(base_url)
        .read_env(false)
        .max_retries(0)
        .add_root_certificate(ca.pem())
        .http2(true)
        .proxy(proxy, no_proxy)
        .build()
        .expect("a client")
}

#[tokio::test]
async fn https_goes_through_an_http_connect_proxy_with_its_credentials() {
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::H2AndHttp1).await;
    let proxy = ConnectProxy::start(None).await;
    let proxy_url = format!("http://crew:hunter2@{}", proxy.addr);
    let client = client(&server.base_url("localhost"), &ca, &proxy_url, "");
    assert_eq!(said(&client).await.expect("an answer"), "Sunny in Paris.");
    // HTTP/2 through the tunnel: the next turns share it.
    said(&client).await.expect("an answer");
    let heads = proxy.heads();
    assert_eq!(heads.len(), 1, "one tunnel: {heads:?}");
    let port = server.addr.port();
    assert!(
        heads[0].starts_with(&format!("CONNECT localhost:{port} HTTP/1.1\r\n")),
        "{}",
        heads[0]
    );
    // `crew:hunter2`, base64: sent to the proxy, in the CONNECT alone.
    assert!(
        heads[0].contains("Proxy-Authorization: Basic Y3JldzpodW50ZXIy\r\n"),
        "{}",
        heads[0]
    );
    assert!(!format!("{client:?}").contains("hunter2"));
    assert_eq!(server.mock.request_count(), 2);
}

#[tokio::test]
async fn plain_http_is_tunnelled_too() {
    let mock = MockLlm::new(crewline_testkit::mock_llm::Script::text(
        3,
        std::time::Duration::ZERO,
    ))
    .start()
    .await
    .expect("the mock model");
    let proxy = ConnectProxy::start(None).await;
    let ca = TestCa::new("unused CA");
    let client = client(&mock.base_url(), &ca, &format!("http://{}", proxy.addr), "");
    said(&client).await.expect("an answer");
    let heads = proxy.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].starts_with(&format!("CONNECT 127.0.0.1:{} ", mock.addr().port())),
        "{}",
        heads[0]
    );
}

#[tokio::test]
async fn no_proxy_hosts_are_reached_directly() {
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::Http1).await;
    let proxy = ConnectProxy::start(None).await;
    let proxy_url = format!("http://{}", proxy.addr);
    for no_proxy in ["localhost", "127.0.0.1,localhost", "*"] {
        let client = client(&server.base_url("localhost"), &ca, &proxy_url, no_proxy);
        said(&client).await.expect("an answer");
    }
    assert_eq!(
        proxy.heads(),
        Vec::<String>::new(),
        "nothing went through the proxy"
    );
}

#[tokio::test]
async fn a_refusing_proxy_is_a_connect_error_naming_it_and_not_its_password() {
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::Http1).await;
    for (answer, why) in [
        (
            "HTTP/1.1 407 Proxy Authentication Required\r\n\r\n",
            "proxy authorization required",
        ),
        ("HTTP/1.1 403 Forbidden\r\n\r\n", "unsuccessful"),
    ] {
        let proxy = ConnectProxy::start(Some(answer)).await;
        let proxy_url = format!("http://crew:hunter2@{}", proxy.addr);
        let client = client(&server.base_url("localhost"), &ca, &proxy_url, "");
        let error = said(&client).await.expect_err("refused");
        let LlmError::Connect(detail) = &error else {
            panic!("not a connection error: {error:?}");
        };
        let message = detail.message();
        assert!(
            message.contains(&format!("through the proxy {}", proxy.addr)),
            "{message}"
        );
        assert!(message.contains(why), "{message}");
        assert!(!format!("{error:?}").contains("hunter2"), "{error:?}");
    }
    assert_eq!(server.mock.request_count(), 0);
}

#[tokio::test]
async fn both_clients_honour_the_proxy_variables_and_no_proxy() {
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::Http1).await;
    let proxy = ConnectProxy::start(None).await;
    let proxy_url = format!("http://{}", proxy.addr);
    run_child(&server, &ca, &[("HTTPS_PROXY", proxy_url.clone())]).await;
    let heads = proxy.heads();
    assert_eq!(
        heads.len(),
        CHILD_REQUESTS,
        "each client tunnelled: {heads:?}"
    );
    run_child(
        &server,
        &ca,
        &[
            ("HTTPS_PROXY", proxy_url),
            ("NO_PROXY", "localhost".to_owned()),
        ],
    )
    .await;
    assert_eq!(
        proxy.heads().len(),
        CHILD_REQUESTS,
        "the exempt host went direct"
    );
    assert_eq!(server.mock.request_count(), 2 * CHILD_REQUESTS);
}

/// A tiny SOCKS5 proxy on 127.0.0.1 (user and password asked for): it records each
/// request's target as sent (a name for `socks5h`, an address for `socks5`) and relays.
async fn socks5_proxy() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let targets = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn({
        let targets = targets.clone();
        async move {
            while let Ok((client, _)) = listener.accept().await {
                let targets = targets.clone();
                tokio::spawn(async move {
                    let _ = socks5(client, targets).await;
                });
            }
        }
    });
    (addr, targets)
}

/// Serves one SOCKS5 connection.
async fn socks5(mut client: TcpStream, targets: Arc<Mutex<Vec<String>>>) -> std::io::Result<()> {
    let mut head = [0; 2];
    client.read_exact(&mut head).await?;
    let mut methods = vec![0; usize::from(head[1])];
    client.read_exact(&mut methods).await?;
    // Username and password (RFC 1929), which the test's client must send.
    client.write_all(&[5, 2]).await?;
    let mut version_and_len = [0; 2];
    client.read_exact(&mut version_and_len).await?;
    let mut user = vec![0; usize::from(version_and_len[1])];
    client.read_exact(&mut user).await?;
    let mut pass_len = [0; 1];
    client.read_exact(&mut pass_len).await?;
    let mut pass = vec![0; usize::from(pass_len[0])];
    client.read_exact(&mut pass).await?;
    let accepted = user == b"crew" && pass == b"hunter2";
    client.write_all(&[1, if accepted { 0 } else { 1 }]).await?;
    if !accepted {
        return Ok(());
    }
    let mut request = [0; 4];
    client.read_exact(&mut request).await?;
    let host = match request[3] {
        1 => {
            let mut ip = [0; 4];
            client.read_exact(&mut ip).await?;
            std::net::Ipv4Addr::from(ip).to_string()
        }
        3 => {
            let mut len = [0; 1];
            client.read_exact(&mut len).await?;
            let mut name = vec![0; usize::from(len[0])];
            client.read_exact(&mut name).await?;
            String::from_utf8_lossy(&name).into_owned()
        }
        _ => return Ok(()),
    };
    let mut port = [0; 2];
    client.read_exact(&mut port).await?;
    let target = format!("{host}:{}", u16::from_be_bytes(port));
    targets.lock().expect("targets").push(target.clone());
    let mut upstream = TcpStream::connect(target).await?;
    client.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

#[tokio::test]
async fn https_goes_through_a_socks5_proxy_resolving_names_there_or_here() {
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::H2AndHttp1).await;
    let (proxy, targets) = socks5_proxy().await;
    let port = server.addr.port();
    for (scheme, target) in [
        ("socks5h", format!("localhost:{port}")),
        ("socks5", format!("127.0.0.1:{port}")),
    ] {
        let proxy_url = format!("{scheme}://crew:hunter2@{proxy}");
        let client = client(&server.base_url("localhost"), &ca, &proxy_url, "");
        assert_eq!(said(&client).await.expect("an answer"), "Sunny in Paris.");
        let last = targets.lock().expect("targets").last().cloned();
        assert_eq!(last, Some(target), "{scheme}");
    }
    assert_eq!(server.mock.request_count(), 2);
}
