use super::*;

/// When each attempt started (ms from the first) in a run under `backoff` whose every
/// attempt fails with `status`, and the error it ended with.
async fn attempt_times(backoff: Backoff, status: u16) -> (Vec<u128>, ClientError) {
    let started = tokio::time::Instant::now();
    let mut times = Vec::new();
    let error = retrying(backoff, "test", || {
        times.push(started.elapsed().as_millis());
        let detail = String::new();
        async move { Err::<(), _>(ClientError::Status { status, detail }) }
    })
    .await
    .expect_err("every attempt fails");
    (times, error)
}

/// The pauses between `times`, each checked against its nominal length (ms): a jittered
/// pause is between half of it and all of it. backon computes delays in `f32` seconds and
/// tokio's timer rounds up to the millisecond, so a pause may be 1 ms off either end.
fn assert_pauses(times: &[u128], expected: &[u128]) {
    let pauses: Vec<u128> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(pauses.len(), expected.len(), "{pauses:?}");
    for (pause, nominal) in pauses.iter().zip(expected) {
        assert!(
            (nominal / 2 - 1..=nominal + 1).contains(pause),
            "{pauses:?} not within half of and all of {expected:?}"
        );
    }
}

#[test]
fn backoff_schedules_are_jittered_within_their_nominal_delays() {
    use backon::BackoffBuilder;
    let schedule = || -> Vec<u128> {
        Backoff::default()
            .schedule()
            .build()
            .map(|d| d.as_millis())
            .collect()
    };
    let nominal = [100, 200, 400, 800, 1600, 3200, 5000];
    let (first, second) = (schedule(), schedule());
    for pauses in [&first, &second] {
        assert_eq!(pauses.len(), nominal.len(), "{pauses:?}");
        for (pause, nominal) in pauses.iter().zip(nominal) {
            assert!(
                (nominal / 2 - 1..=nominal).contains(pause),
                "{pauses:?} not within half of and all of {nominal}"
            );
        }
        // All the retries of one request stay within the nominal schedule's 11.3 s.
        assert!(pauses.iter().sum::<u128>() <= 11_300, "{pauses:?}");
    }
    // Clients that failed together retry at different times (seven equal random
    // pauses: nil chance).
    assert_ne!(first, second);
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_up_to_its_cap() {
    let backoff = Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_millis(700),
        max_attempts: 5,
    };
    let (times, error) = attempt_times(backoff, 503).await;
    assert_pauses(&times, &[100, 200, 400, 700]);
    assert!(
        matches!(&error, ClientError::GaveUp { attempts: 5, last }
                if matches!(**last, ClientError::Status { status: 503, .. })),
        "{error:?}"
    );
    let long = Backoff {
        max_attempts: 200,
        ..backoff
    };
    let (times, _) = attempt_times(long, 503).await;
    assert_eq!(times.len(), 200);
    assert_pauses(&times[190..], &[700; 9]);
}

#[tokio::test(start_paused = true)]
async fn the_default_backoff_and_what_is_not_retried() {
    let (times, error) = attempt_times(Backoff::default(), 429).await;
    assert_pauses(&times, &[100, 200, 400, 800, 1600, 3200, 5000]);
    assert!(
        matches!(error, ClientError::GaveUp { attempts: 8, .. }),
        "{error:?}"
    );
    // A client error is not retried, and keeps its own type.
    let (times, error) = attempt_times(Backoff::default(), 400).await;
    assert_eq!(times, [0]);
    assert!(
        matches!(error, ClientError::Status { status: 400, .. }),
        "{error:?}"
    );
    // One attempt allowed (or none, which counts as one): no retry.
    for max_attempts in [0, 1] {
        let once = Backoff {
            max_attempts,
            ..Backoff::default()
        };
        let (times, error) = attempt_times(once, 503).await;
        assert_eq!(times, [0]);
        assert!(
            matches!(error, ClientError::GaveUp { attempts: 1, .. }),
            "{error:?}"
        );
    }
}

#[test]
fn the_api_key_never_shows_in_debug_output() {
    let config = ClientConfig::new("http://127.0.0.1:1").api_key("sk-very-secret");
    let client = TaskClient::new(config).unwrap();
    let shown = format!("{client:?}");
    assert!(!shown.contains("sk-very-secret"), "{shown}");
    assert!(shown.contains("redacted"), "{shown}");
}

#[test]
fn seen_events_are_bounded_and_deduplicated() {
    let mut seen = SeenEvents::default();
    assert!(seen.insert("a"));
    assert!(!seen.insert("a"));
    for i in 0..SEEN_EVENTS {
        seen.insert(&i.to_string());
    }
    assert_eq!(seen.ids.len(), SEEN_EVENTS);
    assert!(seen.insert("a"), "the oldest id was forgotten");
}

#[test]
fn urls_keep_the_base_path_and_encode_ids() {
    let client = TaskClient::new(ClientConfig::new("https://api.example/api/v1/")).unwrap();
    assert_eq!(
        client.url(&["task", "a b/c"]).as_str(),
        "https://api.example/api/v1/task/a%20b%2Fc"
    );
}

#[test]
fn results_map_to_codes_by_who_can_fix_them() {
    let call = ToolCall::new("e1", "t", "{}");
    let ok = answer_for(ToolResult::ok(&call, r#"{"temp": 3}"#));
    assert_eq!((ok.code, ok.output["temp"].as_i64()), (200, Some(3)));
    let text = answer_for(ToolResult::ok(&call, "42"));
    assert_eq!(text.output, json!("42"), "non-object content stays text");
    for (kind, code) in [
        (ToolErrorKind::ToolArgsInvalid, 400),
        (ToolErrorKind::ToolError, 400),
        (ToolErrorKind::UnknownTool, 400),
        (ToolErrorKind::Timeout, 500),
        (ToolErrorKind::Cancelled, 500),
    ] {
        let answer = answer_for(ToolResult::error(&call, kind, "m"));
        assert_eq!(answer.code, code, "{kind}");
        assert_eq!(answer.error_kind(), Some(kind.as_str()));
    }
    let panic = answer_for(ToolResult::error(
        &call,
        ToolErrorKind::ToolError,
        PANIC_MESSAGE,
    ));
    assert_eq!(panic.code, 500);
}
