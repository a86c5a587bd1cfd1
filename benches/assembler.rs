//! Tool-call assembly throughput: how fast streamed deltas become whole calls.
//!
//! Side by side: assembling the deltas versus merely concatenating the same argument
//! fragments into strings (the least any assembler must do), so the ratio shows the cost of
//! the bookkeeping.

use std::hint::black_box;

use crewline::llm::{ToolCallAssembler, ToolCallDelta};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// The deltas of `calls` tool calls whose arguments arrive in `fragment`-byte pieces, the
/// calls interleaved the way a server streams parallel calls.
fn deltas(calls: usize, fragment: usize) -> Vec<ToolCallDelta> {
    let arguments =
        r#"{"location":"San Francisco, CA","unit":"fahrenheit","days":5,"include_hourly":true}"#;
    let pieces: Vec<&str> = arguments
        .as_bytes()
        .chunks(fragment)
        .map(|c| std::str::from_utf8(c).unwrap_or_default())
        .collect();
    let mut out = Vec::new();
    for call in 0..calls {
        out.push(ToolCallDelta {
            index: Some(call as u32),
            id: Some(format!("call_{call}")),
            name: Some("get_weather".into()),
            arguments: Some(String::new()),
        });
    }
    for piece in &pieces {
        for call in 0..calls {
            out.push(ToolCallDelta {
                index: Some(call as u32),
                arguments: Some((*piece).to_owned()),
                ..ToolCallDelta::default()
            });
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("assemble");
    for calls in [1usize, 4] {
        let input = deltas(calls, 4);
        let bytes: usize = input
            .iter()
            .map(|d| d.arguments.as_ref().map_or(0, String::len))
            .sum();
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_with_input(BenchmarkId::new("assembler", calls), &input, |b, input| {
            b.iter_batched(
                || input.clone(),
                |deltas| {
                    let mut assembler = ToolCallAssembler::new();
                    for delta in deltas {
                        assembler.push(delta).expect("within the limits");
                    }
                    black_box(assembler.finish())
                },
                criterion::BatchSize::SmallInput,
            )
        });
        group.bench_with_input(
            BenchmarkId::new("concat_baseline", calls),
            &input,
            |b, input| {
                b.iter_batched(
                    || input.clone(),
                    |deltas| {
                        let mut args = vec![String::new(); calls];
                        for delta in deltas {
                            let i = delta.index.unwrap_or(0) as usize;
                            if let Some(piece) = delta.arguments {
                                args[i].push_str(&piece);
                            }
                        }
                        black_box(args)
                    },
                    criterion::BatchSize::SmallInput,
                )
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
