//! HTTPS to the mock model: a certificate from a CA the client trusts works; an untrusted
//! one, or one for another host, fails with an error naming the host.

use std::time::Duration;

use crewline_core::Message;
use crewline_llm::{ChatRequest, LlmClient, LlmError, OpenAiClient, StreamItem, TlsRoots};
use crewline_testkit::mock_llm::{MockLlm, Script};
use futures::StreamExt;

use super::server::{Offer, TestCa, TlsMock};

/// A mock model answering every request with "Sunny in Paris." in three pieces.
pub(crate) fn sunny() -> MockLlm {
    let script = Script::from_json(&serde_json::json!({
        "replies": [{"reply": {"content_chunks": ["Sunny ", "in ", "Paris."]}}]
    }))
    .expect("a script");
    MockLlm::new(script)
}

/// A default client for `base_url`, trusting `ca` when given, without retries.
pub(crate) fn client(base_url: &str, ca: Option<&TestCa>) -> OpenAiClient {
    let mut builder = OpenAiClient::builder()
        .model("m")
        .api_key("sk-test-tls")
        .base_url(base_url)
        .read_env(false)
        .max_retries(0)
        .connect_timeout(Duration::from_secs(5))
        .http2(true);
    if let Some(ca) = ca {
        builder = builder.add_root_certificate(ca.pem());
    }
    builder.build().expect("a client")
}

/// The streamed text of one answer.
pub(crate) async fn said(client: &dyn LlmClient) -> Result<String, LlmError> {
    let mut stream = client
        .stream_chat(ChatRequest::new(vec![Message::user("Weather?")]))
        .await?;
    let mut said = String::new();
    while let Some(item) = stream.next().await {
        if let StreamItem::Text(piece) = item? {
            said.push_str(&piece);
        }
    }
    Ok(said)
}

#[tokio::test]
async fn the_default_client_trusts_a_ca_it_is_given() {
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::Http1).await;
    let client = client(&server.base_url("localhost"), Some(&ca));
    assert_eq!(said(&client).await.expect("an answer"), "Sunny in Paris.");
    assert_eq!(server.mock.request_count(), 1);
}

/// Checks that `error` is a connection error naming `host` and saying the certificate is
/// not trusted.
fn assert_refused_certificate(error: &LlmError, host: &str, why: &str) {
    let LlmError::Connect(detail) = error else {
        panic!("not a connection error: {error:?}");
    };
    let message = detail.message();
    assert!(
        message.starts_with(&format!("TLS with {host} failed")),
        "{message}"
    );
    assert!(message.contains("certificate"), "{message}");
    assert!(message.contains(why), "{message}");
}

#[tokio::test]
async fn the_default_client_refuses_an_untrusted_certificate_naming_the_host() {
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::Http1).await;
    // Trusting another CA (or none) is the same: the chain leads nowhere it trusts.
    let other = TestCa::new("another CA");
    for trusted in [None, Some(&other)] {
        let client = client(&server.base_url("localhost"), trusted);
        let error = said(&client).await.expect_err("an untrusted certificate");
        let host = format!("localhost:{}", server.addr.port());
        assert_refused_certificate(&error, &host, "UnknownIssuer");
    }
    assert_eq!(server.mock.request_count(), 0, "no request went out");
    // The server sees each handshake end as the client hangs up (a moment after the error).
    let failed = || server.failed_handshakes();
    let settled = tokio::time::timeout(Duration::from_secs(5), async {
        while failed() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(settled.await.is_ok(), "{} handshakes failed", failed());
}

#[tokio::test]
async fn the_default_client_refuses_a_certificate_for_another_host_naming_it() {
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["models.example"], Offer::Http1).await;
    let client = client(&server.base_url("localhost"), Some(&ca));
    let error = said(&client)
        .await
        .expect_err("a certificate for another host");
    let host = format!("localhost:{}", server.addr.port());
    assert_refused_certificate(&error, &host, "not valid for name");
    assert_eq!(server.mock.request_count(), 0);
}

#[test]
fn a_pem_with_no_certificate_fails_the_build() {
    let built = OpenAiClient::builder()
        .model("m")
        .api_key("k")
        .read_env(false)
        .add_root_certificate("-----BEGIN NONSENSE-----")
        .build();
    assert!(matches!(built, Err(LlmError::Config(_))), "{built:?}");
    assert!(TlsRoots::new().add_pem("").is_err());
}

#[cfg(feature = "async-openai")]
pub(crate) mod async_openai_client {
    use ::async_openai::config::OpenAIConfig;
    use crewline_llm::AsyncOpenAiClient;

    use super::*;

    /// An async-openai client for `base_url` over reqwest with the default client's TLS,
    /// trusting `ca` when given.
    pub(crate) fn client(base_url: &str, ca: Option<&TestCa>) -> AsyncOpenAiClient<OpenAIConfig> {
        let roots = match ca {
            Some(ca) => TlsRoots::new().add_pem(ca.pem()).expect("the CA"),
            None => TlsRoots::new(),
        };
        let config = OpenAIConfig::new()
            .with_api_base(base_url)
            .with_api_key("sk-test-tls");
        let http = roots.reqwest_client().expect("a reqwest client");
        AsyncOpenAiClient::new(
            ::async_openai::Client::with_config(config).with_http_client(http),
            "m",
        )
    }

    #[tokio::test]
    async fn the_async_openai_client_trusts_a_ca_it_is_given() {
        let ca = TestCa::new("crewline test CA");
        let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::Http1).await;
        let client = client(&server.base_url("localhost"), Some(&ca));
        assert_eq!(said(&client).await.expect("an answer"), "Sunny in Paris.");
    }

    #[tokio::test]
    async fn the_async_openai_client_refuses_untrusted_and_wrong_host_certificates() {
        let ca = TestCa::new("crewline test CA");
        for (names, trusted, why) in [
            (["localhost"], false, "UnknownIssuer"),
            (["models.example"], true, "not valid for name"),
        ] {
            let server = TlsMock::serve(sunny(), &ca, &names, Offer::Http1).await;
            let client = client(&server.base_url("localhost"), trusted.then_some(&ca));
            let error = said(&client).await.expect_err("a refused certificate");
            let host = format!("localhost:{}", server.addr.port());
            let LlmError::Connect(detail) = &error else {
                panic!("not a connection error: {error:?}");
            };
            let message = detail.message();
            assert!(message.contains(&host), "{message}");
            assert!(message.contains(why), "{message}");
        }
    }
}

/// The variable that hands [`ssl_cert_file_child`] the server's URL.
const CHILD_URL: &str = "CREWLINE_TLS_TEST_URL";

/// Runs [`ssl_cert_file_child`] in a child process with `SSL_CERT_FILE` naming `ca` and
/// the variables `env`: both clients, given no root of their own, stream an answer from
/// `server` there. Variables are the process's: set in a child running one test, no other
/// test of this binary sees them.
pub(crate) async fn run_child(server: &TlsMock, ca: &TestCa, env: &[(&str, String)]) {
    let path = std::env::temp_dir().join(format!(
        "crewline-test-ca-{}-{}.pem",
        std::process::id(),
        server.addr.port()
    ));
    std::fs::write(&path, ca.pem()).expect("the CA file");
    let child = tokio::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "transport::tls::ssl_cert_file_child",
            "--ignored",
            "--nocapture",
        ])
        .env("SSL_CERT_FILE", &path)
        .env(CHILD_URL, server.base_url("localhost"))
        .envs(env.iter().map(|(name, value)| (name, value)))
        .output()
        .await
        .expect("the child runs");
    let _ = std::fs::remove_file(&path);
    assert!(
        child.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
}

/// How many requests [`ssl_cert_file_child`] makes: one per client.
pub(crate) const CHILD_REQUESTS: usize = if cfg!(feature = "async-openai") { 2 } else { 1 };

#[tokio::test]
async fn a_ca_named_by_ssl_cert_file_is_trusted() {
    let ca = TestCa::new("crewline test CA");
    let server = TlsMock::serve(sunny(), &ca, &["localhost"], Offer::Http1).await;
    run_child(&server, &ca, &[]).await;
    assert_eq!(
        server.mock.request_count(),
        CHILD_REQUESTS,
        "both clients asked"
    );
}

/// Run by [`a_ca_named_by_ssl_cert_file_is_trusted`] with `SSL_CERT_FILE` set: both clients,
/// given no root of their own, reach the server.
#[tokio::test]
#[ignore = "run by a_ca_named_by_ssl_cert_file_is_trusted, with SSL_CERT_FILE set"]
async fn ssl_cert_file_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    assert_eq!(
        said(&client(&url, None)).await.expect("an answer"),
        "Sunny in Paris."
    );
    #[cfg(feature = "async-openai")]
    {
        let said = said(&async_openai_client::client(&url, None)).await;
        assert_eq!(said.expect("an answer"), "Sunny in Paris.");
    }
}
