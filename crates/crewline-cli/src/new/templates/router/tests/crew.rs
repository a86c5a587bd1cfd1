//! The crew on its scripted model, called over a real WebSocket as the voice platform would.

use std::sync::Arc;

use crewline::prelude::*;
use crewline_eval::{CrewTarget, SuiteFailure, check_file};
use crewline_testkit::TestCrew;
use serde_json::json;

use crew_template::{crew, scripted_model};

/// The crew served on a free port, on the scripted model.
async fn serve() -> TestCrew {
    let llm: Arc<dyn LlmClient> = Arc::new(scripted_model());
    TestCrew::serve(move |setup: &SessionSetup| crew(setup, Arc::clone(&llm)))
        .await
        .unwrap()
}

#[tokio::test]
async fn intake_finds_the_order_and_returns_books_the_return() {
    let crew = serve().await;
    let mut call = crew.call().await.unwrap();

    let turn = call.say("Hi, my order number is 1042.").await.unwrap();
    turn.assert_tool_call("find_order", json!({"order_id": "1042"}))
        .succeeded();
    turn.assert_text_contains("blue kettle").assert_logged(
        "agent.transition",
        json!({"from": "intake", "to": "returns"}),
    );

    let turn = call.say("It leaks.").await.unwrap();
    turn.assert_tool_call("book_return", json!({"reason": "It leaks."}))
        .succeeded();
    turn.assert_text_contains("RET-1042").assert_no_errors();
    call.hang_up().await.unwrap();
}

/// The eval scenarios of `evals/crew.toml`, run against the crew served here. The same file
/// runs against a real model with `crewline eval evals/crew.toml`.
#[tokio::test]
async fn the_eval_scenarios_pass() -> Result<(), SuiteFailure> {
    let crew = serve().await;
    let url = crew.url().unwrap().to_owned();
    check_file("evals/crew.toml", CrewTarget::Url(url)).await?;
    Ok(())
}
