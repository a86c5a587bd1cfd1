//! The crew wire protocol of `smallestai.atoms.crew` 5.14.0.
//!
//! One WebSocket message holds one JSON object with a `type`, a `timestamp` and the event's
//! fields. [`Event`] is one such message, typed; [`decode`] reads one leniently (binary or text,
//! unknown extra fields ignored, any timestamp form) and [`encode`] writes one the way the
//! reference does (`type`, `timestamp`, then the fields; optional fields as `null`).
// SKELETON: the helper owning this crate writes the codec and timestamps.

mod event;

pub use event::*;
