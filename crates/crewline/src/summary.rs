//! A long call: the oldest turns summarized by a model call when the context passes a share of
//! its token budget ([`Summarizer`]; [`AgentBuilder::summarize`](crate::agent::AgentBuilder::summarize)).
//!
//! After each answered turn, when the context's tokens ([`Context::tokens`]: the model server's
//! count when it reported one, else the tokenizer's or the byte estimate) pass
//! [`share`](Summarizer::at_share) of the [`budget`](Summarizer::budget), the oldest turns are
//! summarized in the background: a task of the call (it dies with the call), one at a time,
//! never on a turn's path. What is summarized: every turn but the system prompts and the last
//! [`keep_last`](Summarizer::keep_last) turns (a turn starts at a caller's message, so an
//! assistant message with tool calls and its results are summarized together or not at all).
//!
//! When the summary lands (between turns, never while one streams) it replaces exactly the
//! messages it covers, as one user message starting with [`SUMMARY_PREFIX`]. The platform
//! still holds the summarized turns and sends them with every `system.llm.request`: while its
//! conversation holds them in order (recognised by content digests), they are replaced by the
//! summary again; when it does not (the platform changed its history), the summary is dropped
//! and the context's limits truncate as before. A summary that fails, times out, or is longer
//! than [`max_bytes`](Summarizer::max_bytes) or than what it would replace is dropped with a
//! warning: the context's limits truncate as before, and the call goes on.
//!
//! With [`log_usage`](crate::agent::AgentBuilder::log_usage), each summary that lands is also
//! sent to the platform as an `agent.log` entry named [`SUMMARY_LOG`]:
//!
//! ```json
//! {"messages": 14, "tokens_before": 12480, "tokens_after": 3120, "summary_tokens": 160}
//! ```

use std::{fmt, sync::Arc, time::Duration};

use crewline_core::{Context, Message, Role};
use crewline_llm::{ChatRequest, LlmClient, LlmError, Money, PriceTable, RequestOptions, Usage};
use serde_json::{Map, Value};
use tokio::task::JoinHandle;

/// The name of the `agent.log` entry sent when a summary lands.
pub const SUMMARY_LOG: &str = "context_summary";

/// How a summary message starts, so the model reads it as notes and not as the caller's words.
pub const SUMMARY_PREFIX: &str = "[Summary of the earlier conversation] ";

/// The default summary prompt.
pub const DEFAULT_SUMMARY_PROMPT: &str = "You summarize the start of a phone call between a \
caller and a voice agent, so the agent can go on without it. Write a short summary in plain \
sentences: who the caller is, what they asked for, what was decided or promised, names, \
numbers, dates and the results of lookups the agent will still need. No greetings, no \
headings, no lists.";

/// The default token budget the share is taken of, when the context has no token bound.
///
/// A phone call's prompt is read again on every turn: past ~16k tokens each turn starts
/// measurably later and costs more, well before a model's window is full.
pub const DEFAULT_SUMMARY_BUDGET: usize = 16_000;

/// Summarizes a long call's oldest turns in the background; see the [module](self).
///
/// ```
/// use std::sync::Arc;
/// use crewline::{llm::ScriptedLlm, prelude::*, summary::Summarizer};
///
/// let cheap = Arc::new(ScriptedLlm::new([]));
/// let agent = Agent::builder(ScriptedLlm::new([]))
///     .prompt("You are a friendly voice assistant.")
///     .summarize(Summarizer::new(cheap).model("gpt-4o-mini").at_share(0.75).keep_last(4))
///     .build()?;
/// # Ok::<(), crewline::agent::AgentError>(())
/// ```
#[derive(Clone)]
pub struct Summarizer {
    model: Arc<dyn LlmClient>,
    options: RequestOptions,
    share: f64,
    budget: Option<usize>,
    keep_last: usize,
    prompt: Arc<str>,
    max_bytes: usize,
    timeout: Duration,
    /// What the summary requests cost per model (the agent's, unless set).
    prices: Option<Arc<PriceTable>>,
}

impl fmt::Debug for Summarizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Summarizer")
            .field("model", &self.options.model)
            .field("share", &self.share)
            .field("budget", &self.budget)
            .field("keep_last", &self.keep_last)
            .finish_non_exhaustive()
    }
}

impl Summarizer {
    /// Summaries written by `model` (a cheaper one than the agent's, typically), with a phone
    /// call's defaults: at 75% of the budget, the last 4 turns kept, 4 KiB at most, 30 s.
    pub fn new(model: Arc<dyn LlmClient>) -> Self {
        Self {
            model,
            options: RequestOptions::default(),
            share: 0.75,
            budget: None,
            keep_last: 4,
            prompt: Arc::from(DEFAULT_SUMMARY_PROMPT),
            max_bytes: 4 << 10,
            timeout: Duration::from_secs(30),
            prices: None,
        }
    }

    /// Prices the summary requests' tokens (default: the agent's
    /// [`prices`](crate::agent::AgentBuilder::prices)); what they cost goes into the call's
    /// tally ([`CallUsage::summaries`](crate::usage::CallUsage::summaries)).
    #[must_use]
    pub fn prices(mut self, prices: impl Into<Arc<PriceTable>>) -> Self {
        self.prices = Some(prices.into());
        self
    }

    /// This summarizer with `prices` unless it has its own.
    pub(crate) fn or_prices(mut self, prices: Option<&Arc<PriceTable>>) -> Self {
        if self.prices.is_none() {
            self.prices = prices.cloned();
        }
        self
    }

    /// The model name the summary requests ask for (the client's default otherwise).
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.options.model = Some(model.into());
        self
    }

    /// Every other request setting of the summary requests (a later [`model`](Self::model)
    /// still applies).
    #[must_use]
    pub fn request_options(mut self, options: RequestOptions) -> Self {
        let model = self.options.model.take();
        self.options = options;
        if self.options.model.is_none() {
            self.options.model = model;
        }
        self
    }

    /// Summarizes once the context passes `share` of the budget (0 to 1; default 0.75).
    #[must_use]
    pub fn at_share(mut self, share: f64) -> Self {
        self.share = share.clamp(0.0, 1.0);
        self
    }

    /// The token budget the share is of (default: the context's
    /// [`max_tokens`](crewline_core::ContextLimits::max_tokens) when bounded, else
    /// [`DEFAULT_SUMMARY_BUDGET`]).
    #[must_use]
    pub fn budget(mut self, tokens: usize) -> Self {
        self.budget = Some(tokens);
        self
    }

    /// The last `turns` turns (from a caller's message on) are never summarized (default 4).
    #[must_use]
    pub fn keep_last(mut self, turns: usize) -> Self {
        self.keep_last = turns;
        self
    }

    /// The instructions the summarizing model gets (default [`DEFAULT_SUMMARY_PROMPT`]).
    #[must_use]
    pub fn prompt(mut self, prompt: impl Into<String>) -> Self {
        self.prompt = Arc::from(prompt.into());
        self
    }

    /// The longest summary kept, in bytes (default 4 KiB); a longer one is dropped.
    #[must_use]
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// How long a summary may take (default 30 s); a later one is dropped.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The tokens past which the context is summarized.
    fn threshold(&self, context: &Context) -> usize {
        let max = context.limits().max_tokens;
        let budget = self.budget.unwrap_or(if max == usize::MAX {
            DEFAULT_SUMMARY_BUDGET
        } else {
            max
        });
        // A share of a token count: exact enough in f64 for any real budget.
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let threshold = (budget as f64 * self.share) as usize;
        threshold
    }
}

/// Why a summary was not used.
#[derive(Debug, thiserror::Error)]
enum SummaryError {
    #[error("the summary request failed")]
    Model(#[source] LlmError),
    #[error("the summary took longer than {0:?}")]
    Timeout(Duration),
    #[error("the summary task ended")]
    Task(#[source] tokio::task::JoinError),
}

/// A summary being written: the task, and what it covers.
struct Running {
    task: JoinHandle<Result<Answer, SummaryError>>,
    /// The task's result, once taken from it.
    result: Option<Result<Answer, SummaryError>>,
    cover: Cover,
}

/// A summary model's answer: its text and what it cost.
struct Answer {
    text: String,
    spent: Option<Spent>,
}

/// The tokens a summary request used, and their money with prices for its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spent {
    pub(crate) usage: Usage,
    pub(crate) cost: Option<Money>,
}

impl Drop for Running {
    fn drop(&mut self) {
        // The call ended, or the result was taken: a request still out is cancelled.
        self.task.abort();
    }
}

/// What a summary replaces.
#[derive(Clone)]
struct Cover {
    /// The digests of the context's messages it replaces (an earlier summary among them).
    in_context: Vec<u64>,
    /// The digests of the platform's messages it replaces (an earlier summary's, expanded).
    in_platform: Vec<u64>,
    /// The context's tokens when it started.
    tokens_before: usize,
}

/// A summary in effect.
struct Landed {
    message: Message,
    digest: u64,
    /// The platform's messages it replaces, in order.
    covers: Vec<u64>,
}

/// What a summary that landed did, for the log.
pub(crate) struct SummaryNote {
    messages: usize,
    tokens_before: usize,
    tokens_after: usize,
    summary_tokens: usize,
}

impl SummaryNote {
    /// The `agent.log` entry ([`SUMMARY_LOG`]) of this summary.
    ///
    /// With what the request cost (`usage`, `cost`: `null` when not reported or not priced)
    /// and the call's running total (`call`, as in the `llm_usage` entry).
    pub(crate) fn log(
        &self,
        spent: Option<Spent>,
        call: Option<crate::usage::CallUsage>,
    ) -> crewline_protocol::EventBody {
        let mut payload = Map::new();
        payload.insert(
            "usage".to_owned(),
            spent.map_or(Value::Null, |spent| crate::usage::usage_json(&spent.usage)),
        );
        payload.insert(
            "cost".to_owned(),
            spent
                .and_then(|spent| spent.cost)
                .map_or(Value::Null, |cost| Value::String(cost.to_string())),
        );
        if let Some(call) = call {
            payload.insert("call".to_owned(), call.to_json());
        }
        payload.insert("messages".to_owned(), Value::from(self.messages));
        payload.insert("tokens_before".to_owned(), Value::from(self.tokens_before));
        payload.insert("tokens_after".to_owned(), Value::from(self.tokens_after));
        payload.insert(
            "summary_tokens".to_owned(),
            Value::from(self.summary_tokens),
        );
        crewline_protocol::EventBody::Log {
            name: SUMMARY_LOG.to_owned(),
            payload,
        }
    }
}

/// One call's summaries: the one being written, the one in effect.
pub(crate) struct CallSummaries {
    summarizer: Arc<Summarizer>,
    running: Option<Running>,
    landed: Option<Landed>,
    /// What the last summary request that finished cost, until taken.
    spent: Option<Spent>,
}

impl CallSummaries {
    pub(crate) fn new(summarizer: Arc<Summarizer>) -> Self {
        Self {
            summarizer,
            running: None,
            landed: None,
            spent: None,
        }
    }

    /// What the last finished summary request cost (once): its tokens go into the call's
    /// tally, used or not.
    pub(crate) fn take_spent(&mut self) -> Option<Spent> {
        self.spent.take()
    }

    /// Waits for the running summary's result (forever when none runs); cancel-safe.
    pub(crate) async fn finished(&mut self) {
        match &mut self.running {
            Some(running) if running.result.is_none() => {
                let result = match (&mut running.task).await {
                    Ok(result) => result,
                    Err(error) => Err(SummaryError::Task(error)),
                };
                running.result = Some(result);
            }
            Some(_) => {}
            None => std::future::pending().await,
        }
    }

    /// Takes the platform's conversation: the summary in effect replaces the messages it
    /// covers when the conversation holds them in order; otherwise it is dropped.
    pub(crate) fn apply_to_incoming(&mut self, incoming: &mut Vec<Message>) {
        let Some(landed) = &self.landed else {
            return;
        };
        if !splice(incoming, &landed.covers, &landed.message) {
            tracing::warn!(
                "the platform's conversation no longer holds the summarized turns: the summary is dropped"
            );
            self.landed = None;
        }
    }

    /// After a turn: starts a summary when the context is past the share and none runs.
    pub(crate) fn after_turn(&mut self, context: &Context) {
        if self.running.is_some() || context.tokens() <= self.summarizer.threshold(context) {
            return;
        }
        let messages = context.messages();
        let Some(range) = to_summarize(messages, self.summarizer.keep_last) else {
            return;
        };
        let region = &messages[range];
        let mut in_platform = Vec::new();
        let mut in_context = Vec::with_capacity(region.len());
        for message in region {
            let digest = message.digest();
            in_context.push(digest);
            match &self.landed {
                Some(landed) if landed.digest == digest => {
                    in_platform.extend_from_slice(&landed.covers);
                }
                _ => in_platform.push(digest),
            }
        }
        let request = summary_request(region, &self.summarizer);
        let model = Arc::clone(&self.summarizer.model);
        let within = self.summarizer.timeout;
        tracing::info!(
            messages = region.len(),
            tokens = context.tokens(),
            "summarizing the oldest turns"
        );
        let prices = self.summarizer.prices.clone();
        let task = tokio::spawn(async move {
            // The model the tokens are counted under: the request's, else the client's.
            let priced_as = request
                .options
                .model
                .clone()
                .or_else(|| model.model_id().map(str::to_owned));
            match tokio::time::timeout(within, model.chat(request)).await {
                Ok(Ok(answer)) => Ok(Answer {
                    spent: answer.usage.map(|usage| Spent {
                        usage,
                        cost: prices
                            .as_deref()
                            .zip(priced_as.as_deref())
                            .and_then(|(prices, model)| prices.cost(model, &usage)),
                    }),
                    text: answer.content,
                }),
                Ok(Err(error)) => Err(SummaryError::Model(error)),
                Err(_) => Err(SummaryError::Timeout(within)),
            }
        });
        self.running = Some(Running {
            task,
            result: None,
            cover: Cover {
                in_context,
                in_platform,
                tokens_before: context.tokens(),
            },
        });
    }

    /// Between turns: applies the running summary to `context` if it landed.
    pub(crate) fn land(&mut self, context: &mut Context) -> Option<SummaryNote> {
        let done = self.running.as_mut()?;
        if done.result.is_none() {
            // Finished: the output is there to take without waiting.
            let output = futures::FutureExt::now_or_never(&mut done.task)?;
            done.result = Some(output.unwrap_or_else(|error| Err(SummaryError::Task(error))));
        }
        let mut running = self.running.take()?;
        let result = running.result.take()?;
        let text = match result {
            Ok(answer) => {
                // Paid for whether or not it is used.
                self.spent = answer.spent;
                answer.text
            }
            Err(error) => {
                tracing::warn!(error = %crewline_core::ErrorChain(&error), "no summary: the context is truncated as before");
                return None;
            }
        };
        let text = text.trim();
        if text.is_empty() || text.len() > self.summarizer.max_bytes {
            tracing::warn!(
                bytes = text.len(),
                max = self.summarizer.max_bytes,
                "the summary is empty or too long: the context is truncated as before"
            );
            return None;
        }
        let message = Message::user(format!("{SUMMARY_PREFIX}{text}"));
        let mut turns: Vec<Message> = context
            .messages()
            .iter()
            .filter(|m| m.role() != Role::System)
            .cloned()
            .collect();
        if !splice(&mut turns, &running.cover.in_context, &message) {
            tracing::warn!("the summarized turns left the context: the summary is dropped");
            return None;
        }
        let before = context.tokens();
        let mut after = context.clone();
        after.replace(turns);
        let summary_tokens = after
            .messages()
            .iter()
            .position(|m| *m == message)
            .and_then(|i| after.message_tokens(i))
            .unwrap_or_default();
        if after.tokens() >= before {
            tracing::warn!(
                summary_tokens,
                "the summary is no shorter than what it replaces: the context is truncated as before"
            );
            return None;
        }
        let note = SummaryNote {
            messages: running.cover.in_platform.len(),
            tokens_before: running.cover.tokens_before,
            tokens_after: after.tokens(),
            summary_tokens,
        };
        *context = after;
        self.landed = Some(Landed {
            digest: message.digest(),
            message,
            covers: std::mem::take(&mut running.cover.in_platform),
        });
        tracing::info!(
            messages = note.messages,
            tokens_before = note.tokens_before,
            tokens_after = note.tokens_after,
            "the summary replaced the oldest turns"
        );
        Some(note)
    }
}

/// Replaces the run of messages whose digests are `covers` in `turns` (system messages aside)
/// with `summary`, and drops what comes before it (turns the context's limits had dropped).
/// `false` when `turns` does not hold the run.
fn splice(turns: &mut Vec<Message>, covers: &[u64], summary: &Message) -> bool {
    let Some(&first) = covers.first() else {
        return false;
    };
    // Hashing is a pass over a message's bytes: only up to the end of the run.
    let Some(start) = turns
        .iter()
        .position(|m| m.role() != Role::System && m.digest() == first)
    else {
        return false;
    };
    let end = start + covers.len();
    if end > turns.len()
        || !turns[start..end]
            .iter()
            .zip(covers)
            .all(|(m, &digest)| m.digest() == digest)
    {
        return false;
    }
    turns.splice(..end, [summary.clone()]);
    true
}

/// The oldest turns to summarize: from the first turn after the leading system prompts to the
/// start of the last `keep_last` turns (a turn starts at a caller's message); `None` when that
/// is less than two messages, crosses a system message, or would split a tool call from its
/// results.
fn to_summarize(messages: &[Message], keep_last: usize) -> Option<std::ops::Range<usize>> {
    let start = messages.iter().position(|m| m.role() != Role::System)?;
    let users: Vec<usize> = (start..messages.len())
        .filter(|&i| messages[i].role() == Role::User)
        .collect();
    let cut = *users.get(users.len().checked_sub(keep_last.max(1))?)?;
    let end = (start..cut)
        .find(|&i| messages[i].role() == Role::System)
        .unwrap_or(cut);
    if end < start + 2 {
        return None;
    }
    // Every call summarized has its results summarized too, and every result its call.
    let mut calls = std::collections::HashSet::new();
    for message in &messages[start..end] {
        calls.extend(message.tool_calls().iter().map(|c| c.id.as_str()));
        if let Message::Tool { tool_call_id, .. } = message
            && !calls.remove(tool_call_id.as_str())
        {
            return None;
        }
    }
    calls.is_empty().then_some(start..end)
}

/// The tool-less request that summarizes `region`: the prompt, then the turns as a transcript.
fn summary_request(region: &[Message], summarizer: &Summarizer) -> ChatRequest {
    let mut transcript = String::new();
    for message in region {
        let line = match message {
            Message::User { content } => match content.strip_prefix(SUMMARY_PREFIX) {
                Some(summary) => format!("Earlier summary: {summary}"),
                None => format!("Caller: {content}"),
            },
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut line = format!("Agent: {}", content.as_deref().unwrap_or_default());
                for call in tool_calls {
                    line.push_str(&format!(" [called {}({})]", call.name, call.arguments));
                }
                line
            }
            Message::Tool { content, .. } => format!("Tool result: {content}"),
            Message::System { content } => format!("Note: {content}"),
        };
        transcript.push_str(&line);
        transcript.push('\n');
    }
    let mut request = ChatRequest::new(vec![
        Message::system(summarizer.prompt.to_string()),
        Message::user(transcript),
    ]);
    request.options = summarizer.options.clone();
    request
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewline_core::ToolCall;

    fn call_turn(id: &str) -> [Message; 3] {
        [
            Message::user(format!("look {id} up")),
            Message::assistant_with_tools("", vec![ToolCall::new(id, "lookup", "{}")]),
            Message::tool(id, "found"),
        ]
    }

    #[test]
    fn the_oldest_turns_are_chosen_never_the_prompt_or_the_last_ones_and_calls_stay_with_results() {
        let mut messages = vec![Message::system("You are Ava.")];
        messages.extend(call_turn("a"));
        messages.push(Message::assistant("It's found."));
        messages.extend(call_turn("b"));
        messages.push(Message::user("thanks"));
        // Keep the last 2 turns: the first turn (4 messages) is summarized.
        assert_eq!(to_summarize(&messages, 2), Some(1..5));
        // Keep 3: nothing older is left.
        assert_eq!(to_summarize(&messages, 3), None);
        // A result whose call came before the region (a history the platform cut): not now.
        let cut = [
            vec![Message::system("p"), Message::tool("x", "orphan")],
            vec![Message::user("a"), Message::user("b")],
        ]
        .concat();
        assert_eq!(to_summarize(&cut, 1), None);
    }

    #[test]
    fn a_summary_replaces_its_run_and_what_came_before_it_and_only_that_run() {
        let summary = Message::user(format!("{SUMMARY_PREFIX}they asked twice"));
        let mut turns = vec![
            Message::user("dropped by a limit"),
            Message::user("one"),
            Message::assistant("two"),
            Message::user("three"),
        ];
        let covers = [turns[1].digest(), turns[2].digest()];
        assert!(splice(&mut turns, &covers, &summary));
        assert_eq!(turns, [summary.clone(), Message::user("three")]);
        // A history that changed inside the run: not spliced.
        let mut changed = vec![Message::user("one"), Message::assistant("TWO")];
        assert!(!splice(&mut changed, &covers, &summary));
    }
}
