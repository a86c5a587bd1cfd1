//! A whole call traced into a stand-in OTLP/HTTP collector (JSON): one trace per turn, rooted at
//! `crewline.turn` with the platform's call id and the turn's request id, with the LLM requests
//! (time to first token) and the tool call below it, the model provider that answered, and
//! what the turn cost (model, tokens, money).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, body::Bytes, extract::State, routing::post};
use crewline::{
    SessionSetup,
    prelude::{Agent, function_tool},
    protocol::Caller,
};
use crewline_otel::{OtlpProtocol, Telemetry};
use crewline_server::CrewServer;
use crewline_testkit::{
    mock_llm::{MockLlm, Script},
    platform::{PlatformClient, PlatformConfig},
};
use serde_json::{Value, json};
use tracing_subscriber::prelude::*;

/// Get the weather for a city.
#[function_tool]
fn get_weather(location: String) -> String {
    format!("Sunny in {location}")
}

/// The collector's spans, by name, as OTLP/JSON sends them.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Value>>>,
}

async fn receive(State(collector): State<Collector>, body: Bytes) -> &'static str {
    let request: Value = serde_json::from_slice(&body).expect("OTLP/JSON");
    let mut spans = collector.spans.lock().expect("lock");
    for resource in request["resourceSpans"].as_array().into_iter().flatten() {
        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
            for span in scope["spans"].as_array().into_iter().flatten() {
                let mut span = span.clone();
                span["service"] = resource["resource"]["attributes"].clone();
                spans.push(span);
            }
        }
    }
    "{}"
}

/// A span's attributes as a map of key to its value's JSON (`{"stringValue": ...}` etc.).
fn attributes(span: &Value) -> HashMap<String, Value> {
    span["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let value = kv["value"]
                .as_object()
                .and_then(|v| v.values().next().cloned());
            (
                kv["key"].as_str().unwrap_or_default().to_owned(),
                value.unwrap_or(Value::Null),
            )
        })
        .collect()
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

#[tokio::test]
async fn each_turn_is_one_trace_with_its_llm_requests_and_tool_calls() {
    let collector = Collector::default();
    // The collector runs on a thread and runtime of its own: flushing blocks this test's
    // single thread until the exporter's request is answered.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}/v1/traces", listener.local_addr().expect("addr"));
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(collector.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("collector runtime");
        runtime.block_on(async move {
            listener.set_nonblocking(true).expect("nonblocking");
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            axum::serve(listener, app).await
        })
    });

    let telemetry = Telemetry::to_endpoint(endpoint, OtlpProtocol::HttpJson).expect("exporter");
    // The test's runtime is single-threaded, so this subscriber sees every span of the call.
    let _subscriber = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();

    let llm = MockLlm::new(Script::weather_tool(3, Duration::ZERO))
        .start()
        .await
        .expect("mock model");
    let client = llm
        .client_builder()
        .model("gpt-4o-mini")
        .build()
        .expect("client");
    // Behind a fallback client, so the turn's span says which provider answered.
    let client = crewline::llm::FallbackLlm::builder()
        .provider("primary", Arc::new(client))
        .build()
        .expect("one provider");
    let agent = Agent::builder(client)
        .prompt("You are a weather line.")
        .tool(GetWeatherTool)
        .prices(
            "gpt-4o-mini=0.15,0.075,0.60"
                .parse::<crewline::llm::PriceTable>()
                .expect("prices"),
        )
        .build()
        .expect("agent");
    let server = CrewServer::new(move |setup: SessionSetup| {
        let crew = agent.crew_for(&setup);
        async move { Ok::<_, std::convert::Infallible>(crew) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("ws://{}/ws", listener.local_addr().expect("addr"));
    tokio::spawn(server.serve(listener));

    let mut config = PlatformConfig::new(url);
    config.caller = Some(Caller {
        call_id: Some("CA-call-42".to_owned()),
        ..Caller::default()
    });
    let mut platform = PlatformClient::connect(config).await.expect("handshake");
    let mut request_ids = Vec::new();
    for words in ["Weather in Paris?", "And tomorrow?"] {
        let turn = platform
            .user_turn(words)
            .expect("turn")
            .finish()
            .await
            .expect("turn ends");
        request_ids.push(turn.request_id.clone().expect("the turn's request id"));
    }
    platform.close().await.expect("closed");
    telemetry.flush();

    let spans = collector.spans.lock().expect("lock").clone();
    let turns = named(&spans, "crewline.turn");
    assert_eq!(turns.len(), 2, "one root span per turn: {spans:#?}");
    for (turn, request_id) in turns.iter().zip(&request_ids) {
        // A root: its own trace, found by the call's and the turn's ids.
        assert!(
            turn["parentSpanId"].as_str().unwrap_or_default().is_empty(),
            "{turn}"
        );
        let root = attributes(turn);
        assert_eq!(root["call_id"], json!("CA-call-42"));
        assert_eq!(root["request_id"], json!(request_id));
        assert_eq!(root["outcome"], json!("completed"));
        assert_eq!(root["provider"], json!("primary"));
        // What the turn cost: the model, the tokens the mock model reported, the money.
        assert_eq!(root["model"], json!("gpt-4o-mini"));
        let tokens = |kind: &str| -> u64 {
            let value = &root[kind];
            value
                .as_u64()
                .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
                .unwrap_or_else(|| panic!("{kind} on the turn's span: {root:?}"))
        };
        assert!(tokens("prompt_tokens") > 0, "{root:?}");
        assert!(tokens("completion_tokens") > 0, "{root:?}");
        let _ = (tokens("cached_tokens"), tokens("reasoning_tokens"));
        // The context's size after the turn, in tokens.
        assert!(tokens("context_tokens") > 0, "{root:?}");
        let picos = (tokens("prompt_tokens") - tokens("cached_tokens")) * 150_000
            + tokens("cached_tokens") * 75_000
            + tokens("completion_tokens") * 600_000;
        assert_eq!(
            root["cost"],
            json!(crewline::llm::Money::from_picos(picos).to_string())
        );
        assert_eq!(
            turn["links"].as_array().map(Vec::len),
            Some(1),
            "linked to the call"
        );
        let trace = turn["traceId"].as_str().expect("trace id");
        let in_trace: Vec<&Value> = spans.iter().filter(|s| s["traceId"] == trace).collect();
        // Each LLM request (tool round, then the answer) and the tool call, in this trace.
        let requests: Vec<&&Value> = in_trace
            .iter()
            .filter(|s| s["name"] == "llm_request")
            .collect();
        assert_eq!(requests.len(), 2, "{in_trace:#?}");
        for request in requests {
            let fields = attributes(request);
            assert_eq!(fields["model"], json!("gpt-4o-mini"));
            assert!(fields.contains_key("time_to_first_token_ms"), "{request}");
        }
        let tools: Vec<&&Value> = in_trace
            .iter()
            .filter(|s| s["name"] == "tool.call")
            .collect();
        assert_eq!(tools.len(), 1, "{in_trace:#?}");
        assert_eq!(attributes(tools[0])["tool"], json!("get_weather"));
        // Every span of the turn descends from its root.
        let ids: HashMap<&str, &str> = in_trace
            .iter()
            .map(|s| {
                (
                    s["spanId"].as_str().unwrap_or_default(),
                    s["parentSpanId"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        let root = turn["spanId"].as_str().expect("span id");
        for span in &in_trace {
            let mut id = span["spanId"].as_str().unwrap_or_default();
            while id != root {
                id = ids
                    .get(id)
                    .copied()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| panic!("{} does not descend from the turn", span["name"]));
            }
        }
    }
    let service = attributes(&json!({"attributes": turns[0]["service"]}));
    assert_eq!(service["service.name"], json!("crewline"));
    telemetry.shutdown();
}
