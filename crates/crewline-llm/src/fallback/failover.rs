//! One turn through the providers: the race to a first delta (with hedging), the held-back
//! tool calls, failover before any text, and the after-text policy.

use std::{
    collections::VecDeque,
    sync::{Arc, MutexGuard, PoisonError},
};

use crewline_core::ToolCall;
use futures::{FutureExt, StreamExt, future::BoxFuture, stream::FuturesUnordered};
use tokio::time::Instant;

use super::{
    AfterText, Inner, Provider,
    breaker::Admit,
    metrics::Counters,
    policy::{self, Failure},
};
use crate::{ChatRequest, FinishReason, LlmError, LlmStream, StreamItem};

/// The most bytes of spoken text kept for [`AfterText::Continue`]: far above any spoken answer,
/// so a runaway one costs at most this (past it, a failure ends the turn with its error
/// instead of a continuation).
const MAX_SPOKEN_BYTES: usize = 64 << 10;

/// Why a request was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The turn's first request.
    First,
    /// After the previous provider failed.
    Failover,
    /// Alongside a slow one.
    Hedge,
    /// Instead of a slow one whose circuit opened while the turn waited on it (the slow
    /// request is dropped, so it is no extra request and spends no retry budget).
    Move,
}

/// A request in the race: its provider, why it was sent, when, and whether its provider's
/// breaker already counted it slow (at the hedge budget), so its end does not count again.
#[derive(Debug, Clone, Copy)]
struct Racer {
    index: usize,
    kind: Kind,
    started: Instant,
    counted_slow: bool,
}

impl Racer {
    fn new(index: usize, kind: Kind) -> Self {
        Self {
            index,
            kind,
            started: Instant::now(),
            counted_slow: false,
        }
    }
}

/// A provider's stream that produced its first item (put back in front of it).
type Opened = Result<LlmStream, LlmError>;

/// A request on its way to its first item.
type Attempt = BoxFuture<'static, (usize, Opened)>;

/// The provider whose stream is being read.
struct Live {
    index: usize,
    stream: LlmStream,
    /// Tool calls held back until the provider finishes: a provider that fails after them
    /// must not have them run.
    held: Vec<ToolCall>,
    held_bytes: usize,
    /// The provider sent its finish reason: its answer is whole.
    finished: bool,
    /// Its first item came later than the fixed hedge budget: whole or not, the breaker
    /// counts it a failure (a provider too slow for a call).
    slow: bool,
    /// The breaker already counted it slow while it was waited for: its end counts nothing.
    counted: bool,
    /// Cuts a repeat of what was already spoken from a continuation's start.
    dedup: Option<Dedup>,
}

/// Holds a continuation's first text while it may still repeat what was spoken.
struct Dedup {
    said: String,
    held: String,
    done: bool,
    /// What was spoken ends in a space: the new text's leading space is cut, so the two
    /// do not join with two.
    trim_start: bool,
}

impl Dedup {
    fn new(said: &str) -> Self {
        Self {
            said: said.trim().to_owned(),
            held: String::new(),
            done: false,
            trim_start: said.ends_with(char::is_whitespace),
        }
    }

    /// The part of `text` that is new: `None` while it may still be a repeat.
    fn push(&mut self, text: String) -> Option<String> {
        let new = self.new_part(text)?;
        if !self.trim_start {
            return Some(new);
        }
        let trimmed = new.trim_start();
        if trimmed.is_empty() {
            return None;
        }
        self.trim_start = false;
        Some(trimmed.to_owned())
    }

    fn new_part(&mut self, text: String) -> Option<String> {
        if self.done {
            return Some(text);
        }
        self.held.push_str(&text);
        let held = self.held.trim_start();
        if self.said.starts_with(held) {
            if held.len() == self.said.len() {
                // The whole spoken text again: cut it.
                self.done = true;
                self.held.clear();
            }
            return None;
        }
        self.done = true;
        let new = match held.strip_prefix(self.said.as_str()) {
            Some(rest) => rest.to_owned(),
            None => std::mem::take(&mut self.held),
        };
        self.held.clear();
        Some(new)
    }
}

/// One turn's state, read by [`Turn::next`].
pub(super) struct Turn {
    inner: Arc<Inner>,
    request: Arc<ChatRequest>,
    tried: Vec<bool>,
    attempts: usize,
    spoken: String,
    spoken_capped: bool,
    out: VecDeque<Result<StreamItem, LlmError>>,
    live: Option<Live>,
    last_error: Option<LlmError>,
    /// The provider that failed last, whose failover the next request counts.
    last_failed: Option<usize>,
    done: bool,
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Turn {
    pub(super) fn new(inner: Arc<Inner>, request: ChatRequest) -> Self {
        let tried = vec![false; inner.providers.len()];
        Self {
            inner,
            request: Arc::new(request),
            tried,
            attempts: 0,
            spoken: String::new(),
            spoken_capped: false,
            out: VecDeque::new(),
            live: None,
            last_error: None,
            last_failed: None,
            done: false,
        }
    }

    /// Opens the first provider; the turn's error when none could answer.
    pub(super) async fn start(mut self) -> Result<Self, LlmError> {
        self.open().await;
        if self.done
            && self.live.is_none()
            && matches!(self.out.front(), Some(Err(_)))
            && let Some(Err(error)) = self.out.pop_front()
        {
            return Err(error);
        }
        Ok(self)
    }

    /// The next item for the caller.
    pub(super) async fn next(&mut self) -> Option<Result<StreamItem, LlmError>> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            let Some(live) = self.live.as_mut() else {
                self.open().await;
                continue;
            };
            match live.stream.next().await {
                Some(Ok(item)) => self.on_item(item),
                Some(Err(error)) => self.on_error(error),
                None => self.on_end(),
            }
        }
    }

    /// Starts a request to the next provider that may take it; `None` when there is none or
    /// the retry budget refuses an extra request.
    fn send(&mut self, request: &ChatRequest, kind: Kind) -> Option<(usize, Attempt)> {
        let now = Instant::now();
        let index = self.pick(now, kind)?;
        if matches!(kind, Kind::Failover | Kind::Hedge) && !lock(&self.inner.budget).try_retry(now)
        {
            tracing::warn!(
                provider = %self.inner.providers[index].name,
                "LLM retry budget spent: no failover or hedge"
            );
            return None;
        }
        if matches!(kind, Kind::First | Kind::Move) {
            lock(&self.inner.budget).request(now);
        }
        self.tried[index] = true;
        self.attempts += 1;
        if matches!(kind, Kind::Failover | Kind::Move)
            && let Some(failed) = self.last_failed.take()
        {
            Counters::inc(&self.inner.providers[failed].counters.failovers);
        }
        let provider = &self.inner.providers[index];
        Counters::inc(&provider.counters.requests);
        if kind != Kind::First {
            tracing::info!(provider = %provider.name, ?kind, "LLM request to the next provider");
        }
        let client = Arc::clone(&provider.client);
        let request = ChatRequest::clone(request);
        let timeout = self.inner.first_byte_timeout;
        Some((
            index,
            async move {
                let opened = tokio::time::timeout(timeout, async {
                    let mut stream = client.stream_chat(request).await?;
                    match stream.next().await {
                        Some(Err(error)) => Err(error),
                        Some(Ok(first)) => {
                            Ok(futures::stream::iter([Ok(first)]).chain(stream).boxed())
                        }
                        None => Ok(futures::stream::empty().boxed()),
                    }
                })
                .await
                .unwrap_or(Err(LlmError::Timeout(timeout)));
                (index, opened)
            }
            .boxed(),
        ))
    }

    /// The first provider not yet tried whose breaker and rate limit let it take a request.
    /// When every one left is shut, a turn's own request (its first, or a failover) still
    /// goes to the first of them: the breakers then say nothing about where to go, and a
    /// caller must not lose a turn while a provider was left untried. A hedge or a move is
    /// made only to a provider that is up.
    fn pick(&self, now: Instant, kind: Kind) -> Option<usize> {
        let untried = || (0..self.tried.len()).filter(|i| !self.tried[*i]);
        for index in untried() {
            let provider = &self.inner.providers[index];
            let mut health = lock(&provider.health);
            let limited = health.rate_limited_until.is_some_and(|until| now < until);
            if !limited && health.breaker.admit(now) != Admit::No {
                return Some(index);
            }
            Counters::inc(&provider.counters.skipped);
        }
        if matches!(kind, Kind::First | Kind::Failover) {
            let index = untried().next()?;
            tracing::warn!(
                provider = %self.inner.providers[index].name,
                "every LLM provider is shut (breaker or rate limit): trying the first anyway"
            );
            return Some(index);
        }
        None
    }

    /// Races requests to the first item (the first provider, and with hedging the next one
    /// when it is slow), failing over while nothing was heard; sets the live stream, or ends
    /// the turn with the last failure.
    async fn open(&mut self) {
        // Shared, so each attempt clones the conversation once, when it is sent.
        let request = if self.spoken.is_empty() {
            Arc::clone(&self.request)
        } else {
            Arc::new(policy::continuation(&self.request, &self.spoken))
        };
        let first_kind = if self.attempts == 0 {
            Kind::First
        } else {
            Kind::Failover
        };
        let mut racing = FuturesUnordered::new();
        let mut in_flight: Vec<Racer> = Vec::new();
        let Some((first, attempt)) = self.send(&request, first_kind) else {
            return self.give_up();
        };
        racing.push(attempt);
        in_flight.push(Racer::new(first, first_kind));
        let mut hedge_at = self.hedge_deadline(first);
        // A provider past its hedge budget, alone in the race (the budget refused a hedge):
        // should its circuit open meanwhile, the turn moves on instead of waiting it out.
        let mut watching: Option<usize> = None;
        let inner = Arc::clone(&self.inner);
        loop {
            let at = hedge_at;
            let hedge = async move {
                match at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let (watch, inner) = (watching, &inner);
            let opened = async move {
                let Some(provider) = watch.and_then(|index| inner.providers.get(index)) else {
                    return std::future::pending().await;
                };
                let notified = provider.opened.notified();
                tokio::pin!(notified);
                // Enabled before the state is read, so an opening in between is not missed.
                notified.as_mut().enable();
                if !provider.is_open(Instant::now()) {
                    notified.await;
                }
            };
            tokio::select! {
                Some((index, opened)) = racing.next() => {
                    let Some(position) = in_flight.iter().position(|r| r.index == index) else {
                        continue;
                    };
                    let racer = in_flight.remove(position);
                    watching = None;
                    match opened {
                        Ok(stream) => {
                            self.won(racer, stream);
                            // Dropping the other requests closes their connections.
                            drop(racing);
                            for loser in in_flight {
                                self.lost(loser, racer.kind);
                            }
                            return;
                        }
                        Err(error) => {
                            if !self.failed(index, error) {
                                return;
                            }
                            if racing.is_empty() {
                                let Some((next, attempt)) = self.send(&request, Kind::Failover) else {
                                    return self.give_up();
                                };
                                racing.push(attempt);
                                in_flight.push(Racer::new(next, Kind::Failover));
                                hedge_at = self.hedge_deadline(next);
                            }
                        }
                    }
                }
                () = hedge => {
                    hedge_at = None;
                    self.count_slow(&mut in_flight);
                    if let Some((next, attempt)) = self.send(&request, Kind::Hedge) {
                        racing.push(attempt);
                        in_flight.push(Racer::new(next, Kind::Hedge));
                    } else if let [alone] = in_flight.as_slice() {
                        watching = Some(alone.index);
                    }
                }
                () = opened => {
                    watching = None;
                    let [slow] = in_flight.as_slice() else {
                        continue;
                    };
                    let slow = *slow;
                    self.last_failed = Some(slow.index);
                    let Some((next, attempt)) = self.send(&request, Kind::Move) else {
                        self.last_failed = None;
                        continue;
                    };
                    // Dropping the slow request closes its connection.
                    racing = FuturesUnordered::new();
                    racing.push(attempt);
                    self.lost(slow, Kind::Move);
                    in_flight = vec![Racer::new(next, Kind::Move)];
                    hedge_at = self.hedge_deadline(next);
                    tracing::info!(
                        from = %self.inner.providers[slow.index].name,
                        "LLM provider's circuit opened while a turn waited on it: moved on"
                    );
                }
            }
        }
    }

    /// The hedge budget passed with these requests still silent: with a fixed budget each
    /// counts against its provider's breaker now, not when it finally answers, so a provider
    /// that turned slow opens its circuit within one hedge budget of the first turns that
    /// wait on it (and those turns then move on).
    fn count_slow(&self, in_flight: &mut [Racer]) {
        if !matches!(self.inner.hedge, super::Hedge::Fixed(_)) {
            return;
        }
        let now = Instant::now();
        for racer in in_flight.iter_mut().filter(|r| !r.counted_slow) {
            racer.counted_slow = true;
            if !another_up(&self.inner, racer.index, now) {
                continue;
            }
            let provider = &self.inner.providers[racer.index];
            let opened = lock(&provider.health).breaker.failure(now);
            if opened {
                provider.circuit_opened(&self.inner, "too slow to start");
            }
        }
    }

    fn hedge_deadline(&self, index: usize) -> Option<Instant> {
        let provider = self.inner.providers.get(index)?;
        // Only worth it when another provider could take the hedge.
        if self.tried.iter().all(|tried| *tried) {
            return None;
        }
        let delay = self
            .inner
            .hedge
            .delay(&lock(&provider.health).first_delta)?;
        Some(Instant::now() + delay)
    }

    /// A request's stream produced its first item: it is the one the caller hears.
    fn won(&mut self, racer: Racer, stream: LlmStream) {
        let Racer {
            index,
            kind,
            started,
            counted_slow,
        } = racer;
        let provider: &Provider = &self.inner.providers[index];
        // The breaker counts it a success only once its answer is whole (`Finish` or a clean
        // end): a provider that always breaks after its first item must still open it.
        let took = started.elapsed();
        lock(&provider.health).first_delta.record(took);
        // Slow against a fixed budget only: a P95 budget follows the provider's own times.
        let slow = matches!(self.inner.hedge, super::Hedge::Fixed(after) if took > after);
        Counters::inc(&provider.counters.answered);
        if kind == Kind::Hedge {
            Counters::inc(&provider.counters.hedges_won);
        }
        tracing::debug!(provider = %provider.name, "LLM provider answering");
        self.out
            .push_back(Ok(StreamItem::Provider(Arc::clone(&provider.name))));
        let dedup = (!self.spoken.is_empty()).then(|| Dedup::new(&self.spoken));
        self.live = Some(Live {
            index,
            stream,
            held: Vec::new(),
            held_bytes: 0,
            finished: false,
            slow,
            counted: counted_slow,
            dedup,
        });
    }

    /// A request that was still waiting for its first item when request of `winner` kind
    /// produced one: dropped (its connection closed) and counted.
    fn lost(&self, racer: Racer, winner: Kind) {
        let Racer {
            index,
            kind,
            started,
            counted_slow,
        } = racer;
        let provider = &self.inner.providers[index];
        let now = Instant::now();
        // Read before its own lock is taken: one provider's lock at a time.
        let others_up = another_up(&self.inner, index, now);
        let mut health = lock(&provider.health);
        health
            .first_delta
            .record(now.saturating_duration_since(started));
        Counters::inc(&provider.counters.cancelled);
        if kind == Kind::Hedge {
            Counters::inc(&provider.counters.hedges_lost);
        } else if winner == Kind::Hedge && !counted_slow && others_up {
            // Beaten by a hedge that started a whole hedge budget later: this provider is too
            // slow for a call. Its breaker counts it, so a provider that stays slow is skipped
            // for a cool-down instead of costing every turn the hedge budget and a hedge
            // (which the retry budget would soon refuse, leaving turns to wait it out).
            let opened = health.breaker.failure(now);
            drop(health);
            if opened {
                provider.circuit_opened(&self.inner, "beaten by a hedge");
            }
            tracing::debug!(provider = %provider.name, "slower LLM request dropped");
            return;
        }
        tracing::debug!(provider = %provider.name, "slower LLM request dropped");
    }

    /// Counts `error` against provider `index`; whether the turn may go on to another one
    /// (else it ends with the error).
    fn failed(&mut self, index: usize, error: LlmError) -> bool {
        let provider = &self.inner.providers[index];
        let failure = policy::classify(&error);
        let now = Instant::now();
        match failure {
            Failure::Provider => {
                Counters::inc(&provider.counters.failures);
                let opened = lock(&provider.health).breaker.failure(now);
                if opened {
                    provider.circuit_opened(&self.inner, "failing");
                }
            }
            Failure::RateLimited(retry_after) => {
                Counters::inc(&provider.counters.failures);
                let pause = retry_after
                    .unwrap_or(self.inner.rate_limit_pause)
                    .min(super::MAX_RATE_LIMIT_PAUSE);
                lock(&provider.health).rate_limited_until = Some(now + pause);
            }
            Failure::Request => {
                self.out.push_back(Err(error));
                self.done = true;
                return false;
            }
        }
        tracing::warn!(provider = %provider.name, error = %crewline_core::ErrorChain(&error), "LLM provider failed");
        self.last_error = Some(error);
        self.last_failed = Some(index);
        true
    }

    /// No provider is left (or the budget is spent): the turn ends with the last failure.
    fn give_up(&mut self) {
        let error = self.last_error.take().unwrap_or_else(|| {
            LlmError::config("no LLM provider could take the request".to_owned())
        });
        self.out.push_back(Err(error));
        self.done = true;
    }

    fn on_item(&mut self, item: StreamItem) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        match item {
            StreamItem::Text(text) => {
                let text = match live.dedup.as_mut() {
                    Some(dedup) => match dedup.push(text) {
                        Some(text) => text,
                        None => return,
                    },
                    None => text,
                };
                if text.is_empty() {
                    return;
                }
                if self.spoken.len() + text.len() <= MAX_SPOKEN_BYTES {
                    self.spoken.push_str(&text);
                } else {
                    self.spoken_capped = true;
                }
                self.out.push_back(Ok(StreamItem::Text(text)));
            }
            StreamItem::ToolCalls(calls) => {
                let limits = self.inner.limits;
                let bytes: usize = calls
                    .iter()
                    .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                    .sum();
                live.held_bytes = live.held_bytes.saturating_add(bytes);
                if live.held.len() + calls.len() > limits.max_tool_calls {
                    let limit = limits.max_tool_calls;
                    self.fail_answer(LlmError::TooManyToolCalls { limit });
                } else if live.held_bytes > limits.max_answer_bytes {
                    let limit = limits.max_answer_bytes;
                    self.fail_answer(LlmError::TooLarge {
                        what: "the answer",
                        limit,
                    });
                } else {
                    live.held.extend(calls);
                }
            }
            StreamItem::Finish(reason) => {
                live.finished = true;
                whole(&self.inner, live);
                let held = std::mem::take(&mut live.held);
                if !held.is_empty() {
                    self.out.push_back(Ok(StreamItem::ToolCalls(held)));
                }
                self.out.push_back(Ok(StreamItem::Finish(reason)));
            }
            // Another fallback client inside this one: ours already said who answers.
            StreamItem::Provider(_) => {}
            item @ (StreamItem::Usage(_) | StreamItem::Reasoning(_)) => {
                self.out.push_back(Ok(item));
            }
        }
    }

    /// The answer broke a limit: it ends, with none of its held calls.
    fn fail_answer(&mut self, error: LlmError) {
        self.live = None;
        self.out.push_back(Err(error));
        self.done = true;
    }

    fn on_end(&mut self) {
        if let Some(mut live) = self.live.take() {
            if !live.finished {
                whole(&self.inner, &live);
            }
            // A client that ends without a finish reason (a custom one): its calls are whole.
            let held = std::mem::take(&mut live.held);
            if !held.is_empty() {
                self.out.push_back(Ok(StreamItem::ToolCalls(held)));
            }
        }
        self.done = true;
    }

    fn on_error(&mut self, error: LlmError) {
        let Some(live) = self.live.take() else {
            return;
        };
        if live.finished {
            // The answer was whole (its finish reason came): a failure after it (a lost
            // usage chunk) costs the caller nothing.
            tracing::debug!(error = %crewline_core::ErrorChain(&error), "LLM stream failed after its end; answer kept");
            self.done = true;
            return;
        }
        let index = live.index;
        // Dropping the live stream here closes its connection; its held calls are let go.
        drop(live);
        if !self.failed(index, error) {
            return;
        }
        if self.spoken.is_empty() {
            return; // `next` opens the next provider.
        }
        match &self.inner.after_text {
            // `next` opens the next provider, asking it to go on.
            AfterText::Continue if !self.spoken_capped => {}
            AfterText::Continue => self.give_up(),
            AfterText::End { line } => {
                tracing::warn!("LLM provider failed after speaking: ending the turn");
                if !line.is_empty() {
                    self.out.push_back(Ok(StreamItem::Text(line.clone())));
                }
                self.out
                    .push_back(Ok(StreamItem::Finish(FinishReason::Stop)));
                self.done = true;
            }
        }
    }
}

/// A live provider gave a whole answer: a success for its breaker, unless its first item
/// came later than the hedge budget. Counted so, a provider that stays slow is skipped for
/// a cool-down even when the retry budget refuses most hedges (each turn it was not hedged
/// would otherwise be a success, and the breaker would never open while every caller
/// waits for it). One already counted slow while it was waited for counts nothing more.
fn whole(inner: &Inner, live: &Live) {
    if live.counted {
        return;
    }
    let provider = &inner.providers[live.index];
    let now = Instant::now();
    // Slowness counts only while another provider could take the turns instead.
    let slow = live.slow && another_up(inner, live.index, now);
    let opened = {
        let mut health = lock(&provider.health);
        if slow {
            health.breaker.failure(now)
        } else {
            health.breaker.success(now);
            false
        }
    };
    if opened {
        provider.circuit_opened(inner, "too slow to start");
    }
}

/// Whether a provider other than `index` would take a request now (breaker closed, not rate
/// limited). Slowness counts against a breaker only then: a slow provider is skipped when
/// another can answer, but the last one up is never shut for being slow (a stall of the
/// crew's own process makes every request in flight late at once, and shutting the only
/// healthy provider for it would fail the turns after).
fn another_up(inner: &Inner, index: usize, now: Instant) -> bool {
    inner
        .providers
        .iter()
        .enumerate()
        .filter(|(other, _)| *other != index)
        .any(|(_, provider)| {
            let health = lock(&provider.health);
            let limited = health.rate_limited_until.is_some_and(|until| now < until);
            !limited && health.breaker.state(now) == super::BreakerState::Closed
        })
}
