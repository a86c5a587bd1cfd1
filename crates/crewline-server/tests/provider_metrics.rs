//! A crew on a `FallbackLlm`: which provider answered and what each one cost are served on
//! `/metrics` (requests, failovers, hedges, breaker state, per provider).

mod common;

use std::sync::Arc;

use common::*;
use crewline::{
    Crew, LoopAgent, OutputNode, SessionSetup, ToolLoop,
    llm::{FallbackLlm, LlmClient, LlmError, Reply, ScriptedLlm},
    tool::ToolRegistry,
};
use crewline_server::CrewServer;

#[tokio::test]
async fn a_failover_is_counted_per_provider_on_metrics() {
    let down = ScriptedLlm::new([Reply::Fail(LlmError::Api {
        status: Some(503),
        message: "overloaded".into(),
        retry_after: None,
    })]);
    let up = ScriptedLlm::new([Reply::text("Hello from the backup.")]);
    let llm = FallbackLlm::builder()
        .provider("primary", Arc::new(down) as Arc<dyn LlmClient>)
        .provider("backup", Arc::new(up) as Arc<dyn LlmClient>)
        .build()
        .expect("two providers");
    let tool_loop = ToolLoop::new(Arc::new(llm.clone()), Arc::new(ToolRegistry::new()));
    let crew_server = CrewServer::new(move |_setup: SessionSetup| {
        let mut crew = Crew::new();
        crew.add_node(OutputNode::new(
            "agent",
            LoopAgent::new("You answer.", tool_loop.clone()),
        ));
        async move { Ok::<_, std::convert::Infallible>(crew) }
    });
    crew_server.handle().metrics().watch_providers(&llm);
    let server = TestServer::ready(crew_server).await;

    let mut call = server.call("Ada").await;
    let (_, text) = call.turn("hi").await;
    assert_eq!(text, "Hello from the backup.");

    let body = server.get("/metrics").await.body;
    for line in [
        "crewline_llm_provider_requests_total{provider=\"primary\"} 1",
        "crewline_llm_provider_failovers_total{provider=\"primary\"} 1",
        "crewline_llm_provider_answered_total{provider=\"backup\"} 1",
        "crewline_llm_provider_hedges_total{provider=\"backup\",outcome=\"won\"} 0",
        "crewline_llm_provider_breaker_state{provider=\"primary\"} 0",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing `{line}` in:\n{body}"
        );
    }
}
