//! A crew on a `FallbackLlm`: which provider answered is told in an `agent.log`, and what each
//! one cost is served on `/metrics` (requests, failovers, hedges, breaker state, per provider).

use crate::common;

use std::sync::Arc;

use common::*;
use crewline::{
    Crew, SessionSetup, ToolLoop,
    agent::LoopAgent,
    crew::OutputNode,
    llm::{ChatRequest, FallbackLlm, LlmClient, LlmError, LlmStream, Reply, ScriptedLlm},
    tool::ToolRegistry,
};
use crewline_server::CrewServer;

/// A scripted provider that names its model, as a real provider's client does.
struct Named(ScriptedLlm, &'static str);

#[async_trait::async_trait]
impl LlmClient for Named {
    async fn stream_chat(&self, request: ChatRequest) -> Result<LlmStream, LlmError> {
        self.0.stream_chat(request).await
    }

    fn model_id(&self) -> Option<&str> {
        Some(self.1)
    }
}

#[tokio::test]
async fn a_failover_is_counted_per_provider_on_metrics() {
    let down = ScriptedLlm::new([Reply::Fail(LlmError::Api {
        status: Some(503),
        message: "overloaded".into(),
        retry_after: None,
    })]);
    let up = ScriptedLlm::new([Reply::text("Hello from the backup.")]);
    let llm = FallbackLlm::builder()
        .provider(
            "primary",
            Arc::new(Named(down, "gpt-4o-mini")) as Arc<dyn LlmClient>,
        )
        .provider(
            "backup",
            Arc::new(Named(up, "llama-3.3-70b")) as Arc<dyn LlmClient>,
        )
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
    let (frames, text) = call.turn("hi").await;
    assert_eq!(text, "Hello from the backup.");
    // The platform hears which provider answered, in the turn.
    let log = frames
        .iter()
        .find(|f| f["type"] == "agent.log" && f["name"] == "llm_provider")
        .expect("an llm_provider log");
    assert_eq!(log["payload"]["provider"], "backup");

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
    // The turn's tokens are the backup's: counted under its model, not the first provider's.
    for (model, counted) in [("llama-3.3-70b", true), ("gpt-4o-mini", false)] {
        let line = format!("crewline_llm_tokens_total{{model=\"{model}\",kind=\"completion\"}}");
        assert_eq!(
            body.lines().any(|l| l.starts_with(&line)),
            counted,
            "`{line}` in:\n{body}"
        );
    }
}
