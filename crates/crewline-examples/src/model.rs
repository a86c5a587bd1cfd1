//! The model a crew runs on: a real OpenAI-compatible one when `OPENAI_API_KEY` is set, else
//! the crew's own scripted model, so every example runs offline; with [`Fallbacks`], that
//! model and other providers behind a [`FallbackLlm`].

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

/// The model a crew runs on, and a short description of it for the logs.
#[derive(Clone)]
pub struct ChosenModel {
    /// The model.
    pub llm: Arc<dyn LlmClient>,
    /// E.g. `OpenAI gpt-4o-mini` or `scripted model (offline)`.
    pub description: String,
    /// Whether it is the crew's scripted model.
    pub scripted: bool,
    /// The fallback client when the model is one, for its per-provider `/metrics`
    /// (`Metrics::watch_providers`).
    pub fallback: Option<FallbackLlm>,
}

impl std::fmt::Debug for ChosenModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChosenModel")
            .field("description", &self.description)
            .field("scripted", &self.scripted)
            .finish_non_exhaustive()
    }
}

/// The model for `choice`: with [`ModelChoice::FromEnv`] (or
/// [`ModelChoice::AsyncOpenAiFromEnv`]) and `OPENAI_API_KEY` set, OpenAI's `name` (else
/// `OPENAI_MODEL`, else [`DEFAULT_OPENAI_MODEL`]) on that client; otherwise `scripted()`.
///
/// ```
/// use crewline::llm::{Reply, ScriptedLlm};
/// use crewline_examples::model::{ModelChoice, choose};
///
/// let model = choose(ModelChoice::Scripted, None, || ScriptedLlm::new([Reply::text("Hi!")]))?;
/// assert!(model.scripted);
/// # Ok::<(), crewline::llm::LlmError>(())
/// ```
pub fn choose(
    choice: ModelChoice,
    name: Option<String>,
    scripted: impl FnOnce() -> ScriptedLlm,
) -> Result<ChosenModel, LlmError> {
    let from_env = matches!(
        choice,
        ModelChoice::FromEnv | ModelChoice::AsyncOpenAiFromEnv | ModelChoice::FromEnvHttp2
    );
    if from_env && std::env::var_os("OPENAI_API_KEY").is_some() {
        let model = name
            .or_else(|| std::env::var("OPENAI_MODEL").ok())
            .unwrap_or_else(|| DEFAULT_OPENAI_MODEL.to_owned());
        if choice == ModelChoice::AsyncOpenAiFromEnv {
            // `OpenAIConfig::new()` reads OPENAI_API_KEY and OPENAI_BASE_URL, as `from_env` does;
            // `bounded_client` caps what the provider can make async-openai read (error bodies,
            // stream lines), which a plain `Client::with_config` does not.
            let client = AsyncOpenAiClient::bounded_client(
                async_openai::config::OpenAIConfig::new(),
                reqwest::Client::new(),
            );
            return Ok(ChosenModel {
                llm: Arc::new(AsyncOpenAiClient::new(client, model.clone())),
                description: format!("OpenAI {model} (async-openai client)"),
                scripted: false,
                fallback: None,
            });
        }
        let client = OpenAiClient::builder()
            .model(model.clone())
            .http2(choice == ModelChoice::FromEnvHttp2)
            .build()?;
        Ok(ChosenModel {
            llm: Arc::new(client),
            description: format!("OpenAI {model}"),
            scripted: false,
            fallback: None,
        })
    } else {
        Ok(ChosenModel {
            llm: Arc::new(scripted()),
            description: "scripted model (offline)".to_owned(),
            scripted: true,
            fallback: None,
        })
    }
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
    /// ([`shared_breakers_from_env`](crate::args::shared_breakers_from_env)).
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
    if chosen.scripted {
        return Err(LlmError::config(
            "--fallback-base-url, --hedge-after-ms and --after-text need a real model: set \
             OPENAI_API_KEY (and leave out --scripted)"
                .to_owned(),
        ));
    }
    let model = name
        .or_else(|| std::env::var("OPENAI_MODEL").ok())
        .unwrap_or_else(|| DEFAULT_OPENAI_MODEL.to_owned());
    let providers = fallbacks.providers(&model)?;
    let settings = ChainSettings {
        hedge: fallbacks.hedge,
        after_text: fallbacks.after_text.clone(),
        shared_breakers: shared,
    };
    chain(choice, None, &providers, &settings)
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
        scripted: false,
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
        assert!(same.unwrap().scripted);
    }
}
