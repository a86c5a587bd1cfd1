//! What counting a long call's context in tokens costs per turn.
//!
//! Every `system.llm.request` carries the platform's whole conversation and the context takes
//! it with `Context::replace`. Side by side on a 200-exchange call plus one new exchange: the
//! byte estimate; OpenAI's `o200k_base` with the counts of the messages already held kept
//! (what a turn costs); and `o200k_base` counting every message again (what it would cost
//! without them). Before the groups, the tokenizer's one-off load time and resident memory are
//! printed (`load:` lines).

use std::{hint::black_box, io::Write as _, sync::Arc, time::Instant};

use crewline::{
    llm::TiktokenCounter,
    types::{ByteEstimate, Context, Message, TokenCounter},
};
use criterion::{Criterion, criterion_group};

/// `VmRSS` of this process, in KiB (Linux; 0 elsewhere).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A phone call of `exchanges` caller and agent turns.
fn call(exchanges: usize) -> Vec<Message> {
    (0..exchanges)
        .flat_map(|i| {
            [
                Message::user(format!(
                    "Question {i}: could you tell me whether the hotel has parking, and what \
                     breakfast costs for two people on the {i}th?"
                )),
                Message::assistant(format!(
                    "Yes, there is parking for 15 euros a night, and breakfast for two on the \
                     {i}th is 28 euros. Shall I add it to booking {i}?"
                )),
            ]
        })
        .collect()
}

/// The tokenizer's one-off cost, and the estimate's ratio on this call's text.
fn load() {
    let before = rss_kib();
    let start = Instant::now();
    let counter = TiktokenCounter::o200k();
    let loaded = start.elapsed();
    let after = rss_kib();
    let text: String = call(200)
        .iter()
        .filter_map(Message::text)
        .collect::<Vec<_>>()
        .join("\n");
    let tokens = counter.count(&text);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "load: o200k_base in {:.0} ms, +{} MiB resident; this call's text: {} bytes, {} o200k \
         tokens ({:.2} bytes a token), estimate {} tokens",
        loaded.as_secs_f64() * 1e3,
        after.saturating_sub(before) / 1024,
        text.len(),
        tokens,
        text.len() as f64 / tokens as f64,
        ByteEstimate.count(&text),
    );
    let start = Instant::now();
    let _ = TiktokenCounter::cl100k();
    let _ = writeln!(
        out,
        "load: cl100k_base in {:.0} ms, {} MiB resident now",
        start.elapsed().as_secs_f64() * 1e3,
        rss_kib() / 1024
    );
}

fn bench(c: &mut Criterion) {
    let history = call(200);
    let next = call(201);
    let o200k: Arc<dyn TokenCounter> = Arc::new(TiktokenCounter::o200k());
    let mut group = c.benchmark_group("context_turn");
    let prepared = |counter: Option<Arc<dyn TokenCounter>>| {
        let mut context = Context::with_system("You are a hotel's phone line.");
        context.set_token_counter(counter);
        context.replace(history.clone());
        context
    };
    group.bench_function("estimate", |b| {
        b.iter_batched(
            || (prepared(None), next.clone()),
            |(mut context, next)| {
                context.replace(next);
                black_box(context.tokens())
            },
            criterion::BatchSize::LargeInput,
        );
    });
    // A crew with no setting: the estimate, and the server's count of the last request kept
    // while the history it counted comes back unchanged.
    group.bench_function("estimate_with_reported_usage", |b| {
        b.iter_batched(
            || {
                let mut context = prepared(None);
                context.report_prompt_tokens(context.len(), 15_000);
                (context, next.clone())
            },
            |(mut context, next)| {
                context.replace(next);
                black_box(context.tokens())
            },
            criterion::BatchSize::LargeInput,
        );
    });
    group.bench_function("o200k_new_messages_only", |b| {
        b.iter_batched(
            || (prepared(Some(Arc::clone(&o200k))), next.clone()),
            |(mut context, next)| {
                context.replace(next);
                black_box(context.tokens())
            },
            criterion::BatchSize::LargeInput,
        );
    });
    group.bench_function("o200k_every_message", |b| {
        b.iter_batched(
            || {
                let mut context = Context::with_system("You are a hotel's phone line.");
                context.set_token_counter(Some(Arc::clone(&o200k)));
                (context, next.clone())
            },
            |(mut context, next)| {
                context.replace(next);
                black_box(context.tokens())
            },
            criterion::BatchSize::LargeInput,
        );
    });
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    load();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
