//! Typed answers through the real server: the support_triage example's router picks the desk
//! from a typed `Intent`, its billing tool extracts an `Address`, an answer that does not
//! parse is asked for once more with the parse error and then surfaces as an `agent.log`
//! `agent.structured_error` (never a crash), and both OpenAI clients send the strict schema.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use crewline::{
    SessionSetup,
    llm::{ChatRequest, LlmClient, OpenAiClient, Reply, ScriptedLlm},
    structured::STRUCTURED_ERROR_LOG,
    types::Message,
};
use crewline_examples::support_triage as triage;
use crewline_server::CrewServer;
use crewline_testkit::{
    mock_llm::{MockLlm, Script},
    platform::{ToolOutcome, TurnSummary},
};
use serde_json::{Value, json};

/// Serves the triage crew on `llm` and connects a caller.
async fn call_on(llm: Arc<dyn LlmClient>) -> crewline_testkit::platform::PlatformClient {
    let server = CrewServer::new(move |_: SessionSetup| {
        let crew = triage::triage_crew(Arc::clone(&llm));
        async move { crew }
    });
    common::connect(&common::serve(server).await).await
}

/// Runs one user turn, asserting that it ends cleanly.
async fn say(client: &mut crewline_testkit::platform::PlatformClient, text: &str) -> TurnSummary {
    let summary = common::say(client, text).await;
    assert!(summary.ended, "every turn ends: {summary:?}");
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    summary
}

/// The payloads of a turn's `agent.log` entries named `name`.
fn logs(summary: &TurnSummary, name: &str) -> Vec<Value> {
    summary
        .logs
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, payload)| Value::Object(payload.clone()))
        .collect()
}

/// The schema names the model was asked for, request by request (`None`: a plain turn).
fn asked(model: &ScriptedLlm) -> Vec<Option<String>> {
    model
        .requests()
        .iter()
        .map(|r| triage::schema_asked(r).map(str::to_owned))
        .collect()
}

/// The scripted model with `typed` answering the requests for the schema `schema`.
fn with_typed_answers(
    schema: &'static str,
    typed: impl Fn(usize) -> Reply + Send + Sync + 'static,
) -> Arc<ScriptedLlm> {
    let asked = AtomicUsize::new(0);
    Arc::new(ScriptedLlm::from_fn(move |request: &ChatRequest| {
        if triage::schema_asked(request) == Some(schema) {
            return typed(asked.fetch_add(1, Ordering::SeqCst));
        }
        triage::scripted_triage_reply(request)
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typed_intent_picks_the_desk_that_answers_and_the_tool_extracts_the_address() {
    common::bounded(async {
        let model = Arc::new(triage::scripted_triage_model());
        let mut client = call_on(model.clone()).await;

        let hello = say(&mut client, "Hi").await;
        assert_eq!(
            hello.text, "Hello, you've reached Acme Home. Is this about a bill or your internet?",
            "an unclear intent keeps triage, which asks"
        );
        assert_eq!(
            logs(&hello, "agent.transition"),
            [json!({"from": null, "to": "triage", "state": {}})]
        );

        let moved = say(&mut client, "I moved: 12 Oak Street, Springfield, 12345").await;
        assert_eq!(
            logs(&moved, "agent.transition"),
            [json!({"from": "triage", "to": "billing", "state": {"desk": "billing"}})],
            "the typed answer is in the state the move was decided on"
        );
        assert_eq!(moved.tools.len(), 1, "{:?}", moved.tools);
        assert_eq!(moved.tools[0].name, "record_new_address");
        assert_eq!(
            moved.tools[0].outcome,
            ToolOutcome::Ok(json!({
                "recorded": true,
                "address": {"street": "12 Oak Street", "city": "Springfield", "postcode": "12345"}
            }))
        );
        assert_eq!(
            moved.text, "Thanks, I've updated your address to 12 Oak Street in Springfield.",
            "billing answered the same turn"
        );
        assert!(logs(&moved, STRUCTURED_ERROR_LOG).is_empty());

        // Intent (hi), greeting, Intent (moved), billing's tool call, Address, billing's words.
        assert_eq!(
            asked(&model),
            [
                Some("Intent".into()),
                None,
                Some("Intent".into()),
                None,
                Some("Address".into()),
                None
            ]
        );
        let requests = model.requests();
        let classify = &requests[2];
        assert!(
            classify.tools.is_empty(),
            "the typed question offers no tools"
        );
        assert_eq!(
            classify.messages.first(),
            Some(&Message::system(triage::CLASSIFY_PROMPT)),
            "the step's instruction, not triage's prompt"
        );
        assert!(
            classify
                .messages
                .iter()
                .all(|m| m.role() != crewline::types::Role::Tool),
            "no tool traffic in the typed question"
        );
        assert_eq!(
            requests[1].options.response_format, None,
            "the sub-agent's own turn is a plain request"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internet_problem_goes_to_tech_support_and_billing_never_hears_of_it() {
    common::bounded(async {
        let mut client = call_on(Arc::new(triage::scripted_triage_model())).await;
        let slow = say(&mut client, "My internet is slow").await;
        let moves = logs(&slow, "agent.transition");
        assert_eq!(
            moves.last(),
            Some(
                &json!({"from": "triage", "to": "tech_support", "state": {"desk": "tech_support"}})
            )
        );
        assert!(
            slow.text.starts_with("Let's get you back online."),
            "{}",
            slow.text
        );
        // Tech support has no classification step: the next turn asks no typed question.
        let next = say(&mut client, "OK, it's green now, about my bill though").await;
        assert!(
            logs(&next, "agent.transition").is_empty(),
            "{:?}",
            next.logs
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_does_not_parse_is_asked_again_with_the_error_then_logged_and_triage_answers()
 {
    common::bounded(async {
        let model = with_typed_answers("Intent", |_| Reply::text("billing, I think"));
        let mut client = call_on(model.clone()).await;

        let turn = say(&mut client, "It's about my bill").await;

        assert_eq!(
            turn.text, "Hello, you've reached Acme Home. Is this about a bill or your internet?",
            "no move: triage answers"
        );
        assert_eq!(logs(&turn, "agent.transition").len(), 1, "only the start");
        let failures = logs(&turn, STRUCTURED_ERROR_LOG);
        assert_eq!(failures.len(), 1, "{:?}", turn.logs);
        let failure = &failures[0];
        assert_eq!(failure["step"], "triage");
        assert_eq!(failure["schema"], "Intent");
        assert_eq!(failure["kind"], "invalid");
        assert_eq!(failure["raw"], "billing, I think");
        let error = failure["error"].as_str().unwrap();
        assert!(
            error.starts_with("the model's answer does not parse as `Intent` after 2 attempts: "),
            "the typed error with its parse error as cause: {error}"
        );

        assert_eq!(
            asked(&model),
            [Some("Intent".into()), Some("Intent".into()), None],
            "one retry, then the sub-agent's turn"
        );
        let retry = &model.requests()[1];
        let n = retry.messages.len();
        assert_eq!(
            retry.messages[n - 2],
            Message::assistant("billing, I think")
        );
        let correction = retry.messages[n - 1].text().unwrap();
        assert!(
            correction.starts_with("That answer is not valid JSON for the schema `Intent`: "),
            "{correction}"
        );

        // The call goes on.
        let again = say(&mut client, "Hello?").await;
        assert!(!again.text.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_parses_routes_as_if_the_first_answer_had() {
    common::bounded(async {
        let model = with_typed_answers("Intent", |n| match n {
            0 => Reply::text("```json\n{\"desk\": \"billing\", \"extra\": "),
            _ => Reply::text("```json\n{\"desk\": \"billing\"}\n```"),
        });
        let mut client = call_on(model).await;
        let turn = say(&mut client, "A question about a charge").await;
        assert_eq!(
            logs(&turn, "agent.transition")
                .last()
                .map(|m| m["to"].clone()),
            Some(json!("billing"))
        );
        assert!(logs(&turn, STRUCTURED_ERROR_LOG).is_empty());
        assert_eq!(
            turn.text,
            "I can help with your bill. What would you like to do?"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_cannot_be_extracted_is_the_tools_error_and_the_model_asks_again() {
    common::bounded(async {
        let model = with_typed_answers("Address", |_| Reply::text("{\"street\": 12}"));
        let mut client = call_on(model).await;
        let turn = say(&mut client, "I moved, the new address is Oak Street").await;
        assert_eq!(turn.tools.len(), 1);
        assert_eq!(
            turn.tools[0].outcome,
            ToolOutcome::Failed(
                "The address was not clear: ask the caller to say it again.".into()
            ),
            "the model reads what to do, not the parse error"
        );
        assert_eq!(
            turn.text,
            "Sorry, I didn't catch the address. Could you say it again?"
        );
    })
    .await;
}

/// The `response_format` every client must send for the triage step's `Intent`.
fn intent_format() -> Value {
    json!({
        "type": "json_schema",
        "json_schema": {
            "name": "Intent",
            "schema": {
                "type": "object",
                "description": "The triage step's typed answer, merged into the router's state as `{\"desk\": ...}`.",
                "properties": {"desk": {
                    "description": "The desk that should handle the caller's request.",
                    "anyOf": [
                        {"description": "Bills, payments, the address on the account.", "type": "string", "enum": ["billing"]},
                        {"description": "The internet connection, the router, the TV box.", "type": "string", "enum": ["tech_support"]},
                        {"description": "Not clear yet.", "type": "string", "enum": ["unclear"]}
                    ]
                }},
                "required": ["desk"],
                "additionalProperties": false
            },
            "strict": true
        }
    })
}

/// Serves the triage crew on a client of the mock model, runs one turn routed to tech support,
/// and returns the bodies the mock received.
async fn bodies_sent_by(client: impl Fn(&str) -> Arc<dyn LlmClient>) -> Vec<Value> {
    let script = Script::from_json(&json!({"replies": [
        {"when": {"request_index": 0}, "reply": {"content_chunks": ["{\"desk\": ", "\"tech_support\"}"]}},
        {"reply": {"content_chunks": ["Please restart your router."]}},
    ]}))
    .unwrap();
    let mock = MockLlm::new(script)
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut call = call_on(client(&mock.base_url())).await;
    let turn = say(&mut call, "My internet is slow").await;
    assert_eq!(turn.text, "Please restart your router.");
    assert_eq!(
        logs(&turn, "agent.transition")
            .last()
            .map(|m| m["to"].clone()),
        Some(json!("tech_support"))
    );
    mock.mock().requests().into_iter().map(|r| r.body).collect()
}

/// Checks the two requests of the turn: the typed question with its strict schema and no
/// tools; tech support's answer without a `response_format`.
fn assert_schema_sent(bodies: &[Value]) {
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert_eq!(bodies[0]["response_format"], intent_format());
    assert_eq!(bodies[0].get("tools"), None);
    assert_eq!(bodies[0]["messages"][0]["content"], triage::CLASSIFY_PROMPT);
    assert_eq!(
        bodies[1].get("response_format"),
        None,
        "a plain turn is unchanged on the wire"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_client_sends_the_strict_schema() {
    common::bounded(async {
        let bodies = bodies_sent_by(|base_url| {
            Arc::new(
                OpenAiClient::builder()
                    .api_key("sk-mock")
                    .base_url(base_url)
                    .model("mock-gpt")
                    .read_env(false)
                    .max_retries(0)
                    .build()
                    .unwrap(),
            )
        })
        .await;
        assert_schema_sent(&bodies);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_openai_client_sends_the_strict_schema() {
    common::bounded(async {
        let bodies = bodies_sent_by(|base_url| {
            let config = async_openai::config::OpenAIConfig::new()
                .with_api_base(base_url)
                .with_api_key("sk-mock");
            let client = async_openai::Client::with_config(config);
            Arc::new(crewline::llm::AsyncOpenAiClient::new(client, "mock-gpt"))
        })
        .await;
        assert_schema_sent(&bodies);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_model_answers_a_typed_question_from_its_schema() {
    common::bounded(async {
        // One rule for every request: typed questions get JSON made from their schema (the
        // first desk, `billing`), the desks' turns get the text.
        let script = Script::from_json(&json!({"replies": [
            {"reply": {"answer_schema": true, "content_chunks": ["How can billing help?"]}},
        ]}))
        .unwrap();
        let mock = MockLlm::new(script)
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = mock
            .client_builder()
            .model("mock-gpt")
            .max_retries(0)
            .build()
            .unwrap();
        let mut call = call_on(Arc::new(client)).await;
        let turn = say(&mut call, "Hello").await;
        assert_eq!(turn.text, "How can billing help?");
        assert_eq!(
            logs(&turn, "agent.transition").last(),
            Some(&json!({"from": "triage", "to": "billing", "state": {"desk": "billing"}}))
        );
        assert!(logs(&turn, STRUCTURED_ERROR_LOG).is_empty());
    })
    .await;
}
