//! Non-cancellable calls through the claim store: claiming before the tool starts, renewing
//! the lease while it runs, writing the outcome before the claim is released, and what an
//! identical call reads instead of running (see [`claims`](crate::executor::claims)).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::future::Either;
use serde_json::{Value, json};

use super::{outcome_unknown, still_running, unclaimable};
use crate::ToolPolicy;
use crate::executor::{
    Executor, IdempotencyKey, ToolCallError,
    call::guarded_call,
    claims::{Claim, ClaimKey, ClaimOutcome, ClaimRequest, ClaimStore, ClaimTerms, ClaimToken},
    error::Settled,
    ledger::record::Recorder,
    result_size::{oversize, result_size},
    stage::{Call, Trace},
};

/// What claiming a call's key gave: the run is this caller's, or another call's to read.
enum Claimed {
    /// This caller runs the tool, under this token and idempotency key.
    Won {
        token: ClaimToken,
        idempotency_key: IdempotencyKey,
    },
    /// Another call holds the key: what it found.
    Other(Claim),
}

impl Executor {
    /// Runs a non-cancellable call's tool as a task of its own, at most `limit` of which the
    /// caller waits; what the call stage hands back for such a tool.
    ///
    /// A tool that must not be cut off half-way (a payment, a booking): neither a barge-in nor
    /// the timeout stops it, they only stop the waiting. The call is claimed first
    /// (set-if-absent with a lease, on every replica sharing the store): a retry that got here
    /// meanwhile joins this run instead. The tool's task is tracked (its server's shutdown
    /// waits for it) and writes the ledger record itself if this waiter goes away before the
    /// outcome (a barge-in, a timeout).
    pub(crate) async fn run_detached(&self, call: &mut Call<'_>, limit: Duration) -> Settled {
        // A detached tool's task writes the record itself if this call's waiter goes away.
        let mut recorder = self.ledger.as_ref().map(|sink| Recorder {
            sink: Arc::clone(sink),
            call: call.call.clone(),
            trace: Trace {
                arguments: call.trace.arguments.clone(),
                approval: call.trace.approval,
                ..Trace::default()
            },
            started: call.started,
        });
        let started = tokio::time::Instant::now();
        let key = ClaimKey::new(call.context.scope(), &call.call.name, &call.arguments);
        let outcome = match self.claim_run(&key, call.policy).await {
            Err(refused) => Err(refused),
            Ok(Claimed::Other(claim)) => self.read_claim(claim, &key, call.policy, limit).await,
            Ok(Claimed::Won {
                token,
                idempotency_key,
            }) => {
                // The claim is this call's. Its intent is recorded before the tool starts (a
                // crash from here on leaves it pending in the ledger); one that cannot be
                // recorded settles the claim as a failure, so a retry may run.
                if let Err(refused) = self
                    .write_intent(call, recorder.as_mut(), &idempotency_key)
                    .await
                {
                    self.release_unrun(&key, &token, &refused).await;
                    // Nothing ran: no tool time is spent.
                    return Err(refused);
                }
                // The tool starts now, under its key.
                call.trace.detached = true;
                let tool = guarded_call(call.entry, std::mem::take(&mut call.arguments));
                // Its progress goes to the session too, when the session takes it.
                let tool = match call.context.scope().tool_notices() {
                    Some(notices) => {
                        Either::Left(notices.scope(&call.call.id, &call.call.name, tool))
                    }
                    None => Either::Right(tool),
                };
                let waiter = self.in_flight.start(
                    key.clone(),
                    call.context.scope().detached_tasks(),
                    |waiting| self.claimed_call(tool, key, token, idempotency_key, waiting),
                    recorder,
                );
                let outcome = match waiter.wait(limit).await {
                    Some(settled) => settled.and_then(|value| self.check_result_size(value)),
                    None => {
                        tracing::info!(?limit, "stopped waiting; the tool runs on");
                        Err(still_running())
                    }
                };
                call.trace.detached = false;
                outcome
            }
        };
        call.context.run.spend(started.elapsed());
        outcome
    }

    /// The claim settings of this executor.
    pub(crate) fn claim_terms(&self) -> ClaimTerms {
        ClaimTerms {
            lease: self.claim_lease,
            window: self.retry_window,
        }
    }

    /// Before anything is approved or counted: what already holds the call `key` (`None`
    /// when the call may go on towards its run: nothing holds it, or its unknown outcome
    /// may be retried because the tool dedupes by key). A store that cannot be reached
    /// refuses the call: a non-cancellable tool never runs unclaimed.
    pub(crate) async fn join_claim(
        &self,
        key: &ClaimKey,
        policy: ToolPolicy,
    ) -> Result<Option<Claim>, ToolCallError> {
        let found = self
            .claims
            .claim(key, ClaimRequest::Join, self.claim_terms())
            .await
            .map_err(|error| {
                tracing::error!(error = %crewline_core::ErrorChain(&error), "the claim store is unreachable; the call is refused");
                unclaimable(&error)
            })?;
        Ok(match found {
            Claim::Absent => None,
            Claim::Unknown { .. } if policy.dedupes_by_key => {
                tracing::info!("retrying an unknown outcome under its idempotency key");
                None
            }
            other => Some(other),
        })
    }

    /// Claims the call `key` for this caller, or finds what holds it.
    async fn claim_run(
        &self,
        key: &ClaimKey,
        policy: ToolPolicy,
    ) -> Result<Claimed, ToolCallError> {
        let request = ClaimRequest::Claim {
            token: ClaimToken::fresh(),
            idempotency_key: IdempotencyKey::fresh(),
            retake_unknown: policy.dedupes_by_key,
        };
        let found = self
            .claims
            .claim(key, request, self.claim_terms())
            .await
            .map_err(|error| {
                tracing::error!(error = %crewline_core::ErrorChain(&error), "the claim store is unreachable; the call is refused");
                unclaimable(&error)
            })?;
        Ok(match found {
            Claim::Won {
                token,
                idempotency_key,
            } => Claimed::Won {
                token,
                idempotency_key,
            },
            other => Claimed::Other(other),
        })
    }

    /// Releases a claim this call won but whose tool it did not start (its intent could not be
    /// recorded): the claim ends as the failure `refused`, received, so a retry is a new call.
    pub(crate) async fn release_unrun(
        &self,
        key: &ClaimKey,
        token: &ClaimToken,
        refused: &ToolCallError,
    ) {
        let outcome = ClaimOutcome::Failed(refused.clone());
        if let Err(error) = self
            .claims
            .settle(key, token, &outcome, true, self.claim_terms())
            .await
        {
            // The lease lapses instead: a retry reads an unknown outcome, never a second run.
            tracing::warn!(error = %crewline_core::ErrorChain(&error), "an unrun call's claim could not be released");
        }
    }

    /// The tool's call as its detached task runs it: under its idempotency key, its claim
    /// renewed meanwhile, its outcome written to the store before anyone hears it.
    pub(crate) fn claimed_call(
        &self,
        tool: impl Future<Output = Settled> + Send + 'static,
        key: ClaimKey,
        token: ClaimToken,
        idempotency_key: IdempotencyKey,
        waiting: Arc<AtomicBool>,
    ) -> impl Future<Output = Settled> + Send + 'static {
        let store = Arc::clone(&self.claims);
        let terms = self.claim_terms();
        let max_bytes = self.max_result_bytes;
        async move {
            let tool = idempotency_key.scope(tool);
            let settled = {
                let renewing = renew(store.as_ref(), &key, &token, terms);
                tokio::pin!(tool, renewing);
                tokio::select! {
                    biased;
                    settled = &mut tool => settled,
                    () = &mut renewing => tool.await,
                }
            };
            let outcome = ClaimOutcome::of(&settled, max_bytes);
            let received = waiting.load(Ordering::Acquire);
            match store.settle(&key, &token, &outcome, received, terms).await {
                Ok(true) => {}
                Ok(false) => tracing::warn!(
                    "another call holds this call's claim now; its outcome was not kept"
                ),
                Err(error) => tracing::error!(
                    error = %crewline_core::ErrorChain(&error),
                    "the outcome of a non-cancellable call could not be written: its caller \
                     has it, a retry elsewhere reads OutcomeUnknown once the lease lapses"
                ),
            }
            settled
        }
    }

    /// What a call that found `claim` on its key reads, having waited at most `limit` for
    /// a running one.
    pub(crate) async fn read_claim(
        &self,
        claim: Claim,
        key: &ClaimKey,
        policy: ToolPolicy,
        limit: Duration,
    ) -> Result<Value, ToolCallError> {
        let claim = match claim {
            Claim::Running { .. } => {
                tracing::info!("joined the same call, still running");
                let until = tokio::time::Instant::now() + limit;
                match self.claims.wait(key, until, self.claim_terms()).await {
                    Ok(claim) => claim,
                    Err(error) => {
                        tracing::warn!(error = %crewline_core::ErrorChain(&error), "the claim store failed while waiting");
                        return Err(still_running());
                    }
                }
            }
            other => other,
        };
        match claim {
            Claim::Outcome { outcome, .. } => {
                tracing::info!("read the outcome of the same call");
                self.read_outcome(outcome)
            }
            Claim::Done { outcome, age, .. } => {
                tracing::info!(?age, "the same call already succeeded; not run again");
                Ok(self.already_done(outcome, age))
            }
            Claim::Unknown { .. } | Claim::Absent => Err(outcome_unknown(policy.dedupes_by_key)),
            Claim::Running { .. } | Claim::Won { .. } => {
                tracing::info!(?limit, "stopped waiting; the tool runs on to completion");
                Err(still_running())
            }
        }
    }

    /// Marks the outcome of the call `key` received in the store (the synchronous
    /// [`interrupted`](Executor::interrupted) handed it to the conversation), in a task of
    /// its own: a later identical call then reads "already done" instead of the outcome as
    /// its own.
    pub(crate) fn mark_received(&self, key: ClaimKey) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = Arc::clone(&self.claims);
        let terms = self.claim_terms();
        runtime.spawn(async move {
            if let Err(error) = store.claim(&key, ClaimRequest::Join, terms).await {
                tracing::warn!(error = %crewline_core::ErrorChain(&error), "an outcome could not be marked received");
            }
        });
    }

    /// A stored outcome as the call's own.
    fn read_outcome(&self, outcome: ClaimOutcome) -> Result<Value, ToolCallError> {
        match outcome {
            ClaimOutcome::Ok(value) => self.check_result_size(value),
            ClaimOutcome::Failed(error) => Err(error),
            ClaimOutcome::TooLarge { bytes } => Err(oversize(
                self.max_result_bytes.unwrap_or(bytes.saturating_sub(1)),
                format!("a result of more than {} bytes", bytes.saturating_sub(1)),
            )),
        }
    }

    /// What the model reads for an identical call after the first one's success was
    /// received: that it is done, not repeated, and when it can be made again.
    fn already_done(&self, outcome: ClaimOutcome, age: Duration) -> Value {
        let again = self.retry_window.saturating_sub(age).as_secs().max(1);
        let note = format!(
            "This exact action was already carried out in this call {}s ago and was NOT done \
             again. Tell the caller it is already done. Only if they want a second, identical \
             one: it can be requested again in about {again}s.",
            age.as_secs()
        );
        match outcome {
            ClaimOutcome::Ok(value) => match self.check_result_size(value) {
                Ok(value) => json!({"already_done": true, "note": note, "outcome": value}),
                Err(_) => json!({"already_done": true, "note": note}),
            },
            _ => json!({"already_done": true, "note": note}),
        }
    }
}

impl ClaimOutcome {
    /// A call's outcome as a store keeps it: a result over `max_bytes` is kept as its size.
    pub(crate) fn of(settled: &Settled, max_bytes: Option<usize>) -> Self {
        match settled {
            Ok(value) => match max_bytes {
                Some(max) if result_size(value, max).is_none() => Self::TooLarge {
                    bytes: max.saturating_add(1),
                },
                _ => Self::Ok(value.clone()),
            },
            Err(error) => Self::Failed(error.clone()),
        }
    }
}

/// Renews the claim every third of its lease, for as long as it is polled; ends when the
/// claim is lost (someone saw its lease lapse).
async fn renew(store: &dyn ClaimStore, key: &ClaimKey, token: &ClaimToken, terms: ClaimTerms) {
    let every = (terms.lease / 3).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(every).await;
        match store.renew(key, token, terms).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(
                    "a running call lost its claim (its lease lapsed): a retry reads \
                     OutcomeUnknown until its outcome is written"
                );
                return;
            }
            Err(error) => {
                tracing::warn!(error = %crewline_core::ErrorChain(&error), "a claim could not be renewed; retrying")
            }
        }
    }
}
