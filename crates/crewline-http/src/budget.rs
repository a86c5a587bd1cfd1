//! A server-wide budget for the bytes of unfinished WebSocket messages.
//!
//! A WebSocket library assembles a message's fragments (and a large frame's bytes) in memory
//! until the message is whole, so each connection may hold up to the largest message allowed
//! before anything is handed on; over thousands of connections that is gigabytes (issue 30: 200
//! calls each holding an unfinished 900 KiB message cost 1.2 MiB each). The per-message cap
//! bounds one connection, not their sum.
//!
//! The listener ([`serve`](crate::serve)) counts below the WebSocket library: it reads every
//! connection through a counting layer and hands each request a [`ConnectionReads`] extension.
//! A WebSocket handler [`arm`](ConnectionReads::arm)s it with the server's [`MessageBudget`];
//! from then on each read adds its bytes to the connection's count of bytes read since its last
//! whole message, and the handler's read loop calls [`ArmedReads::message_done`] when a message
//! arrives. What a connection has pending beyond [`MessageBudget::allowance`] is charged to the
//! shared budget; a read that would take the budget past its cap fails with [`OverBudget`], so
//! that the one connection that overdraws it is closed while the others go on.
//!
//! Ordinary traffic never touches the shared budget: a message under the allowance costs one
//! relaxed atomic add per read and one swap when it is whole.

use std::{
    io,
    pin::Pin,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll, ready},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The bytes every connection may have pending without touching the shared budget: 64 KiB,
/// sixteen times the largest ordinary platform frame, so that healthy calls are never refused.
pub const DEFAULT_ALLOWANCE: usize = 64 * 1024;

/// The bytes a client's control frame takes on the wire beside its payload: a two-byte header
/// (a control payload is at most 125 bytes, so no extended length) and a four-byte mask.
const CONTROL_FRAME_OVERHEAD: usize = 6;

/// The bytes of unfinished messages that all the connections of one server may hold beyond
/// their [`allowance`](Self::allowance) each.
#[derive(Debug)]
pub struct MessageBudget {
    cap: usize,
    allowance: usize,
    used: AtomicUsize,
    refused: AtomicU64,
}

impl MessageBudget {
    /// A budget of `cap` bytes beyond [`DEFAULT_ALLOWANCE`] per connection; `usize::MAX` is no
    /// cap (the bytes are still counted).
    pub fn new(cap: usize) -> Arc<Self> {
        Self::with_allowance(cap, DEFAULT_ALLOWANCE)
    }

    /// A budget of `cap` bytes beyond `allowance` per connection.
    pub fn with_allowance(cap: usize, allowance: usize) -> Arc<Self> {
        Arc::new(Self {
            cap,
            allowance,
            used: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// The most bytes charged at once.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The bytes each connection may have pending before it is charged.
    pub fn allowance(&self) -> usize {
        self.allowance
    }

    /// The bytes charged now: what connections have pending beyond their allowance.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// How many reads were refused because the budget was spent.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Charges `bytes`; false (nothing charged) if that would pass the cap.
    fn take(&self, bytes: usize) -> bool {
        // Checked and charged in one step, so that two connections cannot overshoot together,
        // nor be refused for a charge the other one then gives back.
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.cap)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

/// A read refused because the server's [`MessageBudget`] is spent: the connection is to be
/// closed (with 1013, "try again later", if a close frame can still be sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "{pending} bytes of an unfinished message would take the server's budget of unfinished \
     messages past its {cap} bytes"
)]
pub struct OverBudget {
    /// What the connection would have pending with the refused read.
    pub pending: usize,
    /// The budget's cap.
    pub cap: usize,
}

impl OverBudget {
    /// The refusal inside `error`, if it is one (as a read returns it).
    pub fn in_io_error(error: &io::Error) -> Option<&Self> {
        error.get_ref()?.downcast_ref::<Self>()
    }
}

/// One connection's count of bytes read since its last whole message.
#[derive(Debug, Default)]
struct Counter {
    /// Set when a WebSocket handler arms the count; before that nothing is counted.
    budget: OnceLock<Arc<MessageBudget>>,
    /// Bytes read since the last whole message.
    read: AtomicUsize,
}

impl Counter {
    /// Counts `bytes` just read; an error (the bytes not counted) if the budget is spent.
    fn count(&self, bytes: usize) -> io::Result<()> {
        let Some(budget) = self.budget.get() else {
            return Ok(());
        };
        let before = self.read.fetch_add(bytes, Ordering::Relaxed);
        let after = before.saturating_add(bytes);
        if after <= budget.allowance {
            return Ok(());
        }
        let over = after - before.max(budget.allowance);
        if budget.take(over) {
            return Ok(());
        }
        self.read.fetch_sub(bytes, Ordering::Relaxed);
        budget.refused.fetch_add(1, Ordering::Relaxed);
        Err(io::Error::other(OverBudget {
            pending: after,
            cap: budget.cap,
        }))
    }

    /// Forgets up to `bytes` of the count, giving back what of them was charged.
    fn forget(&self, bytes: usize) {
        let Some(budget) = self.budget.get() else {
            return;
        };
        let before = match self
            .read
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |read| {
                Some(read.saturating_sub(bytes))
            }) {
            Ok(before) | Err(before) => before,
        };
        let after = before.saturating_sub(bytes);
        budget.give_back(
            before
                .saturating_sub(budget.allowance)
                .saturating_sub(after.saturating_sub(budget.allowance)),
        );
    }

    /// Forgets the whole count.
    fn clear(&self) {
        let Some(budget) = self.budget.get() else {
            return;
        };
        let read = self.read.swap(0, Ordering::Relaxed);
        budget.give_back(read.saturating_sub(budget.allowance));
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.clear();
    }
}

/// A connection's reads, handed to every request on it as an extension: a WebSocket handler
/// [`arm`](Self::arm)s it to count what its connection has pending.
#[derive(Debug, Clone, Default)]
pub struct ConnectionReads(Arc<Counter>);

impl ConnectionReads {
    /// Counts this connection's reads against `budget` from now on; the count is given back
    /// when the returned [`ArmedReads`] is dropped. A connection is armed once: a second
    /// budget is ignored.
    #[must_use = "the count is given back when the ArmedReads is dropped"]
    pub fn arm(&self, budget: Arc<MessageBudget>) -> ArmedReads {
        if self.0.budget.set(budget).is_err() {
            tracing::debug!("a connection's reads were armed twice: kept the first budget");
        }
        ArmedReads(Arc::clone(&self.0))
    }

    /// A count of no connection (for a socket served without [`serve`](crate::serve)): never
    /// armed by anything it reads, so it limits nothing.
    pub fn detached() -> Self {
        Self::default()
    }
}

/// An armed connection's count, held by its read loop.
#[derive(Debug)]
pub struct ArmedReads(Arc<Counter>);

impl ArmedReads {
    /// A whole message arrived: the bytes read since the last one are no longer pending.
    pub fn message_done(&self) {
        self.0.clear();
    }

    /// A ping or pong with `payload` bytes arrived: its frame is no longer pending (a whole
    /// data message may still be under way around it).
    pub fn control_frame_done(&self, payload: usize) {
        self.0
            .forget(payload.saturating_add(CONTROL_FRAME_OVERHEAD));
    }

    /// The bytes read since the last whole message.
    pub fn pending(&self) -> usize {
        self.0.read.load(Ordering::Relaxed)
    }
}

impl Drop for ArmedReads {
    fn drop(&mut self) {
        self.0.clear();
    }
}

/// A connection's IO, counting its reads once armed.
pub(crate) struct CountedIo<T> {
    inner: T,
    counter: Arc<Counter>,
}

impl<T> CountedIo<T> {
    /// `inner`, counted by the returned handle once armed.
    pub(crate) fn new(inner: T) -> (Self, ConnectionReads) {
        let counter = Arc::new(Counter::default());
        let reads = ConnectionReads(Arc::clone(&counter));
        (Self { inner, counter }, reads)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CountedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let read = buf.filled().len().saturating_sub(before);
        if read == 0 {
            return Poll::Ready(Ok(()));
        }
        Poll::Ready(this.counter.count(read))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CountedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A service that hands each request its connection's [`ConnectionReads`].
#[derive(Clone)]
pub(crate) struct WithReads<S> {
    pub(crate) inner: S,
    pub(crate) reads: ConnectionReads,
}

impl<S, B> hyper::service::Service<hyper::Request<B>> for WithReads<S>
where
    S: hyper::service::Service<hyper::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, mut request: hyper::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.reads.clone());
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A counted pipe: what the test writes to `peer` is read through the count.
    fn pipe() -> (
        CountedIo<tokio::io::DuplexStream>,
        ConnectionReads,
        tokio::io::DuplexStream,
    ) {
        let (ours, peer) = tokio::io::duplex(1 << 20);
        let (io, reads) = CountedIo::new(ours);
        (io, reads, peer)
    }

    async fn read_exactly(io: &mut CountedIo<tokio::io::DuplexStream>, bytes: usize) {
        let mut buf = vec![0; bytes];
        io.read_exact(&mut buf).await.expect("read");
    }

    #[tokio::test]
    async fn nothing_is_counted_before_the_connection_is_armed() {
        let budget = MessageBudget::with_allowance(10, 10);
        let (mut io, reads, mut peer) = pipe();
        peer.write_all(&[0; 100]).await.expect("write");
        read_exactly(&mut io, 100).await;
        let armed = reads.arm(Arc::clone(&budget));
        assert_eq!((armed.pending(), budget.used()), (0, 0));
    }

    #[tokio::test]
    async fn bytes_past_the_allowance_are_charged_and_given_back_when_the_message_is_done() {
        let budget = MessageBudget::with_allowance(100, 10);
        let (mut io, reads, mut peer) = pipe();
        let armed = reads.arm(Arc::clone(&budget));
        peer.write_all(&[0; 30]).await.expect("write");
        read_exactly(&mut io, 8).await;
        assert_eq!(budget.used(), 0, "under the allowance: nothing charged");
        read_exactly(&mut io, 22).await;
        assert_eq!((armed.pending(), budget.used()), (30, 20));
        armed.message_done();
        assert_eq!((armed.pending(), budget.used()), (0, 0));
    }

    #[tokio::test]
    async fn a_read_past_the_cap_fails_and_the_other_connections_charge_stays() {
        let budget = MessageBudget::with_allowance(50, 10);
        let (mut first, first_reads, mut first_peer) = pipe();
        let (mut second, second_reads, mut second_peer) = pipe();
        let _first = first_reads.arm(Arc::clone(&budget));
        let second_armed = second_reads.arm(Arc::clone(&budget));
        first_peer.write_all(&[0; 40]).await.expect("write");
        read_exactly(&mut first, 40).await;
        assert_eq!(budget.used(), 30);
        second_peer.write_all(&[0; 40]).await.expect("write");
        let mut buf = [0; 40];
        let error = second.read(&mut buf).await.expect_err("over the budget");
        assert_eq!(
            OverBudget::in_io_error(&error),
            Some(&OverBudget {
                pending: 40,
                cap: 50
            })
        );
        assert_eq!((second_armed.pending(), budget.used()), (0, 30));
        assert_eq!(budget.refused(), 1);
    }

    #[tokio::test]
    async fn a_connections_charge_is_given_back_when_it_ends() {
        let budget = MessageBudget::with_allowance(100, 10);
        let (mut io, reads, mut peer) = pipe();
        let armed = reads.arm(Arc::clone(&budget));
        peer.write_all(&[0; 60]).await.expect("write");
        read_exactly(&mut io, 60).await;
        assert_eq!(budget.used(), 50);
        drop(armed);
        assert_eq!(budget.used(), 0);
        // Whatever the IO reads on until it is dropped is given back with it.
        peer.write_all(&[0; 20]).await.expect("write");
        read_exactly(&mut io, 20).await;
        drop((io, reads));
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn a_control_frame_between_fragments_gives_back_its_own_bytes_only() {
        let budget = MessageBudget::with_allowance(100, 10);
        let (mut io, reads, mut peer) = pipe();
        let armed = reads.arm(Arc::clone(&budget));
        peer.write_all(&[0; 40 + 4 + CONTROL_FRAME_OVERHEAD])
            .await
            .expect("write");
        read_exactly(&mut io, 40 + 4 + CONTROL_FRAME_OVERHEAD).await;
        armed.control_frame_done(4);
        assert_eq!((armed.pending(), budget.used()), (40, 30));
    }
}
