//! [`Agent`]: a model, a prompt and tools, built once and served as every call's output node.

pub use crate::loop_agent::{CallEndHook, LoopAgent};

use std::{fmt, sync::Arc};

use crewline_core::{Context, ContextLimits, TokenCounter, ToolCall};
use crewline_llm::{
    AnswerLimits, LlmClient, PriceTable, RequestOptions, TextToolCallFormat, TextToolCalls,
};
use crewline_tools::{RegistryError, Tool, ToolProvider, ToolRegistry};

use crate::{
    Crew, SessionSetup, ToolLoop,
    crew::OutputNode,
    eval_faults::{CallTurns, ToolFaultError, ToolFaults},
    idle::IdlePolicy,
    summary::Summarizer,
};

/// The node name of an agent that was not given one.
pub const DEFAULT_AGENT_NAME: &str = "agent";

/// How an agent's system prompt is chosen for a call.
#[derive(Clone)]
enum Prompt {
    Fixed(Arc<str>),
    PerCall(Arc<dyn Fn(&SessionSetup) -> String + Send + Sync>),
}

/// A voice agent: the model, the prompt and the tools, built once and shared by every call.
///
/// Each call gets its own conversation and its own tool-call scope; the model, the tools and
/// their executor are shared. An `Agent` is a crew setup of its own (`CrewServer::new(agent)`);
/// in a setup of your own, [`Agent::crew_for`] is the call's crew of the agent alone and
/// [`Agent::node`] its output node in a larger crew ([`Agent::loop_agent`] the agent inside
/// that node, to wrap in an output agent of your own).
///
/// # Examples
///
/// ```
/// use crewline::prelude::*;
/// use crewline::llm::{Reply, ScriptedLlm};
///
/// struct Weather;
///
/// #[tools]
/// impl Weather {
///     /// Get the current weather for a city.
///     #[function_tool]
///     async fn get_weather(&self, city: String) -> Result<String, ToolError> {
///         Ok(format!("18°C and cloudy in {city}"))
///     }
/// }
///
/// let model = ScriptedLlm::new([Reply::text("Hello!")]);
/// let agent = Agent::builder(model)
///     .prompt("You are a friendly voice assistant.")
///     .tools(Weather)
///     .sequential_tools()
///     .max_tool_rounds(2)
///     .build()?;
/// assert_eq!(agent.tool_loop().tools().names(), ["get_weather"]);
/// assert_eq!(agent.crew_for(&SessionSetup::dry_run()).node_names(), ["agent"]);
/// # Ok::<(), crewline::agent::AgentError>(())
/// ```
#[derive(Clone)]
pub struct Agent {
    name: Arc<str>,
    prompt: Prompt,
    limits: Option<ContextLimits>,
    interruptible: bool,
    tool_loop: ToolLoop,
    on_call_end: Option<CallEndHook>,
    /// What every call does when the caller goes silent (none: nothing).
    idle: Option<Arc<IdlePolicy>>,
    /// Whether each answered turn's usage goes to the platform (`agent.log`).
    log_usage: bool,
    /// The tokenizer every call's context counts by (none: the byte estimate).
    token_counter: Option<Arc<dyn TokenCounter>>,
    /// How every call summarizes its oldest turns (none: it does not).
    summarizer: Option<Arc<Summarizer>>,
    /// Tool faults for an eval (see [`crate::eval_faults`]); none in production.
    tool_faults: Option<ToolFaults>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.name)
            .field("tools", &self.tool_loop.tools().names())
            .field("config", self.tool_loop.config())
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts an agent answering with `model` (an [`OpenAiClient`], a [`ScriptedLlm`], any
    /// [`LlmClient`]); a model shared with other agents is passed as an `Arc` of it.
    ///
    /// [`OpenAiClient`]: crewline_llm::OpenAiClient
    /// [`ScriptedLlm`]: crewline_llm::ScriptedLlm
    pub fn builder(model: impl LlmClient + 'static) -> AgentBuilder {
        Self::with_model(Arc::new(model))
    }

    /// Starts an agent answering with a model shared with other agents.
    #[deprecated(since = "0.2.0", note = "use `builder(Arc::clone(&model))`")]
    pub fn builder_shared(model: Arc<dyn LlmClient>) -> AgentBuilder {
        Self::with_model(model)
    }

    fn with_model(model: Arc<dyn LlmClient>) -> AgentBuilder {
        AgentBuilder {
            model,
            name: Arc::from(DEFAULT_AGENT_NAME),
            prompt: Prompt::Fixed(Arc::from("")),
            limits: None,
            interruptible: true,
            registry: Ok(ToolRegistry::new()),
            configure: Vec::new(),
            text_tool_calls: Vec::new(),
            on_call_end: None,
            idle: None,
            log_usage: false,
            token_counter: None,
            summarizer: None,
        }
    }

    /// The output node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tool loop every call's turns run on.
    pub fn tool_loop(&self) -> &ToolLoop {
        &self.tool_loop
    }

    /// A call's output agent with a fresh conversation, for a crew of your own; its system
    /// prompt is the agent's, or what [`AgentBuilder::prompt_with`] says for `setup`.
    pub fn loop_agent(&self, setup: &SessionSetup) -> LoopAgent {
        let prompt = match &self.prompt {
            Prompt::Fixed(prompt) => prompt.to_string(),
            Prompt::PerCall(prompt) => prompt(setup),
        };
        let mut turns = None;
        let mut tool_loop = self.tool_loop.clone();
        if let Some(faults) = self.tool_faults.as_ref().filter(|_| !setup.is_dry_run()) {
            // Each call counts its own turns: a fault on turn 2 is every call's second turn.
            let counted = CallTurns::default();
            match faults.wrap(self.tool_loop.tools(), &counted) {
                Ok(tools) => {
                    tool_loop = tool_loop.with_tools(Arc::new(tools));
                    turns = Some(counted);
                }
                // Checked when the faults were set; tools that took them once take them again.
                Err(error) => tracing::error!(%error, "the call runs without its tool faults"),
            }
        }
        let mut agent = LoopAgent::new(prompt, tool_loop);
        if let Some(turns) = turns {
            agent = agent.counting_turns(turns);
        }
        if let Some(limits) = self.limits {
            agent = agent.context_limits(limits);
        }
        if let Some(counter) = &self.token_counter {
            agent = agent.token_counter(Arc::clone(counter));
        }
        // A dry run (the server's start-up check) is not a call: nothing ended.
        match &self.on_call_end {
            Some(hook) if !setup.is_dry_run() => agent.on_end(Arc::clone(hook)),
            _ => agent,
        }
    }

    /// The call's output node (named [`name`](Self::name)), for a crew with other nodes.
    pub fn node(&self, setup: &SessionSetup) -> OutputNode {
        let node = OutputNode::new(self.name.to_string(), self.loop_agent(setup))
            .interruptible(self.interruptible)
            .log_usage(self.log_usage);
        let node = match &self.summarizer {
            Some(summarizer) => node.summarize_shared(Arc::clone(summarizer)),
            None => node,
        };
        match &self.idle {
            Some(policy) => node.idle_shared(Arc::clone(policy)),
            None => node,
        }
    }

    /// The same agent handling a silent caller as `policy` says (see [`crate::idle`]); its
    /// generated nudges are worded by this agent's model unless the policy names one.
    pub fn with_idle(mut self, policy: IdlePolicy) -> Self {
        let options = &self.tool_loop.config().options;
        self.idle = Some(Arc::new(policy.or_model(self.tool_loop.llm(), options)));
        self
    }

    /// The same agent pricing each turn's tokens with `prices` (see
    /// [`AgentBuilder::prices`]).
    pub fn with_prices(mut self, prices: Arc<PriceTable>) -> Self {
        self.tool_loop = self.tool_loop.with_prices(prices);
        self
    }

    /// The same agent sending each answered turn's usage to the platform, or not (see
    /// [`AgentBuilder::log_usage`]).
    pub fn with_log_usage(mut self, log: bool) -> Self {
        self.log_usage = log;
        self
    }

    /// The same agent counting each call's context in tokens by `counter` (see
    /// [`AgentBuilder::token_counter`]).
    pub fn with_token_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.token_counter = Some(counter);
        self
    }

    /// The same agent summarizing each call's oldest turns as `summarizer` says (see
    /// [`AgentBuilder::summarize`]).
    pub fn with_summarizer(mut self, summarizer: Summarizer) -> Self {
        self.summarizer = Some(Arc::new(summarizer.or_prices(self.tool_loop.prices())));
        self
    }

    /// How every call summarizes its oldest turns, if it does.
    pub fn summarizer(&self) -> Option<&Summarizer> {
        self.summarizer.as_deref()
    }

    /// How every call handles a silent caller, if it does.
    pub fn idle(&self) -> Option<&IdlePolicy> {
        self.idle.as_deref()
    }

    /// A crew of this agent alone, for a call whose handshake was `setup`.
    pub fn crew_for(&self, setup: &SessionSetup) -> Crew {
        let mut crew = Crew::new();
        crew.add_node(self.node(setup));
        crew
    }

    /// The same agent whose tools go wrong as `faults` say, in every call (an eval's crew:
    /// see [`crate::eval_faults`]); an empty plan turns faults off.
    pub fn with_tool_faults(mut self, faults: ToolFaults) -> Result<Self, AgentError> {
        if faults.is_empty() {
            self.tool_faults = None;
            return Ok(self);
        }
        // Wrapped once here, so a plan the tools cannot take is refused now, not per call.
        faults.wrap(self.tool_loop.tools(), &CallTurns::default())?;
        self.tool_faults = Some(faults);
        Ok(self)
    }

    /// The tool faults in effect, if any.
    pub fn tool_faults(&self) -> Option<&ToolFaults> {
        self.tool_faults.as_ref()
    }

    /// A crew of this agent alone, outside any call (the prompt chosen for a dry run).
    #[deprecated(
        since = "0.2.0",
        note = "use `crew_for(&SessionSetup::dry_run())`, or serve the agent itself"
    )]
    pub fn crew(&self) -> Crew {
        self.crew_for(&SessionSetup::dry_run())
    }
}

/// A setting of the tool loop, applied when the agent is built.
type Configure = Box<dyn FnOnce(ToolLoop) -> ToolLoop + Send>;

/// Builds an [`Agent`]; from [`Agent::builder`].
///
/// # Examples
///
/// ```
/// use crewline::prelude::*;
/// use crewline::{agent::AgentError, llm::ScriptedLlm, tool::RegistryError};
///
/// struct Desk;
///
/// #[tools]
/// impl Desk {
///     /// Look an order up.
///     #[function_tool]
///     async fn find_order(&self, id: u32) -> Result<String, ToolError> {
///         Ok(format!("order {id} ships tomorrow"))
///     }
/// }
///
/// let agent = Agent::builder(ScriptedLlm::new([]))
///     .name("orders")
///     .prompt_with(|call: &SessionSetup| format!("Help with orders on a {:?} call.", call.session_context().conversation_type))
///     .tools(Desk)
///     .filler(|_calls: &[ToolCall]| Some("One moment.".to_owned()))
///     .max_tool_rounds(2)
///     .build()?;
/// assert_eq!(agent.tool_loop().config().max_tool_rounds, 2);
///
/// // A tool that cannot be added is reported by `build`, not lost.
/// let twice = Agent::builder(ScriptedLlm::new([])).tools(Desk).tools(Desk).build();
/// assert!(matches!(twice, Err(AgentError::Tools(RegistryError::DuplicateName(_)))));
/// # Ok::<(), AgentError>(())
/// ```
#[must_use = "an agent builder does nothing until `build` is called"]
pub struct AgentBuilder {
    model: Arc<dyn LlmClient>,
    name: Arc<str>,
    prompt: Prompt,
    limits: Option<ContextLimits>,
    interruptible: bool,
    /// The tools so far, or the first tool that could not be added (reported by `build`).
    registry: Result<ToolRegistry, RegistryError>,
    configure: Vec<Configure>,
    /// The formats of tool calls written as text to read as calls (none: off).
    text_tool_calls: Vec<TextToolCallFormat>,
    on_call_end: Option<CallEndHook>,
    idle: Option<IdlePolicy>,
    log_usage: bool,
    token_counter: Option<Arc<dyn TokenCounter>>,
    summarizer: Option<Summarizer>,
}

impl fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Why an [`Agent`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// A tool could not be added (an invalid or repeated name, an unusable schema).
    #[error(transparent)]
    Tools(#[from] RegistryError),
    /// The tool faults (`CREWLINE_EVAL_TOOL_FAULTS`, or [`Agent::with_tool_faults`]) are not
    /// a valid plan.
    #[error("the agent's tool faults")]
    ToolFaults(#[from] ToolFaultError),
}

impl AgentBuilder {
    /// The system prompt of every call.
    pub fn prompt(mut self, prompt: impl Into<String>) -> Self {
        self.prompt = Prompt::Fixed(Arc::from(prompt.into()));
        self
    }

    /// A system prompt chosen per call from its handshake (e.g. the caller's name in its
    /// initial variables).
    pub fn prompt_with<F>(mut self, prompt: F) -> Self
    where
        F: Fn(&SessionSetup) -> String + Send + Sync + 'static,
    {
        self.prompt = Prompt::PerCall(Arc::new(prompt));
        self
    }

    /// The output node's name (default [`DEFAULT_AGENT_NAME`]).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Arc::from(name.into());
        self
    }

    /// Adds every `#[function_tool]` method of `provider` (a `#[tools]` impl, or an `Arc` of
    /// one the crew also holds: its tools then share that instance).
    pub fn tools<P: ToolProvider>(mut self, provider: P) -> Self {
        if let Ok(registry) = &mut self.registry
            && let Err(error) = registry.discover(&Arc::new(provider))
        {
            self.registry = Err(error);
        }
        self
    }

    /// Adds every `#[function_tool]` method of a provider the crew also holds.
    #[deprecated(since = "0.2.0", note = "use `tools(Arc::clone(&provider))`")]
    pub fn tools_shared<P: ToolProvider>(self, provider: &Arc<P>) -> Self {
        self.tools(Arc::clone(provider))
    }

    /// Adds one tool.
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        if let Ok(registry) = &mut self.registry
            && let Err(error) = registry.register(tool)
        {
            self.registry = Err(error);
        }
        self
    }

    /// Uses `registry` (its tools, its executor and limits); the tools added before and after
    /// join it, under the same rule as [`tools`](Self::tools): a name used twice is reported
    /// by `build`.
    pub fn registry(mut self, mut registry: ToolRegistry) -> Self {
        self.registry = match self.registry {
            Ok(before) => before
                .names()
                .into_iter()
                .filter_map(|name| before.get(name))
                .try_for_each(|tool| registry.register_arc(Arc::clone(tool)).map(drop))
                .map(|()| registry),
            Err(error) => Err(error),
        };
        self
    }

    /// Runs a round's tool calls one after the other, in the model's order (default: at once).
    pub fn sequential_tools(self) -> Self {
        self.configure(|tool_loop| tool_loop.with_parallel_tools(false))
    }

    /// Says `filler` while a round's tools run, when the turn has said nothing yet (see
    /// [`ToolLoop::with_filler`]).
    pub fn filler<F>(self, filler: F) -> Self
    where
        F: Fn(&[ToolCall]) -> Option<String> + Send + Sync + 'static,
    {
        self.configure(move |tool_loop| tool_loop.with_filler(filler))
    }

    /// The most tool rounds per turn (default [`MAX_TOOL_ROUNDS`](crate::MAX_TOOL_ROUNDS)).
    pub fn max_tool_rounds(self, rounds: usize) -> Self {
        self.configure(move |tool_loop| tool_loop.with_max_tool_rounds(rounds))
    }

    /// Overrides for every model request (temperature, max tokens, extras).
    pub fn request_options(self, options: RequestOptions) -> Self {
        self.configure(move |tool_loop| {
            let mut config = tool_loop.config().clone();
            config.options = options;
            tool_loop.with_config(config)
        })
    }

    /// The bounds of one model answer (default [`AnswerLimits::default`]: 1 MiB, 128 tool
    /// calls, 256 KiB a call; see [`ToolLoopConfig::answer_limits`](crate::turn::ToolLoopConfig)).
    /// An answer past one ends the turn with an `agent.error`, and nothing of it is kept;
    /// the call goes on. The model client holds limits of its own while it reads
    /// ([`OpenAiClientBuilder::answer_limits`](crewline_llm::OpenAiClientBuilder::answer_limits)).
    pub fn answer_limits(self, limits: AnswerLimits) -> Self {
        self.configure(move |tool_loop| tool_loop.with_answer_limits(limits))
    }

    /// How much of the conversation each call keeps (default [`ContextLimits::default`]).
    pub fn context_limits(mut self, limits: ContextLimits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Reads tool calls the model writes as text in its answer, in any of `formats`, as tool
    /// calls instead of speaking them (see [`TextToolCalls`]); for local servers that pass a
    /// model's tool-call tokens through as content. Off by default; a later call replaces
    /// the formats.
    ///
    /// ```
    /// use crewline::prelude::*;
    /// use crewline::llm::{ScriptedLlm, TextToolCallFormat};
    ///
    /// let agent = Agent::builder(ScriptedLlm::new([]))
    ///     .detect_text_tool_calls([TextToolCallFormat::Hermes, TextToolCallFormat::BareJson])
    ///     .build()?;
    /// # Ok::<(), crewline::agent::AgentError>(())
    /// ```
    pub fn detect_text_tool_calls(
        mut self,
        formats: impl IntoIterator<Item = TextToolCallFormat>,
    ) -> Self {
        self.text_tool_calls = formats.into_iter().collect();
        self
    }

    /// Whether the caller may interrupt the agent (default `true`).
    pub fn interruptible(mut self, interruptible: bool) -> Self {
        self.interruptible = interruptible;
        self
    }

    /// Runs `hook` once per call with its final conversation when the call ends (to record
    /// what it concluded: a remote task's output, a note for a CRM); not for dry runs. It
    /// runs as the call's agent is dropped: keep it quick and non-blocking.
    pub fn on_call_end<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Context) + Send + Sync + 'static,
    {
        self.on_call_end = Some(Arc::new(hook));
        self
    }

    /// Nudges a silent caller, then says goodbye and ends the call, as `policy` says
    /// ([`IdlePolicy::phone_call`] for a live phone call's defaults; see [`crate::idle`]).
    /// Off by default: a crew speaks unprompted and hangs up only when its author says so.
    pub fn idle(mut self, policy: IdlePolicy) -> Self {
        self.idle = Some(policy);
        self
    }

    /// Prices each turn's tokens with `prices` (per model, per million tokens; see
    /// [`crewline_llm::PriceTable`]): the money goes to the call's tally, the turn's span,
    /// `/metrics` and, with [`log_usage`](Self::log_usage), the platform. Without it, usage is
    /// reported without money.
    pub fn prices(self, prices: impl Into<Arc<PriceTable>>) -> Self {
        let prices = prices.into();
        self.configure(move |tool_loop| tool_loop.with_prices(prices))
    }

    /// Sends each answered turn's token usage (and cost, with [`prices`](Self::prices)) to the
    /// platform as an `agent.log` entry (see [`crate::usage`]). Off by default: the platform
    /// may ignore the entry, but a crew's wire stays the reference's unless asked.
    pub fn log_usage(mut self, log: bool) -> Self {
        self.log_usage = log;
        self
    }

    /// Counts each call's context in tokens by `counter`, the model's tokenizer (e.g.
    /// `TiktokenCounter::for_model("gpt-4o")` with the `tiktoken` feature; build it here, with
    /// the crew: its tables load once per process). Without it tokens are estimated from bytes
    /// ([`ESTIMATE_BYTES_PER_TOKEN`](crewline_core::ESTIMATE_BYTES_PER_TOKEN)); either way the
    /// model server's reported prompt tokens replace the count of what they counted.
    pub fn token_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.token_counter = Some(counter);
        self
    }

    /// Summarizes each call's oldest turns in the background when its context passes a share
    /// of its token budget (see [`crate::summary`]). Off by default.
    pub fn summarize(mut self, summarizer: Summarizer) -> Self {
        self.summarizer = Some(summarizer);
        self
    }

    /// Any other tool-loop setting, applied in order when the agent is built.
    pub fn configure<F>(mut self, configure: F) -> Self
    where
        F: FnOnce(ToolLoop) -> ToolLoop + Send + 'static,
    {
        self.configure.push(Box::new(configure));
        self
    }

    /// The agent, or the first tool that could not be added.
    pub fn build(self) -> Result<Agent, AgentError> {
        let registry = self.registry?;
        let model: Arc<dyn LlmClient> = if self.text_tool_calls.is_empty() {
            self.model
        } else {
            Arc::new(TextToolCalls::new(self.model, self.text_tool_calls))
        };
        let tool_loop = self.configure.into_iter().fold(
            ToolLoop::new(model, Arc::new(registry)),
            |tool_loop, configure| configure(tool_loop),
        );
        // The summaries are priced as the agent's turns are, unless they have prices of their
        // own.
        let summarizer = self
            .summarizer
            .map(|summarizer| Arc::new(summarizer.or_prices(tool_loop.prices())));
        let agent = Agent {
            name: self.name,
            prompt: self.prompt,
            limits: self.limits,
            interruptible: self.interruptible,
            tool_loop,
            on_call_end: self.on_call_end,
            idle: None,
            log_usage: self.log_usage,
            token_counter: self.token_counter,
            summarizer,
            tool_faults: None,
        };
        let agent = match self.idle {
            Some(policy) => agent.with_idle(policy),
            None => agent,
        };
        // Set only by whoever starts the process (`crewline eval` for a crew it starts).
        match ToolFaults::from_env()? {
            Some(faults) => {
                tracing::warn!(faults = %faults.to_json(), "tool faults are on (an eval's crew)");
                agent.with_tool_faults(faults)
            }
            None => Ok(agent),
        }
    }
}
