//! crewline mirrors of the reference crews in `reference/crews.py`: the same node names, system
//! prompt, tools (names, descriptions, arguments, return values), `MAX_TOOL_ROUNDS = 4` and
//! parallel tool execution, built only from crewline's public API. The LLM is crewline's
//! `OpenAiClient` pointed at the mock LLM (model `mock-gpt`, key `sk-mock`, no environment).

use std::{fmt, sync::Arc};

use crewline::{
    CallControl, Crew, MAX_TOOL_ROUNDS, SessionSetup, ToolLoop,
    crew::{BackgroundAgent, BackgroundNode, NodeError, NodeHandle, OutputAgent, OutputNode},
    llm::{LlmClient, OpenAiClient},
    prelude::tools,
    protocol::{Event, EventBody, TransferOptions, TransferType},
    session::CrewSetup,
    tool::{ToolError, ToolRegistry},
    turn::TurnStream,
    types::Context,
};
use serde_json::{Value, json};

/// `SYSTEM_PROMPT` of crews.py.
pub const SYSTEM_PROMPT: &str = "You are a helpful weather assistant. Use get_weather for weather questions. Keep answers short.";

/// The crews of crews.py (`--crew`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrewKind {
    /// `WeatherAgent`.
    Weather,
    /// `EndCallAgent`: weather plus `end_call`.
    EndCall,
    /// `TransferAgent`: weather plus `transfer_call`.
    Transfer,
    /// `WeatherAgent` plus `FailingObserver`.
    Background,
    /// `FlakyWeatherAgent`: `get_weather` raises for Atlantis.
    ToolErrors,
}

impl CrewKind {
    /// The crew named in a fixture's `crew` field.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "weather" => Self::Weather,
            "end_call" => Self::EndCall,
            "transfer" => Self::Transfer,
            "background" => Self::Background,
            "tool_errors" => Self::ToolErrors,
            _ => return None,
        })
    }
}

/// `WeatherAgent.get_weather`: a fixed dict, or (flaky) an error for Atlantis.
struct WeatherTools {
    flaky: bool,
}

#[tools]
impl WeatherTools {
    /// Get the current weather for a location.
    ///
    /// # Arguments
    /// * `location` - City name, e.g. "Paris".
    #[function_tool]
    async fn get_weather(&self, location: String) -> Result<Value, ToolError> {
        if self.flaky && location == "Atlantis" {
            // `raise ValueError("no weather station in Atlantis")`
            return Err(ToolError::new("no weather station in Atlantis"));
        }
        Ok(
            json!({"location": location, "temperature_c": 18, "conditions": "sunny", "humidity_pct": 40}),
        )
    }
}

/// `EndCallAgent.end_call`: sends `agent.end_call` and returns `None`.
struct EndCallTools {
    call: CallControl,
}

#[tools]
impl EndCallTools {
    /// End the call gracefully when the user says goodbye.
    #[function_tool]
    async fn end_call(&self) -> Result<(), ToolError> {
        self.call.end_call().await.map_err(ToolError::from)
    }
}

/// `TransferAgent.transfer_call`: a cold transfer to +15550100, returns `None`.
struct TransferTools {
    call: CallControl,
}

#[tools]
impl TransferTools {
    /// Transfer the caller to a human agent.
    #[function_tool]
    async fn transfer_call(&self) -> Result<(), ToolError> {
        let options = TransferOptions {
            kind: TransferType::ColdTransfer,
            private_handoff_option: None,
            public_handoff_option: None,
        };
        self.call
            .transfer_call("+15550100", options, None)
            .await
            .map_err(ToolError::from)
    }
}

/// The output agent: the system prompt, then the documented streaming tool loop.
struct WeatherAgent {
    context: Context,
    tool_loop: ToolLoop,
}

impl OutputAgent for WeatherAgent {
    fn context(&mut self) -> &mut Context {
        &mut self.context
    }

    fn generate_response(&mut self) -> TurnStream<'_> {
        self.tool_loop.run(&mut self.context)
    }
}

/// Python's `RuntimeError`: its type name becomes `error_class`, as in the reference.
#[derive(Debug)]
struct RuntimeError(String);

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RuntimeError {}

/// `FailingObserver(BackgroundCrewNode)`: raises on every transcript update.
struct FailingObserver {
    seen: u32,
}

#[async_trait::async_trait]
impl BackgroundAgent for FailingObserver {
    async fn on_event(&mut self, event: &Event, _node: &NodeHandle) -> Result<(), NodeError> {
        if let EventBody::TranscriptUpdate(_) = event.body {
            self.seen += 1;
            return Err(
                RuntimeError(format!("observer failed on transcript #{}", self.seen)).into(),
            );
        }
        Ok(())
    }
}

/// The mirror crew's model: crewline's OpenAI client at `base_url`, reading no environment.
pub fn mock_llm_client(base_url: &str) -> Arc<dyn LlmClient> {
    let client = OpenAiClient::builder()
        .model("mock-gpt")
        .api_key("sk-mock")
        .base_url(base_url)
        .read_env(false)
        .build()
        .expect("the mock LLM client builds");
    Arc::new(client)
}

/// The same model through `AsyncOpenAiClient`, over an `async_openai::Client` whose team set
/// its own retry policy: async-openai's retry layer with the default client's 2 retries
/// (async-openai's own default is 3), so the recorded request counts hold.
pub fn mock_async_openai_client(base_url: &str) -> Arc<dyn LlmClient> {
    use async_openai::middleware::{ReqwestService, retry::OpenAIRetryLayer};
    use tower::Layer;

    let config = async_openai::config::OpenAIConfig::new()
        .with_api_base(base_url)
        .with_api_key("sk-mock");
    let http = OpenAIRetryLayer::new(2).layer(ReqwestService::new(reqwest::Client::new()));
    let client = async_openai::Client::with_config(config).with_http_service(http);
    Arc::new(crewline::llm::AsyncOpenAiClient::new(client, "mock-gpt"))
}

/// Builds the crew of one call, like `make_setup_handler(crew)`.
pub fn build(kind: CrewKind, llm: &Arc<dyn LlmClient>, setup: &SessionSetup) -> Crew {
    let mut registry = ToolRegistry::new();
    let weather = Arc::new(WeatherTools {
        flaky: kind == CrewKind::ToolErrors,
    });
    // `ToolRegistry().discover(self)` lists a class's tools alphabetically: the mirrors
    // register them in the same order, so the `tools` of each LLM request match.
    match kind {
        CrewKind::EndCall => {
            let call = setup.call().clone();
            registry
                .discover(&Arc::new(EndCallTools { call }))
                .expect("end_call");
            registry.discover(&weather).expect("get_weather");
        }
        CrewKind::Transfer => {
            registry.discover(&weather).expect("get_weather");
            let call = setup.call().clone();
            registry
                .discover(&Arc::new(TransferTools { call }))
                .expect("transfer_call");
        }
        _ => {
            registry.discover(&weather).expect("get_weather");
        }
    }
    let tool_loop = ToolLoop::new(Arc::clone(llm), Arc::new(registry))
        .with_max_tool_rounds(MAX_TOOL_ROUNDS)
        .with_parallel_tools(true);
    let agent = WeatherAgent {
        context: Context::with_system(SYSTEM_PROMPT),
        tool_loop,
    };
    let mut crew = Crew::new();
    crew.add_node(OutputNode::new("weather-agent", agent));
    if kind == CrewKind::Background {
        // Both nodes are roots and leaves, as the cookbook wires them.
        crew.add_node(BackgroundNode::new(
            "failing-observer",
            FailingObserver { seen: 0 },
        ));
    }
    crew
}

/// The crew setup for `CrewServer::new`.
pub fn setup(kind: CrewKind, llm: Arc<dyn LlmClient>) -> impl CrewSetup {
    move |setup: SessionSetup| build(kind, &llm, &setup)
}
