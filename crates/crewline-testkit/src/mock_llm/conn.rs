//! The scripted server's connections: a TCP stream (plain, or TLS) a request handler can reset
//! ([`Fault::Down`] on a connection already open, e.g. one the client keeps alive in its pool),
//! counted while open.
//!
//! [`Fault::Down`]: super::Fault::Down

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use axum::{extract::connect_info::Connected, serve::IncomingStream};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};
use tokio_rustls::server::TlsStream;

use super::MockListener;

/// Connection counters kept with atomics (not the faults' lock), so the plain path pays one
/// increment and one decrement per connection.
#[derive(Default)]
pub(crate) struct ConnCounters {
    /// Connections handed to the HTTP server and not yet closed.
    pub(crate) open: AtomicU64,
    /// The most connections that were open at once.
    pub(crate) open_peak: AtomicU64,
    /// TLS connections by the protocol ALPN settled: `h2`.
    pub(crate) h2: AtomicU64,
    /// TLS connections by the protocol ALPN settled: `http/1.1` (or none offered).
    pub(crate) http1: AtomicU64,
    /// TLS handshakes that failed or stalled past the handshake timeout.
    pub(crate) tls_failed: AtomicU64,
}

/// The byte stream under a connection.
enum Stream {
    Plain(TcpStream),
    // Boxed: a rustls connection is a few KiB, the plain path should not carry its size.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(tcp) => tcp,
            Self::Tls(tls) => tls.get_ref().0,
        }
    }
}

/// One accepted connection; once [`ConnHandle::reset`] is called it fails every read and write,
/// so the server drops it without writing another byte.
pub(crate) struct MockIo {
    stream: Stream,
    reset: Arc<AtomicBool>,
    counters: Arc<ConnCounters>,
}

impl MockIo {
    /// A plain TCP connection, counted open until dropped.
    pub(crate) fn new(tcp: TcpStream, counters: Arc<ConnCounters>) -> Self {
        Self::with(Stream::Plain(tcp), counters)
    }

    /// A TLS connection whose handshake is done, counted open until dropped.
    pub(crate) fn tls(tls: TlsStream<TcpStream>, counters: Arc<ConnCounters>) -> Self {
        Self::with(Stream::Tls(Box::new(tls)), counters)
    }

    fn with(stream: Stream, counters: Arc<ConnCounters>) -> Self {
        let open = counters.open.fetch_add(1, Ordering::Relaxed) + 1;
        counters.open_peak.fetch_max(open, Ordering::Relaxed);
        Self {
            stream,
            reset: Arc::default(),
            counters,
        }
    }

    /// Whether the connection was reset; if so, makes its close a TCP reset (RST), as a crashed
    /// server's.
    fn is_reset(&self) -> bool {
        let reset = self.reset.load(Ordering::Acquire);
        if reset {
            // Best effort: without it the close is a plain FIN, which a client sees the same way
            // (the connection closed before an answer).
            let _ = self.stream.tcp().set_zero_linger();
        }
        reset
    }
}

impl Drop for MockIo {
    fn drop(&mut self) {
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

fn reset_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "mock LLM: connection reset (fault `down`)",
    )
}

impl AsyncRead for MockIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        match &mut self.stream {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MockIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        match &mut self.stream {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        match &mut self.stream {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A handler's hold on the connection its request came on (axum's connect info).
#[derive(Clone)]
pub(crate) struct ConnHandle(Arc<AtomicBool>);

impl ConnHandle {
    /// Resets the connection: the answer being written is dropped and the socket closed.
    pub(crate) fn reset(&self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Connected<IncomingStream<'_, MockListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, MockListener>) -> Self {
        Self(Arc::clone(&stream.io().reset))
    }
}
