//! `crewline ledger pending`: the calls with effects whose outcome is unknown, read from a
//! JSON Lines ledger or a Redis ledger stream: what an operator reconciles after a crash (ask
//! the bank whether the transfer went through, by its idempotency key).
//!
//! One line per intent, oldest first: `time  scope/call  tool  key=…  arguments`. Text that
//! came from a model or a platform (ids, names) is printed with its control characters
//! escaped, so that no value can forge a line or move the terminal's cursor.

use std::{io, io::Write, path::PathBuf};

use crewline::tool::executor::ledger::{JsonlLedger, LedgerError, LedgerIntent};
use crewline_redis::{
    DEFAULT_LEDGER_MAX_LEN, DEFAULT_PREFIX, RedisConfig, RedisLedgerError, RedisStoreError,
};

/// `crewline ledger`'s command line.
#[derive(Debug, clap::Args)]
pub struct LedgerArgs {
    /// What to do with the ledger.
    #[command(subcommand)]
    pub command: LedgerCommand,
}

/// `crewline ledger`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LedgerCommand {
    /// List the intents with no outcome: calls with effects that may or may not have run.
    Pending(PendingArgs),
}

/// `crewline ledger pending`'s command line.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["file", "redis"])))]
pub struct PendingArgs {
    /// A JSON Lines ledger (its rotated files `PATH.1`, `PATH.2`… are read too).
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// The Redis holding the ledger stream (`redis://[user:password@]host:port[/db]`).
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// The key prefix of the crew's Redis keys (the stream is `<prefix>ledger`).
    #[arg(long, default_value = DEFAULT_PREFIX, requires = "redis")]
    pub prefix: String,
    /// The newest entries of the Redis stream read at most.
    #[arg(long, default_value_t = DEFAULT_LEDGER_MAX_LEN, requires = "redis")]
    pub limit: usize,
}

/// Why `crewline ledger` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerCliError {
    /// The ledger file could not be read.
    #[error("could not read the ledger file")]
    File(#[source] LedgerError),
    /// Redis could not be reached.
    #[error("could not connect to the ledger's Redis")]
    Connect(#[source] RedisStoreError),
    /// The Redis stream could not be read.
    #[error("could not read the ledger stream")]
    Stream(#[source] RedisLedgerError),
    /// Writing the output failed.
    #[error("could not write the output")]
    Io(#[source] io::Error),
}

/// Runs `crewline ledger`, writing to `out`.
pub async fn run_cli(args: LedgerArgs, out: impl Write) -> Result<(), LedgerCliError> {
    match args.command {
        LedgerCommand::Pending(args) => pending(args, out).await,
    }
}

/// Runs `crewline ledger pending`.
async fn pending(args: PendingArgs, mut out: impl Write) -> Result<(), LedgerCliError> {
    let intents = match (&args.file, &args.redis) {
        (Some(path), _) => JsonlLedger::pending(path).map_err(LedgerCliError::File)?,
        (None, Some(url)) => {
            let connection = RedisConfig::new(url.trim())
                .prefix(args.prefix.clone())
                .open()
                .await
                .map_err(LedgerCliError::Connect)?;
            let entries = crewline_redis::read_ledger(&connection, args.limit)
                .await
                .map_err(LedgerCliError::Stream)?;
            crewline::tool::executor::ledger::pending(entries)
        }
        // clap requires one of the two.
        (None, None) => Vec::new(),
    };
    for intent in &intents {
        writeln!(out, "{}", line(intent)).map_err(LedgerCliError::Io)?;
    }
    out.flush().map_err(LedgerCliError::Io)
}

/// The arguments shown per intent at most (the ledger has them whole).
const ARGUMENTS_SHOWN: usize = 160;

/// One intent's line: `time  scope/call  tool  key=…  arguments`.
pub fn line(intent: &LedgerIntent) -> String {
    let time = i64::try_from(intent.timestamp_ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || intent.timestamp_ms.to_string(),
            |time| time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        );
    let arguments = intent.arguments.to_string();
    let shown = crewline::types::prefix(&arguments, ARGUMENTS_SHOWN);
    let cut = if shown.len() < arguments.len() {
        "…"
    } else {
        ""
    };
    format!(
        "{time}  {}/{}  {}  key={}  {shown}{cut}",
        safe(&intent.scope),
        safe(&intent.call_id),
        safe(&intent.tool),
        intent.idempotency_key.as_deref().map_or("-".into(), safe),
    )
}

/// `text` with control characters escaped (`\n`, `\u{1b}`…).
fn safe(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_escapes_what_could_forge_a_line_and_cuts_long_arguments() {
        let intent = LedgerIntent {
            intent_id: "int_1".to_owned(),
            idempotency_key: None,
            scope: "call:c1\n2026-01-01T00:00:00.000Z  call:x/y  forged".to_owned(),
            call_id: "tc\u{1b}[2J".to_owned(),
            tool: "transfer_money".to_owned(),
            arguments: serde_json::json!({"memo": "m".repeat(500)}),
            timestamp_ms: 1_764_686_400_123,
        };
        let line = line(&intent);
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line}");
        assert!(
            line.starts_with("2025-12-02T14:40:00.123Z  call:c1\\n2026"),
            "{line}"
        );
        assert!(
            line.contains("  transfer_money  key=-  {\"memo\":\"mmm"),
            "{line}"
        );
        assert!(line.ends_with('…') && line.len() < 400, "{line}");
    }
}
