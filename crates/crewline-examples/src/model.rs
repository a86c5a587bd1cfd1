//! The model a crew runs on: a real OpenAI-compatible one when `OPENAI_API_KEY` is set, else
//! the crew's own scripted model, so every example runs offline.

use std::sync::Arc;

use crewline::llm::{AsyncOpenAiClient, LlmClient, LlmError, OpenAiClient, ScriptedLlm};

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
        ModelChoice::FromEnv | ModelChoice::AsyncOpenAiFromEnv
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
            });
        }
        let client = OpenAiClient::from_env(model.clone())?;
        Ok(ChosenModel {
            llm: Arc::new(client),
            description: format!("OpenAI {model}"),
            scripted: false,
        })
    } else {
        Ok(ChosenModel {
            llm: Arc::new(scripted()),
            description: "scripted model (offline)".to_owned(),
            scripted: true,
        })
    }
}
