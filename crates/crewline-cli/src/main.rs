//! `crewline`: talk to a crew the way the voice platform does.
//!
//! - `crewline chat`: an interactive text client for a running crew server.
//! - `crewline demo`: serves the example weather crew locally and drives a short call.

use std::{
    io::{IsTerminal, Write},
    process::ExitCode,
    time::Duration,
};

use clap::{Args, Parser, Subcommand, ValueEnum};
use crewline::protocol::{Caller, ConversationType};
use crewline_cli::{
    chat::{ChatOptions, banner, run_chat, run_voice_chat, spawn_line_reader},
    crew::{ModelChoice, WeatherCrew, demo_model},
    demo::{DemoConfig, run_demo},
    platform::{PlatformClient, PlatformConfig},
};
use crewline_server::CrewServer;
use serde_json::Value;

/// mimalloc instead of glibc malloc: `crewline demo` (and its `--serve` mode), the mock LLM and the load generator allocate a
/// few small buffers per frame, and glibc's malloc/free were ~30 % of a served crew's CPU
/// under load (BENCHMARKS.md "Load").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "crewline",
    version,
    about = "Talk to a crewline (or atoms crew) server like the voice platform does."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Chat with a running crew over its WebSocket, as the platform would.
    Chat(ChatArgs),
    /// Serve the example weather crew on a local port and drive a short scripted call.
    Demo(DemoArgs),
    /// Serve a scriptable OpenAI-compatible mock LLM (the format of reference/mock_llm.py).
    MockLlm(crewline_cli::mock_llm::MockLlmArgs),
    /// Load-test a crew: N concurrent calls of K turns, latency percentiles and server usage.
    Load(crewline_cli::load::LoadArgs),
}

#[derive(Debug, Args)]
struct ChatArgs {
    /// The crew's WebSocket address.
    #[arg(long, default_value = "ws://127.0.0.1:8080/ws")]
    url: String,
    /// Shared secret, sent as `Authorization: Bearer <token>`.
    #[arg(long)]
    token: Option<String>,
    /// The conversation type announced in `system.init`.
    #[arg(long = "type", default_value = "webcall", value_parser = parse_conversation_type)]
    conversation_type: ConversationType,
    /// A call variable, `key=value` (repeatable).
    #[arg(long = "var", value_parser = parse_var)]
    vars: Vec<(String, String)>,
    /// The caller's phone number (sent as `session_context.caller.user_number`).
    #[arg(long, value_name = "NUMBER")]
    caller: Option<String>,
    /// Tell the crew the agent may not be interrupted.
    #[arg(long)]
    not_interruptible: bool,
    /// Whether typing while a reply streams interrupts it (auto: when input is a terminal).
    #[arg(long, value_enum, default_value_t = BargeIn::Auto)]
    barge_in: BargeIn,
    /// The longest silence within a turn, in seconds.
    #[arg(long, default_value_t = 60)]
    frame_timeout_secs: u64,
    /// Speak the replies (espeak-ng) sentence by sentence as they stream, and report the time
    /// to first sentence and to first audio per turn.
    #[arg(long)]
    voice: bool,
    /// With --voice: write one WAV file per reply to this folder.
    #[arg(long, value_name = "DIR", requires = "voice")]
    out: Option<std::path::PathBuf>,
    /// With --voice: do not play the audio (only write it with --out).
    #[arg(long, requires = "voice")]
    mute: bool,
    /// With --voice: the espeak-ng voice, e.g. en-us, hi, cmn.
    #[arg(long, value_name = "NAME", requires = "voice")]
    espeak_voice: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BargeIn {
    Auto,
    On,
    Off,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// The scripted model's pause before each streamed piece, in ms.
    #[arg(long, default_value_t = 40)]
    chunk_delay_ms: u64,
    /// Use the scripted model even when OPENAI_API_KEY is set.
    #[arg(long)]
    scripted: bool,
    /// Instead of driving a call, serve the demo crew until Ctrl-C (to try `crewline chat`
    /// against it), on --host and --port.
    #[arg(long)]
    serve: bool,
    /// With --serve: the port to listen on.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// With --serve: where and with which token.
    #[command(flatten)]
    listen: crewline_server::ServeArgs,
}

fn parse_conversation_type(text: &str) -> Result<ConversationType, String> {
    serde_json::from_value(Value::String(text.to_owned())).map_err(|_| {
        "expected one of telephonyInbound, telephonyOutbound, chat, webcall, supervisor_agent"
            .to_owned()
    })
}

fn parse_var(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("expected key=value, got `{text}`")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Chat(args) => chat(args).await,
        Command::Demo(args) => demo(args).await,
        Command::MockLlm(args) => crewline_cli::mock_llm::run_cli(args, std::io::stdout()).await,
        Command::Load(args) => crewline_cli::load::run_cli(args, std::io::stdout()).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "crewline: {error}");
            ExitCode::FAILURE
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn chat(args: ChatArgs) -> Result<(), BoxError> {
    let mut config = PlatformConfig::new(args.url.clone());
    config.token = args.token;
    config.conversation_type = args.conversation_type;
    config.interruptible = !args.not_interruptible;
    config.caller = args.caller.map(|number| Caller {
        user_number: Some(number),
        agent_number: None,
        direction: Some(
            match args.conversation_type {
                ConversationType::TelephonyOutbound => "outbound",
                _ => "inbound",
            }
            .to_owned(),
        ),
        call_id: None,
        extra: serde_json::Map::new(),
    });
    config.timeouts.frame = Duration::from_secs(args.frame_timeout_secs.max(1));
    for (key, value) in args.vars {
        config.initial_variables.insert(key, Value::String(value));
    }
    let interactive = std::io::stdin().is_terminal();
    let options = ChatOptions {
        barge_in: match args.barge_in {
            BargeIn::Auto => interactive,
            BargeIn::On => true,
            BargeIn::Off => false,
        },
        echo_input: !interactive,
    };
    let mut out = std::io::stdout();
    let started = tokio::time::Instant::now();
    let mut client = PlatformClient::connect(config).await?;
    writeln!(out, "{}", banner(&args.url, started.elapsed()))?;
    let lines = spawn_line_reader(std::io::BufReader::new(std::io::stdin()));
    let outcome = if args.voice {
        let request = crewline_cli::voice::VoiceRequest {
            out_dir: args.out,
            play: !args.mute,
            espeak_voice: args.espeak_voice,
        };
        let (config, notes) = crewline_cli::voice::VoiceConfig::detect(request).await?;
        for note in notes {
            writeln!(out, "{note}")?;
        }
        let mut voice = crewline_cli::voice::Voice::new(config);
        run_voice_chat(&mut client, lines, &mut out, options, &mut voice).await?
    } else {
        run_chat(&mut client, lines, &mut out, options).await?
    };
    tracing::debug!(?outcome, stats = ?client.stats(), "chat ended");
    if let Err(error) = client.close().await {
        tracing::debug!(%error, "closing the call");
    }
    Ok(())
}

async fn demo(args: DemoArgs) -> Result<(), BoxError> {
    let config = DemoConfig {
        chunk_delay: Duration::from_millis(args.chunk_delay_ms),
        model: if args.scripted {
            ModelChoice::Scripted
        } else {
            ModelChoice::FromEnv
        },
        ..DemoConfig::default()
    };
    if args.serve {
        return serve_demo_crew(config, &args.listen, args.port).await;
    }
    run_demo(config, std::io::stdout()).await?;
    Ok(())
}

async fn serve_demo_crew(
    config: DemoConfig,
    listen: &crewline_server::ServeArgs,
    port: u16,
) -> Result<(), BoxError> {
    let addr = listen.addr(port);
    let (llm, model) = demo_model(config.model, config.chunk_delay)?;
    let crew = WeatherCrew::new(llm, config.service_delay)?;
    writeln!(
        std::io::stdout(),
        "serving the demo weather crew ({model}) on ws://{addr}/ws; Ctrl-C stops"
    )?;
    listen
        .apply(CrewServer::new(crew.setup_fn()), port)
        .run()
        .await?;
    Ok(())
}
