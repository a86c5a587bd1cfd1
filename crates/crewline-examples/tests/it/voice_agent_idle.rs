//! The weather crew with `--idle`, through the real server on a paused clock: a caller who
//! says nothing after the answer hears two check-ins, then the goodbye, and the call ends;
//! without the flag the crew stays quiet.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use clap::Parser;
use crewline::idle::{DEFAULT_GOODBYE, DEFAULT_NUDGE, IdlePolicy};
use crewline_examples::voice_agent::{self, Args, WeatherCrew};
use crewline_server::CrewServer;
use crewline_testkit::{
    PlatformClient, TestCrew,
    platform::{CrewFrame, Handoff, PlatformConfig},
};
use std::sync::Arc;

/// The weather crew (scripted model), checking in on a silent caller when `idle`.
async fn serve(idle: bool) -> TestCrew {
    let model = Arc::new(voice_agent::scripted_weather_model(Duration::ZERO));
    let mut crew = WeatherCrew::new(model, Duration::ZERO).unwrap();
    if idle {
        crew = crew.with_idle(IdlePolicy::phone_call());
    }
    TestCrew::serve_server(CrewServer::new(crew.agent().clone()))
        .await
        .unwrap()
}

/// What the crew says out of turn within `wait`, as `speak:<text>` and `end_call`.
async fn heard(client: &mut PlatformClient, wait: Duration) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut heard = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Some(frame) = client.recv_idle(left).await.unwrap() else {
            return heard;
        };
        match frame.frame {
            CrewFrame::Speak { text } => heard.push(format!("speak:{text}")),
            CrewFrame::EndCall => heard.push("end_call".to_owned()),
            _ => {}
        }
    }
}

#[test]
fn the_idle_flag_is_off_unless_given() {
    assert!(!Args::try_parse_from(["voice_agent"]).unwrap().idle);
    assert!(
        Args::try_parse_from(["voice_agent", "--idle"])
            .unwrap()
            .idle
    );
}

#[tokio::test(start_paused = true)]
async fn with_idle_a_silent_caller_hears_two_check_ins_then_goodbye_and_the_call_ends() {
    let crew = serve(true).await;
    let mut client = PlatformClient::connect(crew.config()).await.unwrap();
    let answer = client
        .user_turn("What's the weather in Paris?")
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert!(answer.text.contains("Paris"), "{}", answer.text);

    // Half a minute of a silent line: two check-ins 10 s apart, then the goodbye.
    assert_eq!(
        heard(&mut client, Duration::from_secs(31)).await,
        [
            format!("speak:{DEFAULT_NUDGE}"),
            format!("speak:{DEFAULT_NUDGE}"),
            format!("speak:{DEFAULT_GOODBYE}"),
            "end_call".to_owned(),
        ]
    );
    assert_eq!(client.handoff(), Some(&Handoff::EndCall));
}

#[tokio::test(start_paused = true)]
async fn without_idle_the_weather_crew_stays_quiet_on_a_silent_line() {
    let crew = serve(false).await;
    let config = PlatformConfig {
        conversation_type: crewline::protocol::ConversationType::TelephonyInbound,
        ..crew.config()
    };
    let mut client = PlatformClient::connect(config).await.unwrap();
    client
        .user_turn("What's the weather in Paris?")
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(
        heard(&mut client, Duration::from_secs(120)).await,
        Vec::<String>::new()
    );
}
