//! A model client over several providers, so no call is dropped by one of them.
//!
//! [`FallbackLlm`] wraps an ordered list of [`LlmClient`]s (any mix: the default client, the
//! async-openai one, other providers and models, each with its own settings) and is itself an
//! `LlmClient`, so every crew, router and example uses it unchanged. Each turn goes to the
//! first provider that may take it:
//!
//! - **Failover before any text.** A connect error, a 5xx, a 429 (the provider is then skipped
//!   until its `Retry-After`, or [`FallbackBuilder::rate_limit_pause`]), no first delta within
//!   [`FallbackBuilder::first_byte_timeout`], or a stream that breaks before its first text
//!   sends the turn to the next provider. Tool calls are held back until their provider
//!   finishes its answer, so the calls of a provider that then failed are never run; tool
//!   calls work through every provider. A bad request (400) or an answer over the limits is
//!   not retried: any provider would fail it.
//! - **After text was spoken**, [`AfterText`] decides: end the turn with a spoken line (the
//!   default), or continue on the next provider from what was said, which is never spoken
//!   twice.
//! - **Hedged first tokens** ([`Hedge`], off by default): when a provider is slow to start,
//!   the next one is asked too; the first to produce a delta is heard, the other request is
//!   dropped (its connection closed) and counted. A request still silent at a fixed budget
//!   counts against its provider's breaker; turns waiting on a provider whose breaker opens
//!   move to the next one at once, without spending the retry budget.
//! - **A circuit breaker per provider** ([`BreakerConfig`]): a provider that keeps failing is
//!   skipped for a cool-down, so it costs the following turns no latency, then probed. With
//!   [`FallbackBuilder::shared_breakers`] (crewline-redis's `RedisBreakers`) the replicas of
//!   a crew share them: a provider one replica found dead is skipped by all within a second.
//! - **A retry budget** ([`RetryBudget`]): failovers and hedges are at most a share of the
//!   requests, so an outage does not become a retry storm.
//!
//! Which provider answers comes first in the stream as
//! [`StreamItem::Provider`](crate::StreamItem::Provider); counts per provider are read with
//! [`FallbackLlm::stats`] (crewline-server exports them on `/metrics`).
//!
//! Give each provider's own client no retries of its own (`max_retries(0)` on the default
//! client): a provider that fails should fail at once, so the next one can answer.
//!
//! # Examples
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//!
//! use crewline_core::Message;
//! use crewline_llm::{
//!     AfterText, ChatRequest, FallbackLlm, Hedge, LlmClient, LlmError, Reply, ScriptedLlm,
//!     StreamItem,
//! };
//! use futures::StreamExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), LlmError> {
//! // The first provider is down; the second answers.
//! let down = ScriptedLlm::new([Reply::Fail(LlmError::Api {
//!     status: Some(503),
//!     message: "overloaded".into(),
//!     retry_after: None,
//! })]);
//! let up = ScriptedLlm::new([Reply::text("Hello from the backup.")]);
//! let llm = FallbackLlm::builder()
//!     .provider("primary", Arc::new(down))
//!     .provider("backup", Arc::new(up))
//!     .after_text(AfterText::Continue)
//!     .hedge(Hedge::Fixed(Duration::from_millis(800)))
//!     .first_byte_timeout(Duration::from_secs(4))
//!     .build()?;
//!
//! let mut stream = llm.stream_chat(ChatRequest::new(vec![Message::user("hi")])).await?;
//! assert_eq!(stream.next().await.transpose()?, Some(StreamItem::Provider("backup".into())));
//! let answer = crewline_llm::collect(stream).await?;
//! assert_eq!(answer.content, "Hello from the backup.");
//! assert_eq!(llm.stats()[0].failovers, 1);
//! # Ok(()) }
//! ```

mod breaker;
mod budget;
mod failover;
mod hedge;
mod metrics;
mod policy;
mod share;

use std::{
    fmt,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use tokio::time::Instant;

use self::{breaker::Breaker, budget::Budget, failover::Turn, hedge::FirstDeltaTimes};
pub use self::{
    breaker::{BreakerConfig, BreakerState},
    budget::RetryBudget,
    hedge::Hedge,
    metrics::ProviderStats,
    policy::{AfterText, DEFAULT_AFTER_TEXT_LINE},
    share::{SHARED_BREAKERS_POLL, ShareError, SharedBreakers},
};
use crate::{AnswerLimits, ChatRequest, LlmClient, LlmError, LlmStream};

/// The default [`FallbackBuilder::first_byte_timeout`]: a caller waits seconds, not minutes.
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(5);

/// The default [`FallbackBuilder::rate_limit_pause`].
pub const DEFAULT_RATE_LIMIT_PAUSE: Duration = Duration::from_secs(2);

/// The longest a provider is skipped for a 429, whatever its `Retry-After` says: a bogus
/// hour-long value must not shut a provider that recovered.
pub const MAX_RATE_LIMIT_PAUSE: Duration = Duration::from_secs(60);

/// What is known of a provider's health.
#[derive(Debug)]
struct Health {
    breaker: Breaker,
    rate_limited_until: Option<Instant>,
    first_delta: FirstDeltaTimes,
}

/// One provider of the list.
struct Provider {
    name: Arc<str>,
    client: Arc<dyn LlmClient>,
    health: Mutex<Health>,
    counters: metrics::Counters,
    /// Woken when its circuit opens: turns still waiting on it move to the next provider.
    opened: tokio::sync::Notify,
}

impl Provider {
    /// Whether its circuit is open at `now` (by this replica's failures or another's word).
    fn is_open(&self, now: Instant) -> bool {
        lock(&self.health).breaker.state(now) == BreakerState::Open
    }

    /// Its circuit just opened: the turns waiting on it are woken and, with a shared store,
    /// the other replicas told.
    fn circuit_opened(&self, inner: &Inner, why: &'static str) {
        tracing::warn!(provider = %self.name, why, "LLM provider circuit open");
        self.opened.notify_waiters();
        if let Some(store) = &inner.shared {
            share::publish(store, &self.name, inner.cool_down);
        }
    }
}

/// What every turn of one client shares.
struct Inner {
    providers: Vec<Provider>,
    cool_down: Duration,
    after_text: AfterText,
    hedge: Hedge,
    first_byte_timeout: Duration,
    rate_limit_pause: Duration,
    limits: AnswerLimits,
    budget: Mutex<Budget>,
    shared: Option<Arc<dyn SharedBreakers>>,
    /// Whether the task reading the shared breakers was started (on the first turn: the
    /// builder may run outside a runtime).
    following: std::sync::atomic::AtomicBool,
}

/// An [`LlmClient`] over an ordered list of providers, failing over, hedging and breaking
/// circuits (see the [module docs](self)); cheap to clone (clones share health and counts).
#[derive(Clone)]
pub struct FallbackLlm {
    inner: Arc<Inner>,
}

impl fmt::Debug for FallbackLlm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.inner.providers.iter().map(|p| &*p.name).collect();
        f.debug_struct("FallbackLlm")
            .field("providers", &names)
            .field("after_text", &self.inner.after_text)
            .field("hedge", &self.inner.hedge)
            .field("first_byte_timeout", &self.inner.first_byte_timeout)
            .finish_non_exhaustive()
    }
}

impl FallbackLlm {
    /// A builder with no provider and the defaults of a live phone call.
    pub fn builder() -> FallbackBuilder {
        FallbackBuilder::default()
    }

    /// Each provider's counts and breaker state, in the order they were added.
    pub fn stats(&self) -> Vec<ProviderStats> {
        let now = Instant::now();
        self.inner
            .providers
            .iter()
            .map(|provider| {
                let breaker = lock(&provider.health).breaker.state(now);
                ProviderStats::read(&provider.name, &provider.counters, breaker)
            })
            .collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait]
impl LlmClient for FallbackLlm {
    async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError> {
        if let Some(store) = &self.inner.shared
            && !self
                .inner
                .following
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tokio::spawn(share::follow(
                Arc::downgrade(&self.inner),
                Arc::clone(store),
            ));
        }
        let turn = Turn::new(Arc::clone(&self.inner), request).start().await?;
        Ok(Box::pin(futures::stream::unfold(
            turn,
            |mut turn| async move {
                let item = turn.next().await?;
                Some((item, turn))
            },
        )))
    }

    /// The first provider's model (a turn another provider answered reads that one's with
    /// [`LlmClient::provider_model_id`]).
    fn model_id(&self) -> Option<&str> {
        self.inner.providers.first()?.client.model_id()
    }

    /// The model of the provider named `provider`.
    fn provider_model_id(&self, provider: &str) -> Option<&str> {
        self.inner
            .providers
            .iter()
            .find(|p| &*p.name == provider)?
            .client
            .model_id()
    }
}

/// Builds a [`FallbackLlm`].
pub struct FallbackBuilder {
    providers: Vec<(String, Arc<dyn LlmClient>)>,
    after_text: AfterText,
    hedge: Hedge,
    first_byte_timeout: Duration,
    rate_limit_pause: Duration,
    breaker: BreakerConfig,
    retry_budget: RetryBudget,
    limits: AnswerLimits,
    shared: Option<Arc<dyn SharedBreakers>>,
}

impl Default for FallbackBuilder {
    fn default() -> Self {
        Self {
            providers: Vec::new(),
            after_text: AfterText::default(),
            hedge: Hedge::Off,
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            rate_limit_pause: DEFAULT_RATE_LIMIT_PAUSE,
            breaker: BreakerConfig::default(),
            retry_budget: RetryBudget::default(),
            limits: AnswerLimits::default(),
            shared: None,
        }
    }
}

impl fmt::Debug for FallbackBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self
            .providers
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        f.debug_struct("FallbackBuilder")
            .field("providers", &names)
            .field("after_text", &self.after_text)
            .field("hedge", &self.hedge)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .finish_non_exhaustive()
    }
}

impl FallbackBuilder {
    /// One provider, tried in the order added; `name` labels metrics, spans and logs.
    pub fn provider(mut self, name: impl Into<String>, client: Arc<dyn LlmClient>) -> Self {
        self.providers.push((name.into(), client));
        self
    }

    /// What a turn does when its provider fails after text was spoken (default: end with
    /// [`DEFAULT_AFTER_TEXT_LINE`]).
    pub fn after_text(mut self, policy: AfterText) -> Self {
        self.after_text = policy;
        self
    }

    /// When to ask the next provider alongside a slow one (default [`Hedge::Off`]).
    pub fn hedge(mut self, hedge: Hedge) -> Self {
        self.hedge = hedge;
        self
    }

    /// How long a provider has to produce its first delta (text, reasoning, its tool calls or
    /// its end) before the turn goes to the next one (default
    /// [`DEFAULT_FIRST_BYTE_TIMEOUT`]). Tool calls arrive whole, so this must also cover
    /// the time a model takes to write its longest tool call.
    pub fn first_byte_timeout(mut self, timeout: Duration) -> Self {
        self.first_byte_timeout = timeout;
        self
    }

    /// How long a provider that answered 429 without `Retry-After` is skipped (default
    /// [`DEFAULT_RATE_LIMIT_PAUSE`]; a `Retry-After` is honoured up to
    /// [`MAX_RATE_LIMIT_PAUSE`]).
    pub fn rate_limit_pause(mut self, pause: Duration) -> Self {
        self.rate_limit_pause = pause;
        self
    }

    /// When each provider's circuit breaker opens (default [`BreakerConfig::default`]).
    pub fn breaker(mut self, config: BreakerConfig) -> Self {
        self.breaker = config;
        self
    }

    /// How many failovers and hedges may be made (default [`RetryBudget::default`]).
    pub fn retry_budget(mut self, budget: RetryBudget) -> Self {
        self.retry_budget = budget;
        self
    }

    /// The bounds of the tool calls held back until a provider finishes (default
    /// [`AnswerLimits::default`]).
    pub fn answer_limits(mut self, limits: AnswerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Shares the breakers with the other replicas through `store`: a circuit opened here is
    /// told to them, and theirs are read every [`SHARED_BREAKERS_POLL`] (default: not shared).
    pub fn shared_breakers(mut self, store: Arc<dyn SharedBreakers>) -> Self {
        self.shared = Some(store);
        self
    }

    /// The client; an error when no provider was added.
    pub fn build(self) -> Result<FallbackLlm, LlmError> {
        if self.providers.is_empty() {
            return Err(LlmError::config(
                "a FallbackLlm needs at least one provider".to_owned(),
            ));
        }
        let breaker = self.breaker;
        let providers = self
            .providers
            .into_iter()
            .map(|(name, client)| Provider {
                name: name.into(),
                client,
                health: Mutex::new(Health {
                    breaker: Breaker::new(breaker),
                    rate_limited_until: None,
                    first_delta: FirstDeltaTimes::default(),
                }),
                counters: metrics::Counters::default(),
                opened: tokio::sync::Notify::new(),
            })
            .collect();
        Ok(FallbackLlm {
            inner: Arc::new(Inner {
                providers,
                cool_down: breaker.cool_down,
                after_text: self.after_text,
                hedge: self.hedge,
                first_byte_timeout: self.first_byte_timeout,
                rate_limit_pause: self.rate_limit_pause,
                limits: self.limits,
                budget: Mutex::new(Budget::new(self.retry_budget)),
                shared: self.shared,
                following: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }
}
