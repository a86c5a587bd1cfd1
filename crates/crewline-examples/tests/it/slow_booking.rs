//! The slow_booking example through the real server on a paused clock: the search's progress
//! is said while it runs, the booking answers at once and is told when it lands.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crewline_examples::slow_booking::{self, BOOKED, BOOKING_TIME, Reservations};
use crewline_testkit::{
    PlatformClient, TestCrew,
    platform::{CrewFrame, PlatformConfig},
};

async fn client() -> (TestCrew, PlatformClient) {
    let model = Arc::new(slow_booking::scripted_restaurant_model());
    let agent = slow_booking::restaurant_agent(model, Reservations::default()).unwrap();
    let crew = TestCrew::serve(agent).await.unwrap();
    let client = PlatformClient::connect(PlatformConfig {
        conversation_type: crewline::protocol::ConversationType::TelephonyInbound,
        ..crew.config()
    })
    .await
    .unwrap();
    (crew, client)
}

#[tokio::test(start_paused = true)]
async fn the_search_says_how_it_is_getting_on_and_the_booking_is_told_when_it_lands() {
    let (_crew, mut client) = client().await;
    let found = client
        .user_turn("Is there a table tonight?")
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(found.speeches, ["Still checking the evening slots..."]);
    assert!(found.text.ends_with("Shall I book it?"), "{}", found.text);

    let booking = client
        .user_turn("Yes, book it")
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(
        booking.text,
        "I'm booking it now. Anything else while I do?"
    );

    let mut said = Vec::new();
    while let Some(frame) = client.recv_idle(BOOKING_TIME * 2).await.unwrap() {
        if let CrewFrame::Speak { text } = frame.frame {
            said.push(text);
            break;
        }
    }
    assert_eq!(said, [BOOKED]);
}
