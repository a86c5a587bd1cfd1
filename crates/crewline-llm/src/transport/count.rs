//! Counts a client's connections to its server, so the number a load opens is reported
//! (HTTP/2 carries many calls on one; HTTP/1.1 takes one per concurrent stream).

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};

/// How many connections a client has opened to its server (through a proxy or not), and
/// how many of them are open now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// Opened since the client was built (TCP connections made, TLS or not).
    pub opened: u64,
    /// Open now.
    pub open: u64,
}

/// The counters a client's pools share.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    opened: AtomicU64,
    open: AtomicU64,
}

impl Counters {
    /// The counts now.
    pub(crate) fn counts(&self) -> ConnectionCounts {
        ConnectionCounts {
            opened: self.opened.load(Ordering::Relaxed),
            open: self.open.load(Ordering::Relaxed),
        }
    }
}

/// A connection that counts itself open until dropped.
#[derive(Debug)]
pub(crate) struct Counted<T> {
    inner: T,
    counters: Arc<Counters>,
}

impl<T> Counted<T> {
    /// Counts `inner` as opened and open.
    pub(crate) fn new(inner: T, counters: Arc<Counters>) -> Self {
        counters.opened.fetch_add(1, Ordering::Relaxed);
        counters.open.fetch_add(1, Ordering::Relaxed);
        Self { inner, counters }
    }
}

impl<T> Drop for Counted<T> {
    fn drop(&mut self) {
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<T: Read + Unpin> Read for Counted<T> {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for Counted<T> {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
}

impl<T: Connection> Connection for Counted<T> {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}
