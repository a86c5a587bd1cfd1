//! Token usage as Prometheus counters: what the model server reports (prompt, completion,
//! cached) counted by the model the crew asked for, through a whole call on the real client.

use crate::common;

use std::sync::Arc;

use common::*;
use crewline::{
    Crew, SessionSetup, ToolLoop, agent::LoopAgent, crew::OutputNode, tool::ToolRegistry,
};
use crewline_server::CrewServer;
use crewline_testkit::mock_llm::{
    MockLlm,
    raw::{After, RawReply},
};
use serde_json::json;

/// One answer's chunks: two pieces of text, then OpenAI's usage chunk with cached tokens.
fn answer() -> RawReply {
    RawReply::chunks(
        &[
            json!({"model": "gpt-4o-mini-2024-07-18",
                   "choices": [{"index": 0, "delta": {"content": "Hello "}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "there."},
                                "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 1200, "completion_tokens": 7,
                   "total_tokens": 1207, "prompt_tokens_details": {"cached_tokens": 1024}}}),
        ],
        After::Done,
    )
}

#[tokio::test]
async fn tokens_are_counted_by_model_and_kind_and_served_on_metrics() {
    let llm = MockLlm::raw_fn(|_| answer())
        .start()
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = llm
        .client_builder()
        .model("gpt-4o-mini")
        .build()
        .expect("client");
    let tool_loop = ToolLoop::new(Arc::new(client), Arc::new(ToolRegistry::new()));
    let server = TestServer::ready(CrewServer::new(move |_setup: SessionSetup| {
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "agent",
            LoopAgent::new("You answer.", tool_loop.clone()),
        ));
        async move { Ok::<_, std::convert::Infallible>(crew) }
    }))
    .await;

    let mut call = server.call("Ada").await;
    for words in ["hello", "again"] {
        let (_, text) = call.turn(words).await;
        assert_eq!(text, "Hello there.");
    }

    // Labelled by the model the crew asked for (bounded), not the dated name the server sent.
    let metrics = server.handle.metrics();
    assert_eq!(metrics.tokens("gpt-4o-mini", "prompt"), 2400);
    assert_eq!(metrics.tokens("gpt-4o-mini", "completion"), 14);
    assert_eq!(metrics.tokens("gpt-4o-mini", "cached"), 2048);
    let body = server.get("/metrics").await.body;
    for line in [
        "# TYPE crewline_llm_tokens_total counter",
        "crewline_llm_tokens_total{model=\"gpt-4o-mini\",kind=\"prompt\"} 2400",
        "crewline_llm_tokens_total{model=\"gpt-4o-mini\",kind=\"completion\"} 14",
        "crewline_llm_tokens_total{model=\"gpt-4o-mini\",kind=\"cached\"} 2048",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing `{line}` in:\n{body}"
        );
    }
    call.close().await;
}
