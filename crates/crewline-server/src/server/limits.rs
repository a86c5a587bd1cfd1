//! The builder's setters of the limits ([`crate::limits`]).

use std::time::Duration;

use super::CrewServer;

impl CrewServer {
    /// The most calls served at once (default [`DEFAULT_MAX_SESSIONS`](crate::DEFAULT_MAX_SESSIONS)); a call past it is
    /// answered 503 before the WebSocket upgrade. `usize::MAX` sets no limit.
    pub fn max_sessions(mut self, calls: usize) -> Self {
        self.config.limits.max_sessions = calls;
        self
    }

    /// How often the server pings the platform on each call (default 15 s).
    ///
    /// The pongs are what keeps a silent call alive under the
    /// [`idle_timeout`](Self::idle_timeout): a caller who says nothing is not a dead
    /// connection. `Duration::ZERO` counts as 1 ms.
    pub fn ping_interval(mut self, interval: Duration) -> Self {
        self.config.limits.ping_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How long a call may go without any inbound frame, pongs included, before it is taken
    /// for a half-open connection and closed (default 35 s: two unanswered pings).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.config.limits.idle_timeout = timeout;
        self
    }

    /// How long one socket write may take (default 5 s); past it the platform is taken for
    /// one that stopped reading, and the call is ended and its session shut down.
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.config.limits.write_timeout = timeout;
        self
    }

    /// How long a client has to send a request's headers, and the longest an idle
    /// keep-alive connection is kept (default 10 s).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.config.limits.header_read_timeout = timeout;
        self
    }

    /// The most bytes of platform events queued for a call's nodes (default
    /// [`crewline::session::DEFAULT_INBOX_BYTES`]); an event past it is dropped, counted, and the
    /// platform gets an `agent.error` saying so.
    pub fn inbox_bytes(mut self, bytes: usize) -> Self {
        self.config.limits.inbox_bytes = bytes;
        self
    }

    /// The most bytes of unfinished inbound messages all calls together may hold beyond the
    /// first 64 KiB of each (default [`DEFAULT_MAX_PENDING_BYTES`](crate::DEFAULT_MAX_PENDING_BYTES), 256 MiB); `usize::MAX`
    /// sets no cap.
    ///
    /// A message is pending from its first byte read until it is whole. A call whose read
    /// would take the total past the cap is closed with 1013 ("try again later") and an
    /// `agent.error` (`message_budget`), counted in `crewline_errors_total{kind="message_budget"}`;
    /// the other calls go on, and what a call held is freed when its message is whole or the
    /// call ends. Bounds memory only when served by [`serve`](Self::serve) and its siblings
    /// (crewline's listener counts the reads), not through [`router`](Self::router) under
    /// another server.
    pub fn max_pending_bytes(mut self, bytes: usize) -> Self {
        self.config.limits.max_pending_bytes = bytes;
        self
    }
}
