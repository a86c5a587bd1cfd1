//! `crewline`: talk to a crew the way the voice platform does.
//!
//! - `crewline chat`: an interactive text client for a running crew server.
//! - `crewline demo`: serves the example weather crew locally and drives a short call.
//! - `crewline mock-llm`: a scriptable OpenAI-compatible mock model.
//! - `crewline load`: a load test of a crew.
//! - `crewline playground`: serves the browser playground page for a crew.
//! - `crewline ledger pending`: lists the calls with effects that have no outcome (a crash).
//! - `crewline fake-bank`: a fake bank that counts transfers by idempotency key (chaos runs).
//! - `crewline eval`: runs scenario files against a crew; fails when a scenario fails.
//! - `crewline new`: writes a crew project of one's own from a template.
//!
//! Each command's flags and work live in the library (`crewline_cli::{chat, demo, mock_llm,
//! load, playground, ledger, fake_bank, eval, new}`); this file only parses and dispatches.

use std::{io::Write, process::ExitCode};

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc malloc: `crewline demo` (and its `--serve` mode), the mock LLM and the load generator allocate a
/// few small buffers per frame, and glibc's malloc/free were ~30 % of a served crew's CPU
/// under load (BENCHMARKS.md "Load").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "crewline",
    version,
    about = "crewline's command line: start a crew project, chat with a crew, run the demo crew, serve a mock model, load-test, eval, and the playground.",
    long_about = "crewline's command line: start a crew project of your own (new), chat with a crewline (or atoms) crew as the voice \
platform does (chat), run or serve the demo weather crew (demo), serve an OpenAI-compatible \
mock model with faults (mock-llm), load-test a crew (load), run eval scenarios (eval), serve \
the browser playground (playground), read the tool ledger (ledger) and serve a fake bank for \
chaos runs (fake-bank).\n\nPorts: --port is always a crew's (or the mock's) port, \
--playground-port the page's. --token defaults to CREWLINE_AUTH_TOKEN in every command."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Chat with a running crew over its WebSocket, as the platform would.
    Chat(crewline_cli::chat::ChatArgs),
    /// Serve the example weather crew on a local port and drive a short scripted call.
    Demo(crewline_cli::demo::DemoArgs),
    /// Serve a scriptable OpenAI-compatible mock LLM (the format of reference/mock_llm.py).
    MockLlm(crewline_cli::mock_llm::MockLlmArgs),
    /// Load-test a crew: N concurrent calls of K turns, latency percentiles and server usage.
    Load(crewline_cli::load::LoadArgs),
    /// Serve the browser playground for a crew on 127.0.0.1 and print its address.
    Playground(crewline_cli::playground::PlaygroundArgs),
    /// Read the tool ledger: `ledger pending` lists calls with effects that have no outcome.
    Ledger(crewline_cli::ledger::LedgerArgs),
    /// Serve a fake bank that executes transfers and counts them by idempotency key.
    FakeBank(crewline_cli::fake_bank::FakeBankArgs),
    /// Run scenario files against a crew: expectations, pass rates, budgets; JUnit and JSON.
    Eval(crewline_cli::eval::EvalArgs),
    /// Write a crew project of your own: the crew, a test, an eval, Dockerfile, Kubernetes, CI.
    New(crewline_cli::new::NewArgs),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never into a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result: Result<(), BoxError> = match cli.command {
        Command::Chat(args) => crewline_cli::chat::run_cli(args, std::io::stdout())
            .await
            .map(drop)
            .map_err(Into::into),
        Command::Demo(args) => crewline_cli::demo::run_cli(args, std::io::stdout())
            .await
            .map_err(Into::into),
        Command::MockLlm(args) => crewline_cli::mock_llm::run_cli(args, std::io::stdout()).await,
        Command::Load(args) => crewline_cli::load::run_cli(args, std::io::stdout()).await,
        Command::FakeBank(args) => crewline_cli::fake_bank::run_cli(args, std::io::stdout()).await,
        Command::Playground(args) => crewline_cli::playground::run_cli(args, std::io::stdout())
            .await
            .map_err(Into::into),
        Command::Ledger(args) => crewline_cli::ledger::run_cli(args, std::io::stdout())
            .await
            .map_err(Into::into),
        Command::Eval(args) => crewline_cli::eval::run_cli(args, std::io::stdout())
            .await
            .map_err(Into::into),
        Command::New(args) => {
            crewline_cli::new::run_cli(args, std::io::stdout()).map_err(Into::into)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(
                std::io::stderr(),
                "crewline: {}",
                crewline::types::ErrorChain(&*error)
            );
            ExitCode::FAILURE
        }
    }
}
