//! What each call cost: the tokens of its turns, by the model that served them, and their
//! money when the agent has prices.
//!
//! Every turn's usage lands in three places without any setting: the call's tally
//! ([`CallControl::usage`](crate::CallControl::usage)), the `crewline.turn` span (fields
//! `model`, `prompt_tokens`, `completion_tokens`, `cached_tokens`, `reasoning_tokens`, `cost`)
//! and the server's `/metrics`. A crew that opts in
//! ([`AgentBuilder::log_usage`](crate::agent::AgentBuilder::log_usage), or
//! [`OutputNode::log_usage`](crate::crew::OutputNode::log_usage)) also sends one `agent.log` entry
//! named [`USAGE_LOG`] per answered turn, right before `agent.response.end`:
//!
//! ```json
//! {"turn_id": "…", "model": "gpt-4o-mini", "provider": null,
//!  "usage": {"prompt_tokens": 812, "completion_tokens": 23, "total_tokens": 835,
//!            "reasoning_tokens": 0, "cached_tokens": 512},
//!  "cost": "0.0000803",
//!  "call": {"turns": 3, "usage": {…}, "cost": "0.000241", "priced_turns": 3}}
//! ```
//!
//! `usage` is `null` when the model server reported none (the crew still answers); `cost` is
//! `null` without prices for the model; `call` is the call's running total, so the last entry
//! of a call holds what the whole call cost. Money is a decimal string in the price table's
//! currency ([`PriceTable`](crewline_llm::PriceTable)), exact.
//!
//! Turns a barge-in cut short report nothing: the model server sends usage last, and the
//! request is dropped before it.

use crewline_llm::{Money, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::turn::TurnReport;

/// The name of the `agent.log` entry that carries a turn's usage.
pub const USAGE_LOG: &str = "llm_usage";

/// The key of the call's tally in its checkpoint, so a resumed call goes on counting.
pub(crate) const USAGE_KEY: &str = "crewline.usage";

/// The call's tally as the checkpoint keeps it (money as an exact integer of pico-units).
#[derive(Debug, Default, Serialize, Deserialize)]
struct KeptUsage {
    turns: u64,
    reported_turns: u64,
    usage: Usage,
    cost_picos: Option<u64>,
    priced_turns: u64,
    #[serde(default)]
    summaries: u64,
}

/// What one call's answered turns cost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallUsage {
    /// Turns answered (with a report), whether or not their usage was reported.
    pub turns: u64,
    /// Turns whose usage the model server reported.
    pub reported_turns: u64,
    /// Tokens over the reported turns.
    pub usage: Usage,
    /// What the priced turns cost (none until one was priced).
    pub cost: Option<Money>,
    /// Turns with a price (the rest were on models the table does not name).
    pub priced_turns: u64,
    /// Summary requests of a long call ([`crate::summary`]): their tokens and money are in
    /// `usage` and `cost` too, but they are not turns.
    pub summaries: u64,
}

impl CallUsage {
    /// Adds one turn's report.
    pub(crate) fn add(&mut self, report: &TurnReport) {
        self.turns += 1;
        if report.usage_reported() {
            self.reported_turns += 1;
            self.usage += report.usage;
        }
        if let Some(cost) = report.cost {
            self.priced_turns += 1;
            *self.cost.get_or_insert(Money::ZERO) += cost;
        }
    }

    /// Adds one summary request's tokens and money (a long call's; not a turn).
    pub(crate) fn add_summary(&mut self, spent: crate::summary::Spent) {
        self.summaries += 1;
        self.usage += spent.usage;
        if let Some(cost) = spent.cost {
            *self.cost.get_or_insert(Money::ZERO) += cost;
        }
    }

    /// The tally as the checkpoint keeps it.
    pub(crate) fn kept(self) -> Value {
        let kept = KeptUsage {
            turns: self.turns,
            reported_turns: self.reported_turns,
            usage: self.usage,
            cost_picos: self.cost.map(Money::picos),
            priced_turns: self.priced_turns,
            summaries: self.summaries,
        };
        serde_json::to_value(kept).unwrap_or(Value::Null)
    }

    /// The tally a checkpoint kept; zero when there is none or it does not read (a checkpoint
    /// of another version: the call goes on, counting from zero).
    pub(crate) fn from_kept(kept: Option<&Value>) -> Self {
        let Some(kept) =
            kept.and_then(|kept| serde_json::from_value::<KeptUsage>(kept.clone()).ok())
        else {
            return Self::default();
        };
        Self {
            turns: kept.turns,
            reported_turns: kept.reported_turns,
            usage: kept.usage,
            cost: kept.cost_picos.map(Money::from_picos),
            priced_turns: kept.priced_turns,
            summaries: kept.summaries,
        }
    }

    /// The `call` object of the usage entry.
    pub(crate) fn to_json(self) -> Value {
        json!({
            "turns": self.turns,
            "usage": (self.reported_turns > 0).then(|| usage_json(&self.usage)),
            "cost": self.cost.map(|cost| cost.to_string()),
            "priced_turns": self.priced_turns,
            "summaries": self.summaries,
        })
    }
}

pub(crate) fn usage_json(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "cached_tokens": usage.cached_tokens,
    })
}

/// The payload of the [`USAGE_LOG`] entry of one turn.
pub(crate) fn usage_payload(
    turn_id: &str,
    report: &TurnReport,
    call: CallUsage,
) -> Map<String, Value> {
    let mut payload = Map::new();
    payload.insert("turn_id".to_owned(), Value::String(turn_id.to_owned()));
    let text = |name: Option<&str>| name.map_or(Value::Null, |n| Value::String(n.to_owned()));
    payload.insert("model".to_owned(), text(report.model.as_deref()));
    payload.insert("provider".to_owned(), text(report.provider()));
    let usage = if report.usage_reported() {
        usage_json(&report.usage)
    } else {
        Value::Null
    };
    payload.insert("usage".to_owned(), usage);
    let cost = report
        .cost
        .map_or(Value::Null, |c| Value::String(c.to_string()));
    payload.insert("cost".to_owned(), cost);
    payload.insert("call".to_owned(), call.to_json());
    payload
}

/// Records a turn's usage on its `crewline.turn` span (fields declared empty at its start).
pub(crate) fn record_on_span(span: &tracing::Span, report: &TurnReport) {
    if let Some(model) = report.model.as_deref() {
        span.record("model", model);
    }
    if !report.usage_reported() {
        return;
    }
    let usage = &report.usage;
    span.record("prompt_tokens", usage.prompt_tokens);
    span.record("completion_tokens", usage.completion_tokens);
    span.record("cached_tokens", usage.cached_tokens);
    span.record("reasoning_tokens", usage.reasoning_tokens);
    if let Some(cost) = report.cost {
        span.record("cost", tracing::field::display(cost));
    }
}
