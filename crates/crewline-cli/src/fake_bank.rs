//! `crewline fake-bank`: the testkit's fake bank ([`crewline_testkit::bank`]) as a process, for
//! `deploy/test/chaos.sh`: it executes transfers, dedupes them by idempotency key and counts
//! the ones executed twice (`GET /stats`).

use std::{
    io::Write,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    time::Duration,
};

use clap::Args;
use crewline_testkit::bank::FakeBank;

/// The options of `crewline fake-bank`.
#[derive(Debug, Clone, Args)]
pub struct FakeBankArgs {
    /// The port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 18002)]
    pub port: u16,
    /// The address to bind (loopback by default).
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub host: IpAddr,
    /// How long booking a transfer takes, in ms (the window a crash can fall into).
    #[arg(long, default_value_t = 300)]
    pub delay_ms: u64,
    /// Keys and distinct transfers remembered at most; new ones beyond are refused (503).
    #[arg(long, default_value_t = 1_000_000)]
    pub max_entries: usize,
}

/// Serves the bank until Ctrl-C or SIGTERM, writing its address to `out` once it listens.
pub async fn run_cli(
    args: FakeBankArgs,
    mut out: impl Write,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let bank = FakeBank::new()
        .with_delay(Duration::from_millis(args.delay_ms))
        .with_max_entries(args.max_entries)
        .spawn(SocketAddr::new(args.host, args.port))
        .await?;
    writeln!(
        out,
        "fake bank listening on {} (POST /transfers, GET /stats); Ctrl-C stops",
        bank.url()
    )?;
    out.flush()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        stopped = tokio::signal::ctrl_c() => stopped?,
        _ = term.recv() => {}
    }
    let stats = bank.stats();
    tracing::info!(
        requested = stats.requested,
        executed = stats.executed,
        duplicated = stats.duplicated,
        "fake bank stopping"
    );
    bank.shutdown(Duration::from_secs(2)).await;
    Ok(())
}
