//! Tool-loop overhead per round on the scripted model (no network, no delay).
//!
//! Side by side: a text-only turn through `ToolLoop` versus draining the same scripted stream
//! directly, and a one-tool-round turn, so the ratios show what the loop itself adds.

use crewline::{
    ToolLoop,
    llm::{Reply, ScriptedLlm},
    tool::ToolRegistry,
    types::{Context, Message},
};
use futures::StreamExt;
use std::{hint::black_box, sync::Arc};

use crewline::{llm::ChatRequest, prelude::*};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

struct Lookup;

#[tools]
impl Lookup {
    /// Look up an order's status.
    ///
    /// # Arguments
    /// * `order_id` - The order number
    #[function_tool]
    async fn order_status(&self, order_id: String) -> String {
        format!("Order {order_id}: shipped")
    }
}

const ANSWER: &str = "Your order shipped yesterday and should arrive on Thursday before noon.";

fn scripted() -> ScriptedLlm {
    ScriptedLlm::from_fn(|request: &ChatRequest| match request.messages.last() {
        Some(Message::User { content }) if content.contains("order") => {
            Reply::tool_call("order_status", json!({"order_id": "A-1234"}))
        }
        _ => Reply::text(ANSWER),
    })
}

fn context(question: &str) -> Context {
    let mut context = Context::with_system("You are a support agent.");
    context.add(Message::user(question));
    context
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut registry = ToolRegistry::new();
    registry.discover(&Arc::new(Lookup)).expect("register");
    let llm = Arc::new(scripted());
    let turn_loop = ToolLoop::new(llm.clone(), Arc::new(registry));

    let mut group = c.benchmark_group("tool_loop");
    group.bench_function("scripted_stream_only", |b| {
        b.to_async(&runtime).iter(|| async {
            let request = ChatRequest::new(context("hello").messages().to_vec());
            let mut stream = llm.stream_chat(request).await.expect("stream");
            let mut n = 0;
            while let Some(item) = stream.next().await {
                n += usize::from(item.is_ok());
            }
            black_box(n)
        })
    });
    group.bench_function("text_turn", |b| {
        b.to_async(&runtime).iter(|| async {
            let mut context = context("hello");
            let mut turn = turn_loop.run(&mut context);
            while let Some(event) = turn.next().await {
                black_box(event.is_ok());
            }
        })
    });
    group.bench_function("one_tool_round_turn", |b| {
        b.to_async(&runtime).iter(|| async {
            let mut context = context("where is my order?");
            let mut turn = turn_loop.run(&mut context);
            while let Some(event) = turn.next().await {
                black_box(event.is_ok());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
