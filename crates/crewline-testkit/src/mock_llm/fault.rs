//! Faults chosen per request, whatever the script says: by the `x-mock-fault` header or by a
//! `[[mock:FAULT]]` marker in the last user message (so a fault can be triggered through a
//! crew, which builds the request itself).
//!
//! | fault | effect |
//! |---|---|
//! | `500`, `429`, any `NNN` | that HTTP status with an OpenAI-shaped error body, before any byte |
//! | `cut`, `cut:N` | the stream is aborted after N events (default: half of them, at least 1) |
//! | `stall`, `stall:MS` | no byte at all for MS ms (default 10 minutes) before answering |

use std::{borrow::Cow, time::Duration};

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::Reply;

/// The header that selects a fault.
pub const FAULT_HEADER: &str = "x-mock-fault";

/// How long `stall` waits by default: longer than any client's first-byte timeout.
const DEFAULT_STALL: Duration = Duration::from_secs(600);

/// A fault forced onto one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this HTTP status.
    Status(u16),
    /// Abort the stream after this many events (`None`: half of them).
    Cut(Option<usize>),
    /// Wait this long before the first byte.
    Stall(Duration),
}

impl Fault {
    /// Reads a fault name (`500`, `429`, `cut`, `cut:3`, `stall`, `stall:2000`).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (name, arg) = match text.split_once(':') {
            Some((name, arg)) => (name, Some(arg.trim())),
            None => (text, None),
        };
        match (name, arg) {
            ("cut", None) => Some(Self::Cut(None)),
            ("cut", Some(n)) => n.parse().ok().map(|n| Self::Cut(Some(n))),
            ("stall", None) => Some(Self::Stall(DEFAULT_STALL)),
            ("stall", Some(ms)) => ms
                .parse()
                .ok()
                .map(|ms| Self::Stall(Duration::from_millis(ms))),
            (status, None) => status
                .parse::<u16>()
                .ok()
                .filter(|s| (400..=599).contains(s))
                .map(Self::Status),
            _ => None,
        }
    }

    /// The fault a request asks for: the header first, else a marker in the last user message.
    pub fn of_request(headers: &HeaderMap, body: &Value) -> Option<Self> {
        if let Some(value) = headers.get(FAULT_HEADER).and_then(|v| v.to_str().ok()) {
            return Self::parse(value);
        }
        let content = body
            .get("messages")?
            .as_array()?
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?
            .get("content")?
            .as_str()?;
        let start = content.find("[[mock:")? + "[[mock:".len();
        let len = content[start..].find("]]")?;
        Self::parse(&content[start..start + len])
    }

    /// `reply` with this fault applied; `events` is how many SSE events the reply streams.
    pub fn apply<'r>(self, reply: &'r Reply, events: usize) -> Cow<'r, Reply> {
        let mut reply = reply.clone();
        match self {
            Self::Status(status) => {
                reply.http_status = Some(status);
                if status == 429 && reply.error_body.is_none() {
                    reply.error_body = Some(json!({
                        "error": {
                            "message": "Rate limit reached (mock LLM)",
                            "type": "requests",
                            "param": null,
                            "code": "rate_limit_exceeded",
                        }
                    }));
                }
            }
            Self::Cut(after) => {
                reply.cut_after_chunks = Some(after.unwrap_or((events / 2).max(1)));
            }
            Self::Stall(delay) => reply.first_byte_delay = delay,
        }
        Cow::Owned(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!(Fault::parse("500"), Some(Fault::Status(500)));
        assert_eq!(Fault::parse(" 429 "), Some(Fault::Status(429)));
        assert_eq!(Fault::parse("cut"), Some(Fault::Cut(None)));
        assert_eq!(Fault::parse("cut:3"), Some(Fault::Cut(Some(3))));
        assert_eq!(Fault::parse("stall"), Some(Fault::Stall(DEFAULT_STALL)));
        assert_eq!(
            Fault::parse("stall:250"),
            Some(Fault::Stall(Duration::from_millis(250)))
        );
        for bad in ["200", "cut:x", "boom", "", "stall:-1"] {
            assert_eq!(Fault::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_header_wins_over_the_marker() {
        let body = json!({"messages": [
            {"role": "user", "content": "old [[mock:500]]"},
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": "please [[mock:cut:2]] now"},
        ]});
        assert_eq!(
            Fault::of_request(&HeaderMap::new(), &body),
            Some(Fault::Cut(Some(2)))
        );
        let mut headers = HeaderMap::new();
        headers.insert(FAULT_HEADER, "429".parse().unwrap());
        assert_eq!(Fault::of_request(&headers, &body), Some(Fault::Status(429)));
        let plain = json!({"messages": [{"role": "user", "content": "hello"}]});
        assert_eq!(Fault::of_request(&HeaderMap::new(), &plain), None);
    }

    #[test]
    fn a_cut_defaults_to_half_the_events() {
        let reply = Reply::text(["a", "b", "c"]);
        let cut = Fault::Cut(None).apply(&reply, 7);
        assert_eq!(cut.cut_after_chunks, Some(3));
        let rate_limited = Fault::Status(429).apply(&reply, 7);
        assert_eq!(rate_limited.http_status, Some(429));
        assert_eq!(
            rate_limited.error_body()["error"]["code"],
            "rate_limit_exceeded"
        );
    }
}
