//! The collections router example driven through the real server by the platform client, with
//! scripted conversations, asserting what reaches the platform: chunks, the `agent.transition`
//! logs, the transfer hand-off, and each turn's end.

use crate::common;

use std::sync::Arc;

use crewline::{SessionSetup, llm::LlmClient, protocol::Caller};
use crewline_examples::collections_router as collections;
use crewline_server::CrewServer;
use crewline_testkit::platform::{
    Handoff, PlatformClient, PlatformConfig, PlatformError, TurnSummary,
};
use serde_json::{Map, Value, json};

/// Serves the collections crew on 127.0.0.1 (port 0) and returns its WebSocket URL.
async fn serve() -> String {
    let llm: Arc<dyn LlmClient> = Arc::new(collections::scripted_collections_model());
    let server = CrewServer::new(move |setup: SessionSetup| {
        let crew = collections::collections_crew(&setup, llm.clone());
        async move { crew }
    });
    common::serve(server).await
}

/// Connects with `config`; the handshake must succeed.
async fn connect(config: PlatformConfig) -> PlatformClient {
    common::connect_with(config).await.expect("handshake")
}

/// Runs one user turn, asserting that it ends cleanly.
async fn say(client: &mut PlatformClient, text: &str) -> TurnSummary {
    let summary = common::say(client, text).await;
    assert!(summary.ended, "every turn ends: {summary:?}");
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    summary
}

/// The `agent.transition` payloads of a turn.
fn transitions(summary: &TurnSummary) -> Vec<Value> {
    summary
        .logs
        .iter()
        .filter(|(name, _)| name == "agent.transition")
        .map(|(_, payload)| Value::Object(payload.clone()))
        .collect()
}

/// The tools that finished in a turn, by name.
fn tools(summary: &TurnSummary) -> Vec<String> {
    summary.tools.iter().map(|t| t.name.clone()).collect()
}

#[tokio::test]
async fn a_caller_goes_from_intake_through_verify_to_a_payment_plan() {
    let url = serve().await;
    let mut client = connect(PlatformConfig::new(&url)).await;

    let hello = say(&mut client, "Hi there").await;
    assert_eq!(
        hello.text,
        "Hello, this is Acme Collections. What is your account number?"
    );
    assert_eq!(
        transitions(&hello),
        [json!({"from": null, "to": "intake", "state": {}})],
        "the start is logged on the first turn; no account yet, so intake stays"
    );

    let found = say(&mut client, "My account is 12345").await;
    assert_eq!(tools(&found), ["find_account"]);
    assert_eq!(
        found.text,
        "Thanks, Jordan Lee. I found your account. What is your date of birth?"
    );
    assert_eq!(
        transitions(&found),
        [json!({"from": "intake", "to": "verify", "state": {"account_id": "12345"}})]
    );
    let types = found.wire_types();
    assert_eq!(
        &types[types.len() - 2..],
        ["agent.log", "agent.llm.response.end"],
        "the move is logged after the last words, before end"
    );

    let wrong = say(&mut client, "It's 1999-01-01").await;
    assert_eq!(tools(&wrong), ["verify_identity"]);
    assert!(
        wrong.text.starts_with("That doesn't match"),
        "{}",
        wrong.text
    );
    assert!(transitions(&wrong).is_empty(), "not verified: verify stays");

    let verified = say(&mut client, "Sorry, 1980-04-02").await;
    assert_eq!(verified.text, "Thank you, you're verified.");
    assert_eq!(
        transitions(&verified),
        [json!({
            "from": "verify",
            "to": "resolve",
            "state": {
                "account_id": "12345",
                "verify_attempts": 2,
                "verified": true,
                "verified_by": "date_of_birth"
            }
        })]
    );

    let plan = say(&mut client, "I can pay 50 a month").await;
    assert_eq!(tools(&plan), ["propose_payment_plan"]);
    assert_eq!(plan.text, "Done: 50 dollars a month for 9 months.");
    assert!(transitions(&plan).is_empty(), "resolve is the last step");
    assert!(plan.handoff.is_none());
}

#[tokio::test]
async fn a_caller_ringing_from_the_number_on_file_skips_verification() {
    let url = serve().await;
    let mut config = PlatformConfig::new(&url);
    config.caller = Some(Caller {
        user_number: Some("+15550123".into()),
        ..Caller::default()
    });
    let mut client = connect(config).await;

    let found = say(&mut client, "Account 12345 please").await;

    assert_eq!(
        found.text,
        "Thanks, Jordan Lee. I found your account, and you're already verified."
    );
    let moves = transitions(&found);
    assert_eq!(moves.len(), 2, "{moves:?}");
    assert_eq!(
        moves[1],
        json!({
            "from": "intake",
            "to": "resolve",
            "state": {"account_id": "12345", "verified": true, "verified_by": "caller_number"}
        }),
        "verify is skipped"
    );
    let plan = say(&mut client, "100 a month").await;
    assert_eq!(plan.text, "Done: 100 dollars a month for 5 months.");
}

#[tokio::test]
async fn a_caller_verified_by_the_platform_skips_verification() {
    let url = serve().await;
    let mut config = PlatformConfig::new(&url);
    let mut variables = Map::new();
    variables.insert(collections::VERIFIED_VARIABLE.into(), Value::Bool(true));
    config.initial_variables = variables;
    let mut client = connect(config).await;

    let found = say(&mut client, "It's 67890").await;

    let moves = transitions(&found);
    assert_eq!(moves[1]["from"], "intake");
    assert_eq!(moves[1]["to"], "resolve");
    assert_eq!(moves[1]["state"]["verified_by"], "platform");
}

#[tokio::test]
async fn asking_for_a_person_transfers_the_call_and_nothing_more_is_said() {
    let url = serve().await;
    let mut client = connect(PlatformConfig::new(&url)).await;
    say(&mut client, "My account is 12345").await;

    let summary = say(&mut client, "Can I talk to a person?").await;

    assert_eq!(
        summary.text, "Of course, I'm connecting you with a colleague now.",
        "the words before the tool call, and nothing after the transfer"
    );
    assert_eq!(tools(&summary), ["transfer_to_human"]);
    assert!(transitions(&summary).is_empty(), "the call left the crew");
    let types = summary.wire_types();
    assert_eq!(
        &types[types.len() - 2..],
        ["agent.transfer_call", "agent.llm.response.end"]
    );
    let transfer = common::transfer_of(&summary);
    assert_eq!(transfer.transfer_call_number, collections::COLLECTIONS_DESK);
    let briefing = transfer
        .transfer_options
        .private_handoff_option
        .expect("a briefing for the colleague")
        .prompt;
    assert!(briefing.starts_with("Account 12345."), "{briefing}");
    assert!(matches!(
        &summary.handoff,
        Some(Handoff::Transfer(number)) if number == collections::COLLECTIONS_DESK
    ));
    assert!(matches!(
        client.user_turn("hello?"),
        Err(PlatformError::HandedOff)
    ));
}
