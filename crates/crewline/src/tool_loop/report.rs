//! What a turn and each of its model requests cost.

use std::{sync::Arc, time::Duration};

use crewline_llm::{Money, Usage};

/// What one turn cost.
#[derive(Debug, Clone, Default)]
pub struct TurnReport {
    /// One entry per LLM request.
    pub rounds: Vec<RoundReport>,
    /// Tokens over all requests (zeros when the server reported none: see
    /// [`usage_reported`](Self::usage_reported)).
    pub usage: Usage,
    /// What the tokens cost, when the loop has prices for the model
    /// ([`ToolLoop::with_prices`](super::ToolLoop::with_prices)).
    pub cost: Option<Money>,
    /// The model the requests asked for, when known (to count tokens by model).
    pub model: Option<Arc<str>>,
    /// Time from the turn's start to its first text.
    pub time_to_first_token: Option<Duration>,
    /// Time from the turn's start to its end.
    pub total: Duration,
    /// Whether the round cap was reached and a tool-less answer forced.
    pub hit_round_cap: bool,
}

/// What one LLM request of a turn cost.
#[derive(Debug, Clone, Default)]
pub struct RoundReport {
    /// Time from the request to its first text or tool call.
    pub time_to_first_token: Option<Duration>,
    /// Time from the request to the end of its tools.
    pub duration: Duration,
    /// Tokens, when the server reported them.
    pub usage: Option<Usage>,
    /// Each tool call of the round: name and latency.
    pub tools: Vec<(String, Duration)>,
    /// The provider that answered, when the model client said (a
    /// [`FallbackLlm`](crewline_llm::FallbackLlm) does).
    pub provider: Option<Arc<str>>,
}

impl TurnReport {
    /// The provider that answered the turn's last request that named one.
    pub fn provider(&self) -> Option<&str> {
        self.rounds
            .iter()
            .rev()
            .find_map(|round| round.provider.as_deref())
    }

    /// Whether the model server reported the usage of any of the turn's requests.
    pub fn usage_reported(&self) -> bool {
        self.rounds.iter().any(|round| round.usage.is_some())
    }

    pub(super) fn trace(&self) {
        tracing::info!(
            rounds = self.rounds.len(),
            provider = self.provider(),
            ttft_ms = self.time_to_first_token.map(|d| d.as_secs_f64() * 1e3),
            total_ms = self.total.as_secs_f64() * 1e3,
            prompt_tokens = self.usage.prompt_tokens,
            completion_tokens = self.usage.completion_tokens,
            cached_tokens = self.usage.cached_tokens,
            reasoning_tokens = self.usage.reasoning_tokens,
            cost = self.cost.map(tracing::field::display),
            hit_round_cap = self.hit_round_cap,
            "turn finished"
        );
    }
}
