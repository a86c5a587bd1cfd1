//! The limits on what one caller or one connection can hold: calls, silent and stalled
//! sockets, queued input, slow request headers. Their defaults are those of a live phone call.

use std::time::Duration;

/// The default most calls served at once: 20,000.
///
/// Twice the 10,000 concurrent calls the load benchmark holds on a 2-core machine (about
/// 50 KiB each at peak, BENCHMARKS.md), so that the benchmark runs unchanged, while a flood
/// of connections gets 503 instead of exhausting the process's memory and file descriptors.
pub const DEFAULT_MAX_SESSIONS: usize = 20_000;
/// The default time between two WebSocket pings to the platform: 15 s.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(15);
/// The default time without any inbound frame (pongs included) after which a call is taken
/// for a half-open connection and closed: 35 s, two pings unanswered and 5 s for the second
/// one's round trip.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(35);
/// The default time one socket write may take before the call is ended: 5 s.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The default time a client has to send a request's headers (also the longest an idle
/// keep-alive connection is kept): 10 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The default most bytes of unfinished inbound messages all calls together may hold beyond
/// 64 KiB each ([`crewline_http::budget::DEFAULT_ALLOWANCE`]): 256 MiB.
///
/// A message's bytes are held until it is whole (fragments, or a large frame arriving
/// slowly), up to `max_frame_bytes` per call; without a shared cap, 20,000 calls each holding
/// an unfinished 1 MiB message would take about 24 GiB. 256 MiB lets some 250 calls hold a whole
/// 1 MiB message unfinished at once, far more than a platform's large events (a long
/// conversation in `system.init`) ever overlap; a call's first 64 KiB never count, so calls
/// sending ordinary frames are never refused.
pub const DEFAULT_MAX_PENDING_BYTES: usize = 256 * 1024 * 1024;
/// How long HTTP connections still open when the drain is over (a long-lived streaming
/// response on a merged route, say) get to finish before they are dropped.
pub(crate) const HTTP_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The limits' settings.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) max_sessions: usize,
    pub(crate) ping_interval: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) write_timeout: Duration,
    pub(crate) header_read_timeout: Duration,
    pub(crate) inbox_bytes: usize,
    pub(crate) max_pending_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sessions: DEFAULT_MAX_SESSIONS,
            ping_interval: DEFAULT_PING_INTERVAL,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            inbox_bytes: crewline::session::DEFAULT_INBOX_BYTES,
            max_pending_bytes: DEFAULT_MAX_PENDING_BYTES,
        }
    }
}
