//! The client's settings, checked once when it is built.

use std::{
    fmt,
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use hyper::header::{AUTHORIZATION, HeaderName, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value};

use super::{
    OpenAiClient, body,
    http::{Settings, Transport},
    key::ApiKey,
};
use crate::{
    AnswerLimits, LlmError, MaxTokensField, RequestOptions, TlsRoots, transport::proxy::Proxies,
};

/// The API base used when neither the builder nor `OPENAI_BASE_URL` names one.
const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);
/// A live call's limit on silence mid-answer. A healthy stream sends a token every few tens of
/// milliseconds and pauses for a second or two at worst (a loaded provider); a caller who
/// hears nothing for ten seconds is about to hang up, so by then the turn must end with an
/// error the platform can act on (apologize, transfer) rather than wait on.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest line or event of a stream, and the largest whole answer. A chunk is a few
/// hundred bytes and the longest answers are tens of kilobytes: 4 MiB is far above anything
/// real, yet bounds what a runaway or hostile server can make one call hold.
const DEFAULT_MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;
pub(super) const DEFAULT_MAX_RETRIES: usize = 2;

/// Settings for an [`OpenAiClient`].
///
/// Start from [`OpenAiClient::builder`]; only the model and a key are required. Defaults set
/// here go in every request's body; a request's [`RequestOptions`](crate::RequestOptions)
/// override them.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use crewline_core::Message;
/// use crewline_llm::{ChatRequest, LlmClient, LlmError, OpenAiClient};
/// # use crewline_testkit::mock_llm::{MockLlm, Script};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let mock = MockLlm::new(Script::default()).spawn("127.0.0.1:0".parse()?).await?;
/// # let base_url = format!("{}/", mock.base_url());
/// let client = OpenAiClient::builder()
///     .model("llama-3.1-8b")
///     .base_url(base_url) // a trailing `/` is dropped
///     .api_key("sk-local")
///     .read_env(false) // depend on nothing but these settings
///     .temperature(0.2)
///     .extra("seed", serde_json::json!(7))
///     .first_byte_timeout(Duration::from_secs(60)) // a model that thinks first
///     .max_retries(0)
///     .build()?;
/// assert!(!client.base_url().ends_with('/'));
///
/// client.chat(ChatRequest::new(vec![Message::user("Hi")])).await?;
/// let sent = &mock.mock().requests()[0].body;
/// assert_eq!(sent["model"], "llama-3.1-8b");
/// assert_eq!(sent["temperature"], 0.2);
/// assert_eq!(sent["seed"], 7);
///
/// // Settings are checked when the client is built, not on the first call.
/// let no_key = OpenAiClient::builder().model("gpt-4o-mini").read_env(false).build();
/// assert!(matches!(no_key, Err(LlmError::MissingApiKey)));
/// let bad_url = OpenAiClient::builder().model("m").api_key("k").base_url("ftp://x").build();
/// assert!(matches!(bad_url, Err(LlmError::Config(_))));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct OpenAiClientBuilder {
    model: Option<String>,
    base_url: Option<String>,
    api_key: Option<SecretString>,
    read_env: bool,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    extra: Map<String, Value>,
    /// The typed defaults set with [`OpenAiClientBuilder::defaults`] and the quirk settings.
    options: RequestOptions,
    /// Azure OpenAI's deployment and `api-version`, when the base URL is an Azure resource.
    azure: Option<Azure>,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    idle_timeout: Duration,
    max_retries: usize,
    max_event_bytes: usize,
    answer_limits: AnswerLimits,
    /// PEM given to [`OpenAiClientBuilder::add_root_certificate`], read when built.
    root_pems: Vec<Vec<u8>>,
    http2: bool,
    /// The proxy given to [`OpenAiClientBuilder::proxy`] and its exemptions (else the
    /// environment's).
    proxy: Option<(SecretString, String)>,
}

impl Default for OpenAiClientBuilder {
    fn default() -> Self {
        Self {
            model: None,
            base_url: None,
            api_key: None,
            read_env: true,
            temperature: None,
            max_tokens: None,
            extra: Map::new(),
            options: RequestOptions::default(),
            azure: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            answer_limits: AnswerLimits::default(),
            root_pems: Vec::new(),
            http2: false,
            proxy: None,
        }
    }
}

impl fmt::Debug for OpenAiClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClientBuilder")
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("read_env", &self.read_env)
            .field("temperature", &self.temperature)
            .field("max_tokens", &self.max_tokens)
            .field("extra", &self.extra)
            .field("options", &self.options)
            .field("azure", &self.azure)
            .field("connect_timeout", &self.connect_timeout)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_retries", &self.max_retries)
            .field("max_event_bytes", &self.max_event_bytes)
            .field("answer_limits", &self.answer_limits)
            .field("root_certificates", &self.root_pems.len())
            .field("http2", &self.http2)
            // Not the proxy's URL: it may hold a password.
            .field("proxy", &self.proxy.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl OpenAiClientBuilder {
    /// The model to use (required).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The API base URL, e.g. `http://localhost:8000/v1` (default: `OPENAI_BASE_URL`, else
    /// `https://api.openai.com/v1`).
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = Some(base_url.into());
        self
    }

    /// The API key (default: `OPENAI_API_KEY`).
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(SecretString::from(api_key.into()));
        self
    }

    /// Whether `build()` may fall back to `OPENAI_API_KEY` and `OPENAI_BASE_URL` (default
    /// `true`); turn off to depend on nothing but the builder.
    pub fn read_env(mut self, read_env: bool) -> Self {
        self.read_env = read_env;
        self
    }

    /// The default sampling temperature.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// The default limit of generated tokens (sent as `max_tokens`, or as
    /// `max_completion_tokens` after [`max_tokens_field`](Self::max_tokens_field)).
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// The body field the token limit goes in (default `max_tokens`). OpenAI's reasoning
    /// models (o1, o3, gpt-5...) refuse `max_tokens`: use
    /// [`MaxTokensField::MaxCompletionTokens`] for them.
    pub fn max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.options.max_tokens_field = Some(field);
        self
    }

    /// Whether streamed answers ask for token usage with `stream_options` (default `true`).
    /// Turn off for a server that rejects `stream_options`; without this, the client finds
    /// out from the server's first 400 naming it, retries once without it and leaves it out
    /// from then on (one warning).
    pub fn stream_usage(mut self, stream_usage: bool) -> Self {
        self.options.stream_usage = Some(stream_usage);
        self
    }

    /// Azure OpenAI: requests go to
    /// `{endpoint}/openai/deployments/{deployment}/chat/completions?api-version={api_version}`
    /// with the key in the `api-key` header (default: `AZURE_OPENAI_API_KEY`, else
    /// `OPENAI_API_KEY`). The model defaults to the deployment's name (Azure reads the
    /// deployment from the URL). Azure's content-filter fields in chunks are read without
    /// error; an answer the filter stopped ends with
    /// [`FinishReason::ContentFilter`](crate::FinishReason::ContentFilter).
    ///
    /// ```
    /// let client = crewline_llm::OpenAiClient::builder()
    ///     .azure("https://my-resource.openai.azure.com", "gpt-4o-prod", "2024-10-21")
    ///     .api_key("azure-key")
    ///     .build()?;
    /// assert_eq!(client.model(), "gpt-4o-prod");
    /// # Ok::<(), crewline_llm::LlmError>(())
    /// ```
    pub fn azure(
        mut self,
        endpoint: impl Into<String>,
        deployment: impl Into<String>,
        api_version: impl Into<String>,
    ) -> Self {
        self.base_url = Some(endpoint.into());
        self.azure = Some(Azure {
            deployment: deployment.into(),
            api_version: api_version.into(),
        });
        self
    }

    /// Typed defaults for every request (`parallel_tool_calls`, `response_format`, `seed`,
    /// `user`, `metadata`...); the builder's own setters (model, temperature, token limit,
    /// extras, token field, stream usage) win over the same fields here, whatever the order
    /// of the calls.
    pub fn defaults(mut self, options: RequestOptions) -> Self {
        let quirks = (self.options.max_tokens_field, self.options.stream_usage);
        self.options = options;
        self.options.max_tokens_field = quirks.0.or(self.options.max_tokens_field);
        self.options.stream_usage = quirks.1.or(self.options.stream_usage);
        self
    }

    /// An extra body parameter sent with every request (`top_p`, `seed`, vendor fields...).
    pub fn extra(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra.insert(key.into(), value);
        self
    }

    /// The time limit for opening a connection (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The time limit from sending a request to its answer's headers and first token (text,
    /// a tool call or the finish reason), retries included (default 30 s). Separate from the
    /// idle timeout so a reasoning model that thinks before its first token can be given
    /// longer. A non-streaming [`LlmClient::chat`](crate::LlmClient::chat) gets this plus the
    /// idle timeout for its whole answer.
    pub fn first_byte_timeout(mut self, timeout: Duration) -> Self {
        self.first_byte_timeout = timeout;
        self
    }

    /// The longest allowed gap between two chunks of a streamed answer that carry something
    /// (text, a tool call, the finish reason, usage), after the first token (default 10 s: a
    /// caller hears nothing while the stream is silent). Keepalives, comments and empty
    /// deltas do not count. An HTTP/2 connection silent this long is pinged, and closed when
    /// the ping is not answered within it as long.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// The largest line or event of a streamed answer, and the largest non-streamed answer,
    /// in bytes (default 4 MiB); past it the call fails with [`LlmError::TooLarge`], having
    /// held at most about this much of the answer.
    pub fn max_event_bytes(mut self, max_event_bytes: usize) -> Self {
        self.max_event_bytes = max_event_bytes;
        self
    }

    /// The bounds of one whole answer: its bytes (text, reasoning and tool calls together),
    /// its tool calls, one call's bytes (default [`AnswerLimits::default`]: 1 MiB, 128 calls,
    /// 256 KiB). Past one the answer fails with [`LlmError::TooLarge`] or
    /// [`LlmError::TooManyToolCalls`] at once, having held at most about the limit.
    pub fn answer_limits(mut self, limits: AnswerLimits) -> Self {
        self.answer_limits = limits;
        self
    }

    /// How many times a request is retried before its first byte (default 2).
    pub fn max_retries(mut self, max_retries: usize) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// Trusts the CA certificates of `pem` (one or more `-----BEGIN CERTIFICATE-----` blocks)
    /// beside the platform's roots and those of `SSL_CERT_FILE`: a self-hosted model behind
    /// a private CA, a company's TLS-inspecting proxy. A `pem` with no certificate fails the
    /// build with [`LlmError::Config`].
    pub fn add_root_certificate(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.root_pems.push(pem.as_ref().to_vec());
        self
    }

    /// Whether HTTPS connections offer HTTP/2 by ALPN (default `false`, see below): a server that speaks
    /// it carries many calls' streams on one connection; one that does not answers over
    /// HTTP/1.1, a connection per stream. Plain `http://` is always HTTP/1.1.
    ///
    /// Over HTTP/2 a connection carries at most the server's `SETTINGS_MAX_CONCURRENT_STREAMS`
    /// streams (often 100 to 256); further requests wait for a free stream rather than open
    /// another connection (hyper-util's pool keeps one HTTP/2 connection per server and
    /// runtime thread), so it stays off by default until a load run at 10,000 calls shows
    /// the stream limit costs a call nothing.
    pub fn http2(mut self, http2: bool) -> Self {
        self.http2 = http2;
        self
    }

    /// Sends every request through `proxy` instead of the one the environment names
    /// (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, either case, read by default), except to the
    /// hosts of `no_proxy` (`NO_PROXY`'s syntax: `localhost,.internal,10.0.0.0/8`). `http://`
    /// proxies are asked for a tunnel (`CONNECT`); `socks5://`, `socks5h://` (names resolved
    /// by the proxy) and `socks4://` are SOCKS; credentials go in the URL's user part and
    /// are sent to the proxy alone, never logged.
    pub fn proxy(mut self, proxy: impl Into<String>, no_proxy: impl Into<String>) -> Self {
        self.proxy = Some((SecretString::from(proxy.into()), no_proxy.into()));
        self
    }

    /// Checks the settings and builds the client.
    pub fn build(mut self) -> Result<OpenAiClient, LlmError> {
        let azure = self.azure.take();
        let model = self
            .model
            .or_else(|| self.options.model.take())
            .or_else(|| azure.as_ref().map(|a| a.deployment.clone()))
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| {
                LlmError::config("no model: call OpenAiClientBuilder::model(..)".to_owned())
            })?;
        let api_key = self
            .api_key
            .or_else(|| {
                azure
                    .as_ref()
                    .and_then(|_| env_var(self.read_env, "AZURE_OPENAI_API_KEY"))
                    .or_else(|| env_var(self.read_env, "OPENAI_API_KEY"))
                    .map(SecretString::from)
            })
            .filter(|k| !k.expose_secret().trim().is_empty())
            .ok_or(LlmError::MissingApiKey)?;
        let key = api_key.expose_secret().trim();
        let base_url = self
            .base_url
            .or_else(|| env_var(self.read_env, "OPENAI_BASE_URL"))
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let base_url = check_base_url(&base_url)?;
        let mut extra = std::mem::take(&mut self.options.extra);
        extra.extend(self.extra);
        if let Some(temperature) = self.temperature.or(self.options.temperature) {
            body::check_temperature(temperature)?;
        }
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("first_byte_timeout", self.first_byte_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if value.is_zero() {
                return Err(LlmError::config(format!("{name} must be more than zero")));
            }
        }
        if self.max_event_bytes == 0 {
            return Err(LlmError::config(
                "max_event_bytes must be more than zero".to_owned(),
            ));
        }

        // The key travels only in this header, marked sensitive so no HTTP layer logs it.
        let (key_header, value) = match &azure {
            Some(_) => (HeaderName::from_static("api-key"), key.to_owned()),
            None => (AUTHORIZATION, format!("Bearer {key}")),
        };
        let mut authorization = HeaderValue::from_str(&value).map_err(|_| {
            LlmError::config(
                "the API key has characters that cannot go in an HTTP header".to_owned(),
            )
        })?;
        authorization.set_sensitive(true);

        let url = match &azure {
            Some(azure) => azure.url(&base_url)?,
            None => format!("{base_url}/chat/completions"),
        };
        let roots = self
            .root_pems
            .iter()
            .try_fold(TlsRoots::new(), |roots, pem| roots.add_pem(pem))?;
        let proxies = match &self.proxy {
            Some((proxy, no_proxy)) => Proxies::fixed(proxy.expose_secret(), no_proxy),
            // The environment's proxy whatever `read_env` says, as before: the machine's
            // network, not the client's settings.
            None => Proxies::from_system(),
        };
        let settings = Settings {
            proxies,
            connect_timeout: self.connect_timeout,
            roots,
            http2: self.http2,
            counters: Default::default(),
            ping_after: self.idle_timeout,
        };
        let transport =
            Transport::new(settings, &url, key_header, authorization, self.max_retries)?;

        Ok(OpenAiClient {
            transport,
            defaults: RequestOptions {
                model: Some(model),
                temperature: self.temperature.or(self.options.temperature),
                max_tokens: self.max_tokens.or(self.options.max_tokens),
                extra,
                ..self.options
            },
            stream_options_refused: Arc::new(AtomicBool::new(false)),
            base_url,
            api_key: ApiKey(Arc::new(SecretString::from(key))),
            connect_timeout: self.connect_timeout,
            first_byte_timeout: self.first_byte_timeout,
            idle_timeout: self.idle_timeout,
            max_retries: self.max_retries,
            max_event_bytes: self.max_event_bytes,
            answer_limits: self.answer_limits,
        })
    }
}

/// An Azure OpenAI deployment.
#[derive(Debug, Clone)]
struct Azure {
    deployment: String,
    api_version: String,
}

impl Azure {
    /// The deployment's chat-completions URL under the resource's `endpoint`.
    fn url(&self, endpoint: &str) -> Result<String, LlmError> {
        if self.deployment.trim().is_empty() || self.api_version.trim().is_empty() {
            return Err(LlmError::config(
                "Azure OpenAI needs a deployment and an api-version".to_owned(),
            ));
        }
        let mut url = url::Url::parse(endpoint).map_err(|e| {
            LlmError::config_caused_by(format!("invalid Azure endpoint {endpoint:?}"), e)
        })?;
        url.path_segments_mut()
            .map_err(|()| LlmError::config(format!("invalid Azure endpoint {endpoint:?}")))?
            .pop_if_empty()
            .extend([
                "openai",
                "deployments",
                self.deployment.trim(),
                "chat",
                "completions",
            ]);
        url.query_pairs_mut()
            .append_pair("api-version", self.api_version.trim());
        Ok(url.into())
    }
}

/// The variable's value, if reading the environment is allowed and it is set.
fn env_var(allowed: bool, name: &str) -> Option<String> {
    if allowed {
        std::env::var(name).ok()
    } else {
        None
    }
}

/// The base URL without a trailing slash (`/chat/completions` is appended to it).
fn check_base_url(base_url: &str) -> Result<String, LlmError> {
    let trimmed = base_url.trim().trim_end_matches('/');
    let url = url::Url::parse(trimmed)
        .map_err(|e| LlmError::config_caused_by(format!("invalid base URL {trimmed:?}"), e))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(LlmError::config(format!(
            "invalid base URL {trimmed:?}: the scheme must be http or https"
        )));
    }
    Ok(trimmed.to_owned())
}

/// Settings for the tests: a model, a key, a local URL, no environment.
#[cfg(test)]
pub(super) fn test_builder() -> OpenAiClientBuilder {
    OpenAiClient::builder()
        .model("m")
        .api_key("sk-secret-123456")
        .base_url("http://127.0.0.1:9/v1/")
        .read_env(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> OpenAiClientBuilder {
        test_builder()
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let builder = builder();
        assert!(!format!("{builder:?}").contains("sk-secret"));
        let client = builder.build().expect("client");
        let debug = format!("{client:?}");
        assert!(!debug.contains("sk-secret"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
    }

    #[test]
    fn trailing_slash_is_trimmed_from_the_base_url() {
        assert_eq!(
            builder().build().expect("client").base_url(),
            "http://127.0.0.1:9/v1"
        );
    }

    #[test]
    fn bad_settings_are_config_errors() {
        let cases = [
            OpenAiClient::builder().api_key("k").read_env(false).build(),
            builder().model(" ").build(),
            builder().base_url("ftp://x").build(),
            builder().base_url("not a url").build(),
            builder().temperature(f32::INFINITY).build(),
            builder().idle_timeout(Duration::ZERO).build(),
            builder().max_event_bytes(0).build(),
            builder().api_key("bad\nkey").build(),
        ];
        for case in cases {
            let err = case.expect_err("invalid settings");
            assert!(matches!(err, LlmError::Config(_)), "{err:?}");
            assert!(!err.to_string().contains("bad\nkey"));
        }
    }

    #[test]
    fn missing_or_blank_key_is_missing_api_key() {
        let no_key = OpenAiClient::builder().model("m").read_env(false).build();
        assert!(matches!(no_key, Err(LlmError::MissingApiKey)));
        let blank = builder().api_key("  ").build();
        assert!(matches!(blank, Err(LlmError::MissingApiKey)));
    }
}
