//! The bank-support crew booking transfers with a bank over HTTP (the testkit's fake bank, as
//! `CREWLINE_BANK_URL` sets it up in the example): an approved transfer is executed there once;
//! a bank that cannot be reached moves nothing and the caller hears it was not done.

// Test helpers set up what the tests drive: a failed step should panic and fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{sync::Arc, time::Duration};

use crewline::{SessionSetup, llm::LlmClient};
use crewline_examples::bank_support as bank;
use crewline_server::CrewServer;
use crewline_testkit::bank::FakeBank;

use common::{bounded, connect, say};

/// Serves the bank crew over `books` on 127.0.0.1 (port 0); returns its WebSocket URL.
async fn serve(books: bank::Bank) -> String {
    let llm: Arc<dyn LlmClient> = Arc::new(bank::scripted_bank_model());
    let shared = bank::BankShared::in_memory(books);
    let server = CrewServer::new(move |setup: SessionSetup| {
        let crew = bank::bank_crew(&setup, llm.clone(), &shared);
        async move { crew }
    });
    common::serve(server).await
}

#[tokio::test]
async fn an_approved_transfer_is_executed_by_the_http_bank_once() {
    bounded(async {
        let fake = FakeBank::new()
            .with_delay(Duration::from_millis(20))
            .spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let books = bank::Bank::demo().with_http(bank::HttpBank::new(&fake.url()).unwrap());
        let url = serve(books.clone()).await;
        let mut client = connect(&url).await;

        let ask = say(&mut client, "Please send $12.34 to Alice.").await;
        assert_eq!(ask.text, "Shall I transfer $12.34 to Alice?");
        assert_eq!(fake.stats().requested, 0, "nothing is sent before the yes");
        let done = say(&mut client, "Yes, go ahead.").await;
        assert_eq!(done.text, "Done: I've sent $12.34 to Alice.");

        let stats = fake.stats();
        assert_eq!(stats.executed, 1);
        assert_eq!(stats.distinct_executed, 1);
        assert_eq!(stats.duplicated, 0);
        // The in-memory books are not where this bank books transfers.
        assert_eq!(books.balance("caller"), Some(125_000));
    })
    .await;
}

#[tokio::test]
async fn an_unreachable_bank_moves_nothing_and_the_caller_hears_so() {
    bounded(async {
        // A port bound and never listening: connections are refused.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        let books =
            bank::Bank::demo().with_http(bank::HttpBank::new(&format!("http://{addr}")).unwrap());
        let url = serve(books).await;
        let mut client = connect(&url).await;

        say(&mut client, "Please send $5 to Alice.").await;
        let failed = say(&mut client, "Yes, go ahead.").await;
        assert!(
            failed.text.contains("could not be reached") && failed.text.contains("nothing"),
            "{}",
            failed.text
        );
        drop(socket);
    })
    .await;
}
