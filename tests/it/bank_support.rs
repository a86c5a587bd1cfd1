//! The bank-support example driven through the real server by the platform client: a
//! transfer is asked for, the agent asks the caller to confirm, and the caller's next turn
//! decides whether any money moves.

use crate::common;

use std::{sync::Arc, time::Duration};

use crewline::{
    SessionSetup,
    llm::LlmClient,
    protocol::{EventBody, LlmRequest, Messages},
};
use crewline_examples::bank_support as bank;
use crewline_server::CrewServer;
use crewline_testkit::platform::{
    CrewFrame, PlatformClient, PlatformConfig, ToolOutcome, TurnSummary,
};
use serde_json::{Map, json};

use common::{connect, connect_with, say};

const CALLER: i64 = 125_000;
const ALICE: i64 = 10_000;

/// Serves the bank crew over `bank` on 127.0.0.1 (port 0); returns its WebSocket URL.
async fn serve(bank: bank::Bank) -> String {
    let llm: Arc<dyn LlmClient> = Arc::new(bank::scripted_bank_model());
    let shared = bank::BankShared::in_memory(bank);
    let server = CrewServer::new(move |setup: SessionSetup| {
        let crew = bank::bank_crew(&setup, llm.clone(), &shared);
        async move { crew }
    });
    common::serve(server).await
}

/// The messages of the turn's `tool_call_error` logs.
fn tool_errors(summary: &TurnSummary) -> Vec<String> {
    summary
        .frames
        .iter()
        .filter_map(|f| match &f.frame {
            CrewFrame::ToolError(log) => Some(log),
            _ => None,
        })
        .map(|log| log.error.clone().unwrap_or_default())
        .collect()
}

/// Asks for the transfer and checks the question; returns the parked call's id.
async fn ask_to_send_50_to_alice(client: &mut PlatformClient, bank: &bank::Bank) -> String {
    let ask = say(client, "Please send $50 to Alice.").await;
    assert_eq!(ask.text, "Shall I transfer $50.00 to Alice?");
    assert_eq!(ask.tool_events(), ["tool_call_start", "tool_call_error"]);
    let call = &ask.tools[0];
    assert_eq!(call.name, "transfer_money");
    assert_eq!(
        call.arguments,
        json!({"amount": 50.0, "recipient": "Alice"})
    );
    assert!(
        matches!(&call.outcome, ToolOutcome::Failed(message) if message.contains("waiting for approval")),
        "{:?}",
        call.outcome
    );
    // Nothing moves while the caller has not answered.
    assert_eq!(bank.balance("caller"), Some(CALLER));
    assert_eq!(bank.balance("alice"), Some(ALICE));
    call.call_id.clone()
}

#[tokio::test]
async fn a_yes_runs_the_parked_transfer() {
    let books = bank::Bank::demo();
    let url = serve(books.clone()).await;
    let mut client = connect(&url).await;

    let call_id = ask_to_send_50_to_alice(&mut client, &books).await;
    let confirm = say(&mut client, "Yes, please.").await;

    assert_eq!(confirm.tool_events(), ["tool_call_start", "tool_call_end"]);
    let run = &confirm.tools[0];
    assert_eq!(run.call_id, call_id, "the parked call itself runs");
    assert_eq!(
        run.outcome,
        ToolOutcome::Ok(json!({
            "status": "completed",
            "amount": "$50.00",
            "recipient": "Alice",
            "new_balance": "$1,200.00",
        }))
    );
    assert_eq!(
        confirm.text,
        "Done: I've sent $50.00 to Alice. Your new balance is $1,200.00."
    );
    assert_eq!(books.balance("caller"), Some(CALLER - 5_000));
    assert_eq!(books.balance("alice"), Some(ALICE + 5_000));

    // The approval was used up: another "yes" moves nothing more.
    let again = say(&mut client, "yes").await;
    assert!(again.tools.is_empty(), "{:?}", again.tools);
    assert_eq!(books.balance("caller"), Some(CALLER - 5_000));
}

#[tokio::test]
async fn a_no_leaves_the_balance_unchanged_and_tells_the_model() {
    let books = bank::Bank::demo();
    let url = serve(books.clone()).await;
    let mut client = connect(&url).await;

    let call_id = ask_to_send_50_to_alice(&mut client, &books).await;
    let decline = say(&mut client, "No, don't do that.").await;

    assert_eq!(
        decline.tool_events(),
        ["tool_call_start", "tool_call_error"]
    );
    assert_eq!(decline.tools[0].call_id, call_id);
    let errors = tool_errors(&decline);
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains("the caller said no"), "{errors:?}");
    assert_eq!(
        decline.text,
        "Okay, I haven't transferred anything. Your balance is unchanged."
    );
    assert_eq!(books.balance("caller"), Some(CALLER));
    assert_eq!(books.balance("alice"), Some(ALICE));

    // The caller can still check the balance afterwards.
    let balance = say(&mut client, "What's my balance?").await;
    assert_eq!(balance.text, "Your balance is $1,250.00.");
}

#[tokio::test]
async fn anything_but_a_clear_yes_denies_the_transfer() {
    let books = bank::Bank::demo();
    let url = serve(books.clone()).await;
    let mut client = connect(&url).await;

    ask_to_send_50_to_alice(&mut client, &books).await;
    let unclear = say(&mut client, "Hmm, let me think about it.").await;

    assert_eq!(
        unclear.tool_events(),
        ["tool_call_start", "tool_call_error"]
    );
    assert!(
        tool_errors(&unclear)[0].contains("did not confirm"),
        "{:?}",
        tool_errors(&unclear)
    );
    assert_eq!(books.balance("caller"), Some(CALLER));
}

#[tokio::test]
async fn a_barge_in_during_the_transfer_does_not_stop_it_and_the_caller_is_told_next_turn() {
    // Booking takes a while, so the caller can talk over it.
    let books = bank::Bank::demo().with_processing_time(Duration::from_millis(500));
    let url = serve(books.clone()).await;
    let mut client = connect(&url).await;
    ask_to_send_50_to_alice(&mut client, &books).await;

    let mut confirm = client.user_turn("Yes.").expect("turn sent");
    while let Some(frame) = confirm.next().await.expect("frame") {
        if matches!(frame.frame, CrewFrame::ToolStart(_)) {
            break;
        }
    }
    let cut = confirm.interrupt().await.expect("interrupted turn ended");
    assert_eq!(cut.tool_events(), ["tool_call_start"]);
    assert!(cut.text.is_empty(), "{}", cut.text);

    // The transfer was approved, so it is booked even though nobody waits for it any more.
    tokio::time::timeout(Duration::from_secs(20), async {
        while books.balance("caller") == Some(CALLER) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the transfer was booked");
    assert_eq!(books.balance("alice"), Some(ALICE + 5_000));

    // The next turn tells the caller what happened, once.
    let told = say(&mut client, "Hello? Did it work?").await;
    assert_eq!(
        told.text,
        "Done: I've sent $50.00 to Alice. Your new balance is $1,200.00."
    );
    let after = say(&mut client, "Thanks.").await;
    assert!(!after.text.contains("Done"), "{}", after.text);
    assert_eq!(books.balance("caller"), Some(CALLER - 5_000));
}

#[tokio::test]
async fn a_request_without_new_words_leaves_the_transfer_parked_and_one_yes_sends_once() {
    let books = bank::Bank::demo();
    let url = serve(books.clone()).await;
    let mut client = connect(&url).await;
    let call_id = ask_to_send_50_to_alice(&mut client, &books).await;

    // The platform asks for a turn after silence: the conversation ends with the question.
    let messages = client.messages().to_vec();
    client
        .send(EventBody::LlmRequest(LlmRequest {
            messages: Some(Messages::from_values(&messages)),
            extra_params: Map::new(),
        }))
        .expect("request sent");
    let nudge = client
        .recv_idle(Duration::from_secs(20))
        .await
        .expect("socket open");
    assert!(matches!(
        nudge.map(|f| f.frame),
        Some(CrewFrame::Start { .. })
    ));
    let mut logs = Vec::new();
    while let Some(frame) = client
        .recv_idle(Duration::from_secs(20))
        .await
        .expect("socket open")
    {
        match frame.frame {
            CrewFrame::End => break,
            CrewFrame::ToolStart(log) | CrewFrame::ToolEnd(log) | CrewFrame::ToolError(log) => {
                logs.push(log.call_id)
            }
            _ => {}
        }
    }
    assert!(!logs.contains(&call_id), "the parked call was not decided");

    // The model asked again about the same transfer: it is still the one parked call (the
    // same session, tool and arguments are never parked twice), so one yes sends it once.
    let confirm = say(&mut client, "Yes").await;
    assert_eq!(confirm.tool_events(), ["tool_call_start", "tool_call_end"]);
    assert_eq!(confirm.tools[0].call_id, call_id);
    assert!(matches!(confirm.tools[0].outcome, ToolOutcome::Ok(_)));
    assert_eq!(books.balance("caller"), Some(CALLER - 5_000));
    assert_eq!(books.balance("alice"), Some(ALICE + 5_000));
}

#[tokio::test]
async fn one_callers_yes_cannot_approve_another_callers_transfer() {
    let books = bank::Bank::demo();
    let url = serve(books.clone()).await;
    let mut asking = connect(&url).await;
    let mut other = connect(&url).await;

    ask_to_send_50_to_alice(&mut asking, &books).await;
    let elsewhere = say(&mut other, "yes").await;

    assert!(elsewhere.tools.is_empty(), "{:?}", elsewhere.tools);
    assert_eq!(books.balance("caller"), Some(CALLER));
}

#[test]
fn only_a_clear_yes_counts_as_one() {
    for yes in ["Yes", "yeah, go ahead", "Sure.", "ok do it", "Yes please!"] {
        assert_eq!(bank::caller_answer(yes), Some(true), "{yes}");
    }
    for no in [
        "No",
        "nope",
        "Don't.",
        "cancel that",
        "no thanks",
        "never mind",
    ] {
        assert_eq!(bank::caller_answer(no), Some(false), "{no}");
    }
    for unclear in [
        "yes... no, wait",
        "how much was it?",
        "",
        "Yesterday I paid",
    ] {
        assert_eq!(bank::caller_answer(unclear), None, "{unclear}");
    }
}

#[test]
fn the_books_refuse_what_cannot_be_sent() {
    let books = bank::Bank::demo();
    assert!(matches!(
        books.transfer("caller", "alice", 10_000_000),
        Err(bank::BankError::InsufficientFunds { .. })
    ));
    assert!(matches!(
        books.transfer("caller", "mallory", 100),
        Err(bank::BankError::UnknownAccount(_))
    ));
    assert_eq!(books.balance("caller"), Some(CALLER));
    assert_eq!(bank::dollars(123_456_789), "$1,234,567.89");
}

/// The platform's settings for the phone call `call_id`.
fn phone_call(url: &str, call_id: &str) -> PlatformConfig {
    let mut config = PlatformConfig::new(url);
    config.caller = Some(crewline::protocol::Caller {
        call_id: Some(call_id.to_owned()),
        ..Default::default()
    });
    config
}

#[tokio::test]
async fn a_call_reconnected_mid_transfer_books_it_once_and_the_caller_hears_it() {
    let books = bank::Bank::demo().with_processing_time(Duration::from_millis(500));
    let url = serve(books.clone()).await;
    let mut client = connect_with(phone_call(&url, "call-bank-31"))
        .await
        .unwrap();
    ask_to_send_50_to_alice(&mut client, &books).await;

    // The caller says yes, and the socket drops while the transfer is being booked.
    let mut confirm = client.user_turn("Yes.").expect("turn sent");
    while let Some(frame) = confirm.next().await.expect("frame") {
        if matches!(frame.frame, CrewFrame::ToolStart(_)) {
            break;
        }
    }
    drop(confirm);
    drop(client);

    // The platform reconnects with the same call id; the caller, who heard nothing, asks again.
    let mut again = connect_with(phone_call(&url, "call-bank-31"))
        .await
        .unwrap();
    let told = say(&mut again, "Please send $50 to Alice.").await;
    assert!(
        told.text.contains("sent $50.00 to Alice"),
        "the caller hears the first transfer's outcome: {}",
        told.text
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        books.balance("caller"),
        Some(CALLER - 5_000),
        "the transfer was booked once"
    );
    assert_eq!(books.balance("alice"), Some(ALICE + 5_000));
}
