//! A server-sent-events parser for streamed answers.
//!
//! It follows the event stream format of the HTML spec as far as a chat-completion stream
//! uses it (`data` and `event` fields, comments, CR / LF / CRLF line ends, a leading BOM) and
//! splits events exactly as the `eventsource-stream` crate does (a test checks both agree on
//! random streams cut at random places). It exists because that crate copies the rest of its
//! buffer for every line and allocates several strings per event, which showed in profiles
//! (and it panics on a stream that starts with a BOM): here the bytes are kept in one buffer,
//! and an event's data stays in a reused string.

use std::fmt;

/// The UTF-8 byte order mark a stream may start with.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// What kind of event was read (only `keepalive` changes what the reader does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// `event: keepalive`, sent by some servers to keep idle connections open.
    Keepalive,
    /// Any other event (usually a `message` without an `event` field).
    Other,
}

/// A line of the stream that is not UTF-8.
#[derive(Debug)]
pub(crate) struct SseError(std::str::Utf8Error);

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the event stream is not UTF-8 ({})", self.0)
    }
}

/// Splits a byte stream into events; feed it with [`SseParser::push`] and take the events
/// with [`SseParser::next_event`].
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// Received bytes; those before `pos` are consumed.
    buf: Vec<u8>,
    pos: usize,
    /// Whether the start of the stream was checked for a BOM.
    started: bool,
    /// The data of the event being read (each `data` line followed by LF), or of the event
    /// last returned.
    data: String,
    /// The `event` field of the event being read.
    kind: Option<EventKind>,
    /// Whether `data` belongs to the event last returned (cleared on the next call).
    returned: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds bytes received from the server.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.pos == self.buf.len() {
            self.buf.clear();
        } else if self.pos > 0 {
            self.buf.drain(..self.pos);
        }
        self.pos = 0;
        self.buf.extend_from_slice(bytes);
    }

    /// The data of the event last returned by [`SseParser::next_event`].
    pub(crate) fn data(&self) -> &str {
        &self.data
    }

    /// The next complete event, if the bytes received so far hold one.
    pub(crate) fn next_event(&mut self) -> Result<Option<EventKind>, SseError> {
        if self.returned {
            self.returned = false;
            self.data.clear();
        }
        loop {
            let rest = &self.buf[self.pos..];
            if !self.started {
                if rest.len() < BOM.len() && BOM.starts_with(rest) {
                    // Too few bytes yet to tell a BOM from text.
                    return Ok(None);
                }
                self.started = true;
                if rest.starts_with(BOM) {
                    self.pos += BOM.len();
                }
                continue;
            }
            let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') else {
                return Ok(None);
            };
            let consumed = if rest[end] == b'\r' {
                match rest.get(end + 1) {
                    // A CR may be the first half of a CRLF: wait for the next byte.
                    None => return Ok(None),
                    Some(b'\n') => end + 2,
                    Some(_) => end + 1,
                }
            } else {
                end + 1
            };
            let line = std::str::from_utf8(&rest[..end]).map_err(SseError)?;
            if line.is_empty() {
                self.pos += consumed;
                let kind = self.kind.take().unwrap_or(EventKind::Other);
                if self.data.is_empty() {
                    // An event without data is not dispatched.
                    continue;
                }
                self.data.pop();
                self.returned = true;
                return Ok(Some(kind));
            }
            if !line.starts_with(':') {
                let (name, value) = match line.split_once(':') {
                    Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
                    None => (line, ""),
                };
                match name {
                    "data" => {
                        self.data.push_str(value);
                        self.data.push('\n');
                    }
                    "event" => {
                        self.kind = Some(if value == "keepalive" {
                            EventKind::Keepalive
                        } else {
                            EventKind::Other
                        });
                    }
                    // `id` and `retry` mean nothing to a one-shot answer.
                    _ => {}
                }
            }
            self.pos += consumed;
        }
    }
}

#[cfg(test)]
mod tests {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    use proptest::prelude::*;

    use super::*;

    /// Every event of `body` delivered in `parts`, as (keepalive, data).
    fn ours(parts: &[&[u8]]) -> Vec<(bool, String)> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for part in parts {
            parser.push(part);
            while let Some(kind) = parser.next_event().expect("UTF-8") {
                events.push((kind == EventKind::Keepalive, parser.data().to_owned()));
            }
        }
        events
    }

    /// The same, read by the `eventsource-stream` crate.
    fn theirs(parts: &[&[u8]]) -> Vec<(bool, String)> {
        let parts: Vec<Result<Vec<u8>, std::io::Error>> =
            parts.iter().map(|p| Ok(p.to_vec())).collect();
        futures::executor::block_on(
            futures::stream::iter(parts)
                .eventsource()
                .map(|event| {
                    let event = event.expect("a valid stream");
                    (event.event == "keepalive", event.data)
                })
                .collect(),
        )
    }

    #[test]
    fn chat_completion_stream_is_split_into_events() {
        let body = "data: {\"a\":1}\n\n: ping\n\nevent: keepalive\ndata: {}\n\ndata: [DONE]\n\n";
        assert_eq!(
            ours(&[body.as_bytes()]),
            vec![
                (false, "{\"a\":1}".to_owned()),
                (true, "{}".to_owned()),
                (false, "[DONE]".to_owned()),
            ]
        );
    }

    #[test]
    fn line_ends_bom_multi_line_data_and_cuts_anywhere() {
        let body =
            "\u{feff}data:a\r\ndata:  b\r\rdata\n\nevent: x\nid: 3\ndata: ü✓\r\n\r\ndata: tail";
        let whole = ours(&[body.as_bytes()]);
        assert_eq!(
            whole,
            vec![
                (false, "a\n b".to_owned()),
                (false, String::new()),
                (false, "ü✓".to_owned()),
            ]
        );
        let bytes = body.as_bytes();
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(ours(&[a, b]), whole, "cut at {cut}");
        }
    }

    #[test]
    fn a_line_that_is_not_utf8_is_an_error() {
        let mut parser = SseParser::new();
        parser.push(b"data: \xff\xfe\n\n");
        assert!(parser.next_event().is_err());
    }

    /// Pieces SSE streams are made of, odd ones included.
    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("data: {\"choices\":[]}".to_owned()),
            Just("data:".to_owned()),
            Just("data".to_owned()),
            Just("event: keepalive".to_owned()),
            Just("event:".to_owned()),
            Just(": comment".to_owned()),
            Just("id: 7".to_owned()),
            Just("retry: 10".to_owned()),
            Just(String::new()),
            "[a-z :é✓\"{}]{0,12}".prop_map(|s| format!("data: {s}")),
            "[a-z :]{0,8}",
        ]
    }

    fn line_end() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just("\n"),
            Just("\r\n"),
            Just("\r"),
            Just("\n\n"),
            Just("\r\n\r\n")
        ]
    }

    proptest! {
        #[test]
        // No BOM here: eventsource-stream 0.2.3 panics on one (it slices the BOM's first
        // byte off a `str`); `line_ends_bom_multi_line_data_and_cuts_anywhere` covers ours.
        fn agrees_with_eventsource_stream(
            lines in prop::collection::vec((piece(), line_end()), 0..24),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut body = String::new();
            for (piece, end) in &lines {
                body.push_str(piece);
                body.push_str(end);
            }
            let bytes = body.as_bytes();
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut parts: Vec<&[u8]> = Vec::new();
            let mut start = 0;
            for point in points {
                parts.push(&bytes[start..point]);
                start = point;
            }
            parts.push(&bytes[start..]);
            prop_assert_eq!(ours(&parts), theirs(&parts));
        }
    }
}
