//! The command-line options every crewline crew binary shares (feature `clap`): where to
//! listen ([`ServeArgs`]) and which model to run on ([`ModelArgs`]).

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    time::Duration,
};

use crewline::llm::{AfterText, Hedge, ScriptedLlm};

use crate::{
    BoxError, CrewServer, call_store_from_env,
    model::{ChosenModel, Fallbacks, ModelChoice, choose},
    shared_breakers_from_env,
};

/// The port a crew binary listens on unless `--port` says otherwise.
pub const DEFAULT_PORT: u16 = 8080;

/// `--host`, `--token` (or `CREWLINE_AUTH_TOKEN`), `--allow-unauthenticated` and `--allow-origin`, to flatten
/// into a binary's own `clap` options beside its `--port`.
///
/// ```
/// # use clap::Parser;
/// #[derive(clap::Parser)]
/// struct Options {
///     #[command(flatten)]
///     serve: crewline_server::ServeArgs,
///     /// The port.
///     #[arg(long, default_value_t = 8080)]
///     port: u16,
/// }
/// let options = Options::parse_from(["serve", "--host", "0.0.0.0", "--token", "s3cret"]);
/// assert_eq!(options.serve.addr(options.port).to_string(), "0.0.0.0:8080");
/// ```
#[derive(Clone, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on; beyond loopback the server refuses to start without --token
    /// (or --allow-unauthenticated).
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub host: IpAddr,
    /// The shared secret every request must carry, as `Authorization: Bearer <token>` (or
    /// `?token=` on /ws).
    #[arg(long, env = crewline_auth::TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// Serve without a token even beyond loopback: for a trusted network only.
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// Also let web pages of this origin (e.g. `https://console.example.com`, `*` for any) open
    /// calls from a browser; the crew's own origin and pages on this machine always may.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
}

impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeArgs")
            .field("host", &self.host)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("allow_unauthenticated", &self.allow_unauthenticated)
            .field("allow_origins", &self.allow_origins)
            .finish()
    }
}

impl ServeArgs {
    /// The address to bind: `--host` and `port`.
    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.host, port)
    }

    /// `server` bound to `--host` and `port`, with the token and the opt-out applied (the
    /// server's start-up checks then refuse an empty token or an open address without one).
    pub fn apply(&self, server: CrewServer, port: u16) -> CrewServer {
        let mut server = server.bind(self.addr(port));
        if let Some(token) = &self.token {
            server = server.auth_token(token);
        }
        if self.allow_unauthenticated {
            server = server.allow_unauthenticated();
        }
        for origin in &self.allow_origins {
            server = server.allow_origin(origin);
        }
        server
    }
}

/// `--host`, `--port`, `--token`, `--allow-unauthenticated`, `--allow-origin` and the model
/// flags: what a binary serving one crew on `/ws` takes, to flatten into its own `clap`
/// options beside its own flags.
///
/// ```
/// use clap::Parser;
/// use crewline_server::CrewArgs;
///
/// /// Serves my crew on `/ws`.
/// #[derive(Parser)]
/// struct Args {
///     #[command(flatten)]
///     crew: CrewArgs,
/// }
///
/// let args = Args::parse_from(["my_crew", "--port", "9000", "--scripted"]);
/// assert_eq!(args.crew.port, 9000);
/// assert!(args.crew.model.scripted);
/// ```
#[derive(Debug, Clone, clap::Args)]
pub struct CrewArgs {
    /// Where to listen, and the token every call must carry.
    #[command(flatten)]
    pub serve: ServeArgs,
    /// The port to listen on.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Which model the crew runs on.
    #[command(flatten)]
    pub model: ModelArgs,
}

impl CrewArgs {
    /// `server` bound to `--host` and `--port`, with the token options applied.
    pub fn apply(&self, server: CrewServer) -> CrewServer {
        self.serve.apply(server, self.port)
    }

    /// Serves `server` as the flags say until SIGTERM or Ctrl-C: bound to `--host` and
    /// `--port` with the token options ([`apply`](Self::apply)), `model`'s providers on
    /// `/metrics` when it is a fallback chain ([`ChosenModel::watch_on`]), and each call's
    /// checkpoint in Redis when `CREWLINE_REDIS_URL` is set ([`call_store_from_env`], so a
    /// call resumes on any replica). Logs where it listens.
    pub async fn serve(&self, server: CrewServer, model: &ChosenModel) -> Result<(), BoxError> {
        let server = self.apply(server);
        model.watch_on(&server);
        let server = call_store_from_env(server).await?;
        tracing::info!(port = self.port, "crew listening on /ws");
        server.run().await?;
        Ok(())
    }
}

/// `--model`, `--scripted`, `--llm-client` and the fallback flags: which model (or models)
/// the crew runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ModelArgs {
    /// The model, used when OPENAI_API_KEY or OPENAI_BASE_URL is set (default: $OPENAI_MODEL,
    /// else gpt-4o-mini). Without either the crew runs on its scripted model, offline.
    #[arg(long)]
    pub model: Option<String>,
    /// Run on the crew's scripted model even when OPENAI_API_KEY or OPENAI_BASE_URL is set.
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
    /// order. Needs a real model (OPENAI_API_KEY or OPENAI_BASE_URL set). With CREWLINE_REDIS_URL set, the
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
    /// What tokens cost per model, to turn each turn's usage into money (the call's tally,
    /// the turn's span, /metrics, --log-usage): `model=prompt,cached_prompt,completion` per
    /// million tokens, entries separated by `;`, or `@FILE` for a file of them, one a line
    /// (`#` comments). A model it does not name is reported without money.
    #[arg(long, value_name = "PRICES|@FILE", env = "CREWLINE_PRICES")]
    pub prices: Option<String>,
    /// Send each answered turn's token usage and cost to the platform as an `agent.log`
    /// entry (`llm_usage`), which the platform may ignore.
    #[arg(long = "log-usage")]
    pub log_usage: bool,
}

/// Why `--prices` could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PricesError {
    /// The file `@FILE` names could not be read.
    #[error("cannot read the price file {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The prices are not a price table.
    #[error("--prices")]
    Table(#[from] crewline::llm::PriceError),
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
    /// The price table `--prices` (or `CREWLINE_PRICES`) gives, read from its file for
    /// `@FILE`; `None` without one.
    ///
    /// ```
    /// use clap::Parser;
    /// use crewline_server::ModelArgs;
    ///
    /// #[derive(Parser)]
    /// struct Args {
    ///     #[command(flatten)]
    ///     model: ModelArgs,
    /// }
    /// let args = Args::parse_from(["my_crew", "--prices", "gpt-4o-mini=0.15,0.075,0.60"]);
    /// let prices = args.model.price_table()?.expect("given");
    /// assert_eq!(prices.price("gpt-4o-mini").map(|p| p.prompt), Some(150_000));
    /// # Ok::<(), crewline_server::PricesError>(())
    /// ```
    pub fn price_table(&self) -> Result<Option<crewline::llm::PriceTable>, PricesError> {
        let Some(spec) = self.prices.as_deref() else {
            return Ok(None);
        };
        let text = match spec.strip_prefix('@') {
            Some(path) => std::fs::read_to_string(path).map_err(|source| PricesError::Read {
                path: path.to_owned(),
                source,
            })?,
            None => spec.to_owned(),
        };
        Ok(Some(text.parse()?))
    }

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
    /// crew's offline one. Logs which model serves the crew and at which URL
    /// ([`ChosenModel::log`]).
    ///
    /// ```
    /// use clap::Parser;
    /// use crewline::llm::{Reply, ScriptedLlm};
    /// use crewline_server::ModelArgs;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), crewline_server::BoxError> {
    /// #[derive(Parser)]
    /// struct Args {
    ///     #[command(flatten)]
    ///     model: ModelArgs,
    /// }
    /// let args = Args::parse_from(["my_crew", "--scripted"]);
    /// let model = args.model.choose(|| ScriptedLlm::new([Reply::text("Hi!")])).await?;
    /// assert!(model.is_scripted());
    /// # Ok(()) }
    /// ```
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
    /// unchanged otherwise. Logs which model serves the crew and at which URL.
    pub async fn with_fallbacks(&self, chosen: ChosenModel) -> Result<ChosenModel, BoxError> {
        let fallbacks = self.fallbacks();
        if fallbacks.is_empty() {
            chosen.log();
            return Ok(chosen);
        }
        let shared = if chosen.is_scripted() {
            // Refused below: no need to reach Redis first.
            None
        } else {
            shared_breakers_from_env().await?
        };
        let chosen = crate::model::with_fallbacks(
            self.choice(),
            self.model.clone(),
            &fallbacks,
            shared,
            chosen,
        )?;
        chosen.log();
        Ok(chosen)
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
