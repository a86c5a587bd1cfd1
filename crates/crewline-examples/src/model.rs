//! The model a crew runs on: a real OpenAI-compatible one when `OPENAI_API_KEY` is set, else
//! the crew's own scripted model, so every example runs offline; with [`Fallbacks`], that
//! model and other providers behind a [`FallbackLlm`].

use std::{sync::Arc, time::Duration};

use crewline::llm::{
    AnswerBodyLimit, AsyncOpenAiClient, FallbackLlm, Hedge, LlmClient, LlmError, OpenAiClient,
    ScriptedLlm,
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
/// `--hedge-after-ms`): the crew's model becomes a [`FallbackLlm`] over them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fallbacks {
    /// Each fallback provider's OpenAI-compatible base URL, in the order they are tried.
    pub base_urls: Vec<String>,
    /// The model at each, by position (default: the main model).
    pub models: Vec<String>,
    /// Ask the next provider too when the one asked has produced nothing for this long.
    pub hedge_after: Option<Duration>,
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
}

impl Fallbacks {
    /// Whether no fallback flag was given (the main model serves alone).
    pub fn is_empty(&self) -> bool {
        self.base_urls.is_empty() && self.models.is_empty() && self.hedge_after.is_none()
    }

    /// The providers in the order they are tried: the main one (`main_model` at
    /// `OPENAI_BASE_URL`), then each fallback with its model (default `main_model`). An error
    /// when more models than base URLs are given, or a hedge without a provider to hedge on.
    pub fn providers(&self, main_model: &str) -> Result<Vec<Provider>, LlmError> {
        if self.models.len() > self.base_urls.len() {
            return Err(LlmError::Config(format!(
                "{} --fallback-model for {} --fallback-base-url: each model names the provider at \
                 the same position",
                self.models.len(),
                self.base_urls.len()
            )));
        }
        if self.hedge_after.is_some() && self.base_urls.is_empty() {
            return Err(LlmError::Config(
                "--hedge-after-ms needs a --fallback-base-url: there is no other provider to ask"
                    .to_owned(),
            ));
        }
        let main = Provider {
            name: "primary".to_owned(),
            base_url: None,
            model: main_model.to_owned(),
        };
        let fallbacks = self.base_urls.iter().enumerate().map(|(i, url)| Provider {
            name: format!("fallback-{}", i + 1),
            base_url: Some(url.clone()),
            model: self
                .models
                .get(i)
                .cloned()
                .unwrap_or_else(|| main_model.to_owned()),
        });
        Ok(std::iter::once(main).chain(fallbacks).collect())
    }
}

/// `chosen` (the model for `choice` and `name`, see [`choose`]) with `fallbacks` behind it:
/// unchanged without fallbacks; otherwise a [`FallbackLlm`] over the main model and each
/// fallback provider, on the client `choice` names, each with the same `OPENAI_API_KEY` and no
/// retries of its own (a provider that fails fails at once, so the next one answers). Logs
/// each provider. An error with the scripted model: fallbacks need a real one.
pub fn with_fallbacks(
    choice: ModelChoice,
    name: Option<String>,
    fallbacks: &Fallbacks,
    chosen: ChosenModel,
) -> Result<ChosenModel, LlmError> {
    if fallbacks.is_empty() {
        return Ok(chosen);
    }
    if chosen.scripted {
        return Err(LlmError::Config(
            "--fallback-base-url and --hedge-after-ms need a real model: set OPENAI_API_KEY (and \
             leave out --scripted)"
                .to_owned(),
        ));
    }
    let model = name
        .or_else(|| std::env::var("OPENAI_MODEL").ok())
        .unwrap_or_else(|| DEFAULT_OPENAI_MODEL.to_owned());
    let providers = fallbacks.providers(&model)?;
    chain(choice, None, &providers, fallbacks.hedge_after)
}

/// A [`FallbackLlm`] over `providers` on the client `choice` names, each keyed with `api_key`
/// (`None`: `OPENAI_API_KEY`), hedging after `hedge_after`.
pub fn chain(
    choice: ModelChoice,
    api_key: Option<&str>,
    providers: &[Provider],
    hedge_after: Option<Duration>,
) -> Result<ChosenModel, LlmError> {
    let mut builder = FallbackLlm::builder();
    let mut described = Vec::with_capacity(providers.len());
    for provider in providers {
        let (client, base_url) = provider_client(choice, api_key, provider)?;
        tracing::info!(
            provider = %provider.name,
            base_url = %base_url,
            model = %provider.model,
            "model provider"
        );
        described.push(format!(
            "{} {} at {base_url}",
            provider.name, provider.model
        ));
        builder = builder.provider(provider.name.clone(), client);
    }
    if let Some(after) = hedge_after {
        builder = builder.hedge(Hedge::Fixed(after));
    }
    let client = match choice {
        ModelChoice::AsyncOpenAiFromEnv => ", async-openai client",
        _ => "",
    };
    let hedge = hedge_after.map_or_else(String::new, |after| {
        format!(", hedged after {} ms", after.as_millis())
    });
    let fallback = builder.build()?;
    Ok(ChosenModel {
        llm: Arc::new(fallback.clone()),
        description: format!("fallback over {}{client}{hedge}", described.join(", ")),
        scripted: false,
        fallback: Some(fallback),
    })
}

/// One provider's client, with no retries of its own, and its base URL (for the logs).
fn provider_client(
    choice: ModelChoice,
    api_key: Option<&str>,
    provider: &Provider,
) -> Result<(Arc<dyn LlmClient>, String), LlmError> {
    if choice == ModelChoice::AsyncOpenAiFromEnv {
        use async_openai::{config::OpenAIConfig, middleware::ReqwestService};

        // `OpenAIConfig::new()` reads OPENAI_API_KEY and OPENAI_BASE_URL.
        let mut config = OpenAIConfig::new();
        if let Some(url) = &provider.base_url {
            config = config.with_api_base(url);
        }
        if let Some(key) = api_key {
            config = config.with_api_key(key);
        }
        let base_url = async_openai::config::Config::api_base(&config).to_owned();
        // Bounded as `bounded_client` is, without its retry layer: the next provider is the
        // retry.
        let service = tower::Layer::layer(
            &AnswerBodyLimit::default(),
            ReqwestService::new(reqwest::Client::new()),
        );
        let client = async_openai::Client::with_config(config).with_http_service(service);
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
    use super::*;

    fn fallbacks(urls: &[&str], models: &[&str], hedge_ms: Option<u64>) -> Fallbacks {
        Fallbacks {
            base_urls: urls.iter().map(|u| (*u).to_owned()).collect(),
            models: models.iter().map(|m| (*m).to_owned()).collect(),
            hedge_after: hedge_ms.map(Duration::from_millis),
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
                    model: "gpt-4o-mini".into()
                },
                Provider {
                    name: "fallback-1".into(),
                    base_url: Some("http://a/v1".into()),
                    model: "llama".into()
                },
                Provider {
                    name: "fallback-2".into(),
                    base_url: Some("http://b/v1".into()),
                    model: "gpt-4o-mini".into()
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
            error.to_string().contains("--hedge-after-ms needs"),
            "{error}"
        );
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
            scripted.clone(),
        )
        .unwrap_err();
        assert!(error.to_string().contains("need a real model"), "{error}");
        // Without fallback flags the model is handed back as it was.
        let same = with_fallbacks(ModelChoice::Scripted, None, &Fallbacks::default(), scripted);
        assert!(same.unwrap().scripted);
    }
}
