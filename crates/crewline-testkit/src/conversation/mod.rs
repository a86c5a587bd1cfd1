//! Scripted conversations against a crew, with assertions on what came out: the way a crew
//! author tests a crew (as livekit-agents users run an agent session in a test).
//!
//! [`TestCrew`] serves the crew a setup function builds on 127.0.0.1 (a free port), or points
//! at a crew already running at a URL; [`TestCall`] is one call to it, driven turn by turn as
//! the voice platform would; each turn comes back as a [`TurnRecord`]: the spoken text (the
//! chunks joined), the tool calls with their arguments and results (from the tool-log frames),
//! the hand-off (`end_call`, `transfer_call`) and the raw frames, with `assert_*` methods whose
//! failure messages show the expected and the actual turn.
//!
//! [`TestCrew::serve`] serves the crew through a real socket: the server, the session and the
//! wire encoding are the ones the platform meets, so a test passes for the same reasons a
//! call does. [`TestCrew::in_process`] runs the same session in the test's process with no
//! socket and no port (the frames still go through the wire encoding), for tests that need
//! no server around the crew; the calls, the records and their assertions are the same.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//!
//! use crewline::{agent::LoopAgent, ToolLoop, prelude::*, tool::ToolRegistry};
//! use crewline_testkit::{ScriptedLlm, ScriptedReply as Reply};
//! use crewline_testkit::TestCrew;
//!
//! fn greeter(_setup: &SessionSetup) -> Result<Crew, std::convert::Infallible> {
//!     let llm = ScriptedLlm::new([Reply::text("Hello! How can I help?")]);
//!     let tool_loop = ToolLoop::new(Arc::new(llm), Arc::new(ToolRegistry::new()));
//!     let mut crew = Crew::new();
//!     crew.add_node(OutputNode::new("greeter", LoopAgent::new("Greet the caller.", tool_loop)));
//!     Ok(crew)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), crewline_testkit::TestkitError> {
//! let crew = TestCrew::serve(greeter).await?;
//! let mut call = crew.call().await?;
//! call.say("Hi").await?
//!     .assert_text("Hello! How can I help?")
//!     .assert_no_tool_calls();
//! call.hang_up().await?;
//! # Ok(()) }
//! ```

mod record;

use std::{net::SocketAddr, sync::Arc};

use crewline::session::CrewSetup;
use crewline_server::{CrewServer, ServerHandle};
use serde_json::Value;
use tokio::{net::TcpListener, task::JoinHandle};

pub use record::{ToolCallCheck, TurnRecord};

use crate::platform::{CrewFrame, PlatformClient, PlatformConfig, PlatformError, SetupFn};

/// Why a scripted conversation could not run (assertion failures panic instead, as in any
/// test).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// The test server could not bind 127.0.0.1.
    #[error("could not serve the crew on 127.0.0.1")]
    Bind(#[source] std::io::Error),
    /// The platform client failed: connecting, the handshake, or a turn (a timeout, a closed
    /// connection).
    #[error(transparent)]
    Platform(#[from] PlatformError),
}

/// A crew under test: served by this process on 127.0.0.1, run in this process with no
/// socket, or running elsewhere at a URL. The calls and the records are the same in each.
///
/// A served crew stops when this value is dropped.
///
/// # Examples
///
/// A crew already running (started by the test, or by another process):
///
/// ```no_run
/// # async fn run() -> Result<(), crewline_testkit::TestkitError> {
/// let crew = crewline_testkit::TestCrew::at("ws://127.0.0.1:8080/ws");
/// let mut call = crew.call().await?;
/// call.say("What's the weather in Paris?").await?.assert_text_contains("Paris");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TestCrew {
    target: Target,
}

/// Where a [`TestCrew`]'s calls go.
enum Target {
    /// A crew running at this URL.
    At(String),
    /// A crew this value serves on 127.0.0.1.
    Served(Served),
    /// A crew run in this process, one session per call.
    InProcess(SetupFn),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::At(url) => f.debug_tuple("At").field(url).finish(),
            Self::Served(served) => f.debug_tuple("Served").field(served).finish(),
            Self::InProcess(_) => f.write_str("InProcess"),
        }
    }
}

/// The server of a crew served by [`TestCrew`].
#[derive(Debug)]
struct Served {
    url: String,
    addr: SocketAddr,
    handle: ServerHandle,
    task: JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.handle.shutdown();
        self.task.abort();
    }
}

/// The URL a call's [`PlatformConfig`] holds for an in-process crew, which is not used.
const IN_PROCESS_URL: &str = "in-process:";

impl TestCrew {
    /// Serves the crew that `setup` builds for each call, on 127.0.0.1 (a free port), with
    /// the server's default settings.
    ///
    /// `setup` is what the crew author hands to `CrewServer::new` (an
    /// [`Agent`](crewline::Agent), or a function of the call's handshake returning the crew,
    /// a `Result` or a future of either; see [`CrewSetup`]): an error is a rejected handshake.
    pub async fn serve<M>(setup: impl CrewSetup<M>) -> Result<Self, TestkitError> {
        Self::serve_server(CrewServer::new(setup)).await
    }

    /// Runs the crew that `setup` builds for each call in this process: no server, no
    /// socket, no port. Each call is a [`Session`](crewline::Session) fed the frames the
    /// platform would send, through the wire encoding both ways, so a test's records are
    /// the ones [`TestCrew::serve`] gives for the same conversation.
    ///
    /// `setup` is the same builder [`TestCrew::serve`] takes; an error (or a panic) in it
    /// rejects the call's handshake with the server's message. What only a server does
    /// (auth, limits, keepalive pings, draining) needs [`TestCrew::serve_server`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use crewline::{agent::LoopAgent, ToolLoop, prelude::*, tool::ToolRegistry};
    /// use crewline_testkit::{ScriptedLlm, ScriptedReply as Reply, TestCrew};
    ///
    /// fn greeter(_setup: &SessionSetup) -> Result<Crew, std::convert::Infallible> {
    ///     let llm = ScriptedLlm::new([Reply::text("Hello! How can I help?")]);
    ///     let tool_loop = ToolLoop::new(Arc::new(llm), Arc::new(ToolRegistry::new()));
    ///     let mut crew = Crew::new();
    ///     crew.add_node(OutputNode::new("greeter", LoopAgent::new("Greet.", tool_loop)));
    ///     Ok(crew)
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), crewline_testkit::TestkitError> {
    /// let crew = TestCrew::in_process(greeter);
    /// let mut call = crew.call().await?;
    /// call.say("Hi").await?.assert_text("Hello! How can I help?");
    /// call.hang_up().await?;
    /// # Ok(()) }
    /// ```
    pub fn in_process<M>(setup: impl CrewSetup<M>) -> Self {
        Self {
            target: Target::InProcess(crate::platform::shared_setup(setup)),
        }
    }

    /// Serves `server` (a crew server configured by the test: a token, limits, an async
    /// setup) on 127.0.0.1, a free port.
    pub async fn serve_server(server: CrewServer) -> Result<Self, TestkitError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(TestkitError::Bind)?;
        let addr = listener.local_addr().map_err(TestkitError::Bind)?;
        let handle = server.handle();
        let task = tokio::spawn(async move {
            if let Err(error) = server.serve(listener).await {
                tracing::warn!(error = %crewline::types::ErrorChain(&error), "the test crew's server stopped");
            }
        });
        Ok(Self {
            target: Target::Served(Served {
                url: format!("ws://{addr}/ws"),
                addr,
                handle,
                task,
            }),
        })
    }

    /// A crew running at `url` (`ws://host:port/ws`).
    pub fn at(url: impl Into<String>) -> Self {
        Self {
            target: Target::At(url.into()),
        }
    }

    /// The crew's WebSocket URL (`None` for a crew run in process).
    pub fn url(&self) -> Option<&str> {
        match &self.target {
            Target::At(url) | Target::Served(Served { url, .. }) => Some(url),
            Target::InProcess(_) => None,
        }
    }

    /// The address the served crew listens on (`None` for a crew given by URL or run in
    /// process).
    pub fn addr(&self) -> Option<SocketAddr> {
        match &self.target {
            Target::Served(served) => Some(served.addr),
            _ => None,
        }
    }

    /// Whether the calls run in this process ([`TestCrew::in_process`]).
    pub fn is_in_process(&self) -> bool {
        matches!(self.target, Target::InProcess(_))
    }

    /// The call settings [`TestCrew::call`] uses: a web call to this crew with the platform
    /// client's defaults; change them and pass them to [`TestCrew::call_with`].
    pub fn config(&self) -> PlatformConfig {
        PlatformConfig::new(self.url().unwrap_or(IN_PROCESS_URL))
    }

    /// Starts a call with the default settings (a web call, interruptible).
    pub async fn call(&self) -> Result<TestCall, TestkitError> {
        self.call_with(self.config()).await
    }

    /// Starts a call with `config` (a token, call variables, the conversation type, the
    /// timeouts that bound every wait). For a crew run in process, `config.url` and the
    /// token are not used.
    pub async fn call_with(&self, config: PlatformConfig) -> Result<TestCall, TestkitError> {
        let client = match &self.target {
            Target::InProcess(setup) => {
                PlatformClient::connect_in_process(config, Arc::clone(setup)).await?
            }
            _ => PlatformClient::connect(config).await?,
        };
        Ok(TestCall { client })
    }
}

/// One call to a crew under test, driven turn by turn as the voice platform would.
///
/// Every wait is bounded by the call's [`Timeouts`](crate::platform::Timeouts): a crew that
/// stops answering fails the turn with [`PlatformError::Timeout`] instead of hanging the test.
#[derive(Debug)]
pub struct TestCall {
    client: PlatformClient,
}

impl TestCall {
    /// Says `words` as the user and waits for the crew's whole turn.
    pub async fn say(&mut self, words: &str) -> Result<TurnRecord, TestkitError> {
        let summary = self.client.user_turn(words)?.finish().await?;
        Ok(TurnRecord::new(summary))
    }

    /// Says `words`, then barges in (`system.control.interrupt`) once the crew has streamed
    /// `after_chunks` chunks of its answer (at once for 0), and waits for the turn to end.
    ///
    /// The record's [`TurnRecord::assert_interrupted`] checks that the crew fell silent.
    pub async fn say_and_barge_in(
        &mut self,
        words: &str,
        after_chunks: usize,
    ) -> Result<TurnRecord, TestkitError> {
        let mut turn = self.client.user_turn(words)?;
        let mut chunks = 0;
        while chunks < after_chunks {
            match turn.next().await? {
                Some(frame) if matches!(frame.frame, CrewFrame::Chunk { .. }) => chunks += 1,
                Some(_) => {}
                None => break,
            }
        }
        Ok(TurnRecord::new(turn.interrupt().await?))
    }

    /// The conversation as the platform keeps it: the user's and the assistant's turns, as
    /// OpenAI-style messages.
    pub fn conversation(&self) -> &[Value] {
        self.client.messages()
    }

    /// The platform client underneath, for what the scripted calls do not cover: sending raw
    /// events, reading frames between turns, a turn read frame by frame.
    pub fn client(&mut self) -> &mut PlatformClient {
        &mut self.client
    }

    /// Ends the call as the platform does (a close frame) and waits for the crew to close.
    pub async fn hang_up(self) -> Result<(), TestkitError> {
        Ok(self.client.close().await?)
    }
}
