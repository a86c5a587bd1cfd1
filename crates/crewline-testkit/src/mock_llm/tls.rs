//! The mock served over HTTPS, as every real provider is: rustls, ALPN offering `h2` then
//! `http/1.1`, so HTTP/1.1 and HTTP/2 clients both work.
//!
//! Handshakes run on tasks of their own, never in the listener's `accept` (10,000 calls
//! connecting at once would otherwise wait on each other's round trips): a task per accepted
//! connection does the handshake and hands the finished stream to `accept` through a bounded
//! channel. A handshake that has not finished within [`HANDSHAKE_TIMEOUT`] is dropped; at most
//! [`MAX_HANDSHAKES`] run at once (the next connection waits in the kernel's backlog).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::{net::TcpListener, sync::mpsc, task::JoinHandle};
use tokio_rustls::TlsAcceptor;

use super::{Shared, conn::MockIo};

/// How long a client has to finish its TLS handshake before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many handshakes run at once; past it, accepting waits for one to end.
pub const MAX_HANDSHAKES: usize = 4096;

/// Finished TLS connections waiting for the HTTP server's `accept`.
const READY_QUEUE: usize = 1024;

/// Why a certificate and key could not be made into the mock's TLS settings.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The PEM text held no certificate, or no private key, or did not parse.
    #[error("{what}: {detail}")]
    Pem {
        /// Which input: `certificate` or `key`.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// rustls refused the certificate and key (e.g. a key that does not match).
    #[error("the certificate and key were refused")]
    Rustls(#[from] rustls::Error),
}

/// The mock's TLS settings: a certificate chain and its key, ALPN offering `h2` and
/// `http/1.1`.
#[derive(Clone)]
pub struct MockTls {
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for MockTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockTls")
            .field("alpn", &self.config.alpn_protocols)
            .finish_non_exhaustive()
    }
}

impl MockTls {
    /// Settings serving `chain` (the server's certificate first) with `key`.
    pub fn new(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<Self, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// Settings from PEM text: a certificate chain and a private key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, TlsError> {
        let pem = |what: &'static str, detail: String| TlsError::Pem { what, detail };
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem("certificate", e.to_string()))?;
        if chain.is_empty() {
            return Err(pem("certificate", "no CERTIFICATE block".to_owned()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| pem("key", e.to_string()))?;
        Self::new(chain, key)
    }

    /// Settings from two PEM files, as `crewline mock-llm --tls-cert --tls-key` reads them.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                path: path.to_owned(),
                source,
            })
        };
        Self::from_pem(&read(cert)?, &read(key)?)
    }

    /// Settings from a rustls configuration the caller made (its own ALPN list, versions...).
    pub fn from_config(config: Arc<rustls::ServerConfig>) -> Self {
        Self { config }
    }
}

/// The handshake side of a TLS listener: finished connections arrive on `ready`; dropping it
/// stops accepting.
pub(crate) struct Handshakes {
    pub(crate) ready: mpsc::Receiver<(MockIo, SocketAddr)>,
    task: JoinHandle<()>,
}

impl Drop for Handshakes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Handshakes {
    /// Accepts on `listener`, resets connections a `down` fault refuses, and runs each other
    /// connection's handshake on a task of its own.
    pub(crate) fn start(listener: TcpListener, shared: Arc<Shared>, tls: &MockTls) -> Self {
        let (done, ready) = mpsc::channel(READY_QUEUE);
        let acceptor = TlsAcceptor::from(Arc::clone(&tls.config));
        let task = tokio::spawn(accept_loop(listener, shared, acceptor, done));
        Self { ready, task }
    }
}

async fn accept_loop(
    mut listener: TcpListener,
    shared: Arc<Shared>,
    acceptor: TlsAcceptor,
    done: mpsc::Sender<(MockIo, SocketAddr)>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        // axum's own accept: it logs and retries accept errors.
        let (tcp, addr) = axum::serve::Listener::accept(&mut listener).await;
        if shared.faults().accept() {
            // A reset before the handshake: a provider that is down.
            if let Err(error) = tcp.set_zero_linger() {
                tracing::debug!(error = %crewline::types::ErrorChain(&error), "could not set SO_LINGER");
            }
            drop(tcp);
            continue;
        }
        // Without TCP_NODELAY, each small SSE event after the first waits for the client's
        // delayed ACK (about 40 ms on Linux).
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(error = %crewline::types::ErrorChain(&error), "could not set TCP_NODELAY");
        }
        let (acceptor, done, counters) = (
            acceptor.clone(),
            done.clone(),
            Arc::clone(&shared.connections),
        );
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    counters.tls_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %crewline::types::ErrorChain(&error), %addr, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    counters.tls_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%addr, "TLS handshake stalled; connection dropped");
                    return;
                }
            };
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let protocol = if h2 { &counters.h2 } else { &counters.http1 };
            protocol.fetch_add(1, Ordering::Relaxed);
            // The server is gone when this fails: the connection is dropped with it.
            let _ = done.send((MockIo::tls(tls, counters), addr)).await;
        });
    }
}
