//! `crewline demo`: the weather crew served on a local port and a short scripted call driven
//! through a real WebSocket with the platform client: a greeting, a weather question with two
//! parallel tool calls, a barge-in while the answer streams, and a last turn. The crew is
//! `examples/voice_agent.rs`'s, the one the `voice_agent` example serves.
//!
//! With `--serve` it only serves the crew, for `crewline chat` to talk to; with `--playground`
//! it serves the crew and the browser playground (`crewline-playground`) for it, and prints the
//! page's address.

use std::{
    io,
    io::Write,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    time::Duration,
};

use crate::voice_agent::{self, WEATHER_SERVICE_DELAY, WeatherCrew};
use crewline::{agent::AgentError, llm::LlmError};
use crewline_playground::{Playground, PlaygroundError};
use crewline_server::{CrewServer, DEFAULT_PORT, ServeArgs, ServerError, model::ModelChoice};
use tokio::net::TcpListener;

use crewline_testkit::platform::{
    ClientStats, CrewFrame, PlatformClient, PlatformConfig, PlatformError, Timeouts, TurnSummary,
};

use crate::render::{TurnPrinter, ms};

/// How long the server gets to finish after the call, before it is stopped hard.
const SERVER_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// `crewline demo`'s command line.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// The scripted model's pause before each streamed piece, in ms.
    #[arg(long, default_value_t = 40)]
    pub chunk_delay_ms: u64,
    /// Use the scripted model even when OPENAI_API_KEY is set.
    #[arg(long)]
    pub scripted: bool,
    /// Instead of driving a call, serve the demo crew until Ctrl-C (to try `crewline chat`
    /// against it), on --host and --port.
    #[arg(long)]
    pub serve: bool,
    /// Serve the demo crew (as --serve does) and the browser playground for it on
    /// 127.0.0.1:--playground-port, and print the page's address; Ctrl-C stops both.
    #[arg(long, conflicts_with = "serve")]
    pub playground: bool,
    /// With --playground: the page's port on 127.0.0.1 (0: a free port).
    #[arg(long, default_value_t = crewline_playground::DEFAULT_PORT, requires = "playground")]
    pub playground_port: u16,
    /// With --serve or --playground: the crew's port (0: a free port with --playground).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// With --serve or --playground: where and with which token.
    #[command(flatten)]
    pub listen: ServeArgs,
}

impl DemoArgs {
    /// The demo's configuration from the flags.
    pub fn config(&self) -> DemoConfig {
        DemoConfig {
            chunk_delay: Duration::from_millis(self.chunk_delay_ms),
            model: if self.scripted {
                ModelChoice::Scripted
            } else {
                ModelChoice::FromEnv
            },
            ..DemoConfig::default()
        }
    }
}

/// Runs `crewline demo`: drives the scripted call, or with `--serve` serves the crew until
/// Ctrl-C; writes what happens to `out`.
pub async fn run_cli(args: DemoArgs, mut out: impl Write) -> Result<(), DemoError> {
    let config = args.config();
    if args.playground {
        return serve_with_playground(&args, &config, out).await;
    }
    if !args.serve {
        run_demo(config, out).await?;
        return Ok(());
    }
    let (crew, description) = demo_crew(&config)?;
    // Bound before anything is printed: the line names the port really listened on (`--port
    // 0` picks one), and a port already taken fails without a "serving" line first.
    let (listener, bound) = bind_crew(&args).await?;
    writeln!(
        out,
        "serving the demo weather crew ({description}) on ws://{bound}/ws; Ctrl-C stops"
    )?;
    out.flush()?;
    args.listen
        .apply(CrewServer::new(crew.agent().clone()), bound.port())
        .serve_with_shutdown(listener, crewline_server::shutdown_signal())
        .await
        .map_err(|error| DemoError::Serve(Box::new(error)))
}

/// The crew's listener on `--host`:`--port`, and the address it really got (`--port 0`).
async fn bind_crew(args: &DemoArgs) -> Result<(TcpListener, SocketAddr), DemoError> {
    let addr = args.listen.addr(args.port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| DemoError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| DemoError::Bind { addr, source })?;
    Ok((listener, bound))
}

/// `--playground`: the demo crew on `--host`:`--port` and the playground page for it on
/// 127.0.0.1:`--playground-port`, until Ctrl-C; writes both addresses to `out`.
async fn serve_with_playground(
    args: &DemoArgs,
    config: &DemoConfig,
    mut out: impl Write,
) -> Result<(), DemoError> {
    let (crew, description) = demo_crew(config)?;
    let (listener, bound) = bind_crew(args).await?;
    let crew_url = crew_url_for_page(bound);
    let page_listener = crewline_playground::listen(args.playground_port).await?;
    let page_addr = page_listener.local_addr().map_err(PlaygroundError::Serve)?;
    writeln!(
        out,
        "serving the demo weather crew ({description}) on {crew_url}"
    )?;
    writeln!(
        out,
        "{}",
        crate::playground::page_line(page_addr, &crew_url)
    )?;
    out.flush()?;
    let server = args
        .listen
        .apply(CrewServer::new(crew.agent().clone()), bound.port());
    let page = Playground::new(crew_url)
        .maybe_token(args.listen.token.clone())
        .serve(page_listener);
    tokio::select! {
        served = server.serve_with_shutdown(listener, crewline_server::shutdown_signal()) => {
            served.map_err(|error| DemoError::Serve(Box::new(error)))
        }
        served = page => served.map_err(DemoError::from),
    }
}

/// The demo crew `--serve` and `--playground` serve, and a line that says which model it runs.
fn demo_crew(config: &DemoConfig) -> Result<(WeatherCrew, String), DemoError> {
    let model = voice_agent::model(config.model, None, config.chunk_delay)?;
    Ok((
        WeatherCrew::new(model.llm, config.service_delay)?,
        model.description,
    ))
}

/// The crew's WebSocket address as the page on this machine reaches it: a crew listening on
/// every address (`0.0.0.0`, `::`) is reached on 127.0.0.1.
fn crew_url_for_page(bound: SocketAddr) -> String {
    let ip = if bound.ip().is_unspecified() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        bound.ip()
    };
    format!("ws://{}/ws", SocketAddr::new(ip, bound.port()))
}

/// How the demo runs.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoConfig {
    /// The scripted model's pause before each streamed piece.
    pub chunk_delay: Duration,
    /// Which model the crew uses.
    pub model: ModelChoice,
    /// The pretend weather service's latency per call.
    pub service_delay: Duration,
    /// Barge in once this many chunks of the long answer have arrived.
    pub interrupt_after_chunks: usize,
    /// The platform client's timeouts.
    pub timeouts: Timeouts,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            chunk_delay: Duration::from_millis(40),
            model: ModelChoice::FromEnv,
            service_delay: WEATHER_SERVICE_DELAY,
            interrupt_after_chunks: 3,
            timeouts: Timeouts::default(),
        }
    }
}

/// The demo's call, one step at a time: (label, what the caller says, barge in?).
pub const SCRIPT: [(&str, &str, bool); 4] = [
    ("greeting", "Hi there!", false),
    (
        "weather: two cities, tools in parallel",
        "What's the weather in Paris and Tokyo?",
        false,
    ),
    ("barge-in", "Tell me a long story about the weather.", true),
    ("final turn", "Sorry, never mind. Thanks, bye!", false),
];

/// One turn of the demo call.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoTurn {
    /// What the step shows.
    pub label: String,
    /// What the caller said.
    pub user: String,
    /// Everything that happened.
    pub summary: TurnSummary,
}

/// What the demo call did.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoReport {
    /// The crew's WebSocket address (a free local port).
    pub url: String,
    /// The model used.
    pub model: String,
    /// From connecting to `agent.ready`.
    pub connect_time: Duration,
    /// The turns, in order.
    pub turns: Vec<DemoTurn>,
    /// Echoes of the platform's own events skipped, undecodable and stray frames.
    pub stats: ClientStats,
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// The model could not be set up.
    #[error("could not set up the model")]
    Llm(#[from] LlmError),
    /// The crew's tools could not be registered.
    #[error("could not register the crew's tools")]
    Agent(#[from] AgentError),
    /// The crew's address could not be bound.
    #[error("could not listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The server stopped with an error.
    #[error("the crew server failed: {0}")]
    Server(String),
    /// `--playground`: the page could not be served.
    #[error(transparent)]
    Playground(#[from] PlaygroundError),
    /// `--serve`: the crew server could not start or failed.
    #[error("the crew server failed")]
    Serve(#[source] Box<ServerError>),
    /// The call failed.
    #[error(transparent)]
    Platform(#[from] PlatformError),
    /// Writing the output failed.
    #[error("could not write the output")]
    Io(#[from] io::Error),
}

/// Serves the weather crew on 127.0.0.1 (a free port), drives the scripted call, prints it
/// to `out`, stops the server, and returns what happened.
pub async fn run_demo<W: Write>(config: DemoConfig, out: W) -> Result<DemoReport, DemoError> {
    let (crew, model) = demo_crew(&config)?;
    let server = CrewServer::new(crew.agent().clone()).drain_timeout(Duration::from_secs(2));
    let handle = server.handle();
    let any_port = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
    let listener = TcpListener::bind(any_port)
        .await
        .map_err(|source| DemoError::Bind {
            addr: any_port,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| DemoError::Bind {
        addr: any_port,
        source,
    })?;
    let mut serving = tokio::spawn(server.serve(listener));

    let url = format!("ws://{addr}/ws");
    let call = tokio::select! {
        result = drive_call(&url, &model, &config, out) => result,
        // The server ending first is a failure; the call cannot go on without it.
        ended = &mut serving => Err(DemoError::Server(match ended {
            Ok(Ok(())) => "it stopped during the call".to_owned(),
            Ok(Err(error)) => error.to_string(),
            Err(error) => error.to_string(),
        })),
    };

    handle.shutdown();
    if !serving.is_finished() {
        match tokio::time::timeout(SERVER_STOP_TIMEOUT, &mut serving).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => {
                tracing::warn!(error = %crewline::types::ErrorChain(&error), "the crew server stopped with an error")
            }
            Ok(Err(error)) => {
                tracing::warn!(error = %crewline::types::ErrorChain(&error), "the crew server task failed")
            }
            Err(_) => {
                tracing::warn!("the crew server did not stop in time; stopping it hard");
                serving.abort();
            }
        }
    }
    call
}

async fn drive_call<W: Write>(
    url: &str,
    model: &str,
    config: &DemoConfig,
    out: W,
) -> Result<DemoReport, DemoError> {
    let mut printer = TurnPrinter::new(out);
    printer.line(&format!(
        "crewline demo: the weather crew on {url} ({model})"
    ))?;
    let mut platform = PlatformConfig::new(url);
    platform.timeouts = config.timeouts;
    platform
        .initial_variables
        .insert("name".to_owned(), "Ada".into());
    let connecting = tokio::time::Instant::now();
    let mut client = PlatformClient::connect(platform).await?;
    let connect_time = connecting.elapsed();
    printer.line(&format!(
        "system.init sent, agent.ready after {}",
        ms(connect_time)
    ))?;

    let mut turns = Vec::with_capacity(SCRIPT.len());
    for (label, user, barge_in) in SCRIPT {
        printer.line("")?;
        printer.line(&format!("── {label} ──"))?;
        printer.line(&format!("you>   {user}"))?;
        let mut turn = client.user_turn(user)?;
        let mut chunks = 0;
        let summary = loop {
            let Some(frame) = turn.next().await? else {
                break turn.finish().await?;
            };
            printer.frame(&frame)?;
            if matches!(frame.frame, CrewFrame::Chunk { .. }) {
                chunks += 1;
                if barge_in && chunks >= config.interrupt_after_chunks {
                    // The caller starts talking over the agent.
                    break turn.interrupt().await?;
                }
            }
        };
        printer.summary(&summary)?;
        if barge_in && summary.interrupt.is_none() {
            printer.line("       (the answer ended before the barge-in)")?;
        }
        turns.push(DemoTurn {
            label: label.to_owned(),
            user: user.to_owned(),
            summary,
        });
    }

    let stats = client.stats();
    client.close().await?;
    let tools: usize = turns.iter().map(|t| t.summary.tools.len()).sum();
    let leaked: usize = turns
        .iter()
        .filter_map(|t| t.summary.interrupt.as_ref())
        .map(|r| r.leaked_chunks.len())
        .sum();
    printer.line("")?;
    printer.line(&finished_line(turns.len(), tools, leaked))?;
    Ok(DemoReport {
        url: url.to_owned(),
        model: model.to_owned(),
        connect_time,
        turns,
        stats,
    })
}

/// The demo's last line. The chunks that matter are those the crew sent after an interrupted
/// turn's end (it must fall silent at once); the echoes of the platform's own events that the
/// crew sends back, as the reference does, are protocol bookkeeping and not shown.
fn finished_line(turns: usize, tools: usize, leaked: usize) -> String {
    let silence = match leaked {
        0 => "the crew fell silent at the barge-in".to_owned(),
        n => format!("the crew sent {n} chunks after the barge-in ended its turn"),
    };
    format!("demo finished: {turns} turns, {tools} tool calls, {silence}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_reaches_a_crew_on_every_address_through_loopback() {
        assert_eq!(
            crew_url_for_page(SocketAddr::from(([0, 0, 0, 0], 8080))),
            "ws://127.0.0.1:8080/ws"
        );
        assert_eq!(
            crew_url_for_page(SocketAddr::from(([127, 0, 0, 1], 4100))),
            "ws://127.0.0.1:4100/ws"
        );
    }

    #[test]
    fn the_finished_line_says_whether_the_crew_fell_silent_and_not_how_many_echoes() {
        let clean = finished_line(4, 2, 0);
        assert_eq!(
            clean,
            "demo finished: 4 turns, 2 tool calls, the crew fell silent at the barge-in"
        );
        assert!(!clean.contains("echo"), "{clean}");
        assert!(
            finished_line(4, 2, 3).contains("sent 3 chunks after the barge-in"),
            "a crew that talks on is named"
        );
    }
}
