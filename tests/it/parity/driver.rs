//! Replays a fixture's inbound steps against a running crew over real WebSockets, the way
//! `reference/record.py` does, and records every frame the crew sends back.
//!
//! Every wait is bounded and event-driven (a version counter bumped by each received frame or
//! closed socket); only `settle` steps sleep, for exactly the time the fixture says.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use crewline_testkit::platform::{
    PlatformConfig,
    raw::{RawFrame, RawSender, RawSocket},
};
use serde_json::Value;
use tokio::{sync::watch, task::JoinHandle, time::Instant};

use super::fixture::{CloseInfo, Op, Step, StepResult};

/// The longest any wait for something that should happen may take: generous, for a loaded CI
/// machine. Waits that succeed return as soon as they can.
pub const WAIT: Duration = Duration::from_secs(10);

/// How long a wait that the reference saw time out (something that must NOT happen, e.g. an
/// answer after `end_call`) watches: crewline answers within milliseconds when it answers.
pub const EXPECTED_SILENCE: Duration = Duration::from_millis(1500);

/// After the last expected frame, how long to keep listening for unexpected extra frames.
pub const QUIET: Duration = Duration::from_millis(250);

/// One frame the crew sent.
#[derive(Debug, Clone)]
pub struct Received {
    pub conn: usize,
    /// The step that was running (informational).
    pub step: usize,
    /// Binary (true) or text frame.
    pub binary: bool,
    /// The wire text.
    pub raw: String,
    /// The decoded JSON, if it is JSON.
    pub event: Option<Value>,
}

/// An HTTP probe's answer.
#[derive(Debug, Clone)]
pub struct HttpAnswer {
    pub step: usize,
    pub path: String,
    pub status: u16,
    pub content_type: String,
    pub body_raw: String,
    /// How many of the driver's connections were open when the answer was taken.
    pub live_connections: usize,
}

/// Everything one replay produced.
#[derive(Debug)]
pub struct Recording {
    pub frames: Vec<Received>,
    pub steps: Vec<StepResult>,
    pub connections: Vec<(bool, CloseInfo)>,
    pub http: Vec<HttpAnswer>,
}

/// State shared with the per-connection readers.
struct Shared {
    frames: Mutex<Vec<Received>>,
    /// Bumped by every frame and every closed socket.
    version: watch::Sender<u64>,
    step: AtomicUsize,
}

impl Shared {
    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    fn count(&self, conn: usize, since: usize, kind: &str) -> usize {
        let frames = self.frames.lock().unwrap();
        frames[since.min(frames.len())..]
            .iter()
            .filter(|f| f.conn == conn)
            .filter(|f| {
                f.event
                    .as_ref()
                    .and_then(|e| e.get("type"))
                    .and_then(Value::as_str)
                    == Some(kind)
            })
            .count()
    }

    fn len(&self) -> usize {
        self.frames.lock().unwrap().len()
    }

    fn per_conn(&self, conn: usize) -> usize {
        self.frames
            .lock()
            .unwrap()
            .iter()
            .filter(|f| f.conn == conn)
            .count()
    }
}

/// The end of one connection as its reader saw it.
#[derive(Debug, Default, Clone)]
struct ReaderEnd {
    received: Option<(u16, String)>,
    server_first: Option<bool>,
}

struct Conn {
    sink: RawSender,
    /// Set once the reader has seen the end of the socket.
    closed: Arc<AtomicBool>,
    /// Set when the client sent its close frame.
    client_closing: Arc<AtomicBool>,
    sent: Option<(u16, String)>,
    end: Arc<Mutex<ReaderEnd>>,
    reader: Option<JoinHandle<()>>,
}

/// Replays `steps` against the crew at `addr`.
pub struct Driver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    conns: Vec<Conn>,
    results: Vec<StepResult>,
    http: Vec<HttpAnswer>,
    /// Where a `wait_for` starts counting: the frames received by the end of the last step
    /// that was not a send. record.py counts from the start of the wait itself, but crewline
    /// often answers before the driver reaches the wait (the reference never did), so frames
    /// that arrive during the sends right before a wait count for it too.
    mark: usize,
}

impl Driver {
    /// A driver for the crew server listening on `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        let (version, _) = watch::channel(0);
        Self {
            addr,
            shared: Arc::new(Shared {
                frames: Mutex::new(Vec::new()),
                version,
                step: AtomicUsize::new(0),
            }),
            conns: Vec::new(),
            results: Vec::new(),
            http: Vec::new(),
            mark: 0,
        }
    }

    /// Runs every step, waits until each connection has sent at least `expected[conn]`
    /// frames (bounded), listens for extras a little longer, then closes what is still open
    /// with 1000 "recording finished", like record.py.
    pub async fn run(mut self, steps: &[Step], expected: &[usize]) -> Recording {
        for step in steps {
            self.shared.step.store(step.index, Ordering::SeqCst);
            let result = self.run_step(step).await;
            if !matches!(step.op, Op::Send { .. } | Op::SendRaw { .. }) {
                self.mark = self.shared.len();
            }
            self.results.push(result);
        }
        self.shared.step.store(steps.len(), Ordering::SeqCst);
        let shared = Arc::clone(&self.shared);
        let enough = || {
            expected
                .iter()
                .enumerate()
                .all(|(conn, &n)| shared.per_conn(conn) >= n)
        };
        self.wait_until(WAIT, enough).await;
        tokio::time::sleep(QUIET).await;

        let mut connections = Vec::new();
        for index in 0..self.conns.len() {
            let open = !self.conns[index].closed.load(Ordering::SeqCst);
            if open {
                self.close(index, "recording finished").await;
            }
            let conn = &mut self.conns[index];
            if let Some(reader) = conn.reader.take() {
                reader.abort();
            }
            let end = conn.end.lock().unwrap().clone();
            // When the server closes first, tungstenite answers with the same close frame.
            let sent = match end.server_first {
                Some(true) => end.received.clone(),
                _ => conn.sent.clone(),
            };
            let info = CloseInfo {
                code: end.received.as_ref().map_or(1006, |(code, _)| *code),
                received: end.received,
                sent,
                server_first: end.server_first,
            };
            connections.push((open, info));
        }
        let frames = self.shared.frames.lock().unwrap().clone();
        Recording {
            frames,
            steps: self.results,
            connections,
            http: self.http,
        }
    }

    /// Waits until `done` holds or `bound` passes; returns whether it holds.
    async fn wait_until(&self, bound: Duration, mut done: impl FnMut() -> bool) -> bool {
        let mut changes = self.shared.version.subscribe();
        let deadline = Instant::now() + bound;
        loop {
            changes.borrow_and_update();
            if done() {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return done(),
            }
        }
    }

    async fn connect(&mut self) -> usize {
        let mut config = PlatformConfig::new(format!("ws://{}/ws", self.addr));
        config.timeouts.connect = WAIT;
        config.timeouts.frame = WAIT;
        let socket = RawSocket::connect(&config)
            .await
            .expect("WebSocket connect");
        let (sink, stream) = socket.split();
        // The reader waits for frames as long as the socket is open.
        let mut stream = stream.with_wait(Duration::MAX);
        let index = self.conns.len();
        let closed = Arc::new(AtomicBool::new(false));
        let client_closing = Arc::new(AtomicBool::new(false));
        let end = Arc::new(Mutex::new(ReaderEnd::default()));
        let shared = Arc::clone(&self.shared);
        let reader = {
            let (closed, client_closing, end) = (
                Arc::clone(&closed),
                Arc::clone(&client_closing),
                Arc::clone(&end),
            );
            tokio::spawn(async move {
                while let Ok(Some(frame)) = stream.next_frame().await {
                    let (binary, bytes) = match frame {
                        RawFrame::Binary(bytes) => (true, bytes),
                        RawFrame::Text(text) => (false, text.into_bytes()),
                        RawFrame::Close(close) => {
                            let mut end = end.lock().unwrap();
                            end.received =
                                Some(close.map_or((1005, String::new()), |c| (c.code, c.reason)));
                            end.server_first = Some(!client_closing.load(Ordering::SeqCst));
                            continue;
                        }
                        RawFrame::Ping(_) | RawFrame::Pong(_) => continue,
                    };
                    let raw = String::from_utf8_lossy(&bytes).into_owned();
                    let event = serde_json::from_str(&raw).ok();
                    shared.frames.lock().unwrap().push(Received {
                        conn: index,
                        step: shared.step.load(Ordering::SeqCst),
                        binary,
                        raw,
                        event,
                    });
                    shared.bump();
                }
                closed.store(true, Ordering::SeqCst);
                shared.bump();
            })
        };
        self.conns.push(Conn {
            sink,
            closed,
            client_closing,
            sent: None,
            end,
            reader: Some(reader),
        });
        index
    }

    async fn close(&mut self, index: usize, reason: &str) {
        let conn = &mut self.conns[index];
        conn.client_closing.store(true, Ordering::SeqCst);
        conn.sent = Some((1000, reason.to_owned()));
        let _ = conn.sink.close(1000, reason).await;
        let closed = Arc::clone(&conn.closed);
        self.wait_until(Duration::from_secs(5), || closed.load(Ordering::SeqCst))
            .await;
    }

    async fn run_step(&mut self, step: &Step) -> StepResult {
        let ok = StepResult {
            ok: true,
            timed_out: false,
        };
        let failed = StepResult {
            ok: false,
            timed_out: false,
        };
        match &step.op {
            Op::Connect => {
                self.connect().await;
                ok
            }
            Op::Send { frame, text } => {
                let data = serde_json::to_string(frame).unwrap();
                self.send(data, *text).await
            }
            Op::SendRaw { data, text } => self.send(data.clone(), *text).await,
            Op::WaitFor {
                kind,
                count,
                timeout,
            } => {
                let Some(index) = self.conns.len().checked_sub(1) else {
                    return failed;
                };
                let bound = if step.result.timed_out {
                    EXPECTED_SILENCE.min(Duration::from_secs_f64(*timeout))
                } else {
                    WAIT.max(Duration::from_secs_f64(*timeout))
                };
                let since = self.mark;
                let closed = Arc::clone(&self.conns[index].closed);
                let shared = Arc::clone(&self.shared);
                let kind = kind.clone();
                let count = *count;
                let done = self
                    .wait_until(bound, || {
                        closed.load(Ordering::SeqCst)
                            || (kind != "__closed__" && shared.count(index, since, &kind) >= count)
                    })
                    .await;
                let reached = kind != "__closed__" && shared.count(index, since, &kind) >= count;
                if kind == "__closed__" {
                    StepResult {
                        ok: done,
                        timed_out: !done,
                    }
                } else if reached {
                    ok
                } else {
                    StepResult {
                        ok: false,
                        timed_out: !closed.load(Ordering::SeqCst),
                    }
                }
            }
            Op::Settle { seconds } => {
                tokio::time::sleep(Duration::from_secs_f64(*seconds)).await;
                ok
            }
            Op::Close => match self.conns.len().checked_sub(1) {
                Some(index) if !self.conns[index].closed.load(Ordering::SeqCst) => {
                    self.close(index, "client done").await;
                    ok
                }
                _ => failed,
            },
            Op::Http { method, path } => {
                let answer = self.http_probe(step.index, method, path).await;
                self.http.push(answer);
                ok
            }
        }
    }

    async fn send(&mut self, data: String, text: bool) -> StepResult {
        if self.conns.is_empty() {
            self.connect().await;
        }
        let conn = self.conns.last_mut().unwrap();
        if conn.closed.load(Ordering::SeqCst) {
            return StepResult {
                ok: false,
                timed_out: false,
            };
        }
        let sent = if text {
            conn.sink.send_text(&data).await
        } else {
            conn.sink.send_binary(data.into_bytes()).await
        };
        StepResult {
            ok: sent.is_ok(),
            timed_out: false,
        }
    }

    fn live_connections(&self) -> usize {
        self.conns
            .iter()
            .filter(|c| !c.closed.load(Ordering::SeqCst))
            .count()
    }

    /// One HTTP probe. A count of live sessions settles asynchronously after a close, so the
    /// probe is repeated (bounded) until `active_sessions` equals the live connections.
    async fn http_probe(&self, step: usize, method: &str, path: &str) -> HttpAnswer {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let live = self.live_connections();
            let (status, content_type, body_raw) = http_request(self.addr, method, path).await;
            let active = serde_json::from_str::<Value>(&body_raw)
                .ok()
                .and_then(|b| b.get("active_sessions").and_then(Value::as_u64));
            let settled = active.is_none_or(|n| n as usize == live);
            if settled || Instant::now() >= deadline {
                return HttpAnswer {
                    step,
                    path: path.to_owned(),
                    status,
                    content_type,
                    body_raw,
                    live_connections: live,
                };
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A raw HTTP/1.1 request (`Connection: close`): status, content type and body (decoded
/// when chunked), through the testkit's raw HTTP client.
pub async fn http_request(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let response = crewline_testkit::platform::http::request(addr, &request)
        .await
        .expect("an HTTP answer in time");
    let content_type = response
        .header("content-type")
        .unwrap_or_default()
        .to_owned();
    (response.status, content_type, response.body)
}
