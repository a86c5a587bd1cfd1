//! Faults, whatever the script says: chosen per request by the `x-mock-fault` header or by a
//! `[[mock:FAULT]]` marker in the last user message (`[[mock:FAULT@after_tool]]`: only the
//! answers to a tool result; `@first`: only the others) (so a fault can be triggered through a
//! crew, which builds the request itself), or for every request of one server
//! ([`MockLlm::set_fault`](super::MockLlm::set_fault), a timed
//! [`FaultSchedule`](super::FaultSchedule)). A request's own fault wins over its server's.
//!
//! | fault | effect |
//! |---|---|
//! | `down` | no answer: the connection is reset (for a server-wide fault, every new connection is reset as soon as it is accepted, as behind a port whose server crashed) |
//! | `503`, `500`, any `NNN` | that HTTP status with an OpenAI-shaped error body, before any byte |
//! | `429:SECS`, `503:SECS`, any `NNN:SECS` | the same, with a `Retry-After: SECS` header |
//! | `stall`, `stall:MS` | no byte at all for MS ms (default 10 minutes) before answering |
//! | `slow:MS` | a pause of MS ms before every event (the first included) |
//! | `cut`, `cut:N` | the stream is aborted after N events (default: half of them, at least 1) |
//! | `cut:role` | aborted after the role event, before any text or tool-call delta (a reply of tool calls only: right after the headers) |
//! | `cut:tool` | aborted inside the first tool call: after its header and first argument fragment (when it has more than one), so the client holds a partial call; after any text before it |
//! | `cut:text`, `cut:text:N` | aborted after N text deltas (default 1): some text was spoken |
//!
//! A named cut point a reply does not have (`cut:tool` on a text reply, `cut:text` on a reply of
//! tool calls only) cuts half-way, as `cut` does.

use std::{borrow::Cow, fmt, time::Duration};

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::Reply;

/// The header that selects a fault.
pub const FAULT_HEADER: &str = "x-mock-fault";

/// How long `stall` waits by default: longer than any client's first-byte timeout.
const DEFAULT_STALL: Duration = Duration::from_secs(600);

/// A fault forced onto a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No answer at all: the connection is reset.
    Down,
    /// Answer with this HTTP status.
    Status(u16),
    /// Answer with this HTTP status and `Retry-After: secs`.
    StatusRetryAfter {
        /// The status (429, 503...).
        status: u16,
        /// The `Retry-After` header, in seconds.
        secs: u64,
    },
    /// Abort the stream after this many events (`None`: half of them).
    Cut(Option<usize>),
    /// Abort the stream at a named point of the reply.
    CutAt(CutPoint),
    /// Wait this long before the first byte.
    Stall(Duration),
    /// Wait this long before every event.
    Slow(Duration),
}

/// Where [`Fault::CutAt`] breaks a stream off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutPoint {
    /// After the role event: nothing spoken, no tool-call delta.
    Role,
    /// Inside the first tool call (its header and first argument fragment sent).
    ToolCall,
    /// After this many text deltas.
    Text(usize),
}

impl Fault {
    /// Reads a fault name (`down`, `503`, `429:2`, `cut`, `cut:3`, `cut:role`, `cut:tool`,
    /// `cut:text:2`, `stall`, `stall:2000`, `slow:300`).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (name, arg) = match text.split_once(':') {
            Some((name, arg)) => (name, Some(arg.trim())),
            None => (text, None),
        };
        let millis = |ms: &str| ms.parse().ok().map(Duration::from_millis);
        match (name, arg) {
            ("down", None) => Some(Self::Down),
            ("cut", None) => Some(Self::Cut(None)),
            ("cut", Some("role")) => Some(Self::CutAt(CutPoint::Role)),
            ("cut", Some("tool")) => Some(Self::CutAt(CutPoint::ToolCall)),
            ("cut", Some("text")) => Some(Self::CutAt(CutPoint::Text(1))),
            ("cut", Some(arg)) => match arg.split_once(':') {
                Some(("text", n)) => n
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .map(|n| Self::CutAt(CutPoint::Text(n))),
                Some(_) => None,
                None => arg.parse().ok().map(|n| Self::Cut(Some(n))),
            },
            ("stall", None) => Some(Self::Stall(DEFAULT_STALL)),
            ("stall", Some(ms)) => millis(ms).map(Self::Stall),
            ("slow", Some(ms)) => millis(ms).map(Self::Slow),
            (status, arg) => {
                let status = status
                    .parse::<u16>()
                    .ok()
                    .filter(|s| (400..=599).contains(s))?;
                match arg {
                    None => Some(Self::Status(status)),
                    Some(secs) => secs
                        .parse()
                        .ok()
                        .map(|secs| Self::StatusRetryAfter { status, secs }),
                }
            }
        }
    }

    /// The fault a request asks for: the header first, else a marker in the last user message.
    ///
    /// A marker may name which of the turn's requests it fails, after an `@`:
    /// `[[mock:cut:text@after_tool]]` only the requests answering a tool result (the last
    /// message is a tool's), `[[mock:503@first]]` only the others (the turn's first request,
    /// before any tool ran); without one, every request whose last user message holds it.
    pub fn of_request(headers: &HeaderMap, body: &Value) -> Option<Self> {
        if let Some(value) = headers.get(FAULT_HEADER).and_then(|v| v.to_str().ok()) {
            return Self::parse(value);
        }
        let messages = body.get("messages")?.as_array()?;
        let content = messages
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?
            .get("content")?
            .as_str()?;
        let start = content.find("[[mock:")? + "[[mock:".len();
        let len = content[start..].find("]]")?;
        let marker = &content[start..start + len];
        let (name, on) = match marker.split_once('@') {
            Some((name, on)) => (name, Some(on.trim())),
            None => (marker, None),
        };
        let after_tool = messages
            .last()
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
            == Some("tool");
        match on {
            None => {}
            Some("after_tool") if after_tool => {}
            Some("first") if !after_tool => {}
            Some(_) => return None,
        }
        Self::parse(name)
    }

    /// `reply` with this fault applied; `events` is how many SSE events the reply streams.
    /// [`Fault::Down`] leaves the reply as it is: the server drops the connection instead.
    pub fn apply<'r>(self, reply: &'r Reply, events: usize) -> Cow<'r, Reply> {
        let mut reply = reply.clone();
        let half = (events / 2).max(1);
        match self {
            Self::Down => return Cow::Owned(reply),
            Self::Status(status) => set_status(&mut reply, status, None),
            Self::StatusRetryAfter { status, secs } => set_status(&mut reply, status, Some(secs)),
            Self::Cut(after) => reply.cut_after_chunks = Some(after.unwrap_or(half)),
            Self::CutAt(point) => {
                reply.cut_after_chunks = Some(cut_point(&reply, point).unwrap_or(half));
            }
            Self::Stall(delay) => reply.first_byte_delay = delay,
            Self::Slow(delay) => reply.chunk_delay = delay,
        }
        Cow::Owned(reply)
    }
}

/// Makes `reply` an error answer with `status` (and `Retry-After`), keeping a scripted body.
fn set_status(reply: &mut Reply, status: u16, retry_after: Option<u64>) {
    reply.http_status = Some(status);
    if retry_after.is_some() {
        reply.retry_after_secs = retry_after;
    }
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

/// How many events of `reply` go out before `point` (`None` when the reply has no such point).
///
/// The events are those of `reply::sse_frames`: with text, a role event, then one per text
/// delta; then per tool call a header event (carrying the role when there is no text) and one
/// per argument fragment.
fn cut_point(reply: &Reply, point: CutPoint) -> Option<usize> {
    let texts = reply.content_chunks.len();
    let has_text = texts > 0;
    // The role has an event of its own unless the reply is tool calls only.
    let role_events = usize::from(has_text || reply.tool_calls.is_empty());
    match point {
        CutPoint::Role => Some(role_events),
        CutPoint::Text(n) => has_text.then(|| role_events + n.min(texts)),
        CutPoint::ToolCall => {
            let first = reply.tool_calls.first()?;
            let fragment = usize::from(first.arguments_chunks.len() > 1);
            Some(role_events + texts + 1 + fragment)
        }
    }
}

impl fmt::Display for Fault {
    /// The fault's name, as [`Fault::parse`] reads it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Down => f.write_str("down"),
            Self::Status(status) => write!(f, "{status}"),
            Self::StatusRetryAfter { status, secs } => write!(f, "{status}:{secs}"),
            Self::Cut(None) => f.write_str("cut"),
            Self::Cut(Some(n)) => write!(f, "cut:{n}"),
            Self::CutAt(CutPoint::Role) => f.write_str("cut:role"),
            Self::CutAt(CutPoint::ToolCall) => f.write_str("cut:tool"),
            Self::CutAt(CutPoint::Text(n)) => write!(f, "cut:text:{n}"),
            Self::Stall(delay) => write!(f, "stall:{}", delay.as_millis()),
            Self::Slow(delay) => write!(f, "slow:{}", delay.as_millis()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock_llm::ScriptedCall;

    #[test]
    fn names_parse() {
        assert_eq!(Fault::parse("500"), Some(Fault::Status(500)));
        assert_eq!(Fault::parse(" 429 "), Some(Fault::Status(429)));
        assert_eq!(Fault::parse("down"), Some(Fault::Down));
        assert_eq!(
            Fault::parse("429:3"),
            Some(Fault::StatusRetryAfter {
                status: 429,
                secs: 3
            })
        );
        assert_eq!(Fault::parse("cut"), Some(Fault::Cut(None)));
        assert_eq!(Fault::parse("cut:3"), Some(Fault::Cut(Some(3))));
        assert_eq!(Fault::parse("cut:role"), Some(Fault::CutAt(CutPoint::Role)));
        assert_eq!(
            Fault::parse("cut:tool"),
            Some(Fault::CutAt(CutPoint::ToolCall))
        );
        assert_eq!(
            Fault::parse("cut:text"),
            Some(Fault::CutAt(CutPoint::Text(1)))
        );
        assert_eq!(
            Fault::parse("cut:text:2"),
            Some(Fault::CutAt(CutPoint::Text(2)))
        );
        assert_eq!(Fault::parse("stall"), Some(Fault::Stall(DEFAULT_STALL)));
        assert_eq!(
            Fault::parse("stall:250"),
            Some(Fault::Stall(Duration::from_millis(250)))
        );
        assert_eq!(
            Fault::parse("slow:300"),
            Some(Fault::Slow(Duration::from_millis(300)))
        );
        for bad in [
            "200",
            "cut:x",
            "boom",
            "",
            "stall:-1",
            "slow",
            "down:1",
            "429:x",
            "cut:text:0",
            "cut:tool:1",
            "600",
        ] {
            assert_eq!(Fault::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_name_reads_back_as_the_same_fault() {
        for name in [
            "down",
            "503",
            "429:2",
            "cut",
            "cut:4",
            "cut:role",
            "cut:tool",
            "cut:text:3",
            "stall:1500",
            "slow:40",
        ] {
            let fault = Fault::parse(name).unwrap();
            assert_eq!(fault.to_string(), name);
            assert_eq!(Fault::parse(&fault.to_string()), Some(fault));
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
    fn a_marker_can_fail_only_the_answer_after_a_tool_or_only_the_first_request() {
        let asked = |marker: &str| json!({"messages": [{"role": "user", "content": format!("yes {marker}")}]});
        let answered = |marker: &str| {
            json!({"messages": [
                {"role": "user", "content": format!("yes {marker}")},
                {"role": "assistant", "content": null, "tool_calls": []},
                {"role": "tool", "content": "{}", "tool_call_id": "call_1"},
            ]})
        };
        let none = HeaderMap::new();
        let after = "[[mock:cut:text@after_tool]]";
        assert_eq!(Fault::of_request(&none, &asked(after)), None);
        assert_eq!(
            Fault::of_request(&none, &answered(after)),
            Some(Fault::CutAt(CutPoint::Text(1)))
        );
        let first = "[[mock:503@first]]";
        assert_eq!(
            Fault::of_request(&none, &asked(first)),
            Some(Fault::Status(503))
        );
        assert_eq!(Fault::of_request(&none, &answered(first)), None);
        assert_eq!(
            Fault::of_request(&none, &asked("[[mock:503@sometimes]]")),
            None
        );
        assert_eq!(
            Fault::of_request(&none, &answered("[[mock:503]]")),
            Some(Fault::Status(503))
        );
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
        let retry = Fault::parse("429:7").unwrap().apply(&reply, 7);
        assert_eq!(
            (retry.http_status, retry.retry_after_secs),
            (Some(429), Some(7))
        );
    }

    fn call(fragments: &[&str]) -> ScriptedCall {
        ScriptedCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments_chunks: fragments.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn named_cut_points_count_the_events_before_them() {
        let cut = |reply: &Reply, name: &str| {
            Fault::parse(name)
                .unwrap()
                .apply(reply, 10)
                .cut_after_chunks
        };
        let text = Reply::text(["a", "b", "c"]);
        assert_eq!(cut(&text, "cut:role"), Some(1));
        assert_eq!(cut(&text, "cut:text"), Some(2));
        assert_eq!(cut(&text, "cut:text:9"), Some(4));
        // A text reply has no tool call: half-way.
        assert_eq!(cut(&text, "cut:tool"), Some(5));

        let tools = Reply {
            tool_calls: vec![call(&["{\"location\":", " \"Paris\"}"])],
            ..Reply::default()
        };
        // Tool calls only: the role rides on the first header, so nothing precedes it.
        assert_eq!(cut(&tools, "cut:role"), Some(0));
        assert_eq!(cut(&tools, "cut:tool"), Some(2));
        assert_eq!(cut(&tools, "cut:text"), Some(5));
        let one_fragment = Reply {
            tool_calls: vec![call(&["{}"])],
            ..Reply::default()
        };
        assert_eq!(cut(&one_fragment, "cut:tool"), Some(1));
        let both = Reply {
            content_chunks: vec!["Let me check.".into()],
            tool_calls: vec![call(&["{", "}"])],
            ..Reply::default()
        };
        assert_eq!(cut(&both, "cut:tool"), Some(4));
    }

    #[test]
    fn slow_and_stall_set_their_pauses() {
        let reply = Reply::text(["a"]);
        let slow = Fault::parse("slow:250").unwrap().apply(&reply, 4);
        assert_eq!(slow.chunk_delay, Duration::from_millis(250));
        let stall = Fault::parse("stall:90").unwrap().apply(&reply, 4);
        assert_eq!(stall.first_byte_delay, Duration::from_millis(90));
        assert_eq!(*Fault::Down.apply(&reply, 4), reply);
    }
}
