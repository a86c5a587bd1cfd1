//! A crew whose weather tool runs in another process. The crew server serves the task API
//! beside `/ws`; a client (this binary with `--client`, or any program that speaks the API)
//! registers its `get_weather` with `POST /task`, prints the task id, and answers the crew's
//! tool calls as they come (`GET /task/{id}?event_t=..&wait_ms=..`, then
//! `POST /task/{id}/event`). A platform call that carries `task_id` in its variables gets
//! the client's tool: the crew's setup code attaches the task, which adds a remote
//! `get_weather` to the call's registry; when the model calls it, the call parks until the
//! client answers or the tool's timeout passes. When the call ends, the task is done with the
//! agent's last reply as its output, and the client prints it and exits.
//!
//! ```sh
//! cargo run --example remote_weather -- --port 8080                 # the crew (scripted model)
//! cargo run --example remote_weather -- --client --url http://127.0.0.1:8080/api/v1
//! #   prints task_id=task_...; then talk to the crew with that variable, e.g.
//! crewline chat --url ws://127.0.0.1:8080/ws --var task_id=task_...  # "weather in Oslo?"
//! ```
//!
//! `--api-key KEY` (both sides) protects the task API; `OPENAI_API_KEY` (or `OPENAI_BASE_URL`)
//! switches the crew to a real model; `CREWLINE_REDIS_URL` (e.g. `redis://127.0.0.1:6379`)
//! keeps the tasks in Redis, so several replicas of this server behind a load balancer serve
//! one set of tasks. The scripted model greets as the `voice_agent` example's does: a copy of
//! this file needs a copy of `voice_agent.rs` beside it (and that file's dependencies).
//!
//! A copy of this file is a whole project: save it as `src/main.rs` beside this `Cargo.toml`
//!
//! ```toml
//! [dependencies]
//! crewline = "0.1"
//! crewline-server = { version = "0.1", features = ["clap", "otel", "redis"] }
//! clap = { version = "4", features = ["derive"] }
//! serde_json = "1"
//! tokio = { version = "1", features = ["full"] }
//! tracing = "0.1"
//! crewline-remote = "0.1"
//! crewline-redis = "0.1"
//! thiserror = "2"
//! mimalloc = { version = "0.1", default-features = false }
//! ```

use std::{io::Write, sync::Arc, time::Duration};

use crewline::{
    llm::{ChatRequest, Reply, ScriptedLlm},
    prelude::*,
    tool::ToolRegistry,
    types::Message,
};
use crewline_remote::{ClientConfig, TaskApi};
use crewline_server::{BoxError, CrewArgs, CrewServer, model::choose};
use serde_json::{Value, json};

/// The `voice_agent` example, for its scripted model's greeting (its crew unused here).
#[path = "voice_agent.rs"]
#[allow(dead_code)]
pub mod voice_agent;

/// The remote weather crew (`/ws` and the task API on `/task`), or with `--client` the
/// client whose process runs `get_weather`.
#[derive(Debug, clap::Parser)]
pub struct Args {
    /// crewline-server's shared flags: where to listen, the token, the model.
    #[command(flatten)]
    pub crew: CrewArgs,
    /// Run the client instead of the server.
    #[arg(long)]
    pub client: bool,
    /// The task API's base URL, as for Smooth's: e.g. http://127.0.0.1:8080/api/v1 (the
    /// server's root works too).
    #[arg(long)]
    pub url: Option<String>,
    /// The task API's key (server: required of task clients; client: sent with each request).
    #[arg(long)]
    pub api_key: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The flags, then the logs: stderr (the client's stdout carries its task id for scripts),
    // and each turn traced over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let args = <Args as clap::Parser>::parse();
    let _logs = crewline_server::init_logs("info");
    if args.client {
        return run_client(args).await;
    }
    // The model: OPENAI_BASE_URL's or OpenAI's (with OPENAI_API_KEY), else the scripted one;
    // behind a fallback over other providers when --fallback-base-url is given.
    let chosen = choose(
        args.crew.model.choice(),
        args.crew.model.model.clone(),
        || scripted_model(Duration::from_millis(20)),
    )?;
    let model = args.crew.model.with_fallbacks(chosen).await?;
    // The tasks: in memory, or shared by every replica through Redis (CREWLINE_REDIS_URL).
    let mut tasks = task_api()
        .await
        .inspect_err(|error| {
            // Said once, readably, before main's own report of the error.
            tracing::error!(%error, "the task API's store is unavailable; not serving");
        })?
        .tool_timeout(Duration::from_secs(10));
    if let Some(key) = args.api_key {
        tasks = tasks.api_key(key)?;
    }
    // The crew, one per call; attaching a call's task is async, so the setup is an async
    // closure of the call.
    let weather = RemoteWeatherCrew::new(model.llm.clone(), tasks.clone());
    let server = CrewServer::new(move |setup: SessionSetup| {
        let weather = weather.clone();
        async move { weather.build(&setup).await }
    })
    .merge(tasks.router());
    let server = args.crew.apply(server);
    model.watch_on(&server);
    tracing::info!(
        port = args.crew.port,
        "remote weather crew on /ws, task API on /task"
    );
    server.run().await?;
    Ok(())
}

/// `--client`: registers the station's tool as a task, prints its id, answers the crew's
/// calls until the call ends, then prints the task's outcome.
async fn run_client(args: Args) -> Result<(), BoxError> {
    let url = args
        .url
        .ok_or("--client needs --url http://HOST:PORT/api/v1")?;
    let mut config = ClientConfig::new(url);
    if let Some(key) = args.api_key {
        config = config.api_key(key);
    }
    let outcome = station::run(config, |task_id| {
        // One line a script (or the test) can read: the id to give the call.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "task_id={task_id}");
        let _ = out.flush();
    })
    .await?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "status={} answered={} rejected={} output={}",
        outcome.status,
        outcome.calls_answered,
        outcome.answers_rejected,
        outcome.output.unwrap_or_default()
    )?;
    Ok(())
}

/// The agent's system prompt.
pub const PROMPT: &str = "You are a friendly voice assistant on a phone line. Answer in one or \
two short spoken sentences. For weather questions use get_weather.";

/// What the agent says when the weather station does not answer in time.
pub const NO_ANSWER: &str = "Sorry, the weather station did not answer in time. Please try again \
in a moment.";

/// The cities the scripted model recognises in what the caller says.
const CITIES: [&str; 5] = ["Paris", "Tokyo", "London", "Oslo", "Atlantis"];

/// The task API over the store the environment names: Redis when `CREWLINE_REDIS_URL` is set
/// (so several replicas serve one set of tasks), else this process's memory.
pub async fn task_api() -> Result<TaskApi, BoxError> {
    if std::env::var_os(crewline_server::REDIS_URL_VARIABLE).is_none_or(|url| url.is_empty()) {
        return Ok(TaskApi::new());
    }
    let store = crewline_redis::RedisStore::from_env().await?;
    tracing::info!(
        prefix = store.prefix(),
        "task API: tasks shared through Redis"
    );
    Ok(TaskApi::with_store(store))
}

/// Builds each call's crew: the shared model, and the call's remote tools from its task.
#[derive(Clone)]
pub struct RemoteWeatherCrew {
    llm: Arc<dyn LlmClient>,
    tasks: TaskApi,
}

impl std::fmt::Debug for RemoteWeatherCrew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteWeatherCrew")
            .field("tasks", &self.tasks)
            .finish_non_exhaustive()
    }
}

impl RemoteWeatherCrew {
    /// A crew answering with `llm`, whose calls attach tasks of `tasks`.
    pub fn new(llm: Arc<dyn LlmClient>, tasks: TaskApi) -> Self {
        Self { llm, tasks }
    }

    /// The crew for one call. A call with a `task_id` variable gets that task's tools (again,
    /// after a reconnect with the same call id); an unknown task, or one another call holds,
    /// fails the call's setup with a clear error.
    pub async fn build(
        &self,
        setup: &SessionSetup,
    ) -> Result<Crew, Box<dyn std::error::Error + Send + Sync>> {
        let mut registry = ToolRegistry::new();
        let mut builder = Agent::builder(Arc::clone(&self.llm))
            .name("weather-agent")
            .prompt(PROMPT);
        // Attached for the platform's call id: a reconnect of the same call (to this replica
        // or another) attaches its task again; the task of a replica that died is released
        // after the attach lease.
        let call_id = setup.caller().and_then(|caller| caller.call_id.as_deref());
        if let Some(remote) = self
            .tasks
            .attach_call_for(setup.initial_variables(), call_id)
            .await?
        {
            tracing::info!(task_id = remote.task_id(), tools = ?remote.names(), "remote tools attached");
            // The registry owns the remote tools: when the call ends and the crew is dropped,
            // the task is marked done and the client stops polling.
            remote.register_into(&mut registry)?;
            // The task's output is what the call concluded: here the agent's last reply.
            let output = remote.output();
            builder = builder.on_call_end(move |context| output.record_last_reply(context));
        }
        let agent = builder.registry(registry).build()?;
        Ok(agent.crew_for(setup))
    }
}

/// The offline stand-in for a model: calls `get_weather` for the city the caller names, then
/// reads the result (or the error) back; to anything else it says which cities it knows.
pub fn scripted_model(chunk_delay: Duration) -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| match request.messages.last() {
        Some(Message::Tool { .. }) => {
            let said: Vec<String> = ScriptedLlm::last_tool_results(request)
                .into_iter()
                .map(|content| {
                    let value: Value =
                        serde_json::from_str(content).unwrap_or_else(|_| json!(content));
                    match value.get("error") {
                        // No answer: timed out, never taken by the station, or taken and
                        // never answered (an unknown outcome; a weather lookup has no effect).
                        Some(error)
                            if error["kind"] == "Timeout"
                                || error["kind"] == "OutcomeUnknown"
                                || error["message"]
                                    .as_str()
                                    .is_some_and(|m| m.contains("did not take the call")) =>
                        {
                            NO_ANSWER.to_owned()
                        }
                        Some(error) => error["message"]
                            .as_str()
                            .unwrap_or("That lookup failed.")
                            .to_owned(),
                        None => voice_agent::weather_sentence(&value),
                    }
                })
                .collect();
            Reply::text(said.join(" "))
        }
        Some(Message::User { content }) => {
            let said = content.to_lowercase();
            match CITIES
                .iter()
                .find(|city| said.contains(&city.to_lowercase()))
            {
                Some(city) => Reply::tool_calls([("get_weather", json!({"location": city}))])
                    .with_text("Let me check that for you."),
                None if voice_agent::is_greeting(&said) => Reply::text(voice_agent::GREETING),
                None => Reply::text(voice_agent::off_script(&CITIES, &[])),
            }
        }
        _ => Reply::text("How can I help?"),
    })
    .with_chunk_delay(chunk_delay)
}

/// The client side: a weather station whose `get_weather` runs in the client's process,
/// registered as a custom tool with the crew server's task API and answered over HTTP with
/// crewline-remote's `TaskClient` (`--client`).
pub mod station {
    use crewline::{
        prelude::*,
        tool::{RegistryError, ToolRegistry},
    };
    use crewline_remote::{ClientConfig, ClientError, TaskClient, TaskOutcome, wire::TaskRequest};
    use serde_json::{Value, json};

    /// The client's weather station; its `#[function_tool]` methods are the remote tools.
    #[derive(Debug, Clone, Default)]
    pub struct WeatherStation;

    #[tools]
    impl WeatherStation {
        /// Get the current weather for a location from the caller's weather station.
        ///
        /// # Arguments
        /// * `location` - City name, e.g. Paris
        #[function_tool(export = "remote")]
        async fn get_weather(&self, location: String) -> Result<Value, ToolError> {
            let (temperature_c, conditions) = match location.trim().to_lowercase().as_str() {
                "paris" => (18, "cloudy"),
                "tokyo" => (24, "sunny"),
                "london" => (12, "rainy"),
                "oslo" => (4, "snowing"),
                _ => {
                    return Err(ToolError::new(format!(
                        "The station has no data for {location}; ask for a larger city nearby."
                    )));
                }
            };
            Ok(json!({"location": location, "temperature_c": temperature_c,
                      "conditions": conditions, "source": "client weather station"}))
        }
    }

    /// The station's tools.
    pub fn registry() -> Result<ToolRegistry, RegistryError> {
        let mut registry = ToolRegistry::new();
        registry.discover(&std::sync::Arc::new(WeatherStation))?;
        Ok(registry)
    }

    /// Why the station client stopped.
    #[derive(Debug, thiserror::Error)]
    pub enum StationError {
        /// The tools could not be set up.
        #[error(transparent)]
        Registry(#[from] RegistryError),
        /// The task API failed.
        #[error(transparent)]
        Client(#[from] ClientError),
    }

    /// Registers the station's tools as a new task, tells `on_task` the task's id (to give to
    /// the call), and answers the crew's tool calls until the call ends.
    pub async fn run(
        config: ClientConfig,
        on_task: impl FnOnce(&str),
    ) -> Result<TaskOutcome, StationError> {
        let registry = registry()?;
        let client = TaskClient::new(config)?;
        let request = TaskRequest {
            custom_tools: TaskClient::custom_tools(&registry)?,
            ..TaskRequest::default()
        };
        let task = client.create_task(&request).await?;
        on_task(&task.id);
        Ok(client.serve(&task.id, &registry).await?)
    }
}
