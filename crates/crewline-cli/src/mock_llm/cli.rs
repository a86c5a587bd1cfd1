//! `crewline mock-llm`: the mock served from the command line.

use std::{
    io::Write,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use clap::Args;

use crewline_testkit::mock_llm::{MockLlm, Script};

/// The options of `crewline mock-llm`.
#[derive(Debug, Clone, Args)]
pub struct MockLlmArgs {
    /// The port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 18001)]
    pub port: u16,
    /// The address to bind (loopback by default).
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub host: IpAddr,
    /// A script file in the format of `reference/mock_llm.py` (`{"replies": [...]}`).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Without --script: each text reply has this many chunks.
    #[arg(long, default_value_t = 8)]
    pub chunks: usize,
    /// Without --script: the pause before each chunk, in ms.
    #[arg(long, default_value_t = 0)]
    pub chunk_delay_ms: u64,
    /// Without --script: the first request of a turn calls `get_weather`, the next answers.
    #[arg(long)]
    pub tool: bool,
    /// Keep at most this many requests in the log (`GET /_mock/requests`); 0 keeps all.
    #[arg(long, default_value_t = 100_000)]
    pub record_limit: usize,
}

impl MockLlmArgs {
    /// The script these options describe.
    pub fn script(&self) -> Result<Script, Box<dyn std::error::Error + Send + Sync>> {
        if let Some(path) = &self.script {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            return Ok(Script::from_json_str(&text)?);
        }
        let delay = Duration::from_millis(self.chunk_delay_ms);
        Ok(if self.tool {
            Script::weather_tool(self.chunks, delay)
        } else {
            Script::text(self.chunks, delay)
        })
    }
}

/// Serves the mock until Ctrl-C, writing its address to `out` once it listens.
pub async fn run(
    args: MockLlmArgs,
    mut out: impl Write,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut mock = MockLlm::new(args.script()?);
    if args.record_limit > 0 {
        mock = mock.with_record_limit(args.record_limit);
    }
    let running = mock.spawn(SocketAddr::new(args.host, args.port)).await?;
    writeln!(
        out,
        "mock LLM listening on http://{} (OpenAI base URL {}); Ctrl-C stops",
        running.addr(),
        running.base_url()
    )?;
    out.flush()?;
    tokio::signal::ctrl_c().await?;
    running.shutdown(Duration::from_secs(2)).await;
    Ok(())
}
