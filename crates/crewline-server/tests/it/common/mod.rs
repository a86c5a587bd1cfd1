//! Test helpers: a real server on 127.0.0.1:0, the testkit's raw HTTP client and raw WebSocket
//! (wrapped to fail the test on errors), and a tiny crew whose answers depend on the call's
//! variables and the caller's words.
#![allow(dead_code, unreachable_pub)]

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use crewline::{
    Crew, SessionSetup, ToolLoop,
    crew::{OutputAgent, OutputNode},
    llm::{Reply, ScriptedLlm},
    tool::ToolRegistry,
    turn::TurnStream,
    types::{Context, Message},
};
use crewline_server::{CrewServer, ServerError, ServerHandle};
use crewline_testkit::platform::http;
#[allow(unused_imports)]
pub use crewline_testkit::platform::{
    PlatformConfig, PlatformError,
    raw::{CloseReason, RawFrame, RawSocket},
};
use serde_json::{Value, json};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

/// How long any single wait may take before a test fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// A server running on a free loopback port.
pub struct TestServer {
    pub addr: SocketAddr,
    pub handle: ServerHandle,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServerError>>>,
}

impl TestServer {
    /// Serves `server` on 127.0.0.1:0; `shutdown` starts its drain.
    pub async fn start(server: CrewServer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let handle = server.handle();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve_with_shutdown(listener, async move {
            let _ = stopped.await;
        }));
        Self {
            addr,
            handle,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Starts the server and waits until `/ready` answers 200.
    pub async fn ready(server: CrewServer) -> Self {
        let server = Self::start(server).await;
        server.wait_for_ready().await;
        server
    }

    pub async fn wait_for_ready(&self) {
        let addr = self.addr;
        eventually("/ready to answer 200", || async move {
            http_get(addr, "/ready").await.status == 200
        })
        .await;
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    pub async fn get(&self, path: &str) -> HttpResponse {
        http_get(self.addr, path).await
    }

    /// Opens a call and completes the handshake (waits for `agent.ready`).
    pub async fn call(&self, name: &str) -> Client {
        let mut client = Client::connect(&self.ws_url()).await;
        client.send(&init_frame(name)).await;
        let ready = client.recv().await;
        assert_eq!(ready["type"], "agent.ready", "{ready}");
        client
    }

    /// Sends the shutdown signal.
    pub fn signal_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Waits for `serve_with_shutdown` to return.
    pub async fn join(&mut self) -> Result<(), ServerError> {
        let task = self.task.take().expect("joined twice");
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the server did not stop")
            .expect("the server task panicked")
    }

    /// Waits until the server reports `n` live calls.
    pub async fn wait_for_active(&self, n: usize) {
        let handle = self.handle.clone();
        eventually(&format!("{n} active sessions"), || {
            let handle = handle.clone();
            async move { handle.active_sessions() == n }
        })
        .await;
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Polls `check` until it holds, failing after [`WAIT`].
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// Not every test binary that includes this module uses each of these.
#[allow(unused_imports)]
pub use crewline_testkit::platform::{http::HttpResponse, raw::masked_frame};

/// `GET path` over a fresh connection.
pub async fn http_get(addr: SocketAddr, path: &str) -> HttpResponse {
    http::get(addr, path).await.expect("an HTTP response")
}

/// Sends a raw request and reads the whole response.
pub async fn http_request(addr: SocketAddr, request: &str) -> HttpResponse {
    http::request(addr, request)
        .await
        .expect("an HTTP response")
}

/// A platform-side WebSocket client: the testkit's raw socket, failing the test on errors.
pub struct Client {
    pub socket: RawSocket,
}

impl Client {
    pub async fn connect(url: &str) -> Self {
        Self::connect_with(PlatformConfig::new(url)).await
    }

    /// Connects with `config` (a bearer token, say); the upgrade must succeed.
    pub async fn connect_with(mut config: PlatformConfig) -> Self {
        config.timeouts.connect = WAIT;
        let socket = RawSocket::connect(&config).await.expect("connect");
        Self {
            socket: socket.with_wait(WAIT),
        }
    }

    /// Sends a JSON frame as binary, like the platform.
    pub async fn send(&mut self, frame: &Value) {
        self.socket.send_json(frame).await.expect("send");
    }

    pub async fn send_text(&mut self, text: &str) {
        self.socket.send_text(text).await.expect("send");
    }

    pub async fn send_bytes(&mut self, bytes: Vec<u8>) {
        self.socket.send_binary(bytes).await.expect("send");
    }

    /// The next data frame (asserted binary), skipping pings and pongs.
    pub async fn recv(&mut self) -> Value {
        self.socket.recv_json().await.expect("a binary JSON frame")
    }

    /// The next frame as it came, pings and pongs included.
    pub async fn next_frame(&mut self) -> RawFrame {
        self.socket
            .next_frame()
            .await
            .expect("a frame in time")
            .expect("the socket is open")
    }

    /// Frames up to and including the first of type `until`.
    pub async fn recv_until(&mut self, until: &str) -> Vec<Value> {
        self.socket.recv_until(until).await.expect("frames")
    }

    /// Data frames until the server's close frame; returns them and the close frame.
    pub async fn recv_until_close(&mut self) -> (Vec<Value>, Option<CloseReason>) {
        self.socket
            .recv_until_close()
            .await
            .expect("frames, then a close frame")
    }

    /// Asks for one LLM turn and returns its frames (through `end`) and the spoken text.
    pub async fn turn(&mut self, words: &str) -> (Vec<Value>, String) {
        self.send(&json!({"type": "agent.transcript.update", "role": "user", "content": words}))
            .await;
        self.send(&llm_request(words)).await;
        let frames = self.recv_until("agent.llm.response.end").await;
        let text = spoken(&frames);
        (frames, text)
    }

    pub async fn close(self) {
        self.socket.close().await;
    }
}

/// The text of the chunks among `frames`.
pub fn spoken(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "agent.llm.response.chunk")
        .filter_map(|f| f["text"].as_str())
        .collect()
}

/// The types of `frames`.
pub fn types(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|f| f["type"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// The platform's handshake, as in the reference fixtures, with `name` as a variable.
pub fn init_frame(name: &str) -> Value {
    json!({
        "type": "system.init",
        "timestamp": "2030-01-02T03:04:00.000000",
        "version": "1.0",
        "session_context": {
            "initial_variables": {"name": name},
            "conversation_type": "webcall",
            "caller": null
        },
        "output_agent_settings": {"interruptible": true}
    })
}

pub fn llm_request(words: &str) -> Value {
    json!({"type": "system.llm.request", "messages": [{"role": "user", "content": words}]})
}

/// What the test crew answers `words` on a call whose `name` variable is `name`.
pub fn expected_answer(name: &str, words: &str) -> String {
    format!("Hello {name}, you said: {words}")
}

/// An output agent that streams the answer of a scripted model.
pub struct EchoAgent {
    context: Context,
    tool_loop: ToolLoop,
}

impl OutputAgent for EchoAgent {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }

    fn generate_response(&mut self) -> TurnStream<'_> {
        self.tool_loop.run(&mut self.context)
    }
}

/// The test crew, answering word by word with `chunk_delay` between pieces.
pub fn echo_crew(setup: &SessionSetup, chunk_delay: Duration) -> Crew {
    let name = setup
        .initial_variables()
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("stranger")
        .to_owned();
    let llm = ScriptedLlm::from_fn(move |request| {
        let words = request
            .messages
            .iter()
            .rev()
            .find_map(|message| match message {
                Message::User { content } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        Reply::text(expected_answer(&name, &words))
    })
    .with_chunk_delay(chunk_delay);
    let agent = EchoAgent {
        context: Context::with_system("You echo."),
        tool_loop: ToolLoop::new(Arc::new(llm), Arc::new(ToolRegistry::new())),
    };
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new("echo", agent));
    crew
}

/// Setup code building [`echo_crew`] without delays.
pub async fn echo_setup(setup: SessionSetup) -> Result<Crew, Infallible> {
    Ok(echo_crew(&setup, Duration::ZERO))
}

/// The error of an upgrade to `config`'s URL that must be refused.
pub async fn refusal_with(mut config: PlatformConfig) -> PlatformError {
    config.timeouts.connect = WAIT;
    RawSocket::connect(&config)
        .await
        .expect_err("the upgrade is refused")
}

/// The error of an upgrade to `url` that must be refused.
pub async fn refusal(url: &str) -> PlatformError {
    refusal_with(PlatformConfig::new(url)).await
}

/// Whether `error` is an HTTP refusal of the upgrade with `status`.
pub fn refused_with(error: &PlatformError, status: u16) -> bool {
    matches!(error, PlatformError::Refused { status: refused } if *refused == status)
}

/// The tasks alive on this test's runtime: a baseline taken before a call must be reached
/// again once it has hung up, or something was left running.
pub fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}
