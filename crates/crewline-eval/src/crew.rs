//! The crew under test: a URL, or a process the runner starts on a free port and stops.

use std::{
    net::{Ipv4Addr, SocketAddr},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use crewline_testkit::{
    mock_llm::{MockLlm, RunningMockLlm},
    platform::http,
};
use tokio::{
    io::AsyncReadExt,
    process::{Child, Command},
    time::Instant,
};

use crewline::eval_faults::{self, ToolFaults};

use crate::scenario::{CrewSpec, ModelSpec};

/// The API key the crew is given for the runner's mock model (which takes any key).
pub const MOCK_MODEL_KEY: &str = "crewline-eval-mock-model";

/// How much of a started crew's stderr is kept, from its end, for the error when it fails.
const STDERR_TAIL_BYTES: usize = 4096;
/// How often `/ready` is asked while the crew starts.
const READY_POLL: Duration = Duration::from_millis(100);

/// Why the crew could not be reached or started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CrewError {
    /// No free port could be found on 127.0.0.1.
    #[error("no free port on 127.0.0.1")]
    Port(#[source] std::io::Error),
    /// The command could not be started.
    #[error("could not start `{program}`")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The started crew exited before it was ready.
    #[error(
        "the crew exited ({status}) before /ready answered 200{}",
        tail(stderr)
    )]
    Exited {
        /// How it exited.
        status: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// `/ready` did not answer 200 in time.
    #[error("the crew did not answer /ready with 200 within {} ms{}", after.as_millis(), tail(stderr))]
    NotReady {
        /// How long the runner waited.
        after: Duration,
        /// The end of its stderr.
        stderr: String,
    },
    /// The scenario names no crew and none was given.
    #[error("the scenario names no crew (`crew.url` or `crew.command`)")]
    NoCrew,
    /// The variable named by `token_env` is not set.
    #[error("the crew's token variable {0} is not set")]
    MissingToken(String),
    /// The scenario has a `[model]` (or a `crew.model`) but the crew is reached by URL: the
    /// runner cannot point a running crew at a model.
    #[error(
        "the scenario's [model] or crew.model needs a crew the runner starts (`crew.command`), not a URL: a running crew cannot be pointed at a model"
    )]
    ModelNeedsCommand,
    /// The `[model]` script is not a valid mock script.
    #[error("{0}")]
    ModelScript(String),
    /// `crew.model`'s key variable is not set.
    #[error("{0}")]
    CrewModel(String),
    /// The runner's mock model could not be served.
    #[error("could not serve the mock model")]
    ServeModel(#[source] std::io::Error),
    /// The crew a test serves ([`CrewFactory`]) could not be made.
    #[error("the test's crew could not be served: {0}")]
    Factory(String),
}

/// What a [`CrewFactory`] returns: the crew's WebSocket URL, or why it could not serve one.
pub type ServedCrew = std::pin::Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

/// A crew a test serves itself, on the runner's model: told that model's base URL
/// (`http://127.0.0.1:PORT/v1`; `None` when the scenario has no `[model]`), it serves the
/// crew pointed at it and returns the crew's WebSocket URL. What a `crew.command` with
/// `{model_url}` is to `crewline eval`, in process, for `cargo test`.
#[derive(Clone)]
pub struct CrewFactory(Arc<dyn Fn(Option<String>) -> ServedCrew + Send + Sync>);

impl CrewFactory {
    /// A factory calling `serve` each time the runner needs the crew (once per scenario
    /// group sharing a crew, as a started command is).
    pub fn new<F, Fut>(serve: F) -> Self
    where
        F: Fn(Option<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, String>> + Send + 'static,
    {
        Self(Arc::new(move |model_url| Box::pin(serve(model_url))))
    }
}

impl std::fmt::Debug for CrewFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CrewFactory")
    }
}

impl PartialEq for CrewFactory {
    /// The same factory (not two that happen to serve the same crew).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CrewFactory {}

/// Serves `model`'s script on 127.0.0.1 (port 0), when there is one.
async fn serve_model(model: Option<&ModelSpec>) -> Result<Option<RunningMockLlm>, CrewError> {
    let Some(model) = model else {
        return Ok(None);
    };
    let script = model.script().map_err(CrewError::ModelScript)?;
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .map_err(CrewError::ServeModel)?;
    MockLlm::new(script)
        .serve(listener)
        .map(Some)
        .map_err(CrewError::ServeModel)
}

fn tail(stderr: &str) -> String {
    match stderr.trim() {
        "" => String::new(),
        text => format!("; its stderr ended with:\n{text}"),
    }
}

/// A crew to call: its WebSocket URL and bearer token, and the process when the runner
/// started it (killed when this is dropped).
pub struct RunningCrew {
    /// The crew's WebSocket address.
    pub(crate) url: String,
    /// The bearer token, from `token_env`.
    pub(crate) token: Option<String>,
    process: Option<Child>,
    /// The mock model the runner serves the crew, when the scenario has a `[model]`.
    model: Option<RunningMockLlm>,
}

impl std::fmt::Debug for RunningCrew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningCrew")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("process", &self.process.as_ref().and_then(Child::id))
            .field("model", &self.model.as_ref().map(RunningMockLlm::base_url))
            .finish()
    }
}

impl RunningCrew {
    /// The crew's WebSocket address.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The mock model's base URL (`http://127.0.0.1:PORT/v1`) when the runner serves one.
    pub fn model_url(&self) -> Option<String> {
        self.model.as_ref().map(RunningMockLlm::base_url)
    }

    /// Loads `model`'s script into the mock model the crew runs on (a scenario of a suite
    /// sharing the crew has its own script); clears the model's request log.
    pub(crate) fn load_model(&self, model: &ModelSpec) -> Result<(), CrewError> {
        let script = model.script().map_err(CrewError::ModelScript)?;
        if let Some(running) = &self.model {
            running.mock().load(script);
        }
        Ok(())
    }

    /// The crew `spec` names: `url_override` (e.g. `crewline eval --url`) or its `url` as
    /// is, else its `command` started and waited for. With `model`, the runner first serves
    /// a mock model playing its script on 127.0.0.1 and starts the command pointed at it:
    /// `OPENAI_BASE_URL` and `OPENAI_API_KEY` in its environment, `{model_url}` in its
    /// arguments.
    ///
    /// A `factory` (a crew a test serves) wins over both: it is given the mock model's URL.
    ///
    /// With `tool_faults`, a started crew gets them in `CREWLINE_EVAL_TOOL_FAULTS` (a crew
    /// reached by URL must have been started with them); without, the variable is removed
    /// from its environment, so a runner started with one never passes it on by accident.
    pub async fn start(
        spec: Option<&CrewSpec>,
        url_override: Option<&str>,
        model: Option<&ModelSpec>,
        factory: Option<&CrewFactory>,
        tool_faults: &ToolFaults,
    ) -> Result<Self, CrewError> {
        let token = match spec.and_then(|spec| spec.token_env.as_ref()) {
            Some(name) => {
                Some(std::env::var(name).map_err(|_| CrewError::MissingToken(name.clone()))?)
            }
            None => None,
        };
        if let Some(factory) = factory {
            let model = serve_model(model).await?;
            let url = (factory.0)(model.as_ref().map(RunningMockLlm::base_url))
                .await
                .map_err(CrewError::Factory)?;
            return Ok(Self {
                url,
                token,
                process: None,
                model,
            });
        }
        if let Some(url) = url_override.or(spec.and_then(|spec| spec.url.as_deref())) {
            if model.is_some() || spec.is_some_and(|spec| spec.model.is_some()) {
                return Err(CrewError::ModelNeedsCommand);
            }
            if !tool_faults.is_empty() {
                tracing::info!(
                    %url,
                    "tool faults need the crew at this URL started with them (CREWLINE_EVAL_TOOL_FAULTS)"
                );
            }
            return Ok(Self {
                url: url.to_owned(),
                token,
                process: None,
                model: None,
            });
        }
        let model = serve_model(model).await?;
        let model_url = model.as_ref().map(RunningMockLlm::base_url);
        let spec = spec.ok_or(CrewError::NoCrew)?;
        let command = spec.command.as_deref().unwrap_or_default();
        let (program, args) = command.split_first().ok_or_else(|| CrewError::Spawn {
            program: String::new(),
            source: std::io::Error::other("the command is empty"),
        })?;
        let port = free_port().await?;
        let port_text = port.to_string();
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                let a = a.replace("{port}", &port_text);
                match &model_url {
                    Some(url) => a.replace("{model_url}", url),
                    None => a,
                }
            })
            .collect();
        let mut command = Command::new(program);
        if let Some(live) = &spec.model {
            // A live provider's model, as the example crews read it (the key from its variable).
            for (name, value) in live.env().map_err(CrewError::CrewModel)? {
                command.env(name, value);
            }
        }
        if let Some(url) = &model_url {
            // What the example crews and `crewline demo` read to pick an OpenAI-compatible
            // model: they then run on the runner's mock, not their scripted model.
            command
                .env("OPENAI_BASE_URL", url)
                .env("OPENAI_API_KEY", MOCK_MODEL_KEY);
        }
        if tool_faults.is_empty() {
            command.env_remove(eval_faults::ENV_VAR);
        } else {
            // Armed by the process's starter only: no caller can reach this switch.
            command.env(eval_faults::ENV_VAR, tool_faults.to_json());
        }
        let mut child = command
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| CrewError::Spawn {
                program: program.clone(),
                source,
            })?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(pipe) = child.stderr.take() {
            tokio::spawn(keep_tail(pipe, Arc::clone(&stderr)));
        }
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let timeout = Duration::from_millis(spec.ready_timeout_ms);
        wait_ready(&mut child, addr, timeout, &stderr).await?;
        tracing::info!(%program, port, "crew started and ready");
        Ok(Self {
            url: format!("ws://{addr}{}", spec.path),
            token,
            process: Some(child),
            model,
        })
    }

    /// Stops the started crew, if any, and waits for it to exit.
    pub async fn stop(mut self) {
        if let Some(mut child) = self.process.take() {
            // Already gone is fine: either way it no longer runs.
            let _ = child.kill().await;
        }
    }
}

/// A port free on 127.0.0.1 now (the crew binds it a moment later; another process could
/// take it in between, which then shows as a crew that does not become ready).
async fn free_port() -> Result<u16, CrewError> {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .map_err(CrewError::Port)?;
    Ok(listener.local_addr().map_err(CrewError::Port)?.port())
}

/// Asks `/ready` until it answers 200, the process exits, or `timeout` passes.
async fn wait_ready(
    child: &mut Child,
    addr: SocketAddr,
    timeout: Duration,
    stderr: &Mutex<Vec<u8>>,
) -> Result<(), CrewError> {
    let deadline = Instant::now() + timeout;
    let stderr_text = || {
        let bytes = stderr.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(CrewError::Exited {
                status: status.to_string(),
                stderr: stderr_text(),
            });
        }
        let ask = tokio::time::timeout_at(deadline, http::get(addr, "/ready"));
        if let Ok(Ok(response)) = ask.await
            && response.status == 200
        {
            return Ok(());
        }
        if Instant::now() + READY_POLL >= deadline {
            return Err(CrewError::NotReady {
                after: timeout,
                stderr: stderr_text(),
            });
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// Reads the crew's stderr to its end, keeping only the last [`STDERR_TAIL_BYTES`].
async fn keep_tail(mut pipe: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buffer = [0u8; 1024];
    while let Ok(read) = pipe.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let Ok(mut kept) = tail.lock() else { break };
        kept.extend_from_slice(&buffer[..read]);
        let excess = kept.len().saturating_sub(STDERR_TAIL_BYTES);
        kept.drain(..excess);
    }
}
