//! Declaring a router: sub-agents, transitions, and the checks that run once at build time.

use std::{collections::HashMap, sync::Arc};

use crewline_core::{Context, ContextLimits, TokenCounter};
use crewline_llm::LlmClient;
use crewline_tools::{RegistryError, SessionScope, ToolRegistry};
use serde_json::{Map, Value};

use super::{
    DeterministicRouter, Predicate, RouterError, RouterState, Routes, Stage,
    classify::{Classify, StructuredStep},
};
use crate::{ToolLoop, turn::ToolLoopConfig};

/// One specialist of a [`DeterministicRouter`]: its id, the system prompt used while it is
/// active, and the tools (by name, from the router's registry) it may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAgent {
    id: String,
    prompt: String,
    tools: Vec<String>,
}

impl SubAgent {
    /// A sub-agent without tools: its replies stream straight from the model.
    pub fn new(id: impl Into<String>, prompt: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            prompt: prompt.into(),
            tools: Vec::new(),
        }
    }

    /// Gives the sub-agent these tools of the router's registry (only while it is active).
    pub fn with_tools<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.tools.extend(names.into_iter().map(Into::into));
        self
    }

    /// The sub-agent's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The system prompt used while it is active.
    pub fn prompt(&self) -> &str {
        &self.prompt
    }

    /// The names of its tools.
    pub fn tools(&self) -> &[String] {
        &self.tools
    }
}

/// A transition as declared, before its ids are resolved.
struct Declared {
    from: String,
    to: String,
    when: Option<Predicate>,
}

/// Declares a [`DeterministicRouter`]; [`build`](Self::build) checks the whole graph once.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use crewline::router::{DeterministicRouter, RouterError, RouterState, SubAgent};
/// use crewline::{llm::ScriptedLlm, router::when};
///
/// let llm = Arc::new(ScriptedLlm::new([]));
/// let state = RouterState::new(); // the tools hold a clone and record what they found
/// let router = DeterministicRouter::builder("intake", llm.clone())
///     .state(state.clone())
///     .sub_agent(SubAgent::new("intake", "Find the caller's account."))
///     .sub_agent(SubAgent::new("resolve", "Agree a payment plan."))
///     .add_transition("intake", "resolve", when::present("account_id"))
///     .build()?;
/// # drop(router);
///
/// // The graph is checked once, when it is built: a typo is an error naming it.
/// let typo = DeterministicRouter::builder("intake", llm)
///     .sub_agent(SubAgent::new("intake", "Find the caller's account."))
///     .add_default("intake", "resolv")
///     .build();
/// assert!(matches!(typo, Err(RouterError::UnknownSubAgent { .. })));
/// # Ok::<(), RouterError>(())
/// ```
pub struct RouterBuilder {
    start: String,
    llm: Arc<dyn LlmClient>,
    tools: Arc<ToolRegistry>,
    config: ToolLoopConfig,
    state: RouterState,
    sub_agents: Vec<SubAgent>,
    transitions: Vec<Declared>,
    context_limits: ContextLimits,
    token_counter: Option<Arc<dyn TokenCounter>>,
    classifiers: Vec<(String, Arc<dyn Classify>)>,
}

impl RouterBuilder {
    pub(super) fn new(start: String, llm: Arc<dyn LlmClient>) -> Self {
        Self {
            start,
            llm,
            tools: Arc::new(ToolRegistry::new()),
            config: ToolLoopConfig::default(),
            state: RouterState::new(),
            sub_agents: Vec::new(),
            transitions: Vec::new(),
            context_limits: ContextLimits::default(),
            token_counter: None,
            classifiers: Vec::new(),
        }
    }

    /// Counts the conversation's tokens by `counter` (the model's tokenizer) instead of the
    /// byte estimate, across transitions; a router node summarizes with
    /// [`OutputNode::summarize`](crate::crew::OutputNode::summarize).
    pub fn token_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.token_counter = Some(counter);
        self
    }

    /// How much of the conversation the router keeps (default [`ContextLimits::default`]);
    /// the bound holds across transitions.
    pub fn context_limits(mut self, limits: ContextLimits) -> Self {
        self.context_limits = limits;
        self
    }

    /// The registry the sub-agents take their tools from (by name).
    pub fn tools(mut self, registry: Arc<ToolRegistry>) -> Self {
        self.tools = registry;
        self
    }

    /// The tool loop settings of every sub-agent (rounds, parallel tools, request options).
    pub fn config(mut self, config: ToolLoopConfig) -> Self {
        self.config = config;
        self
    }

    /// The state the transitions read; pass the clone your tools hold.
    pub fn state(mut self, state: RouterState) -> Self {
        self.state = state;
        self
    }

    /// Adds a sub-agent.
    pub fn sub_agent(mut self, sub_agent: SubAgent) -> Self {
        self.sub_agents.push(sub_agent);
        self
    }

    /// Adds a conditional transition `from` -> `to`, taken after a completed turn of `from`
    /// when `when` holds on the state.
    ///
    /// A sub-agent's conditional transitions are tried in the order they were added, before
    /// its default. A transition may go to any sub-agent, so skipping a step is a transition
    /// past it; one back to `from` itself keeps `from` active while its condition holds.
    pub fn add_transition(
        mut self,
        from: impl Into<String>,
        to: impl Into<String>,
        when: impl Fn(&Map<String, Value>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.transitions.push(Declared {
            from: from.into(),
            to: to.into(),
            when: Some(Box::new(when)),
        });
        self
    }

    /// Adds the unconditional default `from` -> `to`, taken after a completed turn of `from`
    /// when none of its conditional transitions holds. Without one, `from` stays active.
    pub fn add_default(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.transitions.push(Declared {
            from: from.into(),
            to: to.into(),
            when: None,
        });
        self
    }

    /// Asks `step`'s typed question at the start of each turn of the sub-agent `at`, writes
    /// the answer to the state, and tries `at`'s transitions at once: the sub-agent they pick
    /// answers this turn (see [`StructuredStep`]).
    ///
    /// The step costs one model call before the first word of each of `at`'s turns; give it
    /// a fast model in its [`Structured`](crate::structured::Structured) options. A step that
    /// fails (no answer, or one that does not parse after its retry) moves nothing: `at`
    /// answers, and the failure reaches the platform as an `agent.log`
    /// [`STRUCTURED_ERROR_LOG`](crate::structured::STRUCTURED_ERROR_LOG) entry.
    pub fn classify<T>(mut self, at: impl Into<String>, step: StructuredStep<T>) -> Self
    where
        T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
    {
        self.classifiers.push((at.into(), Arc::new(step)));
        self
    }

    /// Checks the graph and builds the router.
    ///
    /// Errors name the ids at fault: no sub-agents, a duplicate id, a start or transition end
    /// that is not a sub-agent, two defaults out of one sub-agent, a tool not in the registry.
    /// Sub-agents no transition reaches from the start are allowed but logged as a warning.
    pub fn build(self) -> Result<DeterministicRouter, RouterError> {
        if self.sub_agents.is_empty() {
            return Err(RouterError::NoSubAgents);
        }
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(self.sub_agents.len());
        for (i, sub) in self.sub_agents.iter().enumerate() {
            if index.insert(sub.id.as_str(), i).is_some() {
                return Err(RouterError::DuplicateSubAgent(sub.id.clone()));
            }
        }
        let known = || self.sub_agents.iter().map(|s| s.id.clone()).collect();
        let start = *index
            .get(self.start.as_str())
            .ok_or_else(|| RouterError::UnknownStart {
                start: self.start.clone(),
                known: known(),
            })?;

        let mut routes: Vec<Routes> = (0..self.sub_agents.len())
            .map(|_| Routes::default())
            .collect();
        for declared in self.transitions {
            let lookup = |id: &str| {
                index
                    .get(id)
                    .copied()
                    .ok_or_else(|| RouterError::UnknownSubAgent {
                        from: declared.from.clone(),
                        to: declared.to.clone(),
                        missing: id.to_owned(),
                        known: known(),
                    })
            };
            let (from, to) = (lookup(&declared.from)?, lookup(&declared.to)?);
            let out = &mut routes[from];
            match declared.when {
                Some(when) => out.conditional.push((to, when)),
                None => match out.default {
                    Some(first) => {
                        return Err(RouterError::DuplicateDefault {
                            from: declared.from,
                            first: self.sub_agents[first].id.clone(),
                            second: declared.to,
                        });
                    }
                    None => out.default = Some(to),
                },
            }
        }

        let mut classifiers: Vec<Option<Arc<dyn Classify>>> = vec![None; self.sub_agents.len()];
        for (at, step) in self.classifiers {
            let Some(&i) = index.get(at.as_str()) else {
                return Err(RouterError::UnknownClassifier {
                    sub_agent: at,
                    known: known(),
                });
            };
            if classifiers[i].replace(step).is_some() {
                return Err(RouterError::DuplicateClassifier(at));
            }
        }

        let mut stages = Vec::with_capacity(self.sub_agents.len());
        // One conversation, one session: every step's calls share a scope (the call's, once
        // the router's node starts).
        let scope = SessionScope::new();
        for (sub, classify) in self.sub_agents.into_iter().zip(classifiers) {
            let names: Vec<&str> = sub.tools.iter().map(String::as_str).collect();
            let registry = self.tools.subset(&names).map_err(|error| match error {
                RegistryError::DuplicateName(tool) => RouterError::DuplicateTool {
                    sub_agent: sub.id.clone(),
                    tool,
                },
                RegistryError::UnknownTool(tool) => RouterError::UnknownTool {
                    sub_agent: sub.id.clone(),
                    tool,
                },
                // `subset` reports only the two above; anything else is still a missing tool.
                other => RouterError::UnknownTool {
                    sub_agent: sub.id.clone(),
                    tool: other.to_string(),
                },
            })?;
            let tool_loop = ToolLoop::new(self.llm.clone(), Arc::new(registry))
                .with_config(self.config.clone())
                .with_scope(scope.clone());
            stages.push(Stage {
                id: sub.id,
                prompt: sub.prompt,
                tool_loop,
                classify,
            });
        }
        warn_unreachable(&stages, &routes, start);

        Ok(DeterministicRouter {
            context: {
                let mut context = Context::with_system(stages[start].prompt.clone())
                    .with_limits(self.context_limits);
                context.set_token_counter(self.token_counter);
                context
            },
            stages,
            routes,
            active: start,
            state: self.state,
            node: None,
            entered: false,
            llm: self.llm,
        })
    }
}

/// Logs the sub-agents no transition path reaches from the start: usually a missing transition.
fn warn_unreachable(stages: &[Stage], routes: &[Routes], start: usize) {
    let mut reached = vec![false; stages.len()];
    let mut todo = vec![start];
    reached[start] = true;
    while let Some(at) = todo.pop() {
        let targets = routes[at]
            .conditional
            .iter()
            .map(|(to, _)| *to)
            .chain(routes[at].default);
        for to in targets {
            if !reached[to] {
                reached[to] = true;
                todo.push(to);
            }
        }
    }
    for (stage, reached) in stages.iter().zip(reached) {
        if !reached {
            tracing::warn!(
                sub_agent = %stage.id,
                "no transition reaches this sub-agent from the start"
            );
        }
    }
}
