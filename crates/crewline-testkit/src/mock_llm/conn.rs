//! The scripted server's connections: a TCP stream a request handler can reset ([`Fault::Down`]
//! on a connection already open, e.g. one the client keeps alive in its pool).
//!
//! [`Fault::Down`]: super::Fault::Down

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
};

use axum::{extract::connect_info::Connected, serve::IncomingStream};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};

use super::MockListener;

/// One accepted connection; once [`ConnHandle::reset`] is called it fails every read and write,
/// so the server drops it without writing another byte.
pub(crate) struct MockIo {
    tcp: TcpStream,
    reset: Arc<AtomicBool>,
}

impl MockIo {
    pub(crate) fn new(tcp: TcpStream) -> Self {
        Self {
            tcp,
            reset: Arc::default(),
        }
    }

    /// Whether the connection was reset; if so, makes its close a TCP reset (RST), as a crashed
    /// server's.
    fn is_reset(&self) -> bool {
        let reset = self.reset.load(Ordering::Acquire);
        if reset {
            // Best effort: without it the close is a plain FIN, which a client sees the same way
            // (the connection closed before an answer).
            let _ = self.tcp.set_zero_linger();
        }
        reset
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
        Pin::new(&mut self.tcp).poll_read(cx, buf)
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
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
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
