//! What each call cost, through the real server: an `llm_usage` log per answered turn (its
//! shape pinned) with the call's running total, money from the agent's price table, the
//! tokens and money on `/metrics` after two calls, a model server that reports no usage, and a
//! fallback whose backup answered (its provider, its model, its price).

use crate::common;

use std::sync::Arc;

use common::*;
use crewline::{
    Agent,
    llm::{
        ChatRequest, FallbackLlm, LlmClient, LlmError, LlmStream, PriceTable, Reply, ScriptedLlm,
    },
};
use crewline_server::CrewServer;
use crewline_testkit::mock_llm::{
    MockLlm,
    raw::{After, RawReply},
};
use serde_json::{Value, json};

/// One answer's chunks: text, then (with `usage`) OpenAI's usage chunk with cached and
/// reasoning tokens.
fn answer(usage: bool) -> RawReply {
    let mut chunks = vec![
        json!({"model": "gpt-4o-mini-2024-07-18",
               "choices": [{"index": 0, "delta": {"content": "Hello "}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "there."},
                            "finish_reason": "stop"}]}),
    ];
    if usage {
        chunks.push(json!({"choices": [], "usage": {
            "prompt_tokens": 1200, "completion_tokens": 7, "total_tokens": 1207,
            "prompt_tokens_details": {"cached_tokens": 1024},
            "completion_tokens_details": {"reasoning_tokens": 3}}}));
    }
    RawReply::chunks(&chunks, After::Done)
}

fn prices() -> PriceTable {
    "gpt-4o-mini=0.15,0.075,0.60; llama-3.3-70b=0.59,0.59,0.79"
        .parse()
        .expect("a price table")
}

/// A server whose agent answers with `llm`, priced, logging usage when `log_usage`.
async fn server(llm: impl LlmClient + 'static, log_usage: bool) -> TestServer {
    let agent = Agent::builder(llm)
        .prompt("You answer.")
        .prices(prices())
        .log_usage(log_usage)
        .build()
        .expect("agent");
    TestServer::ready(CrewServer::new(agent)).await
}

/// The turn's `llm_usage` log, checked to come before the turn's end and to name the turn.
fn usage_log(frames: &[Value]) -> Value {
    let logs: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "agent.log" && f["name"] == "llm_usage")
        .collect();
    assert_eq!(logs.len(), 1, "one usage log per turn: {frames:#?}");
    let start = frames
        .iter()
        .find(|f| f["type"] == "agent.llm.response.start")
        .expect("a start");
    let mut payload = logs[0]["payload"].clone();
    assert_eq!(payload["turn_id"], start["request_id"], "{payload}");
    payload["turn_id"] = json!("<turn>");
    // The context's size after the turn (a long call's figure): there, and a count.
    let context = payload
        .as_object_mut()
        .and_then(|payload| payload.remove("context_tokens"));
    assert!(
        context.is_some_and(|tokens| tokens.as_u64() > Some(0)),
        "{payload}"
    );
    payload
}

/// 176 fresh prompt tokens at 0.15, 1024 cached at 0.075 and 7 completion tokens at 0.60 per
/// million: 0.0000264 + 0.0000768 + 0.0000042.
const TURN_COST: &str = "0.0001074";

#[tokio::test]
async fn each_turn_logs_its_usage_and_cost_and_the_call_total_and_metrics_add_up_two_calls() {
    let llm = MockLlm::raw_fn(|_| answer(true))
        .start()
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = llm
        .client_builder()
        .model("gpt-4o-mini")
        .build()
        .expect("client");
    let server = server(client, true).await;
    let turn_usage = json!({"prompt_tokens": 1200, "completion_tokens": 7,
        "total_tokens": 1207, "reasoning_tokens": 3, "cached_tokens": 1024});

    for _call in 0..2 {
        let mut call = server.call("Ada").await;
        let (frames, text) = call.turn("hello").await;
        assert_eq!(text, "Hello there.");
        assert_eq!(
            usage_log(&frames),
            json!({
                "turn_id": "<turn>",
                "model": "gpt-4o-mini",
                "provider": null,
                "usage": turn_usage,
                "cost": TURN_COST,
                "call": {"turns": 1, "usage": turn_usage, "cost": TURN_COST, "priced_turns": 1,
                    "summaries": 0},
            })
        );
        // The last entry of the call holds what the whole call cost.
        let (frames, _) = call.turn("again").await;
        assert_eq!(
            usage_log(&frames)["call"],
            json!({
                "turns": 2,
                "usage": {"prompt_tokens": 2400, "completion_tokens": 14,
                    "total_tokens": 2414, "reasoning_tokens": 6, "cached_tokens": 2048},
                "cost": "0.0002148",
                "priced_turns": 2,
                "summaries": 0,
            })
        );
        call.close().await;
    }

    // Four turns: 4 × 107.4 micro-units = 429.6, served in whole micro-units.
    let metrics = server.handle.metrics();
    assert_eq!(metrics.tokens("gpt-4o-mini", "reasoning"), 12);
    assert_eq!(metrics.cost_micros("gpt-4o-mini"), Some(429));
    let body = server.get("/metrics").await.body;
    for line in [
        "# TYPE crewline_llm_cost_micros_total counter",
        "crewline_llm_cost_micros_total{model=\"gpt-4o-mini\"} 429",
        "crewline_llm_tokens_total{model=\"gpt-4o-mini\",kind=\"prompt\"} 4800",
        "crewline_llm_tokens_total{model=\"gpt-4o-mini\",kind=\"cached\"} 4096",
        "crewline_llm_tokens_total{model=\"gpt-4o-mini\",kind=\"reasoning\"} 12",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing `{line}` in:\n{body}"
        );
    }
}

#[tokio::test]
async fn a_crew_that_does_not_opt_in_sends_no_usage_log() {
    let llm = MockLlm::raw_fn(|_| answer(true))
        .start()
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = llm
        .client_builder()
        .model("gpt-4o-mini")
        .build()
        .expect("client");
    let server = server(client, false).await;
    let mut call = server.call("Ada").await;
    let (frames, _) = call.turn("hello").await;
    assert!(
        !frames.iter().any(|f| f["type"] == "agent.log"),
        "{frames:#?}"
    );
    call.close().await;
    // Still counted and priced on the server's side.
    assert_eq!(
        server.handle.metrics().cost_micros("gpt-4o-mini"),
        Some(107)
    );
}

#[tokio::test]
async fn a_model_server_that_reports_no_usage_is_said_so_and_the_call_goes_on() {
    let llm = MockLlm::raw_fn(|_| answer(false))
        .start()
        .await
        .expect("the mock model binds 127.0.0.1");
    let client = llm
        .client_builder()
        .model("gpt-4o-mini")
        .build()
        .expect("client");
    let server = server(client, true).await;
    let mut call = server.call("Ada").await;
    for turns in 1..=2 {
        let (frames, text) = call.turn("hello").await;
        assert_eq!(text, "Hello there.");
        assert_eq!(
            usage_log(&frames),
            json!({
                "turn_id": "<turn>",
                "model": "gpt-4o-mini",
                "provider": null,
                "usage": null,
                "cost": null,
                "call": {"turns": turns, "usage": null, "cost": null, "priced_turns": 0,
                    "summaries": 0},
            })
        );
    }
    call.close().await;
    let body = server.get("/metrics").await.body;
    assert!(
        !body.contains("crewline_llm_cost_micros_total{"),
        "no money without usage:\n{body}"
    );
}

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

fn fallback(backup_model: &'static str) -> FallbackLlm {
    let down = ScriptedLlm::new([Reply::Fail(LlmError::Api {
        status: Some(503),
        message: "overloaded".into(),
        retry_after: None,
    })]);
    let up = ScriptedLlm::new([Reply::text("Hello from the backup.")]);
    FallbackLlm::builder()
        .provider(
            "primary",
            Arc::new(Named(down, "gpt-4o-mini")) as Arc<dyn LlmClient>,
        )
        .provider(
            "backup",
            Arc::new(Named(up, backup_model)) as Arc<dyn LlmClient>,
        )
        .build()
        .expect("two providers")
}

#[tokio::test]
async fn a_fallback_turn_is_reported_and_priced_as_the_provider_that_answered() {
    let server = server(fallback("llama-3.3-70b"), true).await;
    let mut call = server.call("Ada").await;
    let (frames, text) = call.turn("hi").await;
    assert_eq!(text, "Hello from the backup.");
    let log = usage_log(&frames);
    assert_eq!(log["provider"], "backup", "{log}");
    assert_eq!(log["model"], "llama-3.3-70b", "{log}");
    // The scripted backup's usage, at the backup's prices (0.59 prompt, 0.79 completion).
    let usage = &log["usage"];
    let tokens = |kind: &str| usage[kind].as_u64().expect("a count");
    let picos = tokens("prompt_tokens") * 590_000 + tokens("completion_tokens") * 790_000;
    let expected = crewline::llm::Money::from_picos(picos).to_string();
    assert_eq!(log["cost"], json!(expected), "{log}");
    call.close().await;
    assert!(server.handle.metrics().cost_micros("gpt-4o-mini").is_none());
    assert!(server.handle.metrics().tokens("llama-3.3-70b", "prompt") > 0);
}

#[tokio::test]
async fn a_model_without_a_price_is_reported_without_money() {
    let server = server(fallback("mistral-small"), true).await;
    let mut call = server.call("Ada").await;
    let (frames, _) = call.turn("hi").await;
    let log = usage_log(&frames);
    assert_eq!(log["model"], "mistral-small", "{log}");
    assert!(log["usage"]["prompt_tokens"].as_u64() > Some(0), "{log}");
    assert_eq!(log["cost"], Value::Null, "{log}");
    assert_eq!(log["call"]["priced_turns"], 0, "{log}");
    // A second turn on the same unknown model: still no money, and no crash.
    call.close().await;
}
