//! A fake OpenAI-compatible LLM server on a raw `TcpListener`, for fault tests through a whole
//! call (server, session, tool loop and the real `OpenAiClient`).
//!
//! Each request's fault is chosen by the last user message, so one server serves healthy and
//! faulty calls side by side: the message starts with a [`Fault`] keyword (`fault:500 ...`),
//! anything else is answered normally. Every answer closes its connection, so one connection
//! is one attempt, and the server counts attempts per message and connections still open.
#![allow(dead_code, unreachable_pub)]

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicUsize, Ordering},
    },
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// What the fake does with a request, by the prefix of the last user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `fault:500`: HTTP 500 on every attempt.
    Status500,
    /// `fault:429-once`: HTTP 429 on the first attempt for this message, then a normal answer.
    TooManyOnce,
    /// `fault:stall`: reads the request, then sends nothing until the client goes away.
    StallBeforeHeaders,
    /// `fault:stall-mid`: headers and two chunks, then silence until the client goes away.
    StallMidStream,
    /// `fault:cut`: headers and two chunks, then the connection is dropped mid-body.
    Cut,
    /// `fault:error-event`: two chunks, then an OpenAI error event in the stream.
    ErrorEvent,
    /// `fault:echo-key`: HTTP 401 whose message repeats the request's `Authorization` header,
    /// as some proxies do.
    EchoKey,
    /// `fault:endless-line`: two chunks, then one `data:` line that never ends (64 KiB pieces
    /// until the client goes away, at most [`FLOOD_LIMIT`] bytes).
    EndlessLine,
    /// `tool:NAME`: calls the tool `NAME` (no arguments) when the last message is the user's;
    /// after the tool result, answers with text that quotes the start of the result.
    Tool,
    /// `tool-hold:NAME`: like `tool:NAME`, but the answer with the call ends at its
    /// `finish_reason`: no `[DONE]`, no end of body, the connection held open until the
    /// client goes away (some proxies do this).
    ToolHold,
    /// Anything else: `echo: <message>` in word chunks.
    None,
}

impl Fault {
    fn of(message: &str) -> Self {
        let keyword = message.split_whitespace().next().unwrap_or_default();
        match keyword {
            "fault:500" => Self::Status500,
            "fault:429-once" => Self::TooManyOnce,
            "fault:stall" => Self::StallBeforeHeaders,
            "fault:stall-mid" => Self::StallMidStream,
            "fault:cut" => Self::Cut,
            "fault:error-event" => Self::ErrorEvent,
            "fault:echo-key" => Self::EchoKey,
            "fault:endless-line" => Self::EndlessLine,
            _ if keyword.starts_with("tool:") => Self::Tool,
            _ if keyword.starts_with("tool-hold:") => Self::ToolHold,
            _ => Self::None,
        }
    }
}

/// The text a healthy request is answered with.
pub fn echo_answer(message: &str) -> String {
    format!("echo: {message}")
}

/// The text chunks streamed before a mid-stream fault.
pub const PARTIAL: [&str; 2] = ["partial ", "answer "];

/// Where an endless line stops anyway, so a client without a limit fails its test without
/// taking the machine's memory.
pub const FLOOD_LIMIT: usize = 64 * 1024 * 1024;

#[derive(Default)]
struct State {
    flooded: AtomicUsize,
    attempts: Mutex<HashMap<String, usize>>,
    open: AtomicUsize,
    total: AtomicUsize,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running fake; it lives as long as the test's runtime.
pub struct FakeLlm {
    addr: SocketAddr,
    state: Arc<State>,
}

impl FakeLlm {
    /// Starts the fake on 127.0.0.1:0.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State::default());
        let accepting = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let state = Arc::clone(&accepting);
                state.open.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    serve(socket, &state).await;
                    state.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Self { addr, state }
    }

    /// The API base URL for the client.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// A builder for the real client pointed at this fake (no environment, a dummy key); the
    /// test sets the limits it needs.
    pub fn client_builder(&self) -> crewline::llm::OpenAiClientBuilder {
        crewline::llm::OpenAiClient::builder()
            .model("fake")
            .api_key("sk-test-not-a-real-key")
            .base_url(self.base_url())
            .read_env(false)
    }

    /// How many requests carried `message` as their last user message.
    pub fn attempts(&self, message: &str) -> usize {
        lock(&self.state.attempts)
            .get(message)
            .copied()
            .unwrap_or(0)
    }

    /// Requests received in all.
    pub fn total(&self) -> usize {
        self.state.total.load(Ordering::SeqCst)
    }

    /// Bytes of endless lines sent before the client went away.
    pub fn flooded(&self) -> usize {
        self.state.flooded.load(Ordering::SeqCst)
    }

    /// Connections the fake still holds open.
    pub fn open_connections(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }
}

/// The last message of the request and its role, and the last user message.
fn last_messages(body: &Value) -> (String, String, String) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    (
        last["role"].as_str().unwrap_or_default().to_owned(),
        last["content"].as_str().unwrap_or_default().to_owned(),
        user,
    )
}

async fn serve(mut socket: TcpStream, state: &State) {
    let Some((headers, body)) = read_request(&mut socket).await else {
        return;
    };
    state.total.fetch_add(1, Ordering::SeqCst);
    let (last_role, last_content, user) = last_messages(&body);
    let attempt = {
        let mut attempts = lock(&state.attempts);
        let count = attempts.entry(user.clone()).or_insert(0);
        *count += 1;
        *count
    };
    // Write errors mean the client went away, which the tests check from their side.
    let _ = match Fault::of(&user) {
        Fault::Status500 => {
            write_status(&mut socket, 500, "the model is overloaded (scripted)").await
        }
        Fault::TooManyOnce if attempt == 1 => {
            write_status(&mut socket, 429, "rate limited (scripted)").await
        }
        Fault::EchoKey => {
            let authorization = headers.get("authorization").cloned().unwrap_or_default();
            let message = format!("Incorrect API key provided: {authorization}");
            write_status(&mut socket, 401, &message).await
        }
        Fault::StallBeforeHeaders => {
            wait_for_close(&mut socket).await;
            Ok(())
        }
        Fault::StallMidStream => {
            let result = write_sse(&mut socket, &text_chunks(&PARTIAL), false).await;
            wait_for_close(&mut socket).await;
            result
        }
        Fault::Cut => write_sse(&mut socket, &text_chunks(&PARTIAL), false).await,
        Fault::ErrorEvent => {
            let mut events = text_chunks(&PARTIAL);
            events.push(
                json!({"error": {"message": "the server had an error (scripted)", "type": "server_error"}})
                    .to_string(),
            );
            write_sse(&mut socket, &events, true).await
        }
        Fault::EndlessLine => {
            let result = write_endless_line(&mut socket, &text_chunks(&PARTIAL), state).await;
            wait_for_close(&mut socket).await;
            result
        }
        Fault::Tool if last_role == "user" => {
            let name = user
                .split_whitespace()
                .next()
                .and_then(|k| k.strip_prefix("tool:"))
                .unwrap_or_default();
            write_sse(&mut socket, &tool_call_chunks(name), true).await
        }
        Fault::ToolHold if last_role == "user" => {
            let name = user
                .split_whitespace()
                .next()
                .and_then(|k| k.strip_prefix("tool-hold:"))
                .unwrap_or_default();
            let result = write_sse(&mut socket, &tool_call_chunks(name), false).await;
            wait_for_close(&mut socket).await;
            result
        }
        Fault::Tool | Fault::ToolHold => {
            // Quote the start of the tool result (what the model would read).
            let quoted: String = last_content.chars().take(120).collect();
            let text = format!("the tool said: {quoted}");
            write_sse(&mut socket, &text_chunks(&[text.as_str()]), true).await
        }
        Fault::TooManyOnce | Fault::None => {
            let answer = echo_answer(&user);
            let words: Vec<String> = answer.split_inclusive(' ').map(ToOwned::to_owned).collect();
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            write_sse(&mut socket, &text_chunks(&words), true).await
        }
    };
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    })
    .to_string()
}

fn text_chunks(pieces: &[&str]) -> Vec<String> {
    pieces
        .iter()
        .map(|piece| chunk(json!({"content": piece}), None))
        .collect()
}

fn tool_call_chunks(name: &str) -> Vec<String> {
    vec![
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_fake_1", "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ]
}

async fn write_status(socket: &mut TcpStream, code: u16, message: &str) -> std::io::Result<()> {
    let body = json!({"error": {"message": message, "type": "scripted", "code": code}}).to_string();
    let head = format!(
        "HTTP/1.1 {code} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body.as_bytes()).await?;
    socket.shutdown().await
}

/// Writes an SSE answer; with `finish`, a final `stop` chunk, `[DONE]` and the body's end.
/// Without it the body is left unterminated (the caller cuts or stalls).
async fn write_sse(socket: &mut TcpStream, events: &[String], finish: bool) -> std::io::Result<()> {
    socket
        .write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        )
        .await?;
    for event in events {
        write_chunk(socket, &format!("data: {event}\n\n")).await?;
    }
    if finish {
        write_chunk(
            socket,
            &format!("data: {}\n\n", chunk(json!({}), Some("stop"))),
        )
        .await?;
        write_chunk(socket, "data: [DONE]\n\n").await?;
        socket.write_all(b"0\r\n\r\n").await?;
        socket.shutdown().await?;
    }
    Ok(())
}

/// Writes an SSE answer of `events`, then a `data:` line that never ends, until the client
/// goes away or [`FLOOD_LIMIT`] bytes are out.
async fn write_endless_line(
    socket: &mut TcpStream,
    events: &[String],
    state: &State,
) -> std::io::Result<()> {
    write_sse(socket, events, false).await?;
    write_chunk(socket, "data: ").await?;
    let piece = "x".repeat(64 * 1024);
    while state.flooded.load(Ordering::SeqCst) < FLOOD_LIMIT {
        write_chunk(socket, &piece).await?;
        state.flooded.fetch_add(piece.len(), Ordering::SeqCst);
    }
    Ok(())
}

async fn write_chunk(socket: &mut TcpStream, data: &str) -> std::io::Result<()> {
    let framed = format!("{:x}\r\n{data}\r\n", data.len());
    socket.write_all(framed.as_bytes()).await?;
    socket.flush().await
}

/// Reads until the client closes the connection.
async fn wait_for_close(socket: &mut TcpStream) {
    let mut buf = [0_u8; 1024];
    while let Ok(n) = socket.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

async fn read_request(socket: &mut TcpStream) -> Option<(HashMap<String, String>, Value)> {
    let mut data = Vec::new();
    let mut buf = [0_u8; 8192];
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
    let headers: HashMap<String, String> = head
        .split("\r\n")
        .skip(1)
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
    Some((headers, body))
}

/// Starts `count` healthy calls to `url` in the background, two turns each: every turn must
/// be answered with the echo and no `agent.error`. Await the handles to check them.
pub fn spawn_healthy_calls(url: &str, count: usize) -> Vec<tokio::task::JoinHandle<()>> {
    (0..count)
        .map(|i| {
            let url = url.to_owned();
            tokio::spawn(async move {
                let mut client = crate::common::Client::connect(&url).await;
                client
                    .send(&crate::common::init_frame(&format!("healthy-{i}")))
                    .await;
                assert_eq!(client.recv().await["type"], "agent.ready");
                for turn in 0..2 {
                    let words = format!("hello from call {i} turn {turn}");
                    let (frames, text) = client.turn(&words).await;
                    assert_eq!(text, echo_answer(&words), "{frames:?}");
                    assert!(
                        !crate::common::types(&frames).contains(&"agent.error".to_owned()),
                        "{frames:?}"
                    );
                }
                client.close().await;
            })
        })
        .collect()
}
