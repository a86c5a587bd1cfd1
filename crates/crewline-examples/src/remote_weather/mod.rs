//! The crew side of the remote weather example: a voice agent whose `get_weather` tool is not
//! its own. A client registers the tool with the crew server's task API (`POST /task`), the
//! platform call names the task in its `task_id` variable, and the crew's setup code attaches
//! the task, which adds a remote `get_weather` to the call's registry. When the model calls it,
//! the call parks until the client answers or the tool's timeout passes. When the call ends,
//! the task is `done` and its `output` is the agent's last reply.
//!
//! The example binary serves it; tests/remote_weather.rs drives it. The client side is
//! [`station`].

use crewline::{
    llm::{LlmError, Reply, ScriptedLlm},
    tool::ToolRegistry,
    types::Message,
};
use std::{sync::Arc, time::Duration};

use crewline::{llm::ChatRequest, prelude::*};
use crewline_remote::TaskApi;
use serde_json::{Value, json};

use crate::{
    model::{ChosenModel, ModelChoice, choose},
    voice_agent,
};

pub mod station;

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
///
/// The variable set in a build without the `redis` feature is an error, not a silent fall
/// back to memory: replicas that do not share their tasks would lose them between each other.
pub async fn task_api() -> Result<TaskApi, Box<dyn std::error::Error + Send + Sync>> {
    const URL_VARIABLE: &str = "CREWLINE_REDIS_URL";
    let wanted = std::env::var_os(URL_VARIABLE).is_some_and(|url| !url.is_empty());
    if !wanted {
        return Ok(TaskApi::new());
    }
    #[cfg(feature = "redis")]
    {
        let store = crewline_redis::RedisStore::from_env().await?;
        tracing::info!(
            prefix = store.prefix(),
            "task API: tasks shared through Redis"
        );
        Ok(TaskApi::with_store(store))
    }
    #[cfg(not(feature = "redis"))]
    {
        Err(format!(
            "{URL_VARIABLE} is set, but this build has no Redis store (crewline-examples' `redis` \
             feature)"
        )
        .into())
    }
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
                        None => format!(
                            "In {} it is {} degrees and {}.",
                            value["location"].as_str().unwrap_or("that city"),
                            value["temperature_c"],
                            value["conditions"].as_str().unwrap_or("unknown")
                        ),
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

/// The crew's model for `choice`: OpenAI's `name` (see [`crate::model::choose`]), or
/// [`scripted_model`] pausing `chunk_delay` before each streamed piece.
pub fn model(
    choice: ModelChoice,
    name: Option<String>,
    chunk_delay: Duration,
) -> Result<ChosenModel, LlmError> {
    let mut chosen = choose(choice, name, || scripted_model(chunk_delay))?;
    if chosen.scripted {
        chosen.description = format!("scripted model, {} ms per chunk", chunk_delay.as_millis());
    }
    Ok(chosen)
}
