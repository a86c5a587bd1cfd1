//! Writes the measurements through prometheus-client's encoder at scrape time.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, NoLabelSet},
    metrics::MetricType,
};

use crewline::llm::ProviderStats;

use super::{
    ErrorKind, FrameDrop, HandshakeFailure, Metrics, SEVERITIES, TOKEN_KINDS, TURN_OUTCOMES,
    TokenStats, ToolStats,
};

/// Writes [`Metrics`] through prometheus-client's encoder at scrape time.
#[derive(Debug)]
pub(super) struct Exporter(pub(super) Arc<Metrics>);

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    encoder
        .encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&value, None)
}

fn counter_family<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (label_value, value) in values {
        metric
            .encode_family(&[(label, label_value)])?
            .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
    }
    Ok(())
}

fn loads<'a>(labels: &[&'a str], counters: &[AtomicU64]) -> Vec<(&'a str, u64)> {
    labels
        .iter()
        .zip(counters)
        .map(|(label, counter)| (*label, counter.load(Relaxed)))
        .collect()
}

/// The counter families of the fallback client's providers: (name, help, value).
type ProviderCounter = (&'static str, &'static str, fn(&ProviderStats) -> u64);

const PROVIDER_COUNTERS: [ProviderCounter; 6] = [
    (
        "crewline_llm_provider_requests",
        "Requests sent to each model provider (first tries, failovers and hedges).",
        |s| s.requests,
    ),
    (
        "crewline_llm_provider_answered",
        "Requests each model provider answered that were heard.",
        |s| s.answered,
    ),
    (
        "crewline_llm_provider_failures",
        "Requests each model provider failed (connect, status, timeout, broken stream).",
        |s| s.failures,
    ),
    (
        "crewline_llm_provider_failovers",
        "Turns that moved from each model provider to the next after it failed.",
        |s| s.failovers,
    ),
    (
        "crewline_llm_provider_cancelled",
        "Requests to each model provider dropped because another answered first.",
        |s| s.cancelled,
    ),
    (
        "crewline_llm_provider_skipped",
        "Turns that skipped each model provider (breaker open or Retry-After).",
        |s| s.skipped,
    ),
];

/// Writes the providers' families.
fn providers(e: &mut DescriptorEncoder, stats: &[ProviderStats]) -> fmt::Result {
    if stats.is_empty() {
        return Ok(());
    }
    for (name, help, read) in PROVIDER_COUNTERS {
        counter_family(
            e,
            name,
            help,
            "provider",
            stats.iter().map(|s| (s.name.as_str(), read(s))),
        )?;
    }
    {
        let mut metric = e.encode_descriptor(
            "crewline_llm_provider_hedges",
            "Hedged requests to each model provider, by outcome (won, lost).",
            None,
            MetricType::Counter,
        )?;
        for s in stats {
            for (outcome, value) in [("won", s.hedges_won), ("lost", s.hedges_lost)] {
                metric
                    .encode_family(&[("provider", s.name.as_str()), ("outcome", outcome)])?
                    .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
            }
        }
    }
    let mut metric = e.encode_descriptor(
        "crewline_llm_provider_breaker_state",
        "Each model provider's circuit breaker: 0 closed, 1 open, 2 half-open.",
        None,
        MetricType::Gauge,
    )?;
    for s in stats {
        metric
            .encode_family(&[("provider", s.name.as_str())])?
            .encode_gauge(&s.breaker.as_gauge())?;
    }
    Ok(())
}

impl Collector for Exporter {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let m = &self.0;
        let e = &mut encoder;
        e.encode_descriptor(
            "crewline_active_sessions",
            "Calls in progress (live WebSocket sessions).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(m.active_sessions() as u64))?;
        counter(
            e,
            "crewline_sessions",
            "Calls accepted (WebSocket upgrades).",
            m.sessions_total(),
        )?;
        counter(
            e,
            "crewline_turns_started",
            "LLM turns started.",
            m.turns_started.load(Relaxed),
        )?;
        counter_family(
            e,
            "crewline_turns",
            "LLM turns ended, by outcome.",
            "outcome",
            loads(&TURN_OUTCOMES, &m.turns),
        )?;
        m.first_chunk.encode(
            "crewline_time_to_first_chunk_seconds",
            "Time from an LLM request to the first chunk sent.",
            e,
        )?;
        m.turn_duration.encode(
            "crewline_turn_duration_seconds",
            "Time from an LLM request to the end of its turn.",
            e,
        )?;
        m.llm_first_token.encode(
            "crewline_llm_time_to_first_token_seconds",
            "Time from each LLM request to its first token.",
            e,
        )?;

        let mut models: Vec<(Box<str>, Arc<TokenStats>)> = m
            .tokens
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(name, stats)| (name.clone(), Arc::clone(stats)))
            .collect();
        models.sort_by(|a, b| a.0.cmp(&b.0));
        {
            let mut metric = e.encode_descriptor(
                "crewline_llm_tokens",
                "Tokens the model servers reported, by model and kind (prompt, completion, cached, reasoning).",
                None,
                MetricType::Counter,
            )?;
            for (model, stats) in &models {
                for (kind, counter) in TOKEN_KINDS.iter().zip(&stats.tokens) {
                    metric
                        .encode_family(&[("model", &**model), ("kind", *kind)])?
                        .encode_counter::<NoLabelSet, _, u64>(&counter.load(Relaxed), None)?;
                }
            }
        }
        {
            let mut metric = e.encode_descriptor(
                "crewline_llm_cost_micros",
                "What the priced turns cost, by model, in micro-units of the price table's currency.",
                None,
                MetricType::Counter,
            )?;
            for (model, stats) in &models {
                if let Some(micros) = stats.cost_micros() {
                    metric
                        .encode_family(&[("model", &**model)])?
                        .encode_counter::<NoLabelSet, _, u64>(&micros, None)?;
                }
            }
        }

        providers(e, &m.providers_stats())?;

        let mut tools: Vec<(Box<str>, Arc<ToolStats>)> = m
            .tools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(name, stats)| (name.clone(), Arc::clone(stats)))
            .collect();
        tools.sort_by(|a, b| a.0.cmp(&b.0));
        {
            let mut metric = e.encode_descriptor(
                "crewline_tool_duration_seconds",
                "Tool call latency, by tool.",
                None,
                MetricType::Histogram,
            )?;
            for (name, stats) in &tools {
                let (sum, count, buckets) = stats.latency.snapshot();
                metric
                    .encode_family(&[("tool", &**name)])?
                    .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            }
        }
        {
            let mut metric = e.encode_descriptor(
                "crewline_tool_errors",
                "Tool calls that failed, by tool and kind.",
                None,
                MetricType::Counter,
            )?;
            for (name, stats) in &tools {
                for (kind, value) in stats.errors.snapshot() {
                    metric
                        .encode_family(&[("tool", &**name), ("kind", kind)])?
                        .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
                }
            }
        }
        counter_family(
            e,
            "crewline_node_errors",
            "Errors raised by node code, by severity.",
            "severity",
            loads(&SEVERITIES, &m.node_errors),
        )?;
        let kinds: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        counter_family(
            e,
            "crewline_errors",
            "Errors, by kind.",
            "kind",
            loads(&kinds, &m.errors),
        )?;
        let drops: Vec<&str> = FrameDrop::ALL.iter().map(|k| k.as_str()).collect();
        counter_family(
            e,
            "crewline_dropped_frames",
            "Inbound frames dropped, by reason.",
            "reason",
            loads(&drops, &m.dropped_frames),
        )?;
        counter_family(
            e,
            "crewline_dropped_events",
            "Inbound events the session dropped, by reason.",
            "reason",
            m.dropped_events.snapshot(),
        )?;
        let failures: Vec<&str> = HandshakeFailure::ALL.iter().map(|k| k.as_str()).collect();
        counter_family(
            e,
            "crewline_handshake_failures",
            "Calls that ended before agent.ready, by reason.",
            "reason",
            loads(&failures, &m.handshake_failures),
        )?;
        let gauges = m
            .gauges
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for gauge in gauges.iter() {
            e.encode_descriptor(gauge.name, gauge.help, None, MetricType::Gauge)?
                .encode_gauge(&(gauge.read)())?;
        }
        Ok(())
    }
}
