//! The sentence aggregator on a streamed reply, beside the cost of just collecting the chunks.
//!
//! `cargo bench -p crewline-speech --bench sentences`

use std::hint::black_box;

use crewline_speech::SentenceAggregator;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// A reply of about 1.3 KB with abbreviations, numbers, an ellipsis and quotes.
const REPLY: &str = "Hi! I checked with Dr. Smith this morning, and the results are in. Your \
account balance is $1,200.50, up 3.5 percent from last month. The next payment of $95.20 is due \
on Jan. 5 at 9 a.m. Eastern time, e.g. before the office opens. Well... that is a lot to take \
in, I know. \"Can I pay early?\" you may ask. Yes! You can pay online, by phone, or at any branch \
in the U.S. If you pay before the due date, no late fee applies (see No. 4 in your contract). Is \
there anything else I can help you with today? I can also set up automatic payments, send you \
a reminder by text, or explain the fees in detail. Many customers find automatic payments \
easier, since they never miss a date. Just let me know what you prefer, and I will take care \
of it right away. Thank you for calling, and have a wonderful day!";

/// The reply cut into chunks of about `size` bytes, on character boundaries (an LLM streams
/// a few characters per chunk).
fn chunks(text: &str, size: usize) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + size).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        chunks.push(&text[start..end]);
        start = end;
    }
    chunks
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("sentences");
    let streamed = chunks(REPLY, 4);
    group.throughput(Throughput::Bytes(REPLY.len() as u64));
    group.bench_function("aggregate_4_byte_chunks", |b| {
        b.iter(|| {
            let mut aggregator = SentenceAggregator::new();
            let mut count = 0;
            for chunk in &streamed {
                count += aggregator.push(black_box(chunk)).len();
            }
            count + usize::from(aggregator.flush().is_some())
        });
    });
    group.bench_function("concat_baseline", |b| {
        b.iter(|| {
            let mut text = String::new();
            for chunk in &streamed {
                text.push_str(black_box(chunk));
            }
            text
        });
    });
    // No sentence end for 4 KB: the scan must resume where it stopped, not start over.
    let run_on = "and then it went on ".repeat(200);
    let run_on_chunks = chunks(&run_on, 4);
    group.throughput(Throughput::Bytes(run_on.len() as u64));
    group.bench_function("aggregate_run_on_4_byte_chunks", |b| {
        b.iter(|| {
            let mut aggregator = SentenceAggregator::new();
            for chunk in &run_on_chunks {
                black_box(aggregator.push(black_box(chunk)));
            }
            aggregator.flush()
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
