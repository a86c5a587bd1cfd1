//! A test CA, certificates it signs, and the mock model served over TLS with them: by the
//! mock's own TLS listener ([`MockLlm::serve_tls`], what `crewline mock-llm --tls-cert` and the
//! load runs use), or, to set a stream limit, by a hyper server of the test's own.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use crewline_testkit::mock_llm::{MockLlm, MockTls, RunningMockLlm};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
    service::TowerToHyperService,
};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

/// A certificate authority made for one test.
pub(crate) struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A new CA named `name`.
    pub(crate) fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("a CA key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("a CA certificate"),
        }
    }

    /// The CA's certificate, as a client is given it.
    pub(crate) fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `names` signed by this CA, and its key.
    pub(crate) fn leaf(
        &self,
        names: &[&str],
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let params = CertificateParams::new(names).expect("params");
        let key = KeyPair::generate().expect("a server key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (vec![cert.der().clone(), self.issuer.der().clone()], key)
    }

    /// A server certificate for `names` signed by this CA, as PEM (chain, key): what
    /// `crewline mock-llm --tls-cert --tls-key` reads.
    pub(crate) fn leaf_pem(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let params = CertificateParams::new(names).expect("params");
        let key = KeyPair::generate().expect("a server key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (
            format!("{}{}", cert.pem(), self.issuer.pem()),
            key.serialize_pem(),
        )
    }
}

/// Which HTTP versions the server offers by ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// `http/1.1` alone (a server, or a proxy, that speaks no HTTP/2).
    Http1,
    /// `h2`, then `http/1.1`.
    H2AndHttp1,
}

/// The mock model served over TLS on 127.0.0.1.
pub(crate) struct TlsMock {
    pub(crate) addr: SocketAddr,
    pub(crate) mock: MockLlm,
    served: Served,
}

/// Who serves the TLS connections.
enum Served {
    /// The mock's own TLS listener; it counts connections in its stats.
    ByMock(#[allow(dead_code, reason = "kept alive: dropping it stops the server")] RunningMockLlm),
    /// The test's hyper server (a stream limit set).
    ByTest {
        /// TCP connections accepted.
        connections: Arc<AtomicUsize>,
        task: tokio::task::JoinHandle<()>,
    },
}

impl Drop for TlsMock {
    fn drop(&mut self) {
        if let Served::ByTest { task, .. } = &self.served {
            task.abort();
        }
    }
}

impl TlsMock {
    /// `mock` served with a certificate for `names` from `ca`, offering `offer`.
    pub(crate) async fn serve(mock: MockLlm, ca: &TestCa, names: &[&str], offer: Offer) -> Self {
        Self::serve_with_streams(mock, ca, names, offer, None).await
    }

    /// As [`TlsMock::serve`], allowing at most `max_streams` concurrent HTTP/2 streams on a
    /// connection (hyper's default, 200, when `None`).
    pub(crate) async fn serve_with_streams(
        mock: MockLlm,
        ca: &TestCa,
        names: &[&str],
        offer: Offer,
        max_streams: Option<u32>,
    ) -> Self {
        let (chain, key) = ca.leaf(names);
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("the server's certificate");
        config.alpn_protocols = match offer {
            Offer::Http1 => vec![b"http/1.1".to_vec()],
            Offer::H2AndHttp1 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let Some(max_streams) = max_streams else {
            let tls = MockTls::from_config(Arc::new(config));
            let running = mock.serve_tls(listener, &tls).expect("the mock over TLS");
            return Self {
                addr,
                mock,
                served: Served::ByMock(running),
            };
        };
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let connections = Arc::new(AtomicUsize::new(0));
        let router = mock.router();
        let task = tokio::spawn({
            let connections = connections.clone();
            async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let (acceptor, router) = (acceptor.clone(), router.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = TowerToHyperService::new(router);
                        let mut builder = auto::Builder::new(TokioExecutor::new());
                        builder.http2().max_concurrent_streams(Some(max_streams));
                        let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                    });
                }
            }
        });
        Self {
            addr,
            mock,
            served: Served::ByTest { connections, task },
        }
    }

    /// The base URL at `host` (which resolves to 127.0.0.1).
    pub(crate) fn base_url(&self, host: &str) -> String {
        format!("https://{host}:{}/v1", self.addr.port())
    }

    /// The connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        match &self.served {
            Served::ByMock(_) => self.mock.stats().connections as usize,
            Served::ByTest { connections, .. } => connections.load(Ordering::SeqCst),
        }
    }

    /// The TLS handshakes that failed (the client refused the certificate); counted by the
    /// mock's own listener only.
    pub(crate) fn failed_handshakes(&self) -> usize {
        self.mock.stats().tls_handshakes_failed as usize
    }
}
