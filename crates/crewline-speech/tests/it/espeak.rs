//! The espeak-ng engine against the real program.
//!
//! Where espeak-ng is not installed these tests pass with a note, unless
//! `CREWLINE_REQUIRE_ESPEAK=1` is set (CI sets it after installing espeak-ng): then a missing
//! espeak-ng fails them, so CI cannot go green without running them.

use std::time::Duration;

use crewline_speech::{EspeakNg, ReplyRecording, SentenceAggregator, SpeechError, TextToSpeech};

use crate::common;
use common::espeak_available;

#[tokio::test]
async fn espeak_speaks_a_sentence_as_wav_audio_of_plausible_length() {
    if !espeak_available().await {
        return;
    }
    let engine = EspeakNg::new().words_per_minute(175);
    let short = engine.synthesize("Hello.").await.unwrap();
    let long = engine
        .synthesize("The weather in Paris is eighteen degrees and cloudy this afternoon.")
        .await
        .unwrap();
    assert_eq!(short.format.channels, 1);
    assert!(short.format.sample_rate >= 8000, "{:?}", short.format);
    // Real speech, not silence: some samples are loud.
    assert!(long.samples.iter().any(|s| s.unsigned_abs() > 1000));
    assert!(long.duration() > short.duration());
    assert!(
        long.duration() > Duration::from_secs(2) && long.duration() < Duration::from_secs(15),
        "{:?}",
        long.duration()
    );
}

#[tokio::test]
async fn text_starting_with_a_dash_is_spoken_not_read_as_an_option() {
    if !espeak_available().await {
        return;
    }
    let audio = EspeakNg::new()
        .synthesize("-v xx is not an option here.")
        .await
        .unwrap();
    assert!(audio.duration() > Duration::from_millis(500));
}

#[tokio::test]
async fn a_reply_of_several_sentences_is_written_as_one_wav_file() {
    if !espeak_available().await {
        return;
    }
    let engine = EspeakNg::new();
    let mut aggregator = SentenceAggregator::new();
    let mut sentences = Vec::new();
    for chunk in [
        "Dr. Smith is in",
        " today. He will",
        " see you at 3.30 p.m. ",
        "Bye.",
    ] {
        sentences.extend(aggregator.push(chunk));
    }
    sentences.extend(aggregator.flush());
    assert_eq!(
        sentences,
        [
            "Dr. Smith is in today.",
            "He will see you at 3.30 p.m.",
            "Bye."
        ]
    );
    let mut recording = ReplyRecording::new();
    let mut total = Duration::ZERO;
    for sentence in &sentences {
        let audio = engine.synthesize(sentence).await.unwrap();
        total += audio.duration();
        recording.append(&audio).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("crewline-espeak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("reply.wav");
    assert!(recording.write(&path).unwrap());
    let reader = hound::WavReader::open(&path).unwrap();
    let written = reader.duration() as f64 / f64::from(reader.spec().sample_rate);
    assert!(
        (written - total.as_secs_f64()).abs() < 0.001,
        "{written} vs {total:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_missing_program_is_reported_as_not_installed() {
    let error = EspeakNg::with_program("/nonexistent/espeak-ng")
        .synthesize("Hello.")
        .await
        .unwrap_err();
    assert!(matches!(error, SpeechError::NotInstalled { .. }), "{error}");
    assert!(error.to_string().contains("not installed"), "{error}");
}
