//! The crew wire protocol of `smallestai.atoms.crew` 5.14.0.
//!
//! One WebSocket message holds one JSON object with a `type`, a `timestamp` and the event's
//! fields. [`Event`] is one such message, typed; [`decode`] reads one leniently (binary or text,
//! unknown extra fields ignored, any timestamp form) and [`encode`] writes one the way the
//! reference does (`type`, `timestamp`, then the fields; optional fields as `null`).
//!
//! ```
//! use crewline_protocol::{decode, encode_string, EventBody};
//!
//! let event = decode(br#"{"type":"agent.llm.response.chunk","timestamp":"2030-01-02T03:04:05","text":"Hi","pause_ms":3}"#)?;
//! assert_eq!(event.body, EventBody::ResponseChunk { text: "Hi".into() });
//! assert_eq!(
//!     encode_string(&event),
//!     r#"{"type":"agent.llm.response.chunk","timestamp":"2030-01-02T03:04:05","text":"Hi"}"#
//! );
//! # Ok::<(), crewline_protocol::DecodeError>(())
//! ```
//!
//! Deliberate differences from the reference's bytes: the JSON is compact (the reference puts a
//! space after `:` and `,`) and non-ASCII is written as UTF-8 (the reference escapes it as
//! `\uXXXX`). Both are the same JSON to any parser.

mod codec;
mod event;
mod payloads;
mod timestamp;

pub use codec::{
    DecodeError, DecodeErrorKind, MAX_DEPTH, decode, decode_str, encode, encode_into, encode_string,
};
pub use event::*;
pub use payloads::{NodeFailure, ToolCallEnd, ToolCallError, ToolCallStart};
pub use timestamp::Timestamp;
