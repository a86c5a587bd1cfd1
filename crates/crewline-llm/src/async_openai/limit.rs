//! A tower layer that bounds what async-openai reads of each answer.
//!
//! async-openai reads an error answer's body whole (and logs it whole at ERROR when it is not
//! OpenAI's JSON), and splits a stream into lines with no limit: a server could make it hold
//! gigabytes. Below async-openai, in its HTTP service (its `middleware` feature), this layer
//! wraps each answer's body before async-openai sees it:
//!
//! - an error answer's body ends after `max_error_bytes`;
//! - a successful answer is held to `max_event_bytes` a line and an event: a line is passed
//!   on only once it is whole (so nothing of an oversized line reaches async-openai), and past
//!   the limit the body ends with one event of crewline's own, which the reader turns into
//!   [`LlmError::TooLarge`](crate::LlmError::TooLarge).

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use ::async_openai::{error::OpenAIError, middleware::HttpRequestFactory};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt, future::BoxFuture};
use http_body_util::BodyDataStream;

/// The key of the event that ends a body cut by the layer (see [`too_large`]).
pub(super) const MARKER: &str = "crewline_too_large";
/// How the data of that event starts.
const MARKER_PREFIX: &str = "{\"crewline_too_large\"";

/// The default largest line or event of a stream: the default client's `max_event_bytes`.
pub(super) const DEFAULT_MAX_EVENT_BYTES: usize = 4 << 20;
/// The default most bytes of an error answer's body read: async-openai logs an unreadable one
/// whole, and a real error body is well under a kilobyte.
pub(super) const DEFAULT_MAX_ERROR_BYTES: usize = 16 << 10;

/// A tower [`Layer`](tower::Layer) for an `async_openai::Client`'s HTTP service that bounds
/// what async-openai reads of each answer: error bodies to `max_error_bytes` (default 16 KiB),
/// a stream's lines and events to `max_event_bytes` (default 4 MiB, the default client's).
///
/// Without it async-openai reads with no limit at all; see
/// [`AsyncOpenAiClient::bounded_client`](crate::AsyncOpenAiClient::bounded_client) for a
/// client built with it. Put it innermost, next to the transport, so every attempt of a
/// retry layer is bounded too:
///
/// ```no_run
/// use async_openai::{Client, config::OpenAIConfig, middleware::ReqwestService};
/// use async_openai::middleware::retry::OpenAIRetryLayer;
/// use crewline_llm::{AnswerBodyLimit, AsyncOpenAiClient};
///
/// let service = tower::ServiceBuilder::new()
///     .layer(OpenAIRetryLayer::default())
///     .layer(AnswerBodyLimit::default())
///     .service(ReqwestService::new(reqwest::Client::new()));
/// let client = Client::with_config(OpenAIConfig::default()).with_http_service(service);
/// let model = AsyncOpenAiClient::new(client, "gpt-4o-mini");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct AnswerBodyLimit {
    max_event_bytes: usize,
    max_error_bytes: usize,
}

impl Default for AnswerBodyLimit {
    fn default() -> Self {
        Self {
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            max_error_bytes: DEFAULT_MAX_ERROR_BYTES,
        }
    }
}

impl AnswerBodyLimit {
    /// Sets the largest line or event of a streamed answer, in bytes (default 4 MiB).
    pub fn max_event_bytes(mut self, bytes: usize) -> Self {
        self.max_event_bytes = bytes;
        self
    }

    /// Sets the most bytes of an error answer's body read (default 16 KiB).
    pub fn max_error_bytes(mut self, bytes: usize) -> Self {
        self.max_error_bytes = bytes;
        self
    }
}

impl<S> tower::Layer<S> for AnswerBodyLimit {
    type Service = BodyLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BodyLimited {
            inner,
            limits: *self,
        }
    }
}

/// The service [`AnswerBodyLimit`] makes: `S` with each answer's body bounded.
#[derive(Debug, Clone)]
pub struct BodyLimited<S> {
    inner: S,
    limits: AnswerBodyLimit,
}

impl<S> tower::Service<HttpRequestFactory> for BodyLimited<S>
where
    S: tower::Service<HttpRequestFactory, Response = reqwest::Response, Error = OpenAIError>,
    S::Future: Send + 'static,
{
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = BoxFuture<'static, Result<reqwest::Response, OpenAIError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: HttpRequestFactory) -> Self::Future {
        let answer = self.inner.call(request);
        let limits = self.limits;
        Box::pin(async move { Ok(limits.wrap(answer.await?)) })
    }
}

impl AnswerBodyLimit {
    /// `response` with its body bounded.
    fn wrap(self, response: reqwest::Response) -> reqwest::Response {
        let success = response.status().is_success();
        let response: hyper::Response<reqwest::Body> = response.into();
        let (parts, body) = response.into_parts();
        let data = BodyDataStream::new(body);
        let body = if success {
            reqwest::Body::wrap_stream(Lines::new(data, self.max_event_bytes))
        } else {
            reqwest::Body::wrap_stream(data.scan(self.max_error_bytes, |left, chunk| {
                let chunk = match chunk {
                    Ok(_) if *left == 0 => return futures::future::ready(None),
                    Ok(mut chunk) => {
                        chunk.truncate(*left);
                        *left -= chunk.len();
                        Ok(chunk)
                    }
                    Err(error) => Err(error),
                };
                futures::future::ready(Some(chunk))
            }))
        };
        reqwest::Response::from(hyper::Response::from_parts(parts, body))
    }
}

/// The error a cut stream's closing event stands for, if `data` is one.
pub(super) fn cut_error(data: &str) -> Option<crate::LlmError> {
    // Checked on every event: a prefix test, no allocation, before any parse.
    if !data.starts_with(MARKER_PREFIX) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(data).ok()?;
    let cut = value.get(MARKER)?;
    let what = match cut.get("what")?.as_str()? {
        "an event of the stream" => "an event of the stream",
        _ => "a line of the stream",
    };
    let limit = usize::try_from(cut.get("limit")?.as_u64()?).ok()?;
    Some(crate::LlmError::TooLarge { what, limit })
}

/// The event that ends a stream cut at `limit` (for "a line" or "an event").
fn too_large(what: &str, limit: usize) -> Bytes {
    Bytes::from(format!(
        "\n\ndata: {{\"{MARKER}\":{{\"what\":\"{what}\",\"limit\":{limit}}}}}\n\n"
    ))
}

/// A stream's bytes passed on a whole line at a time, each line and event at most `max`.
struct Lines<S> {
    inner: S,
    /// The line being received, held until its end.
    line: BytesMut,
    /// The bytes of the event being received so far (its lines' contents).
    event: usize,
    /// Whether the last byte passed on was a CR (a LF right after it ends the same line).
    after_cr: bool,
    max: usize,
    /// Set once the stream was cut or ended: nothing more is read.
    done: bool,
}

impl<S> Lines<S> {
    pub(super) fn new(inner: S, max: usize) -> Self {
        Self {
            inner,
            line: BytesMut::new(),
            event: 0,
            after_cr: false,
            max,
            done: false,
        }
    }

    /// The longest line: an event's data and its field name, as the default client allows.
    fn max_line(&self) -> usize {
        self.max.saturating_add("data: ".len())
    }

    /// The most bytes of an event's lines together (field names and line ends included, so
    /// about twice an event's data, for events of many short lines).
    fn max_event(&self) -> usize {
        self.max.saturating_mul(2)
    }

    /// Takes in `chunk`; returns what may be passed on now, and what was too large when the
    /// stream was cut.
    fn take(&mut self, chunk: &[u8]) -> (BytesMut, Option<&'static str>) {
        let mut out = BytesMut::new();
        let mut rest = chunk;
        while let Some(at) = memchr::memchr2(b'\n', b'\r', rest) {
            let end = rest[at];
            if at == 0 && end == b'\n' && self.after_cr && self.line.is_empty() {
                // The LF of a CRLF: the line already ended at its CR.
                out.extend_from_slice(b"\n");
                self.after_cr = false;
                rest = &rest[1..];
                continue;
            }
            let length = self.line.len() + at;
            if length > self.max_line() {
                return (out, Some(self.cut("a line of the stream")));
            }
            if length == 0 {
                self.event = 0;
            } else {
                self.event += length + 1;
                if self.event > self.max_event() {
                    return (out, Some(self.cut("an event of the stream")));
                }
            }
            out.extend_from_slice(&self.line);
            out.extend_from_slice(&rest[..=at]);
            self.line.clear();
            self.after_cr = end == b'\r';
            rest = &rest[at + 1..];
        }
        if !rest.is_empty() {
            self.after_cr = false;
        }
        if self.line.len() + rest.len() > self.max_line() {
            return (out, Some(self.cut("a line of the stream")));
        }
        self.line.extend_from_slice(rest);
        (out, None)
    }

    /// Ends the stream at a limit: the line held is dropped, crewline's event follows.
    fn cut(&mut self, what: &'static str) -> &'static str {
        self.line = BytesMut::new();
        self.done = true;
        tracing::warn!(what, limit = self.max, "the answer is over the limit; cut");
        what
    }
}

impl<S, E> Stream for Lines<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    type Item = Result<Bytes, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match this.inner.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(error))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    // An unterminated last line goes on as it came.
                    let line = std::mem::take(&mut this.line);
                    if line.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(line.freeze())));
                }
                Poll::Ready(Some(Ok(chunk))) => {
                    let (mut out, cut) = this.take(&chunk);
                    if let Some(what) = cut {
                        out.extend_from_slice(&too_large(what, this.max));
                    }
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(out.freeze())));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use proptest::prelude::*;

    use super::*;

    /// What `Lines` passes on of `parts`, all together.
    fn passed(parts: &[&[u8]], max: usize) -> Vec<u8> {
        let chunks: Vec<Result<Bytes, std::io::Error>> = parts
            .iter()
            .map(|p| Ok(Bytes::copy_from_slice(p)))
            .collect();
        let lines = Lines::new(futures::stream::iter(chunks), max);
        let out: Vec<Result<Bytes, std::io::Error>> = futures::executor::block_on(lines.collect());
        out.into_iter()
            .flat_map(|chunk| chunk.expect("no error").to_vec())
            .collect()
    }

    #[test]
    fn a_line_past_the_limit_ends_the_stream_with_crewlines_event_and_nothing_of_it() {
        let mut body = b"data: {\"a\":1}\r\n\r\ndata: ".to_vec();
        body.extend(std::iter::repeat_n(b'x', 200));
        body.extend_from_slice(b"\n\ndata: never\n\n");
        let out = String::from_utf8(passed(&[&body], 100)).expect("UTF-8");
        assert!(out.starts_with("data: {\"a\":1}\r\n\r\n"), "{out}");
        assert!(!out.contains("xxx") && !out.contains("never"), "{out}");
        let data = out
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .next_back()
            .expect("the closing event");
        assert!(matches!(
            cut_error(data),
            Some(crate::LlmError::TooLarge {
                what: "a line of the stream",
                limit: 100
            })
        ));
        // A server's event that merely looks like it is not taken for one.
        assert!(cut_error(r#"{"choices":[],"crewline_too_large":1}"#).is_none());
    }

    #[test]
    fn an_event_of_many_short_lines_past_the_limit_is_cut() {
        let body = "data: 0123456789\n".repeat(30);
        let out = String::from_utf8(passed(&[body.as_bytes()], 100)).expect("UTF-8");
        assert!(out.contains("an event of the stream"), "{out}");
        // CRLF line ends end events as LF ones do: many small events pass.
        let body = "data: 0123456789\r\n\r\n".repeat(100);
        assert_eq!(passed(&[body.as_bytes()], 100), body.as_bytes());
    }

    proptest! {
        #[test]
        fn a_stream_within_the_limit_passes_unchanged_however_it_is_cut(
            lines in prop::collection::vec(("[a-z{}\":]{0,40}", prop_oneof![Just("\n"), Just("\r\n"), Just("\r"), Just("\n\n"), Just("\r\n\r\n")]), 0..30),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let body: String = lines.iter().map(|(l, e)| format!("data: {l}{e}")).collect();
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
            prop_assert_eq!(passed(&parts, 4096), bytes.to_vec());
        }
    }
}
