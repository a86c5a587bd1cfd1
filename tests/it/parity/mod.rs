//! The parity harness: runs one recorded reference scenario against crewline and compares.
//!
//! 1. The Rust mock LLM (`crewline_testkit::mock_llm`) plays the fixture's `llm_script` on
//!    127.0.0.1:0.
//! 2. A crewline crew server serves the crewline mirror of the fixture's reference crew
//!    (`crews.rs`) on 127.0.0.1:0.
//! 3. The fixture's inbound steps are replayed over real WebSockets (`driver.rs`).
//! 4. crewline's frames, step outcomes, connection closes, HTTP answers and the LLM requests
//!    the mock received are compared with the recording, transformed by the named rules of
//!    `rules.rs` (the only differences accepted).

#![allow(dead_code, unreachable_pub)]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

/// Calls `$declare!` with every recorded scenario's name: the one list both parity test files
/// (default client, async-openai client) declare their tests from.
macro_rules! with_scenarios {
    ($declare:ident) => {
        $declare!(
            background_error,
            bad_frame_no_type,
            bad_frame_not_json,
            bad_frame_text,
            bad_frame_unknown_type,
            bad_frame_wrong_field_type,
            bad_frames,
            disconnect_mid_generation,
            end_call,
            frame_extra_fields,
            handshake,
            handshake_invalid_init,
            handshake_timeout,
            handshake_wrong_first_frame,
            http_endpoints,
            interrupt_mid_stream,
            llm_error_500,
            llm_error_mid_stream,
            text_turn,
            tool_errors,
            tool_turn,
            transfer_call,
            two_tools,
            two_tools_sequential,
        );
    };
}

pub mod compare;
pub mod crews;
pub mod driver;
pub mod fixture;
pub mod rules;

use std::time::{Duration, Instant};

use crewline_server::CrewServer;
use crewline_testkit::mock_llm::{MockLlm, Script};
use tokio::net::TcpListener;

use self::{
    compare::Frame,
    crews::CrewKind,
    driver::{Driver, WAIT},
    fixture::Fixture,
};

/// Runs `scenario` on crewline and panics with every difference from the reference that no
/// rule accounts for.
pub async fn check(scenario: &str) {
    check_on(scenario, crews::mock_llm_client).await;
}

/// [`check`], with the crew's model made by `llm` for the mock LLM's base URL (another client
/// must give the same recording).
pub async fn check_on(
    scenario: &str,
    llm: fn(&str) -> std::sync::Arc<dyn crewline::llm::LlmClient>,
) {
    let started = Instant::now();
    let fixture = Fixture::load(scenario);
    assert_eq!(fixture.scenario, scenario);
    let kind = CrewKind::from_name(&fixture.crew)
        .unwrap_or_else(|| panic!("no crewline mirror of crew {:?}", fixture.crew));

    let script = Script::from_json(&fixture.llm_script).expect("the fixture's script loads");
    let mock = MockLlm::new(script)
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .expect("the mock LLM starts");
    let llm = llm(&mock.base_url());
    let mut server = CrewServer::new(crews::setup(kind, llm)).drain_timeout(Duration::from_secs(1));
    if scenario == "handshake_timeout" {
        server = server.handshake_timeout(rules::SHORT_HANDSHAKE_TIMEOUT);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = server.handle();
    let serving = tokio::spawn(server.serve(listener));
    // Like record.py, start once the server is ready (its dry run of the setup passed).
    let deadline = Instant::now() + WAIT;
    while !handle.is_ready() {
        assert!(Instant::now() < deadline, "the crew server never got ready");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let expected = rules::expected(&fixture);
    let conns = expected.connections.len();
    let counts: Vec<usize> = (0..conns)
        .map(|c| expected.frames.iter().filter(|f| f.conn == c).count())
        .collect();
    let recording = Driver::new(addr).run(&fixture.steps, &counts).await;
    let settled = mock.mock().wait_settled(Duration::from_secs(5)).await;
    let requests = mock.mock().requests();

    let mut problems = Vec::new();
    if !settled {
        problems.push("the mock LLM still has a request pending".to_owned());
    }

    // Frames.
    for frame in &recording.frames {
        // Rule `compact_json`: the wire text is exactly serde_json's compact form.
        if let Some(event) = &frame.event
            && serde_json::to_string(event).unwrap() != frame.raw
        {
            problems.push(format!(
                "compact_json: frame is not compact UTF-8 JSON: {}",
                frame.raw
            ));
        }
    }
    let mut actual = compare::normalise_actual(&recording.frames, &fixture.inbound_timestamps());
    let mut expected_frames = expected.frames.clone();
    if expected.run_on {
        let dropped =
            rules::cancelled_stream_may_run_on(&expected_frames, &mut actual, &fixture.llm_script);
        if dropped > 0 {
            eprintln!("{scenario}: cancelled_stream_may_run_on dropped {dropped} late chunk(s)");
        }
    }
    if expected.interleave {
        rules::concurrent_nodes_interleave(&mut expected_frames);
        rules::concurrent_nodes_interleave(&mut actual);
    }
    let mut applied = expected.applied.clone();
    if rules::tool_completion_order(&mut expected_frames)
        | rules::tool_completion_order(&mut actual)
    {
        applied.push("tool_completion_order");
    }
    let max_conn = |frames: &[Frame]| frames.iter().map(|f| f.conn + 1).max().unwrap_or(0);
    for conn in 0..max_conn(&expected_frames).max(max_conn(&actual)) {
        let of = |frames: &[Frame]| -> Vec<Frame> {
            frames.iter().filter(|f| f.conn == conn).cloned().collect()
        };
        if let Err(difference) = compare::compare_frames(&of(&expected_frames), &of(&actual)) {
            problems.push(format!("outbound frames, connection {conn}: {difference}"));
        }
    }

    // Step outcomes.
    for (step, (want, got)) in fixture
        .steps
        .iter()
        .zip(expected.steps.iter().zip(&recording.steps))
    {
        if want != got {
            problems.push(format!(
                "step {} ({:?}): expected {want:?}, got {got:?}",
                step.index, step.op
            ));
        }
    }

    // Connections.
    if recording.connections.len() != expected.connections.len() {
        problems.push(format!(
            "expected {} connections, got {}",
            expected.connections.len(),
            recording.connections.len()
        ));
    }
    for (i, (want, (open, close))) in expected
        .connections
        .iter()
        .zip(&recording.connections)
        .enumerate()
    {
        if want.open_at_end != *open || want.close != *close {
            problems.push(format!(
                "connection {i}: expected open_at_end {} and {:?}, got open_at_end {open} and {close:?}",
                want.open_at_end, want.close
            ));
        }
    }

    // HTTP.
    if expected.http.len() != recording.http.len() {
        problems.push(format!(
            "expected {} HTTP answers, got {}",
            expected.http.len(),
            recording.http.len()
        ));
    }
    for (want, got) in expected.http.iter().zip(&recording.http) {
        if want.path != got.path
            || want.status != got.status
            || want.content_type != got.content_type
            || want.body_raw != got.body_raw
        {
            problems.push(format!(
                "HTTP at step {}: expected {} {} {} {}, got {} {} {} {}",
                got.step,
                want.path,
                want.status,
                want.content_type,
                want.body_raw,
                got.path,
                got.status,
                got.content_type,
                got.body_raw
            ));
        }
    }

    // LLM requests.
    if expected.llm_requests.len() != requests.len() {
        problems.push(format!(
            "expected {} LLM requests ({:?}), got {} ({:?})",
            expected.llm_requests.len(),
            expected
                .llm_requests
                .iter()
                .map(|r| &r.outcome)
                .collect::<Vec<_>>(),
            requests.len(),
            requests.iter().map(|r| &r.outcome).collect::<Vec<_>>()
        ));
    }
    for (i, (want, got)) in expected.llm_requests.iter().zip(&requests).enumerate() {
        if want.path != got.path {
            problems.push(format!(
                "LLM request {i}: path {} instead of {}",
                got.path, want.path
            ));
        }
        if want.outcome != got.outcome {
            problems.push(format!(
                "LLM request {i}: outcome {} instead of {}",
                got.outcome, want.outcome
            ));
        }
        let mut body = got.body.clone();
        rules::parse_tool_contents(&mut body);
        if let Err(difference) = compare::matches(&want.body, &body, false) {
            problems.push(format!(
                "LLM request {i} body: {difference}\nexpected: {}\nactual:   {}",
                want.body, got.body
            ));
        }
    }

    if std::env::var_os("PARITY_DUMP").is_some() {
        for frame in &recording.frames {
            eprintln!(
                "  frame conn {} step {}: {}",
                frame.conn, frame.step, frame.raw
            );
        }
        for request in &requests {
            eprintln!(
                "  llm {} {}: {}",
                request.index, request.outcome, request.body
            );
        }
        for (open, close) in &recording.connections {
            eprintln!("  connection open_at_end {open}: {close:?}");
        }
        for answer in &recording.http {
            eprintln!(
                "  http {} {} {}",
                answer.path, answer.status, answer.body_raw
            );
        }
    }
    eprintln!(
        "{scenario}: {} frames, {} LLM requests, rules applied: [{}], {:.2} s",
        recording.frames.len(),
        requests.len(),
        applied.join(", "),
        started.elapsed().as_secs_f64()
    );
    handle.shutdown();
    serving.abort();
    drop(mock);
    assert!(
        problems.is_empty(),
        "{scenario}: crewline differs from the reference:\n\n{}",
        problems.join("\n\n")
    );
}

/// The scenarios the suite knows, to check that every fixture has a test.
pub fn fixture_names() -> Vec<String> {
    let dir = format!("{}/tests/fixtures/reference", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".json").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}
