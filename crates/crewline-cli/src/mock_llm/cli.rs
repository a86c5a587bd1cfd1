//! `crewline mock-llm`: the mock served from the command line.

use std::{
    io::Write,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use clap::{Args, ValueEnum};

use crewline_testkit::mock_llm::{Fault, FaultSchedule, MockLlm, MockTls, RunningMockLlm, Script};

/// The faults, for `crewline mock-llm --help`.
const FAULTS_HELP: &str = "\
Faults (--fault, --fault-schedule, the x-mock-fault header, a [[mock:FAULT]] marker in the last
user message; a request's own fault wins over the server's):
  down              the connection is reset, no answer (a provider that is down)
  503, 500, NNN     that HTTP status before any byte
  429:SECS, NNN:SECS  the same with a Retry-After: SECS header
  stall:MS          no byte for MS ms, then the answer (default 10 minutes)
  slow:MS           a pause of MS ms before every event
  cut, cut:N        the stream broken off after N events (default half)
  cut:role          broken after the role event: no text, no tool-call delta
  cut:tool          broken inside the first tool call (header and a fragment sent)
  cut:text, cut:text:N  broken after N text deltas (default 1)

A schedule is a comma-separated list of `FAULT for DURATION` phases (`ok` for no fault;
durations 500ms, 20s, 2m); the last may have no `for` and lasts for ever; after the last timed
phase the server is healthy. Example, an outage then a slow spell then recovery:
  crewline mock-llm --fault-schedule \"down for 20s, stall:3000 for 20s\"

HTTPS: --tls-cert and --tls-key (PEM) serve TLS, ALPN offering h2 and http/1.1; the base URL
names localhost, so the certificate must (a client trusts its CA, e.g. with SSL_CERT_FILE).

Control: GET /_mock/stats (requests, connections accepted and open now, over TLS by protocol,
connections reset, requests per fault, the schedule's
phases with their start in Unix ms), POST /_mock/fault (body: a fault or `ok`),
POST /_mock/fault-schedule (body: a schedule, started at once), POST /_mock/script,
POST /_mock/reset, GET /_mock/requests.";

/// `--schedule-start`: when a fault schedule's clock starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ScheduleStart {
    /// At the first completion request (a crew's start-up, health checks and `/_mock/stats`
    /// do not eat into the first phase).
    #[default]
    FirstRequest,
    /// As soon as the server listens.
    Now,
}

/// The options of `crewline mock-llm`.
#[derive(Debug, Clone, Args)]
#[command(after_long_help = FAULTS_HELP)]
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
    /// Without --script: the first request of a turn calls the first tool the crew offers
    /// (arguments from its JSON schema; `get_weather` for Paris without tools), the next answers.
    #[arg(long)]
    pub tool: bool,
    /// Keep at most this many requests in the log (`GET /_mock/requests`); 0 keeps all.
    #[arg(long, default_value_t = 100_000)]
    pub record_limit: usize,
    /// Every request gets this fault (e.g. `down`, `503`, `429:2`, `stall:3000`, `slow:200`,
    /// `cut:role`); see the list below.
    #[arg(long, value_name = "FAULT", value_parser = parse_fault)]
    pub fault: Option<Fault>,
    /// Server-wide faults in timed phases, e.g. "down for 20s, stall:3000 for 20s" (down for
    /// 20 s, then 3 s to the first byte for 20 s, then healthy); see below.
    #[arg(long, value_name = "SCHEDULE", value_parser = parse_schedule, conflicts_with = "fault")]
    pub fault_schedule: Option<FaultSchedule>,
    /// When the schedule's clock starts.
    #[arg(long, value_enum, default_value_t)]
    pub schedule_start: ScheduleStart,
    /// Serve HTTPS with this certificate chain (PEM, the server's certificate first); needs
    /// --tls-key. ALPN offers h2 and http/1.1.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

fn parse_fault(text: &str) -> Result<Fault, String> {
    Fault::parse(text).ok_or_else(|| format!("`{text}` is not a fault (see --help)"))
}

fn parse_schedule(text: &str) -> Result<FaultSchedule, String> {
    FaultSchedule::parse(text).map_err(|e| e.to_string())
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
            Script::first_tool(self.chunks, delay)
        } else {
            Script::text(self.chunks, delay)
        })
    }
}

/// The mock these options describe, listening, with its faults set.
pub async fn start(
    args: &MockLlmArgs,
) -> Result<RunningMockLlm, Box<dyn std::error::Error + Send + Sync>> {
    let mut mock = MockLlm::new(args.script()?);
    if args.record_limit > 0 {
        mock = mock.with_record_limit(args.record_limit);
    }
    mock.set_fault(args.fault);
    if let Some(schedule) = args.fault_schedule.clone() {
        match args.schedule_start {
            ScheduleStart::FirstRequest => mock.arm_schedule(schedule),
            ScheduleStart::Now => mock.set_schedule(schedule),
        }
    }
    let addr = SocketAddr::new(args.host, args.port);
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let tls = MockTls::from_pem_files(cert, key)?;
            Ok(mock.spawn_tls(addr, &tls).await?)
        }
        _ => Ok(mock.spawn(addr).await?),
    }
}

/// Serves the mock until Ctrl-C, writing its address to `out` once it listens.
pub async fn run(
    args: MockLlmArgs,
    mut out: impl Write,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let running = start(&args).await?;
    writeln!(
        out,
        "mock LLM listening on {}://{} (OpenAI base URL {}); Ctrl-C stops",
        if running.is_tls() { "https" } else { "http" },
        running.addr(),
        running.base_url()
    )?;
    if let Some(fault) = args.fault {
        writeln!(out, "every request gets the fault `{fault}`")?;
    }
    if let Some(schedule) = &args.fault_schedule {
        let start = match args.schedule_start {
            ScheduleStart::FirstRequest => "from the first completion request",
            ScheduleStart::Now => "from now",
        };
        writeln!(out, "fault schedule `{schedule}`, {start}")?;
    }
    out.flush()?;
    tokio::signal::ctrl_c().await?;
    running.shutdown(Duration::from_secs(2)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use crewline_testkit::mock_llm::Fault;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        mock: MockLlmArgs,
    }

    fn parse(args: &[&str]) -> Result<MockLlmArgs, clap::Error> {
        let all = std::iter::once("mock-llm").chain(args.iter().copied());
        Cli::try_parse_from(all).map(|cli| cli.mock)
    }

    #[tokio::test]
    async fn a_fault_or_a_schedule_is_set_on_the_server() {
        let args = parse(&["--port", "0", "--fault", "429:2"]).unwrap();
        let running = start(&args).await.unwrap();
        assert_eq!(
            running.mock().fault(),
            Some(Fault::StatusRetryAfter {
                status: 429,
                secs: 2
            })
        );

        let args = parse(&[
            "--port",
            "0",
            "--fault-schedule",
            "down for 20s, stall:3000 for 20s",
        ])
        .unwrap();
        let armed = start(&args).await.unwrap();
        let schedule = armed.mock().stats().schedule.unwrap();
        // Waiting for the first request: no fault yet.
        assert_eq!(schedule.started_unix_ms, None);
        assert_eq!(armed.mock().fault(), None);
        assert_eq!(schedule.phases[1].fault, "stall:3000");

        let args = parse(&[
            "--port",
            "0",
            "--fault-schedule",
            "down for 20s",
            "--schedule-start",
            "now",
        ])
        .unwrap();
        let now = start(&args).await.unwrap();
        assert_eq!(now.mock().fault(), Some(Fault::Down));
    }

    #[tokio::test]
    async fn tls_needs_both_files_and_names_one_it_cannot_read() {
        assert!(parse(&["--tls-cert", "cert.pem"]).is_err());
        assert!(parse(&["--tls-key", "key.pem"]).is_err());
        let args = parse(&[
            "--port",
            "0",
            "--tls-cert",
            "/nonexistent/cert.pem",
            "--tls-key",
            "/nonexistent/key.pem",
        ])
        .unwrap();
        let error = start(&args).await.unwrap_err().to_string();
        assert!(error.contains("/nonexistent/cert.pem"), "{error}");
    }

    #[test]
    fn the_tool_script_calls_the_requests_own_tool() {
        let script = parse(&["--tool"]).unwrap().script().unwrap();
        let body = serde_json::json!({
            "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]}}}]
        });
        let reply = script.pick(0, &body).for_request(&body).unwrap();
        assert_eq!(reply.tool_calls[0].name, "get_weather");
        assert_eq!(
            reply.tool_calls[0].arguments_chunks,
            [r#"{"city":"Paris"}"#]
        );
    }

    #[test]
    fn bad_faults_and_schedules_are_refused_with_the_reason() {
        let error = parse(&["--fault", "boom"]).unwrap_err().to_string();
        assert!(error.contains("`boom` is not a fault"), "{error}");
        let error = parse(&["--fault-schedule", "down for 20"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("`20` is not a duration"), "{error}");
        assert!(parse(&["--fault", "503", "--fault-schedule", "down for 1s"]).is_err());
    }
}
