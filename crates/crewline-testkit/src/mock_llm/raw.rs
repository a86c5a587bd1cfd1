//! The mock model's raw-wire mode: answers written byte for byte on the bare TCP socket, for
//! client tests that need what an HTTP framework hides.
//!
//! Hand-written on purpose: a test can break a stream off mid-body (no final chunk), stall
//! before or after the headers, send a `data:` line or an error body that never ends, hold a
//! connection open after the last event, and see the moment the client lets a connection go.
//! Every answer but [`After::DoneKeepAlive`] closes its connection (`Connection: close`), so
//! one connection is one request.
//!
//! It is a mode of the one mock model, [`MockLlm::raw`](super::MockLlm::raw): the same
//! listener accepts the connections and hands them here instead of to the scripted server.
//!
//! # Examples
//!
//! ```
//! use crewline_testkit::mock_llm::{MockLlm, raw::{After, RawReply}};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! // The first request gets two events and a cut body; later ones a 500.
//! let chunk = json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]});
//! let server = MockLlm::raw(vec![RawReply::chunks(&[chunk.clone(), chunk], After::Cut)])
//!     .start()
//!     .await?;
//! assert!(server.base_url().starts_with("http://127.0.0.1:"));
//! assert_eq!(server.mock().request_count(), 0);
//! # Ok(()) }
//! ```

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::Notify,
};

/// How a streamed answer ends after its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// `data: [DONE]`, then the end of the body, as OpenAI does.
    Done,
    /// `data: [DONE]`, then, 20 ms later in a write of its own, the end of the body; the
    /// connection stays open for the next request (HTTP/1.1 keep-alive).
    DoneKeepAlive,
    /// The end of the body without `[DONE]`.
    Eof,
    /// The socket is dropped mid-body (no final chunk): a broken connection.
    Cut,
    /// Nothing more; the connection stays open until the client closes it.
    Stall,
}

/// One scripted answer, byte for byte.
#[derive(Debug, Clone, PartialEq)]
pub enum RawReply {
    /// A `text/event-stream` answer: each string is one event's `data`.
    Sse(Vec<String>, After),
    /// A non-200 answer with this body.
    Status(u16, String),
    /// A 200 JSON answer (non-streaming).
    Json(Value),
    /// Reads the request, then sends nothing until the client closes.
    StallBeforeHeaders,
    /// A `text/event-stream` answer whose events are followed by one `data:` line that never
    /// ends: [`FLOOD_PIECE`]-byte pieces of it until the client closes the connection (or
    /// [`FLOOD_LIMIT`] bytes are out; then the server waits for the close).
    EndlessLine(Vec<String>),
    /// An error answer with this status whose body starts with the text given and goes on
    /// like [`RawReply::EndlessLine`] (its `content-length` says 1 GiB).
    EndlessStatus(u16, String),
    /// A `text/event-stream` answer of any size, never held whole: the `head` events, then
    /// `event` sent `times` times, then the `tail` events, `data: [DONE]` and the body's end.
    Repeat {
        /// The events before the repeated one.
        head: Vec<String>,
        /// The event sent `times` times.
        event: String,
        /// How many times `event` is sent.
        times: usize,
        /// The events after the repeated one.
        tail: Vec<String>,
    },
}

impl RawReply {
    /// A streamed answer of JSON chunks.
    pub fn chunks(chunks: &[Value], after: After) -> Self {
        Self::Sse(chunks.iter().map(Value::to_string).collect(), after)
    }
}

/// The size of each piece of an endless line or body.
pub const FLOOD_PIECE: usize = 64 * 1024;
/// Where an endless line or body stops anyway, so a client without a limit fails its test
/// without taking the machine's memory.
pub const FLOOD_LIMIT: usize = 64 * 1024 * 1024;

/// The requests the raw mode keeps (the latest ones; the count goes on): a long soak sends it
/// a request per turn for minutes, and a log of every one would grow the test's memory.
pub const RAW_REQUEST_LOG_LIMIT: usize = 1_024;

/// One request as the server read it.
#[derive(Debug, Clone, PartialEq)]
pub struct RawRequest {
    /// The request line's path.
    pub path: String,
    /// Headers, names in lowercase.
    pub headers: HashMap<String, String>,
    /// The body as JSON (`Null` if it was not JSON).
    pub body: Value,
}

/// Chooses the answer to each request.
type Responder = dyn Fn(&RawRequest) -> RawReply + Send + Sync;

/// The raw mode's answers and what it saw of the client.
pub(super) struct RawState {
    respond: Box<Responder>,
    requests: Mutex<VecDeque<RawRequest>>,
    request_count: Mutex<usize>,
    disconnects: Mutex<usize>,
    disconnected: Notify,
    connections: Mutex<usize>,
    open: Mutex<usize>,
    flooded: Mutex<usize>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding the lock has failed already; keep the data.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RawState {
    /// Answers each request with what `respond` returns for it.
    pub(super) fn new(respond: impl Fn(&RawRequest) -> RawReply + Send + Sync + 'static) -> Self {
        Self {
            respond: Box::new(respond),
            requests: Mutex::default(),
            request_count: Mutex::default(),
            disconnects: Mutex::default(),
            disconnected: Notify::new(),
            connections: Mutex::default(),
            open: Mutex::default(),
            flooded: Mutex::default(),
        }
    }

    /// Answers requests with `replies` in order, then with HTTP 500 `no reply left`.
    pub(super) fn in_order(replies: Vec<RawReply>) -> Self {
        let queue = Mutex::new(VecDeque::from(replies));
        Self::new(move |_| {
            lock(&queue).pop_front().unwrap_or_else(|| {
                RawReply::Status(500, r#"{"error":{"message":"no reply left"}}"#.into())
            })
        })
    }

    pub(super) fn requests(&self) -> Vec<RawRequest> {
        lock(&self.requests).iter().cloned().collect()
    }

    pub(super) fn request_count(&self) -> usize {
        *lock(&self.request_count)
    }

    pub(super) fn connections(&self) -> usize {
        *lock(&self.connections)
    }

    pub(super) fn open_connections(&self) -> usize {
        *lock(&self.open)
    }

    pub(super) fn flooded(&self) -> usize {
        *lock(&self.flooded)
    }

    pub(super) fn disconnects(&self) -> usize {
        *lock(&self.disconnects)
    }

    pub(super) async fn disconnected_within(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            loop {
                let notified = self.disconnected.notified();
                if self.disconnects() > 0 {
                    break;
                }
                notified.await;
            }
        })
        .await
        .is_ok()
    }
}

/// Counts a connection open for as long as it is served.
struct OpenGuard<'s>(&'s RawState);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        *lock(&self.0.open) -= 1;
    }
}

/// Serves one connection byte for byte until its answer closes it.
pub(super) async fn handle(socket: TcpStream, state: Arc<RawState>) {
    *lock(&state.connections) += 1;
    *lock(&state.open) += 1;
    let _open = OpenGuard(&state);
    // The socket is closed inside (dropped there), before the guard counts it closed.
    serve(socket, &state).await;
}

async fn serve(mut socket: TcpStream, state: &RawState) {
    while let Some(request) = read_request(&mut socket).await {
        let reply = (state.respond)(&request);
        {
            let mut requests = lock(&state.requests);
            if requests.len() == RAW_REQUEST_LOG_LIMIT {
                requests.pop_front();
            }
            requests.push_back(request);
        }
        *lock(&state.request_count) += 1;
        let keep_alive = matches!(reply, RawReply::Sse(_, After::DoneKeepAlive));
        // Write errors mean the client went away; the test sees that from its side.
        let written = match reply {
            RawReply::Status(code, body) => write_whole(&mut socket, code, &body).await,
            RawReply::Json(body) => write_whole(&mut socket, 200, &body.to_string()).await,
            RawReply::StallBeforeHeaders => {
                wait_for_close(&mut socket, state).await;
                Ok(())
            }
            RawReply::Sse(events, after) => write_sse(&mut socket, &events, after, state).await,
            RawReply::EndlessLine(events) => write_endless_line(&mut socket, &events, state).await,
            RawReply::EndlessStatus(code, start) => {
                write_endless_status(&mut socket, code, &start, state).await
            }
            RawReply::Repeat {
                head,
                event,
                times,
                tail,
            } => write_repeat(&mut socket, &head, &event, times, &tail).await,
        };
        if !keep_alive || written.is_err() {
            return;
        }
    }
}
async fn write_whole(socket: &mut TcpStream, code: u16, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {code} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body.as_bytes()).await?;
    socket.shutdown().await
}

async fn write_sse(
    socket: &mut TcpStream,
    events: &[String],
    after: After,
    state: &RawState,
) -> std::io::Result<()> {
    let connection = match after {
        After::DoneKeepAlive => "keep-alive",
        _ => "close",
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: {connection}\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await?;
    for event in events {
        write_chunk(socket, &format!("data: {event}\n\n")).await?;
    }
    match after {
        After::Done => {
            write_chunk(socket, "data: [DONE]\n\n").await?;
            socket.write_all(b"0\r\n\r\n").await?;
            socket.shutdown().await
        }
        After::DoneKeepAlive => {
            write_chunk(socket, "data: [DONE]\n\n").await?;
            tokio::time::sleep(Duration::from_millis(20)).await;
            socket.write_all(b"0\r\n\r\n").await?;
            socket.flush().await
        }
        After::Eof => {
            socket.write_all(b"0\r\n\r\n").await?;
            socket.shutdown().await
        }
        // Dropping the socket without the final chunk breaks the body off.
        After::Cut => Ok(()),
        After::Stall => {
            wait_for_close(socket, state).await;
            Ok(())
        }
    }
}

/// A [`RawReply::Repeat`] answer: `head`, `event` `times` times, `tail`, `[DONE]`, the end.
async fn write_repeat(
    socket: &mut TcpStream,
    head: &[String],
    event: &str,
    times: usize,
    tail: &[String],
) -> std::io::Result<()> {
    socket
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        .await?;
    let repeated = format!("data: {event}\n\n");
    for event in head {
        write_chunk(socket, &format!("data: {event}\n\n")).await?;
    }
    for _ in 0..times {
        write_chunk(socket, &repeated).await?;
    }
    for event in tail {
        write_chunk(socket, &format!("data: {event}\n\n")).await?;
    }
    write_chunk(socket, "data: [DONE]\n\n").await?;
    socket.write_all(b"0\r\n\r\n").await?;
    socket.shutdown().await
}

async fn write_endless_line(
    socket: &mut TcpStream,
    events: &[String],
    state: &RawState,
) -> std::io::Result<()> {
    socket
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        .await?;
    for event in events {
        write_chunk(socket, &format!("data: {event}\n\n")).await?;
    }
    write_chunk(socket, "data: ").await?;
    flood(socket, state, true).await
}

async fn write_endless_status(
    socket: &mut TcpStream,
    code: u16,
    start: &str,
    state: &RawState,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {code} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{start}",
        1_u64 << 30
    );
    socket.write_all(head.as_bytes()).await?;
    flood(socket, state, false).await
}

/// Writes [`FLOOD_PIECE`]-byte pieces (as HTTP chunks when `chunked`) until the client closes
/// the connection, counting the bytes sent, or until [`FLOOD_LIMIT`], then waits for the close.
async fn flood(socket: &mut TcpStream, state: &RawState, chunked: bool) -> std::io::Result<()> {
    let piece = "x".repeat(FLOOD_PIECE);
    let mut sent = 0;
    while sent < FLOOD_LIMIT {
        let written = if chunked {
            write_chunk(socket, &piece).await
        } else {
            socket.write_all(piece.as_bytes()).await
        };
        if written.is_err() {
            // The client closed the connection.
            *lock(&state.disconnects) += 1;
            state.disconnected.notify_one();
            return Ok(());
        }
        sent += FLOOD_PIECE;
        *lock(&state.flooded) = sent;
    }
    wait_for_close(socket, state).await;
    Ok(())
}

async fn write_chunk(socket: &mut TcpStream, data: &str) -> std::io::Result<()> {
    let framed = format!("{:x}\r\n{data}\r\n", data.len());
    socket.write_all(framed.as_bytes()).await?;
    socket.flush().await
}

/// Reads until the client closes the connection, then counts it.
async fn wait_for_close(socket: &mut TcpStream, state: &RawState) {
    let mut buf = [0_u8; 1024];
    loop {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    *lock(&state.disconnects) += 1;
    state.disconnected.notify_one();
}

async fn read_request(socket: &mut TcpStream) -> Option<RawRequest> {
    let mut data = Vec::new();
    let mut buf = [0_u8; 4096];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while data.len() < head_end + length {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
    let body = serde_json::from_slice(&data[head_end..head_end + length]).unwrap_or(Value::Null);
    Some(RawRequest {
        path,
        headers,
        body,
    })
}
