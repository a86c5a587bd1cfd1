//! The weather voice agent driven through the real server by the platform client: the
//! filler is heard before the slow lookups finish, and a barge-in silences the crew, filler
//! included.

use crate::common;

use std::{sync::Arc, time::Duration};

use crewline_examples::voice_agent as weather;
use crewline_server::CrewServer;
use crewline_testkit::platform::{CrewFrame, ToolOutcome};

use common::connect;

/// Serves the weather crew (scripted model pausing `chunk_delay` per piece, lookups taking
/// `service_delay`) on 127.0.0.1 (port 0); returns its WebSocket URL.
async fn serve(chunk_delay: Duration, service_delay: Duration) -> String {
    let llm = Arc::new(weather::scripted_weather_model(chunk_delay));
    let crew = weather::WeatherCrew::new(llm, service_delay).expect("the weather tools register");
    common::serve(CrewServer::new(crew.agent().clone())).await
}

/// The frame kinds of a turn, in order: `chunk:<text>` for chunks, wire names otherwise.
fn timeline(frames: &[crewline_testkit::platform::TurnFrame]) -> Vec<String> {
    frames
        .iter()
        .map(|f| match &f.frame {
            CrewFrame::Chunk { text } => format!("chunk:{text}"),
            CrewFrame::ToolStart(log) => format!("tool_call_start:{}", log.name),
            CrewFrame::ToolEnd(log) => format!("tool_call_end:{}", log.name),
            other => other.wire_type().to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn the_filler_is_heard_before_the_slow_lookups_and_the_answer_after_them() {
    let url = serve(Duration::from_millis(2), Duration::from_millis(300)).await;
    let mut client = connect(&url).await;

    let greeting = client
        .user_turn("Hi there!")
        .expect("turn")
        .finish()
        .await
        .expect("turn finished");
    assert!(
        !greeting.text.contains(weather::FILLER),
        "no tools, no filler: {}",
        greeting.text
    );

    let summary = client
        .user_turn("What's the weather in Paris and Tokyo?")
        .expect("turn")
        .finish()
        .await
        .expect("turn finished");

    let timeline = timeline(&summary.frames);
    let filler = format!("chunk:{}", weather::FILLER);
    assert_eq!(
        timeline[..4],
        [
            "agent.llm.response.start".to_owned(),
            filler.clone(),
            "tool_call_start:get_weather".to_owned(),
            "tool_call_start:get_weather".to_owned(),
        ],
        "the filler is said at once, before the lookups run: {timeline:?}"
    );
    let first_end = timeline
        .iter()
        .position(|t| t.starts_with("tool_call_end"))
        .expect("the lookups finished");
    assert!(
        timeline[first_end..]
            .iter()
            .all(|t| t != &filler && !t.starts_with("tool_call_start")),
        "one filler per turn, both lookups in one parallel round: {timeline:?}"
    );
    assert_eq!(
        timeline.last().map(String::as_str),
        Some("agent.llm.response.end")
    );
    assert_eq!(
        summary.text,
        format!(
            "{}In Paris it is 18 degrees and cloudy. In Tokyo it is 24 degrees and sunny.",
            weather::FILLER
        )
    );
    assert!(
        summary
            .tools
            .iter()
            .all(|t| matches!(t.outcome, ToolOutcome::Ok(_)))
    );
    assert!(summary.errors.is_empty());
}

#[tokio::test]
async fn a_barge_in_while_the_lookup_runs_silences_the_crew_and_the_call_goes_on() {
    // A lookup far slower than the test: only the interrupt can end this turn in time.
    let url = serve(Duration::from_millis(2), Duration::from_secs(60)).await;
    let mut client = connect(&url).await;

    let mut turn = client
        .user_turn("What's the weather in London?")
        .expect("turn");
    // Listen until the lookup is running (the filler came before it), then talk over it.
    while let Some(frame) = turn.next().await.expect("frame") {
        if matches!(frame.frame, CrewFrame::ToolStart(_)) {
            break;
        }
    }
    let summary = turn.interrupt().await.expect("interrupted turn ended");

    assert_eq!(summary.text, weather::FILLER, "only the filler was said");
    assert!(summary.ended, "the crew closed the turn with its end");
    let interrupt = summary.interrupt.as_ref().expect("interrupt report");
    assert_eq!(interrupt.chunks_after_interrupt, 0, "{interrupt:?}");
    assert!(interrupt.leaked_chunks.is_empty(), "{interrupt:?}");
    assert_eq!(
        summary.tool_events(),
        ["tool_call_start"],
        "the lookup was cancelled"
    );

    let next = client
        .user_turn("Never mind, thanks!")
        .expect("turn")
        .finish()
        .await
        .expect("turn finished");
    assert_eq!(
        next.text,
        "No problem at all. Thanks for calling, and have a lovely day!"
    );
    assert_eq!(next.stray_chunks_before_start, 0);
    assert_eq!(
        client.stats().stray_chunks,
        0,
        "nothing of the old turn came late"
    );
}

#[tokio::test]
async fn an_interrupt_before_the_model_answers_means_no_filler_at_all() {
    // The model takes far longer than the test to ask for the lookup.
    let url = serve(Duration::from_secs(60), Duration::from_millis(1)).await;
    let mut client = connect(&url).await;

    let mut turn = client
        .user_turn("What's the weather in Paris?")
        .expect("turn");
    let first = turn.next().await.expect("frame").expect("a frame");
    assert!(
        matches!(first.frame, CrewFrame::Start { .. }),
        "{:?}",
        first.frame
    );
    let summary = turn.interrupt().await.expect("interrupted turn ended");

    assert_eq!(summary.chunks, 0, "{:?}", summary.text);
    assert!(summary.tools.is_empty(), "{:?}", summary.tools);
    let interrupt = summary.interrupt.as_ref().expect("interrupt report");
    assert!(interrupt.leaked_chunks.is_empty(), "{interrupt:?}");
    // Nothing of the dropped turn arrives after its end.
    assert!(
        client
            .recv_idle(Duration::from_millis(300))
            .await
            .expect("socket open")
            .is_none()
    );
}

#[tokio::test]
async fn with_prices_and_log_usage_each_turn_says_what_it_and_the_call_cost() {
    let llm = Arc::new(weather::scripted_weather_model(Duration::ZERO));
    // The scripted model's usage is counted under `scripted`; priced like a small model.
    let prices: crewline::llm::PriceTable = "scripted=0.15,0.075,0.60".parse().expect("prices");
    let crew = weather::WeatherCrew::new(llm, Duration::ZERO)
        .expect("the weather tools register")
        .with_cost(Some(Arc::new(prices)), true);
    let url = common::serve(CrewServer::new(crew.agent().clone())).await;
    let mut client = connect(&url).await;
    let mut costs = Vec::new();
    for (turns, words) in [(1, "Hi there!"), (2, "What's the weather in Paris?")] {
        let turn = client
            .user_turn(words)
            .expect("turn")
            .finish()
            .await
            .expect("turn finished");
        let usage: Vec<&serde_json::Map<String, serde_json::Value>> = turn
            .frames
            .iter()
            .filter_map(|f| match &f.frame {
                CrewFrame::Log { name, payload } if name == "llm_usage" => Some(payload),
                _ => None,
            })
            .collect();
        assert_eq!(usage.len(), 1, "one usage log a turn: {:?}", turn.frames);
        let log = usage[0];
        assert_eq!(log["model"], "scripted", "{log:?}");
        assert!(log["usage"]["prompt_tokens"].as_u64() > Some(0), "{log:?}");
        let cost = log["cost"].as_str().expect("priced").to_owned();
        assert_eq!(log["call"]["turns"], turns, "{log:?}");
        costs.push((cost, log["call"]["cost"].clone()));
    }
    // The call's total after two turns is the sum of theirs, exactly.
    let picos = |text: &str| -> u64 {
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let fraction = format!("{fraction:0<12}");
        whole.parse::<u64>().expect("whole") * 1_000_000_000_000
            + fraction.parse::<u64>().expect("fraction")
    };
    let total = picos(costs[1].1.as_str().expect("a total"));
    assert_eq!(total, picos(&costs[0].0) + picos(&costs[1].0), "{costs:?}");
    client.close().await.expect("closed");
}
