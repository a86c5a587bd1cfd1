//! The command-line pieces every example shares, for `clap`'s `#[command(flatten)]`: where to
//! serve ([`ServeCrewArgs`]) and which model to run on ([`ModelArgs`]), plus the examples' log
//! set-up ([`init_logs`]).
//!
//! ```
//! use clap::Parser;
//! use crewline_examples::args::ServeCrewArgs;
//!
//! /// Serves my crew on `/ws`.
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     crew: ServeCrewArgs,
//! }
//!
//! let args = Args::parse_from(["my_crew", "--port", "9000", "--scripted"]);
//! assert_eq!(args.crew.port, 9000);
//! assert!(args.crew.model.scripted);
//! ```

use std::{sync::Arc, time::Duration};

use crewline::{
    llm::{AfterText, Hedge, ScriptedLlm, fallback::SharedBreakers},
    prelude::{Crew, LlmClient, SessionSetup},
};
use crewline_server::{BoxError, CrewServer, ServeArgs};

use crate::model::{ChosenModel, Fallbacks, ModelChoice, choose};

/// The port the examples listen on unless `--port` says otherwise.
pub const DEFAULT_PORT: u16 = 8080;

/// `--model`, `--scripted`, `--llm-client` and the fallback flags: which model (or models)
/// the crew runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ModelArgs {
    /// The OpenAI model, used when OPENAI_API_KEY is set (default: $OPENAI_MODEL, else
    /// gpt-4o-mini). Without a key the crew runs on its scripted model, offline.
    #[arg(long)]
    pub model: Option<String>,
    /// Run on the crew's scripted model even when OPENAI_API_KEY is set.
    #[arg(long)]
    pub scripted: bool,
    /// Which client talks to the OpenAI-compatible server: crewline's own (the default) or
    /// async-openai's.
    #[arg(long = "llm-client", value_enum, default_value_t)]
    pub llm_client: LlmClientKind,
    /// Offer HTTP/2 to the model's server by ALPN (crewline's default client, over HTTPS):
    /// many calls' streams share a few connections. Off by default, as the client's.
    #[arg(long = "llm-http2")]
    pub llm_http2: bool,
    /// Another OpenAI-compatible server to fall back on when the model's fails (down, an
    /// error, 429, no first token in time, broken before it spoke); repeat for more, tried in
    /// order. Needs a real model (OPENAI_API_KEY set). With CREWLINE_REDIS_URL set, the
    /// replicas share which providers are down (their circuit breakers).
    #[arg(long = "fallback-base-url", value_name = "URL")]
    pub fallback_base_url: Vec<String>,
    /// The model at each --fallback-base-url, paired in order (default: the main model).
    #[arg(long = "fallback-model", value_name = "NAME")]
    pub fallback_model: Vec<String>,
    /// The environment variable holding the API key of each --fallback-base-url, paired in
    /// order (default: OPENAI_API_KEY), e.g. GROQ_API_KEY: each provider gets its own key.
    /// Give the variable's name, never the key itself; keys are never logged.
    #[arg(long = "fallback-api-key-env", value_name = "NAME")]
    pub fallback_api_key_env: Vec<String>,
    /// Hedge first tokens: when the provider asked has produced nothing after N ms, ask the
    /// next one too; the first to answer is heard, the other request is dropped (off by
    /// default; needs --fallback-base-url).
    #[arg(long, value_name = "N", conflicts_with = "hedge")]
    pub hedge_after_ms: Option<u64>,
    /// Hedge first tokens after a fixed N ms (as --hedge-after-ms), or `p95`: after each
    /// provider's measured 95th percentile time to its first token (at least 300 ms;
    /// `p95:MS` sets that floor), once 20 of its answers were measured.
    #[arg(long, value_name = "N|p95|p95:MS", value_parser = parse_hedge)]
    pub hedge: Option<Hedge>,
    /// When a provider fails after the caller heard some of its answer: `end` the turn with a
    /// short spoken excuse (the default), or `continue` on the next provider from what was
    /// said (never spoken twice). Needs --fallback-base-url.
    #[arg(long = "after-text", value_enum, value_name = "POLICY")]
    pub after_text: Option<AfterTextPolicy>,
}

/// The floor of `--hedge p95` when none is given.
pub const DEFAULT_P95_HEDGE_FLOOR: Duration = Duration::from_millis(300);

/// Reads `--hedge`: `N` (ms), `p95` or `p95:MS`.
fn parse_hedge(text: &str) -> Result<Hedge, String> {
    let text = text.trim();
    let millis = |ms: &str| {
        ms.trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("`{ms}` is not a number of milliseconds"))
    };
    if text.eq_ignore_ascii_case("p95") {
        return Ok(Hedge::P95 {
            floor: DEFAULT_P95_HEDGE_FLOOR,
        });
    }
    if let Some(floor) = text
        .strip_prefix("p95:")
        .or_else(|| text.strip_prefix("P95:"))
    {
        return Ok(Hedge::P95 {
            floor: millis(floor)?,
        });
    }
    millis(text)
        .map(Hedge::Fixed)
        .map_err(|error| format!("{error}: give N (ms), p95 or p95:MS"))
}

/// `--after-text`: what a turn does when its provider fails after text was spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AfterTextPolicy {
    /// End the turn with a short spoken excuse.
    End,
    /// Go on with the next provider from what was said.
    Continue,
}

impl From<AfterTextPolicy> for AfterText {
    fn from(policy: AfterTextPolicy) -> Self {
        match policy {
            AfterTextPolicy::End => AfterText::default(),
            AfterTextPolicy::Continue => AfterText::Continue,
        }
    }
}

/// `--llm-client`: which client talks to the OpenAI-compatible server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LlmClientKind {
    /// crewline's own `OpenAiClient`.
    #[default]
    Default,
    /// `AsyncOpenAiClient` over an `async_openai::Client`.
    AsyncOpenai,
}

impl ModelArgs {
    /// What the flags ask for.
    pub fn choice(&self) -> ModelChoice {
        match (self.scripted, self.llm_client) {
            (true, _) => ModelChoice::Scripted,
            (false, LlmClientKind::Default) if self.llm_http2 => ModelChoice::FromEnvHttp2,
            (false, LlmClientKind::Default) => ModelChoice::FromEnv,
            (false, LlmClientKind::AsyncOpenai) => ModelChoice::AsyncOpenAiFromEnv,
        }
    }

    /// The model the flags ask for, behind a fallback when any fallback flag is given (its
    /// breakers shared through Redis when `CREWLINE_REDIS_URL` is set); `scripted` makes the
    /// crew's offline one.
    pub async fn choose(
        &self,
        scripted: impl FnOnce() -> ScriptedLlm,
    ) -> Result<ChosenModel, BoxError> {
        let chosen = choose(self.choice(), self.model.clone(), scripted)?;
        self.with_fallbacks(chosen).await
    }

    /// The fallback flags.
    pub fn fallbacks(&self) -> Fallbacks {
        let hedge = self.hedge.or_else(|| {
            self.hedge_after_ms
                .map(|ms| Hedge::Fixed(Duration::from_millis(ms)))
        });
        Fallbacks {
            base_urls: self.fallback_base_url.clone(),
            models: self.fallback_model.clone(),
            api_key_envs: self.fallback_api_key_env.clone(),
            hedge,
            after_text: self.after_text.map(AfterText::from),
        }
    }

    /// `chosen` (the model these flags chose, e.g. by a crew's own `model` function) behind a
    /// [`FallbackLlm`](crewline::llm::FallbackLlm) over the fallback providers, when any is
    /// given (see [`crate::model::with_fallbacks`]), its breakers shared by the replicas
    /// through Redis when `CREWLINE_REDIS_URL` is set ([`shared_breakers_from_env`]);
    /// unchanged otherwise.
    pub async fn with_fallbacks(&self, chosen: ChosenModel) -> Result<ChosenModel, BoxError> {
        let fallbacks = self.fallbacks();
        if fallbacks.is_empty() {
            return Ok(chosen);
        }
        let shared = if chosen.scripted {
            // Refused below: no need to reach Redis first.
            None
        } else {
            shared_breakers_from_env().await?
        };
        Ok(crate::model::with_fallbacks(
            self.choice(),
            self.model.clone(),
            &fallbacks,
            shared,
            chosen,
        )?)
    }
}

/// The model providers' circuit breakers shared by every replica through the Redis at
/// `CREWLINE_REDIS_URL` (and `CREWLINE_REDIS_PREFIX`), so a provider one replica found dead
/// is skipped by all within a second; `None` when the variable is unset.
///
/// The variable set in a build without the `redis` feature is an error, as for the call
/// store.
pub async fn shared_breakers_from_env() -> Result<Option<Arc<dyn SharedBreakers>>, BoxError> {
    if std::env::var_os(REDIS_URL_VARIABLE).is_none_or(|url| url.is_empty()) {
        return Ok(None);
    }
    #[cfg(feature = "redis")]
    {
        let connection = crewline_redis::RedisConfig::from_env()?.open().await?;
        tracing::info!(
            prefix = connection.prefix(),
            "model providers' circuit breakers shared in Redis: a provider one replica found \
             dead is skipped by all"
        );
        Ok(Some(Arc::new(crewline_redis::RedisBreakers::new(
            connection,
        ))))
    }
    #[cfg(not(feature = "redis"))]
    {
        Err(format!(
            "{REDIS_URL_VARIABLE} is set, but this build has no Redis (crewline-examples' \
             `redis` feature)"
        )
        .into())
    }
}

/// The variable naming the Redis the replicas share.
const REDIS_URL_VARIABLE: &str = "CREWLINE_REDIS_URL";

/// `--host`, `--port`, `--token`, `--allow-unauthenticated`, `--model` and `--scripted`: a
/// crew served on `/ws`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeCrewArgs {
    /// Where to listen and with which token.
    #[command(flatten)]
    pub listen: ServeArgs,
    /// The port to listen on.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
}

impl ServeCrewArgs {
    /// `server` bound to `--host` and `--port`, with the token options applied.
    pub fn apply(&self, server: CrewServer) -> CrewServer {
        self.listen.apply(server, self.port)
    }

    /// Serves one crew per call, built by `crew` from the call's setup and the model the flags
    /// chose (`scripted` makes the crew's offline one), until SIGTERM or Ctrl-C; `what` names
    /// the crew in the log line that says where it listens.
    pub async fn serve<C, E>(
        &self,
        what: &str,
        scripted: impl FnOnce() -> ScriptedLlm,
        crew: C,
    ) -> Result<(), BoxError>
    where
        C: Fn(&SessionSetup, Arc<dyn LlmClient>) -> Result<Crew, E> + Send + Sync + 'static,
        E: Into<BoxError> + Send + 'static,
    {
        let model = self.model.choose(scripted).await?;
        let llm = model.llm;
        tracing::info!(port = self.port, model = %model.description, "{what} listening on /ws");
        let server = self.apply(CrewServer::new(move |setup: SessionSetup| {
            std::future::ready(crew(&setup, Arc::clone(&llm)))
        }));
        if let Some(fallback) = &model.fallback {
            server.handle().metrics().watch_providers(fallback);
        }
        with_call_store_from_env(server).await?.run().await?;
        Ok(())
    }
}

/// `server` with its calls' checkpoints and owners in Redis when `CREWLINE_REDIS_URL` is set,
/// so a call whose replica died resumes on another (same call id) and never has two live
/// sessions; unchanged otherwise.
///
/// The variable set in a build without the `redis` feature is an error, not a silent fall back
/// to memory: replicas that do not share their calls would lose them between each other.
pub async fn with_call_store_from_env(server: CrewServer) -> Result<CrewServer, BoxError> {
    const URL_VARIABLE: &str = REDIS_URL_VARIABLE;
    if std::env::var_os(URL_VARIABLE).is_none_or(|url| url.is_empty()) {
        return Ok(server);
    }
    #[cfg(feature = "redis")]
    {
        let connection = crewline_redis::RedisConfig::from_env()?.open().await?;
        tracing::info!(
            prefix = connection.prefix(),
            "calls checkpointed in Redis: a call resumes on any replica"
        );
        Ok(server.call_store(crewline_redis::RedisCheckpoints::new(connection)))
    }
    #[cfg(not(feature = "redis"))]
    {
        drop(server);
        Err(format!(
            "{URL_VARIABLE} is set, but this build has no Redis (crewline-examples' `redis` \
             feature)"
        )
        .into())
    }
}

/// Logs to stderr at `default_filter` (e.g. `info`) unless `RUST_LOG` says otherwise; stderr
/// keeps stdout for what a program prints for scripts (e.g. the remote weather client's task
/// id). With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) set, each turn is also
/// traced over OTLP ([`crewline_otel`]); keep the returned guard until the program ends, so
/// the last spans are sent.
///
/// A bad OpenTelemetry setting is logged and tracing stays off: the crew still serves.
pub fn init_logs(default_filter: &str) -> Logs {
    use tracing_subscriber::{Layer, layer::SubscriberExt, util::SubscriberInitExt};

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    let (telemetry, refused) = match crewline_otel::Telemetry::from_env() {
        Ok(telemetry) => (telemetry, None),
        Err(error) => (None, Some(error)),
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colour codes only for a person at a terminal, never into a file or a pipe.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_filter(filter),
        )
        .with(telemetry.as_ref().map(crewline_otel::Telemetry::layer))
        .init();
    if let Some(error) = refused {
        tracing::error!(error = %crewline::types::ErrorChain(&error), "OpenTelemetry tracing is off");
    } else if telemetry.is_some() {
        tracing::info!("OpenTelemetry tracing on: one trace per turn over OTLP");
    }
    Logs { telemetry }
}

/// Keeps tracing going; dropping it sends the spans still buffered.
#[must_use = "dropping the guard stops tracing: hold it until the program ends"]
#[derive(Debug)]
pub struct Logs {
    telemetry: Option<crewline_otel::Telemetry>,
}

impl Drop for Logs {
    fn drop(&mut self) {
        if let Some(telemetry) = self.telemetry.take() {
            telemetry.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        model: ModelArgs,
    }

    fn parse(args: &[&str]) -> ModelArgs {
        Args::try_parse_from(std::iter::once("crew").chain(args.iter().copied()))
            .expect("the flags parse")
            .model
    }

    fn choice(args: &[&str]) -> ModelChoice {
        parse(args).choice()
    }

    #[test]
    fn fallback_flags_build_the_chain_in_order() {
        let args = parse(&[
            "--model",
            "gpt-4o-mini",
            "--fallback-base-url",
            "http://backup-a/v1",
            "--fallback-model",
            "llama-3.1-8b",
            "--fallback-base-url",
            "http://backup-b/v1",
            "--hedge-after-ms",
            "600",
        ]);
        let fallbacks = args.fallbacks();
        assert_eq!(
            fallbacks.hedge,
            Some(Hedge::Fixed(Duration::from_millis(600)))
        );
        let chain: Vec<(String, Option<String>, String)> = fallbacks
            .providers("gpt-4o-mini")
            .expect("a valid chain")
            .into_iter()
            .map(|p| (p.name, p.base_url, p.model))
            .collect();
        assert_eq!(
            chain,
            [
                ("primary".into(), None, "gpt-4o-mini".into()),
                (
                    "fallback-1".into(),
                    Some("http://backup-a/v1".into()),
                    "llama-3.1-8b".into()
                ),
                (
                    "fallback-2".into(),
                    Some("http://backup-b/v1".into()),
                    "gpt-4o-mini".into()
                ),
            ]
        );
        // No fallback flag: no chain.
        assert!(parse(&["--model", "m"]).fallbacks().is_empty());
        assert!(Args::try_parse_from(["crew", "--hedge-after-ms", "soon"]).is_err());
    }

    #[test]
    fn key_variables_hedge_and_after_text_flags_reach_the_chain() {
        let fallbacks = parse(&[
            "--fallback-base-url",
            "http://backup-a/v1",
            "--fallback-api-key-env",
            "GROQ_API_KEY",
            "--hedge",
            "p95",
            "--after-text",
            "continue",
        ])
        .fallbacks();
        assert_eq!(fallbacks.api_key_envs, ["GROQ_API_KEY"]);
        assert_eq!(
            fallbacks.hedge,
            Some(Hedge::P95 {
                floor: DEFAULT_P95_HEDGE_FLOOR
            })
        );
        assert_eq!(fallbacks.after_text, Some(AfterText::Continue));
        let providers = fallbacks.providers("m").expect("a valid chain");
        assert_eq!(providers[1].api_key_env.as_deref(), Some("GROQ_API_KEY"));

        let hedge = |value: &str| parse(&["--hedge", value]).fallbacks().hedge;
        assert_eq!(
            hedge("p95:800"),
            Some(Hedge::P95 {
                floor: Duration::from_millis(800)
            })
        );
        assert_eq!(hedge("450"), Some(Hedge::Fixed(Duration::from_millis(450))));
        assert_eq!(
            parse(&["--after-text", "end"]).fallbacks().after_text,
            Some(AfterText::default())
        );
        for bad in [
            &["--hedge", "p99"][..],
            &["--hedge", "p95:soon"],
            &["--after-text", "retry"],
            &["--hedge", "p95", "--hedge-after-ms", "500"],
        ] {
            assert!(
                Args::try_parse_from(std::iter::once("crew").chain(bad.iter().copied())).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn llm_client_chooses_the_client_and_scripted_still_wins() {
        assert_eq!(choice(&[]), ModelChoice::FromEnv);
        assert_eq!(choice(&["--llm-client", "default"]), ModelChoice::FromEnv);
        assert_eq!(
            choice(&["--llm-client", "async-openai"]),
            ModelChoice::AsyncOpenAiFromEnv
        );
        assert_eq!(
            choice(&["--llm-client", "async-openai", "--scripted"]),
            ModelChoice::Scripted
        );
        assert!(Args::try_parse_from(["crew", "--llm-client", "curl"]).is_err());
    }

    #[test]
    fn llm_http2_asks_the_default_client_for_http2() {
        assert_eq!(choice(&["--llm-http2"]), ModelChoice::FromEnvHttp2);
        assert_eq!(
            choice(&["--llm-http2", "--scripted"]),
            ModelChoice::Scripted
        );
    }
}
