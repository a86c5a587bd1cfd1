//! A scripted OpenAI-compatible HTTP/1.1 server for the client's integration tests.
//!
//! It is written by hand on a raw `TcpListener` so a test can do what a framework hides:
//! break a stream off mid-body, stall before or after the headers, and see the moment the
//! client lets a connection go. Every answer but [`After::DoneKeepAlive`] closes its
//! connection (`Connection: close`), so one connection is one request.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Notify,
};

/// How a streamed answer ends after its events.
#[derive(Debug, Clone, Copy)]
pub(crate) enum After {
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

/// One scripted answer.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
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
    /// like [`Reply::EndlessLine`] (its `content-length` says 1 GiB).
    EndlessStatus(u16, String),
}

/// The size of each piece of an endless line or body.
pub(crate) const FLOOD_PIECE: usize = 64 * 1024;
/// Where an endless line or body stops anyway, so a client without a limit fails the test
/// without taking the machine's memory.
pub(crate) const FLOOD_LIMIT: usize = 64 * 1024 * 1024;

impl Reply {
    /// A streamed answer of JSON chunks.
    pub(crate) fn chunks(chunks: &[Value], after: After) -> Self {
        Self::Sse(chunks.iter().map(Value::to_string).collect(), after)
    }
}

/// One request as the server read it.
#[derive(Debug, Clone)]
pub(crate) struct Captured {
    /// The request line's path.
    pub(crate) path: String,
    /// Headers, names in lowercase.
    pub(crate) headers: HashMap<String, String>,
    /// The body as JSON (`Null` if it was not JSON).
    pub(crate) body: Value,
}

#[derive(Default)]
struct State {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Captured>>,
    disconnects: Mutex<usize>,
    disconnected: Notify,
    connections: Mutex<usize>,
    flooded: Mutex<usize>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding the lock has failed already; keep the data.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running scripted server; it lives as long as the test's runtime.
pub(crate) struct TestServer {
    addr: SocketAddr,
    state: Arc<State>,
}

impl TestServer {
    /// Starts a server on 127.0.0.1 that answers requests with `replies` in order (then 500).
    pub(crate) async fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(State {
            replies: Mutex::new(replies.into()),
            ..State::default()
        });
        let accept_state = state.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(handle(socket, accept_state.clone()));
            }
        });
        Self { addr, state }
    }

    /// The API base URL to give the client.
    pub(crate) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The requests received so far.
    pub(crate) fn requests(&self) -> Vec<Captured> {
        lock(&self.state.requests).clone()
    }

    /// How many requests were received.
    pub(crate) fn request_count(&self) -> usize {
        lock(&self.state.requests).len()
    }

    /// How many connections the client has opened.
    pub(crate) fn connections(&self) -> usize {
        *lock(&self.state.connections)
    }

    /// How many bytes of endless lines and bodies were sent before the client closed.
    pub(crate) fn flooded(&self) -> usize {
        *lock(&self.state.flooded)
    }

    /// How many stalled connections the client has closed.
    pub(crate) fn disconnects(&self) -> usize {
        *lock(&self.state.disconnects)
    }

    /// Whether the client closes a stalled connection within `limit`.
    pub(crate) async fn disconnected_within(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            while self.disconnects() == 0 {
                self.state.disconnected.notified().await;
            }
        })
        .await
        .is_ok()
    }
}

async fn handle(mut socket: TcpStream, state: Arc<State>) {
    *lock(&state.connections) += 1;
    while let Some(request) = read_request(&mut socket).await {
        lock(&state.requests).push(request);
        let reply = lock(&state.replies).pop_front().unwrap_or_else(|| {
            Reply::Status(500, r#"{"error":{"message":"no reply left"}}"#.into())
        });
        let keep_alive = matches!(reply, Reply::Sse(_, After::DoneKeepAlive));
        // Write errors mean the client went away; the test sees that from its side.
        let written = match reply {
            Reply::Status(code, body) => write_whole(&mut socket, code, &body).await,
            Reply::Json(body) => write_whole(&mut socket, 200, &body.to_string()).await,
            Reply::StallBeforeHeaders => {
                wait_for_close(&mut socket, &state).await;
                Ok(())
            }
            Reply::Sse(events, after) => write_sse(&mut socket, &events, after, &state).await,
            Reply::EndlessLine(events) => write_endless_line(&mut socket, &events, &state).await,
            Reply::EndlessStatus(code, start) => {
                write_endless_status(&mut socket, code, &start, &state).await
            }
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
    state: &State,
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

async fn write_endless_line(
    socket: &mut TcpStream,
    events: &[String],
    state: &State,
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
    state: &State,
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
async fn flood(socket: &mut TcpStream, state: &State, chunked: bool) -> std::io::Result<()> {
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
async fn wait_for_close(socket: &mut TcpStream, state: &State) {
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

async fn read_request(socket: &mut TcpStream) -> Option<Captured> {
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
    Some(Captured {
        path,
        headers,
        body,
    })
}
