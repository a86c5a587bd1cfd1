//! A server-sent-events parser for streamed answers. Kept hand-written on purpose: measured
//! cheaper per chunk than `eventsource-stream`, and tested against it (see below).
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
    /// An event written with `error` lines in place of `data` (llama.cpp's server reports a
    /// failure after the 200 so): its data is the error.
    Error,
    /// Any other event (usually a `message` without an `event` field).
    Other,
}

/// Why the stream cannot be read on.
#[derive(Debug)]
pub(crate) enum SseError {
    /// A line of the stream is not UTF-8.
    NotUtf8(std::str::Utf8Error),
    /// One line is longer than the limit (it may still be arriving).
    LineTooLong(usize),
    /// One event's data is larger than the limit.
    EventTooLarge(usize),
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotUtf8(error) => write!(f, "the event stream is not UTF-8 ({error})"),
            Self::LineTooLong(limit) => {
                write!(f, "a line of the event stream is over {limit} bytes")
            }
            Self::EventTooLarge(limit) => {
                write!(f, "an event of the event stream is over {limit} bytes")
            }
        }
    }
}

/// Splits a byte stream into events; feed it with [`SseParser::push`] and take the events
/// with [`SseParser::next_event`].
///
/// Memory is bounded: a line longer than `max_line` bytes, or an event whose data is larger
/// than `max_event`, is an error as soon as it is seen, so the buffer never holds much more
/// than the limit and one pushed chunk. The search for a line end only looks at bytes it has
/// not looked at yet, so a long line arriving in many small pieces costs time linear in its
/// length.
#[derive(Debug)]
pub(crate) struct SseParser {
    /// Received bytes; those before `pos` are consumed.
    buf: Vec<u8>,
    pos: usize,
    /// Bytes from `pos` up to `scanned` hold no line end (the search goes on from here).
    scanned: usize,
    /// Whether the start of the stream was checked for a BOM.
    started: bool,
    /// The data of the event being read (each `data` line followed by LF), or of the event
    /// last returned.
    data: String,
    /// The `event` field of the event being read.
    kind: Option<EventKind>,
    /// Whether the event being read has an `error` line (see [`EventKind::Error`]).
    error_line: bool,
    /// Whether `data` belongs to the event last returned (cleared on the next call).
    returned: bool,
    max_line: usize,
    max_event: usize,
    /// Bytes the line-end search has looked at, for the test that checks it is linear.
    #[cfg(test)]
    examined: usize,
}

impl SseParser {
    /// A parser at the start of a stream, with a limit on one line and on one event's data.
    pub(crate) fn new(max_line: usize, max_event: usize) -> Self {
        Self {
            buf: Vec::new(),
            pos: 0,
            scanned: 0,
            started: false,
            data: String::new(),
            kind: None,
            error_line: false,
            returned: false,
            max_line,
            max_event,
            #[cfg(test)]
            examined: 0,
        }
    }

    /// Adds bytes received from the server.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.pos == self.buf.len() {
            self.buf.clear();
        } else if self.pos > 0 {
            // Only the unconsumed rest moves: at most one partial line.
            self.buf.drain(..self.pos);
        }
        self.scanned -= self.pos;
        self.pos = 0;
        self.buf.extend_from_slice(bytes);
    }

    /// The data of the event last returned by [`SseParser::next_event`].
    pub(crate) fn data(&self) -> &str {
        &self.data
    }

    /// Fails with `error`, letting the buffered bytes go (the stream is not read on).
    fn fail(&mut self, error: SseError) -> Result<Option<EventKind>, SseError> {
        self.buf = Vec::new();
        self.data = String::new();
        self.pos = 0;
        self.scanned = 0;
        Err(error)
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
                    self.scanned = self.pos;
                }
                continue;
            }
            let from = self.scanned - self.pos;
            let found = memchr::memchr2(b'\n', b'\r', &rest[from..]);
            #[cfg(test)]
            {
                self.examined += found.map_or(rest.len() - from, |at| at + 1);
            }
            let Some(end) = found.map(|at| from + at) else {
                self.scanned = self.buf.len();
                if rest.len() > self.max_line {
                    return self.fail(SseError::LineTooLong(self.max_line));
                }
                return Ok(None);
            };
            if end > self.max_line {
                return self.fail(SseError::LineTooLong(self.max_line));
            }
            let consumed = if rest[end] == b'\r' {
                match rest.get(end + 1) {
                    // A CR may be the first half of a CRLF: wait for the next byte (the search
                    // starts again at the CR).
                    None => {
                        self.scanned = self.pos + end;
                        return Ok(None);
                    }
                    Some(b'\n') => end + 2,
                    Some(_) => end + 1,
                }
            } else {
                end + 1
            };
            let line = std::str::from_utf8(&rest[..end]).map_err(SseError::NotUtf8)?;
            if line.is_empty() {
                self.pos += consumed;
                self.scanned = self.pos;
                let mut kind = self.kind.take().unwrap_or(EventKind::Other);
                if std::mem::take(&mut self.error_line) {
                    kind = EventKind::Error;
                }
                if self.data.is_empty() {
                    // An event without data is not dispatched.
                    continue;
                }
                self.data.pop();
                self.returned = true;
                return Ok(Some(kind));
            }
            if !line.starts_with(':') {
                // memchr, not `split_once`: a char searcher per line showed in profiles.
                let (name, value) = match memchr::memchr(b':', line.as_bytes()) {
                    Some(colon) => {
                        let value = &line[colon + 1..];
                        (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
                    }
                    None => (line, ""),
                };
                match name {
                    // The spec ignores an `error` field; llama.cpp's server writes its
                    // mid-stream errors in one, and the caller must hear the server's message.
                    "data" | "error" => {
                        self.error_line |= name == "error";
                        if self.data.len() + value.len() > self.max_event {
                            return self.fail(SseError::EventTooLarge(self.max_event));
                        }
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
            self.scanned = self.pos;
        }
    }
}

#[cfg(test)]
mod tests {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    use proptest::prelude::*;

    use super::*;

    const MIB: usize = 1 << 20;

    /// Every event of `body` delivered in `parts`, as (keepalive, data).
    fn ours(parts: &[&[u8]]) -> Vec<(bool, String)> {
        let mut parser = SseParser::new(MIB, MIB);
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
    fn an_error_field_is_an_error_event_with_its_value_as_data() {
        let body = "data: {\"a\":1}\n\nerror: {\"message\":\"boom\"}\n\ndata: {}\n\n";
        let mut parser = SseParser::new(MIB, MIB);
        parser.push(body.as_bytes());
        let mut events = Vec::new();
        while let Some(kind) = parser.next_event().expect("UTF-8") {
            events.push((kind, parser.data().to_owned()));
        }
        assert_eq!(
            events,
            vec![
                (EventKind::Other, "{\"a\":1}".to_owned()),
                (EventKind::Error, "{\"message\":\"boom\"}".to_owned()),
                (EventKind::Other, "{}".to_owned()),
            ]
        );
    }

    #[test]
    fn a_line_that_is_not_utf8_is_an_error() {
        let mut parser = SseParser::new(MIB, MIB);
        parser.push(b"data: \xff\xfe\n\n");
        assert!(parser.next_event().is_err());
    }

    #[test]
    fn a_long_line_in_small_pieces_is_scanned_once() {
        // 256 KiB of one data line in 16-byte pieces: a search that went back to the line's
        // start on every piece would look at ~2 GiB (16,384 pieces × 128 KiB on average).
        const LINE: usize = 256 * 1024;
        let mut parser = SseParser::new(MIB, MIB);
        let mut body = b"data: ".to_vec();
        body.resize(LINE, b'x');
        body.extend_from_slice(b"\n\n");
        let mut events = 0;
        for piece in body.chunks(16) {
            parser.push(piece);
            while let Some(_kind) = parser.next_event().expect("a valid stream") {
                events += 1;
                assert_eq!(parser.data().len(), LINE - "data: ".len());
            }
        }
        assert_eq!(events, 1);
        assert!(
            parser.examined <= body.len(),
            "looked at {} bytes of a {}-byte stream",
            parser.examined,
            body.len()
        );
    }

    #[test]
    fn a_line_past_the_limit_is_an_error_before_its_end_arrives() {
        let mut parser = SseParser::new(1000, MIB);
        parser.push(b"data: {\"a\":1}\n\n");
        assert_eq!(parser.next_event().expect("valid"), Some(EventKind::Other));
        let mut pushed = 0;
        let error = loop {
            parser.push(&[b'x'; 100]);
            pushed += 100;
            match parser.next_event() {
                Ok(None) => assert!(pushed <= 1000, "no error after {pushed} bytes"),
                Ok(Some(_)) => panic!("no event was complete"),
                Err(error) => break error,
            }
        };
        assert!(matches!(error, SseError::LineTooLong(1000)), "{error:?}");
        assert_eq!(pushed, 1100);
        assert!(parser.buf.capacity() == 0, "the buffer is let go");

        // A line that arrives whole, end and all, is held to the same limit; a comment too.
        for line in [&b"data: "[..], b": "] {
            let mut parser = SseParser::new(1000, MIB);
            let mut body = line.to_vec();
            body.resize(1001, b'x');
            body.extend_from_slice(b"\n\n");
            parser.push(&body);
            assert!(matches!(
                parser.next_event(),
                Err(SseError::LineTooLong(1000))
            ));
        }
        // Exactly at the limit is fine.
        let mut parser = SseParser::new(1000, MIB);
        let mut body = b"data: ".to_vec();
        body.resize(1000, b'x');
        body.extend_from_slice(b"\r\n\r\n");
        parser.push(&body);
        assert_eq!(parser.next_event().expect("valid"), Some(EventKind::Other));
    }

    #[test]
    fn an_event_of_many_lines_past_the_limit_is_an_error() {
        let mut parser = SseParser::new(MIB, 1000);
        // 10 lines of 99 bytes and their 9 line feeds: 999 bytes of data, within the limit.
        let line = format!("data: {}\n", "y".repeat(99));
        parser.push(line.repeat(10).as_bytes());
        parser.push(b"\n");
        assert_eq!(parser.next_event().expect("valid"), Some(EventKind::Other));
        assert_eq!(parser.data().len(), 999);
        // Eleven are not, however they are cut.
        parser.push(line.repeat(11).as_bytes());
        let error = parser.next_event().expect_err("too large");
        assert!(matches!(error, SseError::EventTooLarge(1000)), "{error:?}");
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
