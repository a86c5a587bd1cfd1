//! The reference's weather agent served as a crew: the platform connects to `/ws`, sends
//! `system.init`, and asks for each LLM turn; the crew streams its answers, runs `get_weather`
//! (several cities in one round run in parallel, at most `MAX_TOOL_ROUNDS` = 4 rounds) and
//! reports tool activity as `agent.log` events. A drop-in for the same agent written with the
//! Python SDK, built only from crewline's public API: an `Agent` whose tools `#[tools]` finds.
//!
//! The weather service is slow, and silence on a phone line sounds like a dropped call, so
//! the crew says a filler (`FILLER`) the moment the model asks for the weather, before the
//! lookups start; the model's answer follows when they finish. The filler is the crew's, not
//! the model's (real models often call tools without a word first), so it is said every time
//! and exactly once per turn, never on top of words the model already said; and it is part
//! of the turn's stream, so a barge-in silences it, cancels the lookups, and nothing more is
//! said.
//!
//! ```sh
//! cargo run --example voice_agent -- --port 8080            # scripted model, offline
//! OPENAI_API_KEY=... cargo run --example voice_agent -- --model gpt-4o-mini
//! OPENAI_BASE_URL=http://127.0.0.1:11434/v1 cargo run --example voice_agent -- --model llama3.2
//! OPENAI_API_KEY=... cargo run --example voice_agent -- --llm-client async-openai
//! crewline chat --url ws://127.0.0.1:8080/ws                 # talk to it
//! ```
//!
//! A caller who goes quiet is a phone line's other silence: with `--idle` the crew checks in
//! after 10 s without a word ("Are you still there?", twice), then says goodbye and ends the
//! call (`IdlePolicy::phone_call`, see `WeatherCrew::with_idle`); never in a `chat`, and
//! never over the caller or a reply. Off by default, as in every crew: the platform may
//! handle a silent line itself.
//!
//! What each call cost: every turn's tokens (prompt, completion, cached, reasoning) are on its
//! `crewline.turn` span and in `/metrics`; `--prices 'gpt-4o-mini=0.15,0.075,0.60'` (per
//! million tokens, or `@prices.txt`) adds money, and `--log-usage` sends each turn's usage and
//! the call's running total to the platform as an `llm_usage` log (see `WeatherCrew::with_cost`).
//!
//! A long call: with `--summarize` the crew counts each call's context in tokens (by OpenAI's
//! tokenizer for an OpenAI model name, else 4 bytes a token; the server's reported prompt
//! tokens replace the count when they come) and, past 75% of 16k tokens, has the oldest turns
//! summarized in the background by `--summary-model` (default: the crew's model), keeping the
//! last 4 turns (`Summarizer`, see `WeatherCrew::with_long_call`). With `--log-usage` each
//! summary is also logged to the platform (`context_summary`).
//!
//! `--service-delay-ms N` sets the pretend weather service's time per call (default 300; the
//! load benchmarks use 0, like the reference's tool). Calls run on one single-threaded
//! runtime per CPU (`CrewServer::worker_runtimes`); `--worker-runtimes 0` runs them on one
//! shared, multi-threaded runtime instead. The `sentiment_background`, `weather_agent` and
//! `azure_weather` examples build on this crew: copy this file beside them.
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
//! mimalloc = { version = "0.1", default-features = false }
//! ```

use std::{sync::Arc, time::Duration};

use crewline::{
    agent::AgentError,
    idle::IdlePolicy,
    llm::{ChatRequest, LlmError, PriceTable, Reply, ScriptedLlm, TiktokenCounter},
    prelude::*,
    summary::Summarizer,
    turn::ToolLoop,
    types::Message,
};
use crewline_server::{
    BoxError, CrewArgs, CrewServer,
    model::{ChosenModel, ModelChoice, choose},
};
use serde_json::{Value, json};

/// mimalloc instead of glibc malloc: each call allocates a few small buffers per frame, and
/// glibc's malloc/free were ~30 % of this server's CPU under load (BENCHMARKS.md "Load"). The
/// repository's `system-allocator` feature turns it off, for heap profilers.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Serves the weather crew on `/ws`.
#[derive(Debug, clap::Parser)]
pub struct Args {
    /// crewline-server's shared flags: where to listen, the token, the model.
    #[command(flatten)]
    pub crew: CrewArgs,
    /// How long the weather service takes to answer, in milliseconds (default 300).
    #[arg(long = "service-delay-ms", value_name = "MS", value_parser = parse_millis)]
    pub service_delay: Option<Duration>,
    /// Serve calls on N single-threaded runtimes (default: one per CPU; 0: on one shared,
    /// multi-threaded runtime).
    #[arg(long, value_name = "N", default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
    pub worker_runtimes: usize,
    /// Check in on a caller who goes quiet, then say goodbye and end the call
    /// (`IdlePolicy::phone_call`: 10 s of silence, two nudges).
    #[arg(long)]
    pub idle: bool,
    /// Summarize a long call's oldest turns in the background (past 75% of 16k tokens, the
    /// last 4 turns kept).
    #[arg(long)]
    pub summarize: bool,
    /// The (cheaper) model that writes the summaries (default: the crew's).
    #[arg(long, value_name = "NAME", requires = "summarize")]
    pub summary_model: Option<String>,
}

fn parse_millis(text: &str) -> Result<Duration, std::num::ParseIntError> {
    text.parse().map(Duration::from_millis)
}

fn main() -> Result<(), BoxError> {
    // The flags, then the logs: stderr, and each turn traced over OTLP when
    // OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let args = <Args as clap::Parser>::parse();
    let _logs = crewline_server::init_logs("info");
    // With worker runtimes the calls run on the server's own threads, and this runtime only
    // waits for the shutdown signal: one thread is enough for it.
    let runtime = if args.worker_runtimes > 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
    };
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> Result<(), BoxError> {
    // The model: OPENAI_BASE_URL's or OpenAI's (with OPENAI_API_KEY), else the scripted one;
    // behind a fallback over other providers when --fallback-base-url is given.
    let chosen = model(
        args.crew.model.choice(),
        args.crew.model.model.clone(),
        Duration::from_millis(20),
    )?;
    let model = args.crew.model.with_fallbacks(chosen).await?;
    // The crew: the model and the tools are shared by every call; each call gets its own
    // conversation.
    let service_delay = args.service_delay.unwrap_or(WEATHER_SERVICE_DELAY);
    let mut weather = WeatherCrew::new(model.llm.clone(), service_delay)?;
    if args.idle {
        weather = weather.with_idle(IdlePolicy::phone_call());
    }
    // A long call: its context counted in tokens, its oldest turns summarized.
    if args.summarize {
        weather = weather.with_long_call(
            Arc::clone(&model.llm),
            args.crew.model.model.as_deref(),
            args.summary_model.clone(),
        );
    }
    // What each call cost: tokens always (the turn's span, /metrics), money with --prices,
    // an `llm_usage` log to the platform with --log-usage.
    weather = weather.with_cost(
        args.crew.model.price_table()?.map(Arc::new),
        args.crew.model.log_usage,
    );
    let mut server = CrewServer::new(weather.agent().clone());
    if args.worker_runtimes > 0 {
        server = server.worker_runtimes(args.worker_runtimes);
    }
    // Served on --host and --port with the token until SIGTERM or Ctrl-C; with
    // CREWLINE_REDIS_URL each call's checkpoint lives in Redis (it resumes on any replica).
    args.crew.serve(server, &model).await
}

/// The weather agent's system prompt.
pub const PROMPT: &str = "You are a friendly voice assistant on a phone line. Answer in one or \
two short spoken sentences. For weather questions use get_weather; when the caller names several \
cities, call it once per city.";

/// What the caller hears while the weather service works.
pub const FILLER: &str = "Let me check that for you.";

/// The filler for a round of tool calls: the weather lookups are slow enough to need one.
pub fn filler(calls: &[ToolCall]) -> Option<String> {
    calls
        .iter()
        .any(|call| call.name == "get_weather")
        .then(|| FILLER.to_owned())
}

/// How long the pretend weather service takes per call.
pub const WEATHER_SERVICE_DELAY: Duration = Duration::from_millis(300);

/// The cities the pretend weather service knows.
const CITIES: [&str; 5] = ["Paris", "Tokyo", "London", "New York", "San Francisco"];

/// The pretend weather service; its `#[function_tool]` methods are the model's tools.
#[derive(Debug, Clone)]
pub struct WeatherService {
    delay: Duration,
}

#[tools]
impl WeatherService {
    /// Get the current weather for a location.
    ///
    /// # Arguments
    /// * `location` - City name, e.g. Paris
    #[function_tool]
    async fn get_weather(&self, location: String) -> Result<Value, ToolError> {
        tokio::time::sleep(self.delay).await;
        let city = location
            .split(',')
            .next()
            .unwrap_or_default()
            .trim()
            .to_lowercase();
        let (temperature_c, conditions) = match city.as_str() {
            "paris" => (18, "cloudy"),
            "tokyo" => (24, "sunny"),
            "london" => (12, "rainy"),
            "new york" | "san francisco" => (21, "clear"),
            _ => {
                return Err(ToolError::new(format!(
                    "No weather data for {location}; ask the caller for a larger city nearby."
                )));
            }
        };
        Ok(json!({"location": location, "temperature_c": temperature_c, "conditions": conditions}))
    }
}

/// The weather agent, built once: every call gets its own conversation with it.
#[derive(Debug, Clone)]
pub struct WeatherCrew {
    agent: Agent,
}

impl WeatherCrew {
    /// A crew answering with `llm`, its weather service taking `service_delay` per call.
    pub fn new(llm: Arc<dyn LlmClient>, service_delay: Duration) -> Result<Self, AgentError> {
        let agent = Agent::builder(llm)
            .name("weather-agent")
            .prompt_with(prompt)
            .tools(WeatherService {
                delay: service_delay,
            })
            // Several cities in one question become parallel calls in one round (the
            // default); the filler covers the wait.
            .filler(filler)
            .build()?;
        Ok(Self { agent })
    }

    /// The same crew checking in on a silent caller as `policy` says: nudges after a
    /// silence, then a goodbye and `agent.end_call` (the nudges are worded by the crew's
    /// model when the policy says `nudge_generated`).
    pub fn with_idle(mut self, policy: IdlePolicy) -> Self {
        self.agent = self.agent.with_idle(policy);
        self
    }

    /// The same crew pricing each turn with `prices` (a model it does not name is reported
    /// without money), and sending each turn's usage to the platform when `log_usage`.
    pub fn with_cost(mut self, prices: Option<Arc<PriceTable>>, log_usage: bool) -> Self {
        if let Some(prices) = prices {
            self.agent = self.agent.with_prices(prices);
        }
        self.agent = self.agent.with_log_usage(log_usage);
        self
    }

    /// The same crew counting each call's context in tokens (by OpenAI's tokenizer when
    /// `model` names an OpenAI model, else estimated from bytes) and summarizing a long call's
    /// oldest turns with `llm` (asking for `summary_model` when given) as a phone call would:
    /// past 75% of 16k tokens, the last 4 turns kept.
    pub fn with_long_call(
        mut self,
        llm: Arc<dyn LlmClient>,
        model: Option<&str>,
        summary_model: Option<String>,
    ) -> Self {
        // Loaded here, once per process, while the crew is built: never on a turn.
        if let Some(counter) = model.and_then(TiktokenCounter::for_model) {
            self.agent = self.agent.with_token_counter(Arc::new(counter));
        }
        let mut summarizer = Summarizer::new(llm);
        if let Some(name) = summary_model {
            summarizer = summarizer.model(name);
        }
        self.agent = self.agent.with_summarizer(summarizer);
        self
    }

    /// The agent: what `CrewServer::new` serves.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// The tool loop shared by every call (for running a turn outside a crew, as the
    /// `weather_agent` example does).
    #[allow(dead_code)]
    pub fn tool_loop(&self) -> &ToolLoop {
        self.agent.tool_loop()
    }

    /// The crew for one call: a single interruptible output node (what `CrewServer::new`
    /// makes of [`agent`](Self::agent) for each call).
    #[allow(dead_code)]
    pub fn build(&self, setup: &SessionSetup) -> Crew {
        self.agent.crew_for(setup)
    }
}

/// The system prompt for a call: [`PROMPT`], and the caller's name when the platform sent one.
pub fn prompt(setup: &SessionSetup) -> String {
    let mut prompt = String::from(PROMPT);
    if let Some(name) = setup
        .initial_variables()
        .get("name")
        .and_then(Value::as_str)
    {
        prompt.push_str(&format!(" The caller's name is {name}."));
    }
    prompt
}

/// What the scripted models say to a greeting.
pub const GREETING: &str = "Hi! I can tell you the weather in any big city. Which one?";

/// Whether `said` (lower case) opens with a greeting word.
pub fn is_greeting(said: &str) -> bool {
    said.split(|c: char| !c.is_alphanumeric())
        .find(|word| !word.is_empty())
        .is_some_and(|word| ["hi", "hello", "hey", "hiya", "morning", "good"].contains(&word))
}

/// What a scripted model says to words off its script: it is a script, and what it knows
/// (`cities`, and `more` phrases, e.g. "ask me for a story"), so a user trying it offline
/// learns what to say instead of hearing the greeting again.
pub fn off_script(cities: &[&str], more: &[&str]) -> String {
    let cities = match cities {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    };
    let mut reply = format!(
        "I'm the offline scripted model, so I only know a few things: ask me about the weather \
         in {cities}"
    );
    for phrase in more {
        reply.push_str(", ");
        reply.push_str(phrase);
    }
    reply.push('.');
    reply
}

/// A weather lookup's result (`location`, `temperature_c`, `conditions`) as the scripted
/// models say it.
pub fn weather_sentence(result: &Value) -> String {
    format!(
        "In {} it is {} degrees and {}.",
        result["location"].as_str().unwrap_or("that city"),
        result["temperature_c"],
        result["conditions"].as_str().unwrap_or("unknown")
    )
}

/// The offline stand-in for a model: greets, calls `get_weather` once per city named (all in
/// one round, so they run in parallel, without a word first, as real models often do: the
/// crew's filler covers the wait), reads tool results back, tells a long story when asked
/// (something to barge in on), and says goodbye. Anything else gets what it knows: the cities
/// of the weather service, the story, and goodbye.
pub fn scripted_weather_model(chunk_delay: Duration) -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| match request.messages.last() {
        Some(Message::Tool { .. }) => {
            let answers: Vec<String> = ScriptedLlm::last_tool_results(request)
                .into_iter()
                .filter_map(|content| serde_json::from_str::<Value>(content).ok())
                .map(|v| match v.get("error") {
                    Some(error) => error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("That lookup failed.")
                        .to_owned(),
                    None => weather_sentence(&v),
                })
                .collect();
            Reply::text(answers.join(" "))
        }
        Some(Message::User { content }) => {
            let said = content.to_lowercase();
            let calls: Vec<(&str, Value)> = CITIES
                .iter()
                .filter(|city| said.contains(&city.to_lowercase()))
                .map(|city| ("get_weather", json!({"location": city})))
                .collect();
            if !calls.is_empty() {
                Reply::tool_calls(calls)
            } else if said.contains("story") || said.contains("detail") {
                Reply::text(LONG_STORY)
            } else if said.contains("bye") || said.contains("thank") || said.contains("never mind")
            {
                Reply::text("No problem at all. Thanks for calling, and have a lovely day!")
            } else if is_greeting(&said) {
                Reply::text(GREETING)
            } else {
                Reply::text(off_script(&CITIES, &["ask me for a story", "or say bye"]))
            }
        }
        _ => Reply::text("How can I help?"),
    })
    .with_chunk_delay(chunk_delay)
}

/// A reply long enough to barge in on.
const LONG_STORY: &str = "Once upon a time, high above the rooftops of a sleepy town, a small \
cloud named Nimbus drifted along with the wind. Every morning she watched the baker open his \
shop, the children run to school, and the fishermen push their boats into the silver bay. \
Nimbus dreamed of becoming a great storm cloud, the kind that rolls over mountains with thunder \
in its belly, but every afternoon the sun warmed her until she was thin and wispy again.";

/// The weather crew's model for `choice`: the real one named `name` (see
/// [`crewline_server::model::choose`]), or
/// [`scripted_weather_model`] pausing `chunk_delay` before each streamed piece.
pub fn model(
    choice: ModelChoice,
    name: Option<String>,
    chunk_delay: Duration,
) -> Result<ChosenModel, LlmError> {
    let mut chosen = choose(choice, name, || scripted_weather_model(chunk_delay))?;
    if chosen.is_scripted() {
        chosen.description = format!("scripted model, {} ms per chunk", chunk_delay.as_millis());
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewline::{turn::TurnEvent, types::Context};
    use futures::StreamExt;

    /// The scripted model's answer to `said`, as the crew's tool loop streams it.
    async fn answer(said: &str) -> String {
        let crew = WeatherCrew::new(
            Arc::new(scripted_weather_model(Duration::ZERO)),
            Duration::ZERO,
        )
        .expect("the weather tools register");
        let mut context = Context::with_system(PROMPT);
        context.add(Message::user(said));
        let mut turn = crew.tool_loop().run(&mut context);
        let mut text = String::new();
        while let Some(event) = turn.next().await {
            if let TurnEvent::Text(chunk) = event.expect("the turn runs") {
                text.push_str(&chunk);
            }
        }
        text
    }

    #[tokio::test]
    async fn off_its_script_the_model_says_which_cities_and_phrases_it_knows() {
        let text = answer("What can you do?").await;
        assert_eq!(
            text,
            "I'm the offline scripted model, so I only know a few things: ask me about the \
             weather in Paris, Tokyo, London, New York or San Francisco, ask me for a story, or \
             say bye."
        );
        assert_ne!(text, GREETING);
    }

    #[tokio::test]
    async fn a_greeting_is_still_answered_with_the_greeting() {
        assert_eq!(answer("Hi there!").await, GREETING);
        assert_eq!(answer("Hello?").await, GREETING);
    }

    #[tokio::test]
    async fn a_city_it_knows_is_looked_up() {
        assert_eq!(
            answer("Weather in Tokyo please").await,
            format!("{FILLER}In Tokyo it is 24 degrees and sunny.")
        );
    }
}
