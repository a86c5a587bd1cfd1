//! The scenario file: which crew to call, what the caller says, and what must hold.
//!
//! A scenario is TOML or YAML (the same keys), read into [`Scenario`]; every field is documented here and in the
//! JSON Schema generated from these types (`crewline eval --schema`,
//! `docs/eval-scenario.schema.json`). Unknown keys are errors, so a typo is not a silently
//! skipped expectation.

use std::{collections::BTreeMap, path::Path};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crewline::eval_faults::{ToolFault, ToolFaultKind, ToolFaults};
use crewline_testkit::mock_llm::{Fault, Script};

use crate::{EvalError, pattern as matcher};

/// The largest scenario file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// The most scenarios in one suite file.
pub const MAX_SCENARIOS: usize = 64;
/// The most caller turns in one scenario.
pub const MAX_TURNS: usize = 64;
/// The most runs (repetitions) of one scenario.
pub const MAX_RUNS: u32 = 200;
/// The longest a turn may be given (`turn_timeout_ms`), in ms.
pub const MAX_TURN_TIMEOUT_MS: u64 = 600_000;
/// The longest a started crew may be given to answer `/ready` (`ready_timeout_ms`), in ms.
pub const MAX_READY_TIMEOUT_MS: u64 = 600_000;

/// One scenario: a call placed `runs` times against a crew, and what must hold in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The scenario's name, as the report shows it.
    pub name: String,
    /// What the scenario checks, for the people reading the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The crew to call: a WebSocket URL, or a command line that serves it. In a suite,
    /// the suite's `crew` when the scenario sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crew: Option<CrewSpec>,
    /// The crew's model, served by the runner: a crewline mock model (OpenAI-compatible)
    /// playing this script, which the crew started from `crew.command` is pointed at
    /// (`OPENAI_BASE_URL`, `OPENAI_API_KEY` and `{model_url}`). Needed for a turn's
    /// `fault.model`. In a suite, the suite's `model` if unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    /// The judging model `expect.judge` asks: any OpenAI-compatible provider. In a suite,
    /// the suite's `judge` if unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<ProviderSpec>,
    /// How many times the call is placed (concurrently); models are not deterministic.
    /// 1 to 200, default 1; `crewline eval --runs N` overrides it.
    #[serde(default = "default_runs")]
    #[schemars(range(min = 1, max = 200))]
    pub runs: u32,
    /// The share of runs in which each expectation must hold for the scenario to pass:
    /// above 0 and at most 1 (default 1: every run).
    #[serde(default = "default_threshold")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub pass_threshold: f64,
    /// The call's variables, sent in `system.init` (what the crew's prompt may be rendered
    /// from, e.g. `name = "Ada"`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub variables: Map<String, Value>,
    /// The conversation's type, sent in `system.init`: `webcall` (the default),
    /// `telephonyInbound`, `telephonyOutbound`, `chat` (a text chat) or `supervisor_agent`.
    /// A crew may answer each differently, or serve only one (a chat crew refuses a call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_type: Option<ConversationKind>,
    /// The longest a turn may take, from the request to the crew's `end`, in ms (default
    /// 30000, at most 600000); a turn that takes longer fails its run.
    #[serde(default = "default_turn_timeout_ms")]
    pub turn_timeout_ms: u64,
    /// The caller's turns, in order (1 to 64); none with a simulated `caller`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub turns: Vec<CallerTurn>,
    /// A simulated caller instead of `turns`: a model plays the caller from a persona and a
    /// goal, turn by turn, until it says its goal is reached, the crew ends or transfers the
    /// call, or `max_turns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<CallerSpec>,
    /// What must hold over the whole call. Tool and hand-off expectations here count over
    /// all turns; `reply` and `budget` here apply to every turn.
    #[serde(default)]
    pub expect: Expect,
}

/// The conversation's type a call is placed as (`system.init`'s `conversation_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConversationKind {
    /// A call from a web page (the default).
    #[serde(rename = "webcall")]
    Webcall,
    /// An inbound phone call.
    #[serde(rename = "telephonyInbound")]
    TelephonyInbound,
    /// An outbound phone call.
    #[serde(rename = "telephonyOutbound")]
    TelephonyOutbound,
    /// A text chat: the replies are read, not heard.
    #[serde(rename = "chat")]
    Chat,
    /// A supervisor agent.
    #[serde(rename = "supervisor_agent")]
    SupervisorAgent,
}

impl From<ConversationKind> for crewline::protocol::ConversationType {
    fn from(kind: ConversationKind) -> Self {
        match kind {
            ConversationKind::Webcall => Self::Webcall,
            ConversationKind::TelephonyInbound => Self::TelephonyInbound,
            ConversationKind::TelephonyOutbound => Self::TelephonyOutbound,
            ConversationKind::Chat => Self::Chat,
            ConversationKind::SupervisorAgent => Self::SupervisorAgent,
        }
    }
}

impl ConversationKind {
    /// The scenario's kind for a recorded call's type (`None` for the default, a webcall).
    pub(crate) fn recorded(kind: crewline::protocol::ConversationType) -> Option<Self> {
        use crewline::protocol::ConversationType as Wire;
        match kind {
            Wire::Webcall => None,
            Wire::TelephonyInbound => Some(Self::TelephonyInbound),
            Wire::TelephonyOutbound => Some(Self::TelephonyOutbound),
            Wire::Chat => Some(Self::Chat),
            Wire::SupervisorAgent => Some(Self::SupervisorAgent),
        }
    }
}

/// A suite: several scenarios in one file, sharing a crew unless they name their own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// The crew every scenario without a `crew` of its own calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crew: Option<CrewSpec>,
    /// The model every scenario without a `model` of its own runs its crew on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    /// The judge of every scenario without a `judge` of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<ProviderSpec>,
    /// The scenarios, run one after the other (1 to 64).
    #[schemars(length(min = 1, max = 64))]
    pub scenarios: Vec<Scenario>,
}

/// What a scenario file holds: one scenario (its keys at the top), or a suite of them
/// (`[[scenarios]]` tables, with an optional shared `[crew]`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ScenarioFile {
    /// One scenario.
    One(Box<Scenario>),
    /// A suite: several scenarios, sharing a crew.
    Suite(Box<Suite>),
}

fn default_runs() -> u32 {
    1
}

fn default_threshold() -> f64 {
    1.0
}

fn default_turn_timeout_ms() -> u64 {
    30_000
}

/// The crew under test: set exactly one of `url` and `command`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CrewSpec {
    /// A running crew's WebSocket address, e.g. `ws://127.0.0.1:8080/ws`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A command line that serves the crew on 127.0.0.1, e.g.
    /// `["cargo", "run", "--example", "voice_agent", "--", "--port", "{port}"]`. `{port}` in
    /// any argument becomes a free port; the runner waits for `GET /ready` to answer 200,
    /// places the calls on `ws://127.0.0.1:{port}{path}`, and stops the process at the end.
    /// It runs in the directory `crewline eval` runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// With `command`: the WebSocket path on the started crew (default `/ws`).
    #[serde(default = "default_path")]
    pub path: String,
    /// With `command`: how long the started crew may take to answer `/ready`, in ms
    /// (default 60000, at most 600000; building it is not counted when it is built first).
    #[serde(default = "default_ready_timeout_ms")]
    pub ready_timeout_ms: u64,
    /// The environment variable holding the crew's bearer token, if it needs one (the
    /// token itself never goes in the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// With `command`: a live provider's model the started crew runs on (see
    /// [`CrewModelSpec`]); not with a scenario's `[model]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<CrewModelSpec>,
}

// --- A live model for a started crew (`crew.model`) ------------------------------------------

/// A live provider's model for the crew the runner starts: passed to it as `OPENAI_BASE_URL`,
/// `OPENAI_MODEL` and `OPENAI_API_KEY`, which the example crews and `crewline demo` read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CrewModelSpec {
    /// The provider's OpenAI-compatible base URL, e.g. `https://api.groq.com/openai/v1`
    /// (default: the crew's own, OpenAI's for the examples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The model, e.g. `gpt-4o-mini`.
    pub model: String,
    /// The environment variable holding the provider's key, e.g. `GROQ_API_KEY` (the key
    /// itself never goes in the file); it must be set when the crew starts. Unset: a local
    /// provider that takes no key (the crew is given a placeholder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
}

/// The key a started crew is given for a live model whose `api_key_env` is unset (a local
/// provider that takes none): the example crews use a live model only when a key is set.
pub const NO_KEY_PLACEHOLDER: &str = "no-key";

impl CrewModelSpec {
    fn validate(&self) -> Result<(), String> {
        if let Some(url) = &self.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(format!(
                "[crew.model]: `base_url` {url:?} is not an http:// or https:// address"
            ));
        }
        if self.model.trim().is_empty() {
            return Err("[crew.model]: `model` is empty".to_owned());
        }
        if self
            .api_key_env
            .as_deref()
            .is_some_and(|name| name.trim().is_empty())
        {
            return Err("[crew.model]: `api_key_env` is empty".to_owned());
        }
        Ok(())
    }

    /// The variables the started crew gets: `OPENAI_BASE_URL` (when given), `OPENAI_MODEL`
    /// and `OPENAI_API_KEY` (the value of `api_key_env`); an error naming the variable when
    /// it is not set.
    pub fn env(&self) -> Result<Vec<(&'static str, String)>, String> {
        let key = match &self.api_key_env {
            Some(name) => match std::env::var(name) {
                Ok(key) if !key.trim().is_empty() => key,
                _ => return Err(format!("the crew model's key variable {name} is not set")),
            },
            None => NO_KEY_PLACEHOLDER.to_owned(),
        };
        let mut env = Vec::with_capacity(3);
        if let Some(url) = &self.base_url {
            env.push(("OPENAI_BASE_URL", url.clone()));
        }
        env.push(("OPENAI_MODEL", self.model.clone()));
        env.push(("OPENAI_API_KEY", key));
        Ok(env)
    }
}

// --- end of crew.model -----------------------------------------------------------------------

fn default_path() -> String {
    "/ws".to_owned()
}

fn default_ready_timeout_ms() -> u64 {
    60_000
}

/// The crew's model when the runner serves it: a crewline mock model playing a script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The script's rules, in the format of `crewline mock-llm`'s scripts: each
    /// `{ when = { last_user_contains = "...", last_role = "tool" }, reply = { content_chunks = [...], tool_calls = [{ id = "call_1", name = "...", arguments_chunks = ['{"a": 1}'] }] } }`;
    /// the first rule whose `when` holds answers a request (no `when`: always), none: `OK.`
    /// (at most 256 rules). A reply may instead be a recorded provider stream,
    /// `reply = { recorded_sse = "path/to/case.sse" }` (relative to the scenario file; a
    /// transcript of crewline-llm's provider corpus, its `#` header dropped; at most 1 MiB),
    /// streamed byte for byte, one SSE event at a time.
    #[schemars(length(max = 256))]
    pub replies: Vec<Value>,
}

/// The most rules in a `[model]` script.
pub const MAX_MODEL_RULES: usize = 256;

/// The largest recorded stream a `[model]` reply may name (`recorded_sse`), in bytes.
pub const MAX_RECORDED_SSE_BYTES: u64 = 1024 * 1024;

/// The most bytes of recorded streams one file reads in all (each scenario's `[model]`
/// counts, a suite's shared one once per scenario).
pub const MAX_RECORDED_SSE_TOTAL_BYTES: u64 = 8 * 1024 * 1024;

impl ModelSpec {
    /// Reads the recorded streams the replies name (`reply.recorded_sse`, a path relative to
    /// `base`) into the script (`reply.sse_body`), each taken from `budget`.
    fn read_recorded(&mut self, base: &Path, budget: &mut u64) -> Result<(), String> {
        for (index, rule) in self.replies.iter_mut().enumerate() {
            let Some(reply) = rule.get_mut("reply").and_then(Value::as_object_mut) else {
                continue;
            };
            let Some(path) = reply.remove("recorded_sse") else {
                continue;
            };
            let at =
                |message: String| format!("[model] rule {}: `recorded_sse`: {message}", index + 1);
            let Value::String(path) = path else {
                return Err(at("must be a path (a string)".to_owned()));
            };
            if ["content_chunks", "tool_calls", "sse_body"]
                .iter()
                .any(|key| reply.contains_key(*key))
            {
                return Err(at(
                    "is the whole answer: no `content_chunks`, `tool_calls` or `sse_body` with it"
                        .to_owned(),
                ));
            }
            let full = base.join(&path);
            let body = read_recorded(&full, budget)
                .map_err(|message| at(format!("{}: {message}", full.display())))?;
            reply.insert("sse_body".to_owned(), Value::String(body));
        }
        Ok(())
    }

    /// The mock model's script.
    pub fn script(&self) -> Result<Script, String> {
        if self.replies.len() > MAX_MODEL_RULES {
            return Err(format!(
                "[model]: {} rules; a script has at most {MAX_MODEL_RULES}",
                self.replies.len()
            ));
        }
        // Read by `ScenarioFile::load` (or `parse`); one left over was never read.
        if self
            .replies
            .iter()
            .any(|rule| rule.pointer("/reply/recorded_sse").is_some())
        {
            return Err(
                "[model]: `recorded_sse` was not read: load the scenario with ScenarioFile::load"
                    .to_owned(),
            );
        }
        Script::from_json(&serde_json::json!({ "replies": self.replies }))
            .map_err(|error| format!("[model]: {error}"))
    }
}

/// A model of any OpenAI-compatible provider (OpenAI, Groq, a local Ollama...): the judge
/// (`[judge]`), or the simulated caller's (`[caller.llm]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderSpec {
    /// The provider's OpenAI-compatible base URL, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// The model, e.g. `gpt-4o-mini`.
    pub model: String,
    /// The environment variable holding the provider's API key, e.g. `OPENAI_API_KEY` (the
    /// key itself never goes in the file). Unset: no key (a local provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// How long the model may take to start answering, in ms (default 60000, at most 600000).
    #[serde(default = "default_judge_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_judge_timeout_ms() -> u64 {
    60_000
}

/// A rubric the judge scores the conversation against, in each run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JudgeExpect {
    /// What a good answer does, in plain words (e.g. "gives the temperature of both cities
    /// and invents no forecast"). In a turn, the judge grades that turn's reply (reading the
    /// call up to it); over the call, the whole call.
    pub rubric: String,
    /// The lowest score that passes, from 0 to 1 (the judge scores 0 to 1; default 0.7).
    #[serde(default = "default_min_score")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_score: f64,
}

fn default_min_score() -> f64 {
    0.7
}

/// A simulated caller: a model playing the caller from a persona and a goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallerSpec {
    /// Who the caller is and how they talk (e.g. "Ada, 70, polite, gives her details only
    /// when asked").
    pub persona: String,
    /// What the caller wants from the call (e.g. "move $50 to Alice, once"); `expect.goal_met`
    /// has the judge decide whether it was reached.
    pub goal: String,
    /// The caller's first words (default: the caller's model opens the call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opening: Option<String>,
    /// The most caller turns (1 to 64, default 10).
    #[serde(default = "default_caller_turns")]
    pub max_turns: u32,
    /// The lowest judge's score that counts the goal as met (0 to 1, default 0.7).
    #[serde(default = "default_min_score")]
    pub goal_min_score: f64,
    /// The model playing the caller: any OpenAI-compatible provider.
    pub llm: ProviderSpec,
    // --- Barge-ins and silences of a simulated caller -----------------------------------
    /// When the caller's model ends a line with `[BARGE_IN]`, it talks over the reply after
    /// this many chunks (at least 1, default 1), as a turn's `barge_in.after_chunks`.
    #[serde(default = "default_caller_barge_in_chunks")]
    pub barge_in_after_chunks: u32,
    /// When the caller's model answers `[SILENCE]`, it says nothing for this many ms (1 to
    /// 600000, default 3000), as a `silence_ms` turn: what the crew says meanwhile (an idle
    /// prompt) is the turn's reply.
    #[serde(default = "default_caller_silence_ms")]
    pub silence_ms: u64,
}

fn default_caller_barge_in_chunks() -> u32 {
    1
}

fn default_caller_silence_ms() -> u64 {
    3000
}

fn default_caller_turns() -> u32 {
    10
}

/// Faults forced on one turn, to see the crew cope.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnFault {
    /// The crew's model fails every request of this turn this way: `down` (the connection
    /// reset), `503`, `500`, `429:SECS` (any status, with a `Retry-After`), `stall:MS` (no
    /// byte for MS ms), `slow:MS` (a pause before every streamed piece), `cut` (the stream
    /// broken half-way), `cut:role` (before any text), `cut:text` / `cut:text:N` (after N
    /// pieces of text were spoken), `cut:tool` (inside a tool call). Needs the crew to run on
    /// a crewline mock model: the scenario's `[model]`, or one the author serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Which of the turn's model requests fail: `every` (the default), `first` (the turn's
    /// first request, before any tool ran) or `after_tool` (the answers to tool results: the
    /// tool ran, then the model failed).
    #[serde(default, skip_serializing_if = "FaultOn::is_every")]
    pub on: FaultOn,
    /// A tool of the crew fails in this turn (see [`ToolFaultSpec`]): the runner starts the
    /// crew with the fault armed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolFaultSpec>,
}

/// Which of a turn's model requests a fault fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FaultOn {
    /// Every request of the turn.
    #[default]
    Every,
    /// The turn's first request (before any tool result).
    First,
    /// The requests answering a tool result.
    AfterTool,
}

impl FaultOn {
    fn is_every(&self) -> bool {
        *self == Self::Every
    }
}

// --- Tool faults (`fault.tool`) -------------------------------------------------------------

/// A tool of the crew going wrong in one turn: every call of `name` in that turn fails.
///
/// The crew's tools run in its own process, so the runner arms the fault when it starts the
/// crew (`crew.command`: the `CREWLINE_EVAL_TOOL_FAULTS` variable, read by crewline's `Agent`);
/// a crew reached by URL must have been started with the same plan
/// ([`Scenario::tool_faults`], `Agent::with_tool_faults`). No caller can arm it over the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolFaultSpec {
    /// The tool, e.g. `get_weather`.
    pub name: String,
    /// `error`: the tool returns an error without running; `timeout`: it does not finish, and
    /// the crew's executor stops it at its timeout (the model reads a `Timeout` error).
    pub kind: ToolFaultKindSpec,
    /// With `error`: what the tool says (default "The service is unavailable right now.").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// With `timeout`: the tool's timeout for this turn's calls, in ms (1 to 600000; default:
    /// its own, often 30 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// How a faulted tool goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolFaultKindSpec {
    /// The tool returns an error without running.
    Error,
    /// The tool does not finish; its timeout stops it.
    Timeout,
}

impl ToolFaultSpec {
    fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("`fault.tool.name` is empty".to_owned());
        }
        match self.kind {
            ToolFaultKindSpec::Error if self.timeout_ms.is_some() => {
                Err("`fault.tool.timeout_ms` is for `kind = \"timeout\"`".to_owned())
            }
            ToolFaultKindSpec::Timeout if self.message.is_some() => {
                Err("`fault.tool.message` is for `kind = \"error\"`".to_owned())
            }
            _ => match self.timeout_ms {
                Some(ms) if !(1..=crewline::eval_faults::MAX_TIMEOUT_MS).contains(&ms) => Err(
                    format!("`fault.tool.timeout_ms` is {ms}; it must be 1 to 600000"),
                ),
                _ => Ok(()),
            },
        }
    }

    /// The crew's fault for the call's `turn`th request.
    fn to_fault(&self, turn: u32) -> ToolFault {
        ToolFault {
            tool: self.name.clone(),
            kind: match self.kind {
                ToolFaultKindSpec::Error => ToolFaultKind::Error,
                ToolFaultKindSpec::Timeout => ToolFaultKind::Timeout,
            },
            on_turn: Some(turn),
            message: self.message.clone(),
            timeout_ms: self.timeout_ms,
        }
    }
}

impl Scenario {
    /// The tool faults its turns' `fault.tool` arm, as the crew's process takes them: each
    /// on the call's request of its turn (silences and hang-ups send none). Empty when no
    /// turn has one.
    pub fn tool_faults(&self) -> ToolFaults {
        let mut requests = 0;
        let mut faults = Vec::new();
        for turn in &self.turns {
            if turn.say.is_none() {
                continue;
            }
            requests += 1;
            if let Some(tool) = turn.fault.as_ref().and_then(|fault| fault.tool.as_ref()) {
                faults.push(tool.to_fault(requests));
            }
        }
        // Checked by `validate`: a scenario has at most 64 turns, each fault is valid.
        ToolFaults::new(faults).unwrap_or_default()
    }
}

// --- end of tool faults ----------------------------------------------------------------------

/// One caller turn: words said (and perhaps cut short by a barge-in), or a hang-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallerTurn {
    /// What the caller says (the transcript the platform sends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub say: Option<String>,
    /// The caller says nothing for this many ms (1 to 600000): the platform sends nothing,
    /// and what the crew does meanwhile (an idle prompt, a hang-up, nothing) is this turn's.
    /// Without `say`, `barge_in`, `fault` or budgets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence_ms: Option<u64>,
    /// The caller hangs up instead of speaking: the call is closed. Only as the last turn,
    /// and without `say`, `barge_in`, `fault` or `expect`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hang_up: bool,
    /// The caller talks over the reply: the platform sends `system.control.interrupt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barge_in: Option<BargeIn>,
    /// Faults forced on this turn (the model erroring, stalling or cut off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<TurnFault>,
    /// What must hold in this turn.
    #[serde(default)]
    pub expect: Expect,
}

/// When the caller barges in: set exactly one of the three. If the reply ends before that
/// point, the turn's `barge-in reached` check fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BargeIn {
    /// After this many chunks of the reply have arrived (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_chunks: Option<u32>,
    /// This many ms after the turn's request was sent (at most `turn_timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ms: Option<u64>,
    /// `true`: as soon as the crew starts a tool call (its `agent.log` `tool_call_start`):
    /// the caller talks over a lookup or a transfer in flight.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_tool_start: bool,
}

/// What must hold, in one turn (`[turns.expect]`) or over the call (`[expect]`). Every
/// field is optional; an empty table expects nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Tool calls that must (or must not) be made, read from the crew's `agent.log`
    /// `tool_call_start`/`tool_call_end`/`tool_call_error` events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolExpect>,
    /// The crew's own `agent.log` events (any name but the tool calls'), e.g. a background
    /// node's verdict on the timeline: by name, with matchers on their fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<LogExpect>,
    /// Tool names that must be called in this order (others may come between; the first
    /// call of each name counts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_order: Vec<String>,
    /// What the reply must (not) say. Over the call: every turn's reply.
    #[serde(default, skip_serializing_if = "ReplyExpect::is_empty")]
    pub reply: ReplyExpect,
    /// Latency and barge-in budgets. Over the call: every turn's.
    #[serde(default, skip_serializing_if = "Budget::is_empty")]
    pub budget: Budget,
    /// `true`: the crew ends the call (`agent.end_call`); `false`: it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_call: Option<bool>,
    /// `true`: the crew transfers the call exactly once (`agent.transfer_call`; a second
    /// transfer fails); `false`: it does not transfer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<bool>,
    /// The crew transfers the call (exactly once) to this number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_to: Option<String>,
    /// `true`: the crew hands the call off (ends or transfers it); `false`: the call stays
    /// with the crew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<bool>,
    /// `true`: the crew reports an error (`agent.error`), e.g. after a model fault; `false`:
    /// it sends none. Over the call: in some turn / in no turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_error: Option<bool>,
    /// `true`: the crew says nothing in the turn (no chunk, no `agent.speak`), e.g. while
    /// the caller is silent; `false`: it says something (e.g. an idle prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silent: Option<bool>,
    /// Over the call, with a simulated `caller`: `true`: the judge (the scenario's `judge`)
    /// decides that the caller's goal was reached (a score of at least
    /// `caller.goal_min_score`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal_met: Option<bool>,
    /// Rubrics an LLM judge (the scenario's `judge`) scores the reply (in a turn) or the
    /// whole call (over the call) against.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judge: Vec<JudgeExpect>,
}

impl Expect {
    /// Whether nothing is expected.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// An `agent.log` expectation: by default, at least one event named `name` whose fields
/// match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogExpect {
    /// The event's name (`agent.log`'s `name`, e.g. `sentiment`).
    pub name: String,
    /// Matchers on its fields: the key is a field's name, or a JSON Pointer into the
    /// fields when it starts with `/`. All must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, ArgMatcher>,
    /// Exactly this many matching events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Exactly one matching event.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub once: bool,
    /// No matching event at all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub never: bool,
}

impl LogExpect {
    /// The same matching as a tool call's, on the event's fields.
    pub(crate) fn as_tool(&self) -> ToolExpect {
        ToolExpect {
            name: self.name.clone(),
            args: self.fields.clone(),
            args_subset: None,
            succeeded: None,
            count: self.count,
            once: self.once,
            never: self.never,
        }
    }
}

/// A tool call expectation: by default, at least one call of `name` whose arguments match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolExpect {
    /// The tool's name.
    pub name: String,
    /// Matchers on the arguments: the key is an argument's name, or a JSON Pointer into
    /// the arguments when it starts with `/` (e.g. `/address/city`). All must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, ArgMatcher>,
    /// The arguments must contain this JSON (objects: these keys with matching values;
    /// arrays: each element found; anything else: equal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_subset: Option<Value>,
    /// `true`: only calls that ended with `tool_call_end` count; `false`: only calls that
    /// failed (`tool_call_error`, e.g. refused arguments, or a transfer waiting for the
    /// caller's yes). Unset: any outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<bool>,
    /// Exactly this many matching calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Exactly one matching call (e.g. a transfer of money must not run twice).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub once: bool,
    /// No matching call at all (with `args`: never with those arguments).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub never: bool,
}

/// A matcher on one argument's value; every field given must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArgMatcher {
    /// Equal to this JSON value (numbers compare by value: 3 equals 3.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
    /// Contains this JSON (as `args_subset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<Value>,
    /// Matches this regular expression (Rust `regex` syntax; a string is matched as is,
    /// anything else as its JSON text). `(?i)` makes it case-insensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// A number at least this (a numeric string counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// A number at most this (a numeric string counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

/// What a reply must (not) say: the text of its chunks, joined.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyExpect {
    /// Each of these appears in the reply (ignoring case).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contains: Vec<String>,
    /// None of these appears in the reply (ignoring case).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_contains: Vec<String>,
    /// Each of these regular expressions matches somewhere in the reply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regex: Vec<String>,
    /// The reply has at most this many sentences (cut by crewline-speech's sentence rules,
    /// as a text-to-speech front-end would).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sentences: Option<u32>,
    /// The reply is in this language: its ISO 639-3 code (`fra`, `eng`, `deu`, `spa`) or its
    /// English name (`French`), as detected from its words (reliable from a sentence or so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
}

/// The language a `reply.language` names: an ISO 639-3 code or an English name.
pub(crate) fn language(name: &str) -> Result<whatlang::Lang, String> {
    let name = name.trim();
    whatlang::Lang::from_code(name.to_lowercase())
        .or_else(|| {
            whatlang::Lang::all()
                .iter()
                .copied()
                .find(|lang| lang.eng_name().eq_ignore_ascii_case(name))
        })
        .ok_or_else(|| {
            format!(
                "`reply.language` {name:?} is not a language: give an ISO 639-3 code (fra, eng, \
                 deu...) or an English name (French)"
            )
        })
}

impl ReplyExpect {
    /// Whether nothing is expected of the reply.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// Latency and barge-in budgets, in ms from the turn's `system.llm.request` as the platform
/// client saw it. The per-run ones count in each run's pass rate; the `p95_` ones hold over
/// all runs of the scenario at once (nearest-rank 95th percentile).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// The first chunk of the reply arrives within this many ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_chunk_ms: Option<u64>,
    /// The turn ends (`agent.llm.response.end`) within this many ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_ms: Option<u64>,
    /// The 95th percentile over runs of the time to the first chunk, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_first_chunk_ms: Option<u64>,
    /// The 95th percentile over runs of the turn's time, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_turn_ms: Option<u64>,
    /// At most this many chunks arrive after a barge-in (0: the crew falls silent at once;
    /// chunks in flight and chunks after the turn's `end` both count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks_after_barge_in: Option<u32>,
}

impl Budget {
    /// Whether no budget is set.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// How a scenario file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// TOML (`.toml`, and any other extension).
    Toml,
    /// YAML (`.yaml` or `.yml`).
    Yaml,
}

impl Format {
    /// The format a file's extension names: `.yaml` and `.yml` are YAML, anything else TOML.
    pub fn of_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("yaml") || ext.eq_ignore_ascii_case("yml") => {
                Self::Yaml
            }
            _ => Self::Toml,
        }
    }

    /// Reads `text` as `T`; the error says where.
    fn decode<T: serde::de::DeserializeOwned>(self, text: &str) -> Result<T, EvalError> {
        match self {
            Self::Toml => toml::from_str(text).map_err(parse_error),
            Self::Yaml => serde_norway::from_str(text).map_err(|error| EvalError::Parse {
                path: Default::default(),
                message: error.to_string(),
            }),
        }
    }

    /// Whether `text` holds a suite (a top-level `scenarios`) rather than one scenario.
    fn is_suite(self, text: &str) -> Result<bool, EvalError> {
        Ok(match self {
            Self::Toml => self.decode::<toml::Table>(text)?.contains_key("scenarios"),
            Self::Yaml => self
                .decode::<serde_norway::Value>(text)?
                .get("scenarios")
                .is_some(),
        })
    }
}

impl ScenarioFile {
    /// Reads and checks a scenario or suite file (at most [`MAX_FILE_BYTES`]), TOML or YAML
    /// by its extension ([`Format::of_path`]): its scenarios, in order, each with its crew
    /// (and model and judge) filled in.
    pub fn load(path: &Path) -> Result<Vec<Scenario>, EvalError> {
        let text = read_bounded(path)?;
        Self::parse_in(&text, Format::of_path(path), base_dir(path))
            .map_err(|error| error.in_file(path))
    }

    /// Parses and checks a scenario or suite from TOML text.
    pub fn from_toml(text: &str) -> Result<Vec<Scenario>, EvalError> {
        Self::parse(text, Format::Toml)
    }

    /// Parses and checks a scenario or suite from YAML text (the same keys as TOML).
    pub fn from_yaml(text: &str) -> Result<Vec<Scenario>, EvalError> {
        Self::parse(text, Format::Yaml)
    }

    /// Parses and checks a scenario or suite written in `format` (a `recorded_sse` path in a
    /// `[model]` is read from the working directory).
    pub fn parse(text: &str, format: Format) -> Result<Vec<Scenario>, EvalError> {
        Self::parse_in(text, format, Path::new("."))
    }

    /// [`ScenarioFile::parse`], reading `recorded_sse` paths from `base`.
    fn parse_in(text: &str, format: Format, base: &Path) -> Result<Vec<Scenario>, EvalError> {
        check_size(text)?;
        if !format.is_suite(text)? {
            return Scenario::parse_in(text, format, base).map(|scenario| vec![scenario]);
        }
        let mut recorded_budget = MAX_RECORDED_SSE_TOTAL_BYTES;
        let suite: Suite = format.decode(text)?;
        if suite.scenarios.is_empty() || suite.scenarios.len() > MAX_SCENARIOS {
            return Err(invalid(format!(
                "{} scenarios; a suite has 1 to {MAX_SCENARIOS}",
                suite.scenarios.len()
            )));
        }
        suite
            .scenarios
            .into_iter()
            .enumerate()
            .map(|(index, mut scenario)| {
                if scenario.crew.is_none() {
                    scenario.crew.clone_from(&suite.crew);
                }
                if scenario.model.is_none() {
                    scenario.model.clone_from(&suite.model);
                }
                if scenario.judge.is_none() {
                    scenario.judge.clone_from(&suite.judge);
                }
                let mut recorded = Ok(());
                if let Some(model) = &mut scenario.model {
                    recorded = model.read_recorded(base, &mut recorded_budget);
                }
                recorded
                    .and_then(|()| scenario.validate())
                    .map_err(|message| {
                        invalid(format!(
                            "scenario {} ({:?}): {message}",
                            index + 1,
                            scenario.name
                        ))
                    })?;
                Ok(scenario)
            })
            .collect()
    }

    /// The JSON Schema of scenario files (what `crewline eval --schema` prints).
    pub fn json_schema() -> Value {
        schemars::schema_for!(ScenarioFile).to_value()
    }
}

/// The folder a file's relative paths are read from.
fn base_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Reads the recorded stream at `path` (at most [`MAX_RECORDED_SSE_BYTES`], taken from
/// `budget`): the body after its `#` header, as the mock model serves it.
fn read_recorded(path: &Path, budget: &mut u64) -> Result<String, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_RECORDED_SSE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let size = bytes.len() as u64;
    if size > MAX_RECORDED_SSE_BYTES {
        return Err(format!(
            "larger than {MAX_RECORDED_SSE_BYTES} bytes; a recorded stream is one answer"
        ));
    }
    *budget = budget.checked_sub(size).ok_or_else(|| {
        format!("the file's recorded streams exceed {MAX_RECORDED_SSE_TOTAL_BYTES} bytes in all")
    })?;
    let body =
        crewline_testkit::mock_llm::sse_transcript_body(&bytes).map_err(|e| e.to_string())?;
    String::from_utf8(body.to_vec()).map_err(|_| "not UTF-8 text".to_owned())
}

fn read_bounded(path: &Path) -> Result<String, EvalError> {
    let read_error = |source| EvalError::Read {
        path: path.to_owned(),
        source,
    };
    let size = std::fs::metadata(path).map_err(read_error)?.len();
    if size > MAX_FILE_BYTES {
        return Err(EvalError::TooLarge {
            path: path.to_owned(),
            bytes: size,
        });
    }
    std::fs::read_to_string(path).map_err(read_error)
}

fn check_size(text: &str) -> Result<(), EvalError> {
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(EvalError::TooLarge {
            path: Default::default(),
            bytes: text.len() as u64,
        });
    }
    Ok(())
}

fn parse_error(error: toml::de::Error) -> EvalError {
    EvalError::Parse {
        path: Default::default(),
        message: error.to_string(),
    }
}

fn invalid(message: String) -> EvalError {
    EvalError::Invalid {
        path: Default::default(),
        message,
    }
}

impl Scenario {
    /// Reads and checks a file holding one scenario (at most [`MAX_FILE_BYTES`]), TOML or
    /// YAML by its extension; see [`ScenarioFile::load`] for suites.
    pub fn load(path: &Path) -> Result<Self, EvalError> {
        let text = read_bounded(path)?;
        Self::parse_in(&text, Format::of_path(path), base_dir(path))
            .map_err(|error| error.in_file(path))
    }

    /// Parses and checks a scenario from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, EvalError> {
        Self::parse(text, Format::Toml)
    }

    /// Parses and checks a scenario from YAML text (the same keys as TOML).
    pub fn from_yaml(text: &str) -> Result<Self, EvalError> {
        Self::parse(text, Format::Yaml)
    }

    /// Parses and checks a scenario written in `format` (a `recorded_sse` path in its
    /// `[model]` is read from the working directory).
    pub fn parse(text: &str, format: Format) -> Result<Self, EvalError> {
        Self::parse_in(text, format, Path::new("."))
    }

    /// [`Scenario::parse`], reading `recorded_sse` paths from `base`.
    fn parse_in(text: &str, format: Format, base: &Path) -> Result<Self, EvalError> {
        check_size(text)?;
        let mut scenario: Self = format.decode(text)?;
        if let Some(model) = &mut scenario.model {
            let mut budget = MAX_RECORDED_SSE_TOTAL_BYTES;
            model.read_recorded(base, &mut budget).map_err(invalid)?;
        }
        scenario.validate().map_err(invalid)?;
        Ok(scenario)
    }

    /// Checks what the types cannot say; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("`name` is empty".to_owned());
        }
        if !(1..=MAX_RUNS).contains(&self.runs) {
            return Err(format!(
                "`runs` is {}; it must be 1 to {MAX_RUNS}",
                self.runs
            ));
        }
        if !(self.pass_threshold > 0.0 && self.pass_threshold <= 1.0) {
            return Err(format!(
                "`pass_threshold` is {}; it must be above 0 and at most 1",
                self.pass_threshold
            ));
        }
        if !(1..=MAX_TURN_TIMEOUT_MS).contains(&self.turn_timeout_ms) {
            return Err(format!(
                "`turn_timeout_ms` is {}; it must be 1 to {MAX_TURN_TIMEOUT_MS}",
                self.turn_timeout_ms
            ));
        }
        match &self.crew {
            Some(crew) => crew.validate()?,
            None => return Err("no `crew`: set `crew.url` or `crew.command`".to_owned()),
        }
        if let Some(model) = &self.model {
            model.script()?;
            if self.crew.as_ref().is_some_and(|crew| crew.model.is_some()) {
                return Err(
                    "set `[model]` (the runner's mock model) or `crew.model` (a live one), not both"
                        .to_owned(),
                );
            }
        }
        if let Some(judge) = &self.judge {
            judge.validate("[judge]")?;
        }
        let judged = !self.expect.judge.is_empty()
            || self.turns.iter().any(|turn| !turn.expect.judge.is_empty());
        if judged && self.judge.is_none() {
            return Err(
                "`expect.judge` needs a `[judge]` (base_url, model, api_key_env)".to_owned(),
            );
        }
        if let Some(caller) = &self.caller {
            if !self.turns.is_empty() {
                return Err("set `turns` or a simulated `caller`, not both".to_owned());
            }
            caller.validate()?;
        } else if self.turns.is_empty() || self.turns.len() > MAX_TURNS {
            return Err(format!(
                "{} turns; a scenario has 1 to {MAX_TURNS} (or a simulated `caller`)",
                self.turns.len()
            ));
        }
        if self.turns.iter().any(|t| t.expect.goal_met.is_some()) {
            return Err("`goal_met` is over the call: put it in [expect]".to_owned());
        }
        if self.expect.goal_met.is_some() {
            if self.caller.is_none() {
                return Err("`expect.goal_met` needs a simulated `caller`".to_owned());
            }
            if self.judge.is_none() {
                return Err("`expect.goal_met` needs a `[judge]` to decide it".to_owned());
            }
        }
        let last = self.turns.len().saturating_sub(1);
        for (index, turn) in self.turns.iter().enumerate() {
            turn.validate(index == last, self.turn_timeout_ms)
                .map_err(|message| format!("turn {}: {message}", index + 1))?;
        }
        self.expect
            .validate()
            .map_err(|message| format!("[expect]: {message}"))
    }
}

impl CrewSpec {
    fn validate(&self) -> Result<(), String> {
        match (&self.url, &self.command) {
            (Some(_), Some(_)) => Err("[crew]: set `url` or `command`, not both".to_owned()),
            (None, None) => Err("[crew]: set `url` or `command`".to_owned()),
            (Some(url), None) if !(url.starts_with("ws://") || url.starts_with("wss://")) => Err(
                format!("[crew]: `url` {url:?} is not a ws:// or wss:// address"),
            ),
            (None, Some(command)) if command.is_empty() => {
                Err("[crew]: `command` is empty".to_owned())
            }
            _ if !self.path.starts_with('/') => {
                Err(format!("[crew]: `path` {:?} must start with /", self.path))
            }
            _ if !(1..=MAX_READY_TIMEOUT_MS).contains(&self.ready_timeout_ms) => Err(format!(
                "[crew]: `ready_timeout_ms` must be 1 to {MAX_READY_TIMEOUT_MS}"
            )),
            (_, None) if self.model.is_some() => Err(
                "[crew]: `model` needs `command`: a running crew cannot be pointed at a model"
                    .to_owned(),
            ),
            _ => self.model.as_ref().map_or(Ok(()), CrewModelSpec::validate),
        }
    }
}

impl CallerTurn {
    fn validate(&self, is_last: bool, turn_timeout_ms: u64) -> Result<(), String> {
        if let Some(ms) = self.silence_ms {
            if self.say.is_some() || self.hang_up || self.barge_in.is_some() || self.fault.is_some()
            {
                return Err("a silence has no `say`, `hang_up`, `barge_in` or `fault`".to_owned());
            }
            if !(1..=MAX_TURN_TIMEOUT_MS).contains(&ms) {
                return Err(format!(
                    "`silence_ms` is {ms}; it must be 1 to {MAX_TURN_TIMEOUT_MS}"
                ));
            }
            if !self.expect.budget.is_empty() {
                return Err("a silence has no reply to time: no `budget`".to_owned());
            }
            return self.expect.validate();
        }
        if self.hang_up {
            if self.say.is_some()
                || self.barge_in.is_some()
                || self.fault.is_some()
                || !self.expect.is_empty()
            {
                return Err("a hang-up has no `say`, `barge_in`, `fault` or `expect`".to_owned());
            }
            if !is_last {
                return Err("a hang-up must be the last turn".to_owned());
            }
            return Ok(());
        }
        if self.say.as_deref().is_none_or(|say| say.trim().is_empty()) {
            return Err(
                "set `say` (what the caller says), `silence_ms` or `hang_up = true`".to_owned(),
            );
        }
        if let Some(barge_in) = &self.barge_in {
            match (
                barge_in.after_chunks,
                barge_in.after_ms,
                barge_in.on_tool_start,
            ) {
                (Some(0), None, false) => {
                    return Err("`barge_in.after_chunks` must be at least 1".into());
                }
                (None, Some(ms), false) if ms > turn_timeout_ms => {
                    return Err("`barge_in.after_ms` is past `turn_timeout_ms`".to_owned());
                }
                (Some(_), None, false) | (None, Some(_), false) | (None, None, true) => {}
                _ => {
                    return Err(
                        "`barge_in`: set one of `after_chunks`, `after_ms` and `on_tool_start`"
                            .to_owned(),
                    );
                }
            }
        } else if self.expect.budget.chunks_after_barge_in.is_some() {
            return Err("`chunks_after_barge_in` needs a `barge_in` in the turn".to_owned());
        }
        if let Some(fault) = &self.fault {
            fault.validate()?;
        }
        self.expect.validate()
    }
}

impl Expect {
    fn validate(&self) -> Result<(), String> {
        for tool in &self.tools {
            tool.validate()
                .map_err(|message| format!("tool `{}`: {message}", tool.name))?;
        }
        for log in &self.logs {
            log.as_tool().validate().map_err(|message| {
                format!(
                    "log `{}`: {}",
                    log.name,
                    message.replace("args.", "fields.")
                )
            })?;
        }
        for pattern in &self.reply.regex {
            matcher::compile(pattern).map_err(|message| format!("reply.regex: {message}"))?;
        }
        if let Some(name) = &self.reply.language {
            language(name)?;
        }
        if self.transfer == Some(false) && self.transfer_to.is_some() {
            return Err("`transfer = false` with a `transfer_to`".to_owned());
        }
        for judge in &self.judge {
            if judge.rubric.trim().is_empty() {
                return Err("judge: `rubric` is empty".to_owned());
            }
            if !(0.0..=1.0).contains(&judge.min_score) {
                return Err(format!(
                    "judge: `min_score` is {}; it must be from 0 to 1",
                    judge.min_score
                ));
            }
        }
        Ok(())
    }
}

impl ProviderSpec {
    /// Checks the provider, named `table` in the message (`[judge]`, `[caller.llm]`).
    fn validate(&self, table: &str) -> Result<(), String> {
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err(format!(
                "{table}: `base_url` {:?} is not an http:// or https:// address",
                self.base_url
            ));
        }
        if self.model.trim().is_empty() {
            return Err(format!("{table}: `model` is empty"));
        }
        if !(1..=MAX_TURN_TIMEOUT_MS).contains(&self.timeout_ms) {
            return Err(format!(
                "{table}: `timeout_ms` must be 1 to {MAX_TURN_TIMEOUT_MS}"
            ));
        }
        Ok(())
    }
}

impl CallerSpec {
    fn validate(&self) -> Result<(), String> {
        if self.persona.trim().is_empty() || self.goal.trim().is_empty() {
            return Err("[caller]: `persona` and `goal` must not be empty".to_owned());
        }
        if !(1..=MAX_TURNS as u32).contains(&self.max_turns) {
            return Err(format!(
                "[caller]: `max_turns` is {}; it must be 1 to {MAX_TURNS}",
                self.max_turns
            ));
        }
        if !(0.0..=1.0).contains(&self.goal_min_score) {
            return Err("[caller]: `goal_min_score` must be from 0 to 1".to_owned());
        }
        if self.barge_in_after_chunks == 0 {
            return Err("[caller]: `barge_in_after_chunks` must be at least 1".to_owned());
        }
        if !(1..=MAX_TURN_TIMEOUT_MS).contains(&self.silence_ms) {
            return Err(format!(
                "[caller]: `silence_ms` is {}; it must be 1 to {MAX_TURN_TIMEOUT_MS}",
                self.silence_ms
            ));
        }
        self.llm.validate("[caller.llm]")
    }
}

impl TurnFault {
    fn validate(&self) -> Result<(), String> {
        if let Some(tool) = &self.tool {
            tool.validate()?;
            if self.model.is_none() {
                return match self.on {
                    FaultOn::Every => Ok(()),
                    _ => Err("`fault.on` is for `fault.model`".to_owned()),
                };
            }
        }
        match &self.model {
            None => Err(
                "`fault`: set `model` (how the model fails) or `tool` (which tool fails)"
                    .to_owned(),
            ),
            Some(name)
                if name.contains(']') || name.contains('@') || Fault::parse(name).is_none() =>
            {
                Err(format!(
                    "`fault.model` {name:?} is not a fault: give down, 503, 429:SECS, stall:MS, \
                     slow:MS, cut, cut:N, cut:role, cut:text, cut:text:N or cut:tool"
                ))
            }
            Some(_) => Ok(()),
        }
    }

    /// The marker that makes a crewline mock model fail a request whose last user message
    /// holds it.
    pub(crate) fn marker(&self) -> Option<String> {
        self.model
            .as_ref()
            .map(|name| format!("[[mock:{}]]", name.trim()))
    }
}

impl ToolExpect {
    fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("`name` is empty".to_owned());
        }
        let counts =
            usize::from(self.count.is_some()) + usize::from(self.once) + usize::from(self.never);
        if counts > 1 {
            return Err("set at most one of `count`, `once` and `never`".to_owned());
        }
        for (key, arg) in &self.args {
            arg.validate()
                .map_err(|message| format!("args.{key}: {message}"))?;
        }
        Ok(())
    }
}

impl ArgMatcher {
    fn validate(&self) -> Result<(), String> {
        if self == &Self::default() {
            return Err(
                "an empty matcher; give `equals`, `subset`, `regex`, `min` or `max`".into(),
            );
        }
        if let Some(pattern) = &self.regex {
            matcher::compile(pattern)?;
        }
        if let (Some(min), Some(max)) = (self.min, self.max)
            && min > max
        {
            return Err(format!("`min` {min} is above `max` {max}"));
        }
        Ok(())
    }
}
