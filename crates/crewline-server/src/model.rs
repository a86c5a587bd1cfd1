//! The model a crew runs on (feature `clap`): a real OpenAI-compatible one when
//! `OPENAI_API_KEY` or `OPENAI_BASE_URL` is set, else the crew's own scripted model, so a crew
//! runs offline; with [`Fallbacks`], that model and other providers behind a [`FallbackLlm`].
//! [`ModelArgs`](crate::ModelArgs) is the command line that chooses one.

use std::sync::Arc;

use crewline::llm::{
    AfterText, AsyncOpenAiClient, FallbackLlm, Hedge, LlmClient, LlmError, OpenAiClient,
    ScriptedLlm, fallback::SharedBreakers,
};

/// The OpenAI model used when neither `--model` nor `OPENAI_MODEL` names one.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";

/// Which model a crew uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelChoice {
    /// The real OpenAI-compatible endpoint when `OPENAI_API_KEY` is set, else the scripted one.
    #[default]
    FromEnv,
    /// As [`ModelChoice::FromEnv`], through async-openai's client (`async_openai::Client`
    /// with the same `OPENAI_API_KEY` and `OPENAI_BASE_URL`) instead of the default one.
    AsyncOpenAiFromEnv,
    /// As [`ModelChoice::FromEnv`], the default client offering HTTP/2 by ALPN (`--llm-http2`:
    /// many calls' streams share a connection to a provider that speaks it).
    FromEnvHttp2,
    /// Always the offline scripted model.
    Scripted,
}

/// The placeholder key sent to an `OPENAI_BASE_URL` when `OPENAI_API_KEY` is unset: a local
/// server (Ollama, llama.cpp, vLLM) needs no key, and the clients need one to send.
const NO_KEY: &str = "no-key";

/// The model a crew runs on, and a short description of it for the logs.
#[derive(Clone)]
pub struct ChosenModel {
    /// The model.
    pub llm: Arc<dyn LlmClient>,
    /// E.g. `OpenAI gpt-4o-mini` or `scripted model (offline)`.
    pub description: String,
    /// The URL of the (first) provider it asks, `None` for the scripted model.
    pub base_url: Option<String>,
    /// The fallback client when the model is one, for its per-provider `/metrics`
    /// (`Metrics::watch_providers`).
    pub fallback: Option<FallbackLlm>,
}

impl std::fmt::Debug for ChosenModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChosenModel")
            .field("description", &self.description)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl ChosenModel {
    /// Whether it is the crew's offline scripted model (it asks no URL).
    pub fn is_scripted(&self) -> bool {
        self.base_url.is_none()
    }

    /// Shows a fallback chain's requests, failovers, hedges and breaker states per provider
    /// on `server`'s `/metrics` ([`Metrics::watch_providers`](crate::Metrics::watch_providers));
    /// nothing for a single model.
    pub fn watch_on(&self, server: &crate::CrewServer) {
        if let Some(fallback) = &self.fallback {
            server.handle().metrics().watch_providers(fallback);
        }
    }

    /// Logs, at INFO, which model serves the crew and at which URL (never a key): the line
    /// to read first when a crew answers unlike what was expected.
    pub fn log(&self) {
        tracing::info!(
            model = %self.description,
            url = self.base_url.as_deref().unwrap_or("offline"),
            "the crew's model"
        );
    }
}

/// What the environment says about the model: `OPENAI_API_KEY` (whether set),
/// `OPENAI_BASE_URL` and `OPENAI_MODEL`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelEnv {
    /// Whether `OPENAI_API_KEY` is set (its value is never kept here).
    pub has_api_key: bool,
    /// `OPENAI_BASE_URL`, when set and not empty.
    pub base_url: Option<String>,
    /// `OPENAI_MODEL`, when set and not empty.
    pub model: Option<String>,
}

impl ModelEnv {
    /// Reads the three variables.
    pub fn from_env() -> Self {
        let read = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Self {
            has_api_key: std::env::var_os("OPENAI_API_KEY").is_some_and(|key| !key.is_empty()),
            base_url: read("OPENAI_BASE_URL"),
            model: read("OPENAI_MODEL"),
        }
    }

    /// Whether a real model is configured: a key (for OpenAI or `OPENAI_BASE_URL`), or an
    /// `OPENAI_BASE_URL` alone (a local server needs no key).
    pub fn has_real_model(&self) -> bool {
        self.has_api_key || self.base_url.is_some()
    }

    /// The model's name: `name`, else `OPENAI_MODEL`, else [`DEFAULT_OPENAI_MODEL`].
    pub fn model_name(&self, name: Option<String>) -> String {
        name.or_else(|| self.model.clone())
            .unwrap_or_else(|| DEFAULT_OPENAI_MODEL.to_owned())
    }

    /// The key to give a client when none is in the environment (`None`: the client reads
    /// `OPENAI_API_KEY` itself).
    fn placeholder_key(&self) -> Option<&'static str> {
        (!self.has_api_key).then_some(NO_KEY)
    }
}

/// The model for `choice`: with [`ModelChoice::FromEnv`] (or its variants) and
/// `OPENAI_API_KEY` or `OPENAI_BASE_URL` set, the model `name` (else `OPENAI_MODEL`, else
/// [`DEFAULT_OPENAI_MODEL`]) at `OPENAI_BASE_URL` (else OpenAI's) on that client; otherwise
/// `scripted()`.
///
/// ```
/// use crewline::llm::{Reply, ScriptedLlm};
/// use crewline_server::model::{ModelChoice, choose};
///
/// let model = choose(ModelChoice::Scripted, None, || ScriptedLlm::new([Reply::text("Hi!")]))?;
/// assert!(model.is_scripted());
/// # Ok::<(), crewline::llm::LlmError>(())
/// ```
pub fn choose(
    choice: ModelChoice,
    name: Option<String>,
    scripted: impl FnOnce() -> ScriptedLlm,
) -> Result<ChosenModel, LlmError> {
    choose_in(&ModelEnv::from_env(), choice, name, scripted)
}

/// [`choose`] with the environment read beforehand (`env`).
pub fn choose_in(
    env: &ModelEnv,
    choice: ModelChoice,
    name: Option<String>,
    scripted: impl FnOnce() -> ScriptedLlm,
) -> Result<ChosenModel, LlmError> {
    if choice == ModelChoice::Scripted || !env.has_real_model() {
        return Ok(ChosenModel {
            llm: Arc::new(scripted()),
            description: "scripted model (offline)".to_owned(),
            base_url: None,
            fallback: None,
        });
    }
    let model = env.model_name(name);
    if choice == ModelChoice::AsyncOpenAiFromEnv {
        use async_openai::config::{Config, OpenAIConfig};

        // `OpenAIConfig::new()` reads OPENAI_API_KEY and OPENAI_BASE_URL, as `from_env` does;
        // `bounded_client` caps what the provider can make async-openai read (error bodies,
        // stream lines), which a plain `Client::with_config` does not.
        let mut config = OpenAIConfig::new();
        if let Some(url) = &env.base_url {
            config = config.with_api_base(url);
        }
        if let Some(key) = env.placeholder_key() {
            config = config.with_api_key(key);
        }
        let base_url = config.api_base().to_owned();
        let client = AsyncOpenAiClient::bounded_client(config, reqwest::Client::new());
        return Ok(ChosenModel {
            llm: Arc::new(AsyncOpenAiClient::new(client, model.clone())),
            description: format!("{model} (async-openai client)"),
            base_url: Some(base_url),
            fallback: None,
        });
    }
    let mut builder = OpenAiClient::builder()
        .model(model.clone())
        .http2(choice == ModelChoice::FromEnvHttp2);
    if let Some(url) = &env.base_url {
        builder = builder.base_url(url.clone());
    }
    if let Some(key) = env.placeholder_key() {
        builder = builder.api_key(key);
    }
    let client = builder.build()?;
    Ok(ChosenModel {
        description: model,
        base_url: Some(client.base_url().to_owned()),
        llm: Arc::new(client),
        fallback: None,
    })
}

/// Other providers behind the main model (`--fallback-base-url`, `--fallback-model`,
/// `--fallback-api-key-env`, `--hedge-after-ms`, `--hedge`, `--after-text`): the crew's model
/// becomes a [`FallbackLlm`] over them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fallbacks {
    /// Each fallback provider's OpenAI-compatible base URL, in the order they are tried.
    pub base_urls: Vec<String>,
    /// The model at each, by position (default: the main model).
    pub models: Vec<String>,
    /// The environment variable holding each one's API key, by position (default: the main
    /// key).
    pub api_key_envs: Vec<String>,
    /// When to ask the next provider too while the one asked has produced nothing (`None`:
    /// never).
    pub hedge: Option<Hedge>,
    /// What a turn does when its provider fails after some of its text was spoken (`None`:
    /// [`AfterText::default`], a short spoken excuse).
    pub after_text: Option<AfterText>,
}

/// One provider of a crew's model chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    /// Its name in metrics, spans and logs: `primary`, `fallback-1`, `fallback-2`...
    pub name: String,
    /// Its base URL (`None`: `OPENAI_BASE_URL`, else OpenAI's).
    pub base_url: Option<String>,
    /// Its model.
    pub model: String,
    /// The environment variable holding its API key (`None`: the chain's main key).
    pub api_key_env: Option<String>,
}

/// How a chain behaves beyond its providers.
#[derive(Clone, Default)]
pub struct ChainSettings {
    /// When to hedge (`None`: never).
    pub hedge: Option<Hedge>,
    /// What a turn does when its provider fails after text (`None`: the default).
    pub after_text: Option<AfterText>,
    /// Where the replicas share their breakers (`None`: each replica on its own); the
    /// examples use Redis when `CREWLINE_REDIS_URL` is set
    /// ([`shared_breakers_from_env`](crate::shared_breakers_from_env)).
    pub shared_breakers: Option<Arc<dyn SharedBreakers>>,
}

impl std::fmt::Debug for ChainSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainSettings")
            .field("hedge", &self.hedge)
            .field("after_text", &self.after_text)
            .field("shared_breakers", &self.shared_breakers.is_some())
            .finish()
    }
}

impl Fallbacks {
    /// Whether no fallback flag was given (the main model serves alone).
    pub fn is_empty(&self) -> bool {
        self.base_urls.is_empty()
            && self.models.is_empty()
            && self.api_key_envs.is_empty()
            && self.hedge.is_none()
            && self.after_text.is_none()
    }

    /// The providers in the order they are tried: the main one (`main_model` at
    /// `OPENAI_BASE_URL`, with the main key), then each fallback with its model (default
    /// `main_model`) and key variable (default: the main key). An error when more models or
    /// key variables than base URLs are given, or a hedge or after-text policy without a
    /// provider to move to.
    pub fn providers(&self, main_model: &str) -> Result<Vec<Provider>, LlmError> {
        for (count, flag) in [
            (self.models.len(), "--fallback-model"),
            (self.api_key_envs.len(), "--fallback-api-key-env"),
        ] {
            if count > self.base_urls.len() {
                return Err(LlmError::config(format!(
                    "{count} {flag} for {} --fallback-base-url: each names the provider at the \
                     same position",
                    self.base_urls.len()
                )));
            }
        }
        if let Some(name) = self.api_key_envs.iter().find(|name| name.trim().is_empty()) {
            return Err(LlmError::config(format!(
                "--fallback-api-key-env {name:?}: a variable's name, not empty"
            )));
        }
        if self.base_urls.is_empty() {
            if self.hedge.is_some() {
                return Err(LlmError::config(
                    "--hedge-after-ms and --hedge need a --fallback-base-url: there is no other \
                     provider to ask"
                        .to_owned(),
                ));
            }
            if self.after_text.is_some() {
                return Err(LlmError::config(
                    "--after-text needs a --fallback-base-url: there is no other provider"
                        .to_owned(),
                ));
            }
        }
        let main = Provider {
            name: "primary".to_owned(),
            base_url: None,
            model: main_model.to_owned(),
            api_key_env: None,
        };
        let fallbacks = self.base_urls.iter().enumerate().map(|(i, url)| Provider {
            name: format!("fallback-{}", i + 1),
            base_url: Some(url.clone()),
            model: self
                .models
                .get(i)
                .cloned()
                .unwrap_or_else(|| main_model.to_owned()),
            api_key_env: self.api_key_envs.get(i).cloned(),
        });
        Ok(std::iter::once(main).chain(fallbacks).collect())
    }
}

/// `chosen` (the model for `choice` and `name`, see [`choose`]) with `fallbacks` behind it:
/// unchanged without fallbacks; otherwise a [`FallbackLlm`] over the main model and each
/// fallback provider, on the client `choice` names, each with its own key
/// (`--fallback-api-key-env`, default `OPENAI_API_KEY`), no retries of its own (a provider
/// that fails fails at once, so the next one answers), and its breakers shared through
/// `shared` when given. Logs each provider (never a key). An error with the scripted model:
/// fallbacks need a real one.
pub fn with_fallbacks(
    choice: ModelChoice,
    name: Option<String>,
    fallbacks: &Fallbacks,
    shared: Option<Arc<dyn SharedBreakers>>,
    chosen: ChosenModel,
) -> Result<ChosenModel, LlmError> {
    if fallbacks.is_empty() {
        return Ok(chosen);
    }
    if chosen.is_scripted() {
        return Err(LlmError::config(
            "--fallback-base-url, --hedge-after-ms and --after-text need a real model: set \
             OPENAI_API_KEY or OPENAI_BASE_URL (and leave out --scripted)"
                .to_owned(),
        ));
    }
    let env = ModelEnv::from_env();
    let model = env.model_name(name);
    let providers = fallbacks.providers(&model)?;
    let settings = ChainSettings {
        hedge: fallbacks.hedge,
        after_text: fallbacks.after_text.clone(),
        shared_breakers: shared,
    };
    chain(choice, env.placeholder_key(), &providers, &settings)
}

/// A [`FallbackLlm`] over `providers` on the client `choice` names, each keyed with its
/// `api_key_env`'s value, else `api_key`, else `OPENAI_API_KEY`; hedging, ending or continuing
/// after text and sharing breakers as `settings` say.
pub fn chain(
    choice: ModelChoice,
    api_key: Option<&str>,
    providers: &[Provider],
    settings: &ChainSettings,
) -> Result<ChosenModel, LlmError> {
    let mut builder = FallbackLlm::builder();
    let mut described = Vec::with_capacity(providers.len());
    let mut first_url = None;
    for provider in providers {
        let key = match &provider.api_key_env {
            Some(variable) => Some(key_from(variable)?),
            None => api_key.map(str::to_owned),
        };
        let (client, base_url) = provider_client(choice, key.as_deref(), provider)?;
        // The variable's name, never its value.
        let key_from = provider.api_key_env.as_deref().unwrap_or("the main key");
        tracing::info!(
            provider = %provider.name,
            base_url = %base_url,
            model = %provider.model,
            api_key = key_from,
            "model provider"
        );
        described.push(format!(
            "{} {} at {base_url}",
            provider.name, provider.model
        ));
        first_url.get_or_insert(base_url);
        builder = builder.provider(provider.name.clone(), client);
    }
    if let Some(hedge) = settings.hedge {
        builder = builder.hedge(hedge);
    }
    if let Some(after_text) = &settings.after_text {
        builder = builder.after_text(after_text.clone());
    }
    if let Some(store) = &settings.shared_breakers {
        builder = builder.shared_breakers(Arc::clone(store));
    }
    let client = match choice {
        ModelChoice::AsyncOpenAiFromEnv => ", async-openai client",
        _ => "",
    };
    let hedge = match settings.hedge {
        Some(Hedge::Fixed(after)) => format!(", hedged after {} ms", after.as_millis()),
        Some(Hedge::P95 { floor }) => format!(
            ", hedged after each provider's p95 first token (at least {} ms)",
            floor.as_millis()
        ),
        Some(Hedge::Off) | None => String::new(),
    };
    let after = match &settings.after_text {
        Some(AfterText::Continue) => ", continuing on the next provider after text",
        _ => "",
    };
    let shared = if settings.shared_breakers.is_some() {
        ", breakers shared"
    } else {
        ""
    };
    let fallback = builder.build()?;
    Ok(ChosenModel {
        llm: Arc::new(fallback.clone()),
        description: format!(
            "fallback over {}{client}{hedge}{after}{shared}",
            described.join(", ")
        ),
        base_url: first_url,
        fallback: Some(fallback),
    })
}

/// The API key in the environment variable `variable`; an error naming the variable (never a
/// value) when it is unset or empty.
fn key_from(variable: &str) -> Result<String, LlmError> {
    match std::env::var(variable) {
        Ok(key) if !key.trim().is_empty() => Ok(key),
        _ => Err(LlmError::config(format!(
            "--fallback-api-key-env {variable}: {variable} is not set (or empty)"
        ))),
    }
}

/// One provider's client, with no retries of its own, and its base URL (for the logs).
fn provider_client(
    choice: ModelChoice,
    api_key: Option<&str>,
    provider: &Provider,
) -> Result<(Arc<dyn LlmClient>, String), LlmError> {
    if choice == ModelChoice::AsyncOpenAiFromEnv {
        use async_openai::config::OpenAIConfig;

        // `OpenAIConfig::new()` reads OPENAI_API_KEY and OPENAI_BASE_URL.
        let mut config = OpenAIConfig::new();
        if let Some(url) = &provider.base_url {
            config = config.with_api_base(url);
        }
        if let Some(key) = api_key {
            config = config.with_api_key(key);
        }
        let base_url = async_openai::config::Config::api_base(&config).to_owned();
        // Bounded, with `Retry-After` kept, and no retry layer: the next provider is the retry.
        let client = AsyncOpenAiClient::provider_client(config, reqwest::Client::new());
        let llm = AsyncOpenAiClient::new(client, provider.model.clone());
        return Ok((Arc::new(llm), base_url));
    }
    let mut builder = OpenAiClient::builder()
        .model(provider.model.clone())
        .http2(choice == ModelChoice::FromEnvHttp2)
        .max_retries(0);
    if let Some(url) = &provider.base_url {
        builder = builder.base_url(url.clone());
    }
    if let Some(key) = api_key {
        builder = builder.api_key(key);
    }
    let client = builder.build()?;
    let base_url = client.base_url().to_owned();
    Ok((Arc::new(client), base_url))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn fallbacks(urls: &[&str], models: &[&str], hedge_ms: Option<u64>) -> Fallbacks {
        Fallbacks {
            base_urls: urls.iter().map(|u| (*u).to_owned()).collect(),
            models: models.iter().map(|m| (*m).to_owned()).collect(),
            hedge: hedge_ms.map(|ms| Hedge::Fixed(Duration::from_millis(ms))),
            ..Fallbacks::default()
        }
    }

    #[test]
    fn fallback_models_pair_with_base_urls_in_order_and_default_to_the_main_model() {
        let providers = fallbacks(&["http://a/v1", "http://b/v1"], &["llama"], None)
            .providers("gpt-4o-mini")
            .unwrap();
        assert_eq!(
            providers,
            [
                Provider {
                    name: "primary".into(),
                    base_url: None,
                    model: "gpt-4o-mini".into(),
                    api_key_env: None,
                },
                Provider {
                    name: "fallback-1".into(),
                    base_url: Some("http://a/v1".into()),
                    model: "llama".into(),
                    api_key_env: None,
                },
                Provider {
                    name: "fallback-2".into(),
                    base_url: Some("http://b/v1".into()),
                    model: "gpt-4o-mini".into(),
                    api_key_env: None,
                },
            ]
        );
        assert!(Fallbacks::default().is_empty());
    }

    #[test]
    fn a_model_without_a_url_or_a_hedge_without_a_fallback_is_refused() {
        let error = fallbacks(&["http://a/v1"], &["x", "y"], None)
            .providers("m")
            .unwrap_err();
        assert!(
            error.to_string().contains("2 --fallback-model for 1"),
            "{error}"
        );
        let error = fallbacks(&[], &[], Some(500)).providers("m").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("--hedge-after-ms and --hedge need"),
            "{error}"
        );
        let error = Fallbacks {
            after_text: Some(AfterText::Continue),
            ..Fallbacks::default()
        }
        .providers("m")
        .unwrap_err();
        assert!(error.to_string().contains("--after-text needs"), "{error}");
        let error = Fallbacks {
            base_urls: vec!["http://a/v1".into()],
            api_key_envs: vec!["A_KEY".into(), "B_KEY".into()],
            ..Fallbacks::default()
        }
        .providers("m")
        .unwrap_err();
        assert!(
            error.to_string().contains("2 --fallback-api-key-env for 1"),
            "{error}"
        );
    }

    #[test]
    fn key_variables_pair_with_base_urls_and_default_to_the_main_key() {
        let providers = Fallbacks {
            base_urls: vec!["http://a/v1".into(), "http://b/v1".into()],
            api_key_envs: vec!["GROQ_API_KEY".into()],
            ..Fallbacks::default()
        }
        .providers("m")
        .unwrap();
        let keys: Vec<Option<&str>> = providers.iter().map(|p| p.api_key_env.as_deref()).collect();
        assert_eq!(keys, [None, Some("GROQ_API_KEY"), None]);
    }

    #[test]
    fn an_unset_key_variable_is_named_and_no_chain_is_built() {
        let provider = Provider {
            name: "fallback-1".into(),
            base_url: Some("http://127.0.0.1:9/v1".into()),
            model: "m".into(),
            api_key_env: Some("CREWLINE_TEST_SURELY_UNSET_KEY".into()),
        };
        let error = chain(
            ModelChoice::FromEnv,
            Some("sk-main"),
            &[provider],
            &ChainSettings::default(),
        )
        .map(|_| ())
        .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("CREWLINE_TEST_SURELY_UNSET_KEY is not set"),
            "{text}"
        );
        assert!(!text.contains("sk-main"), "{text}");
    }

    fn env(has_api_key: bool, base_url: Option<&str>) -> ModelEnv {
        ModelEnv {
            has_api_key,
            base_url: base_url.map(str::to_owned),
            model: None,
        }
    }

    fn scripted() -> ScriptedLlm {
        ScriptedLlm::new([crewline::llm::Reply::text("Hi")])
    }

    #[test]
    fn a_base_url_without_a_key_is_that_endpoint_not_the_scripted_model() {
        let local = "http://127.0.0.1:11434/v1";
        for choice in [
            ModelChoice::FromEnv,
            ModelChoice::FromEnvHttp2,
            ModelChoice::AsyncOpenAiFromEnv,
        ] {
            let model = choose_in(
                &env(false, Some(local)),
                choice,
                Some("llama3".into()),
                scripted,
            )
            .expect("a local endpoint needs no key");
            assert!(!model.is_scripted(), "{choice:?}");
            assert!(
                model.description.contains("llama3"),
                "{}",
                model.description
            );
        }
        // The default client tells where it asks: the local server, not OpenAI.
        let model = choose_in(
            &env(false, Some(local)),
            ModelChoice::FromEnv,
            None,
            scripted,
        )
        .expect("a local endpoint needs no key");
        assert_eq!(model.base_url.as_deref(), Some(local));
        assert_eq!(model.description, DEFAULT_OPENAI_MODEL);
    }

    #[test]
    fn without_a_key_or_a_url_or_with_scripted_the_crew_runs_offline() {
        let offline = choose_in(&env(false, None), ModelChoice::FromEnv, None, scripted).unwrap();
        assert!(offline.is_scripted());
        assert_eq!(offline.base_url, None);
        let scripted_wins = choose_in(
            &env(true, Some("http://127.0.0.1:9/v1")),
            ModelChoice::Scripted,
            None,
            scripted,
        )
        .unwrap();
        assert!(scripted_wins.is_scripted());
    }

    #[test]
    fn the_scripted_model_takes_no_fallback() {
        let scripted = choose(ModelChoice::Scripted, None, || {
            ScriptedLlm::new([crewline::llm::Reply::text("Hi")])
        })
        .unwrap();
        let error = with_fallbacks(
            ModelChoice::Scripted,
            None,
            &fallbacks(&["http://a/v1"], &[], None),
            None,
            scripted.clone(),
        )
        .unwrap_err();
        assert!(error.to_string().contains("need a real model"), "{error}");
        // Without fallback flags the model is handed back as it was.
        let same = with_fallbacks(
            ModelChoice::Scripted,
            None,
            &Fallbacks::default(),
            None,
            scripted,
        );
        assert!(same.unwrap().is_scripted());
    }
}
