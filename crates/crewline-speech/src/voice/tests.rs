use std::sync::Mutex;

use super::*;
use crate::AudioFormat;

#[tokio::test]
async fn an_output_folder_that_cannot_be_created_is_a_typed_error_naming_it() {
    // A folder inside a regular file can never be created.
    let file = std::env::temp_dir().join(format!("crewline-voice-{}", std::process::id()));
    std::fs::write(&file, b"not a folder").unwrap();
    let wanted = file.join("wavs");
    let result = VoiceConfig::detect(VoiceRequest {
        out_dir: Some(wanted.clone()),
        play: false,
        espeak_voice: None,
    })
    .await;
    std::fs::remove_file(&file).unwrap();
    let Err(error) = result else {
        panic!("a folder inside a file was accepted")
    };
    let VoiceError::OutDir { path, .. } = &error;
    assert_eq!(path, &wanted);
    assert!(error.to_string().contains("could not create"), "{error}");
}

/// Tells the test each sentence it is asked to speak; one sample per character.
struct EchoTts(mpsc::UnboundedSender<String>);

#[async_trait::async_trait]
impl TextToSpeech for EchoTts {
    async fn synthesize(&self, text: &str) -> Result<Audio, SpeechError> {
        let _ = self.0.send(text.to_owned());
        Ok(Audio::new(
            AudioFormat::mono(8000),
            vec![1; text.chars().count()],
        ))
    }

    fn name(&self) -> String {
        "echo".to_owned()
    }
}

/// Plays nothing and never finishes, until dropped; counts the drops.
struct Endless(Arc<Mutex<usize>>, mpsc::UnboundedSender<()>);

struct DropCount(Arc<Mutex<usize>>);

impl Drop for DropCount {
    fn drop(&mut self) {
        *self.0.lock().unwrap() += 1;
    }
}

#[async_trait::async_trait]
impl AudioPlayer for Endless {
    async fn play(&self, _audio: &Audio) -> Result<(), SpeechError> {
        let _guard = DropCount(Arc::clone(&self.0));
        let _ = self.1.send(());
        std::future::pending::<()>().await;
        Ok(())
    }
}

fn at(elapsed_ms: u64) -> Duration {
    Duration::from_millis(elapsed_ms)
}

#[tokio::test]
async fn a_sentence_goes_to_the_engine_while_the_reply_is_still_streaming() {
    let (said_tx, mut said) = mpsc::unbounded_channel();
    let mut config = VoiceConfig::text_only();
    config.tts = Some(Arc::new(EchoTts(said_tx)));
    let mut voice = Voice::new(config);
    let mut reply = voice.start_reply(Instant::now());
    reply.text("The weather in Paris", at(10));
    reply.text(" is mild today. It may", at(20));
    // The reply has not ended, yet the first sentence is being spoken.
    assert_eq!(
        said.recv().await.unwrap(),
        "The weather in Paris is mild today."
    );
    reply.text(" rain later.", at(30));
    reply.end(at(40));
    assert_eq!(said.recv().await.unwrap(), "It may rain later.");
    let report = reply.finished().await;
    assert_eq!(
        report.time_to_first_sentence,
        Some(Duration::from_millis(20))
    );
    assert_eq!(report.synthesized, 2);
    assert!(report.time_to_first_audio.is_some());
    assert!(!report.barged_in);
}

#[tokio::test]
async fn a_barge_in_stops_playback_and_drops_the_rest_of_the_reply() {
    let (said_tx, mut said) = mpsc::unbounded_channel();
    let (playing_tx, mut playing) = mpsc::unbounded_channel();
    let stopped = Arc::new(Mutex::new(0));
    let config = VoiceConfig {
        tts: Some(Arc::new(EchoTts(said_tx))),
        player: Some(Arc::new(Endless(Arc::clone(&stopped), playing_tx))),
        out_dir: None,
        min_sentence_chars: 8,
        max_sentence_chars: None,
    };
    let mut voice = Voice::new(config);
    let mut reply = voice.start_reply(Instant::now());
    reply.text("Once upon a time there was a cloud. She", at(10));
    playing.recv().await.unwrap();
    assert!(reply.is_speaking());
    reply.barge_in();
    reply.text(" dreamed of storms. The end.", at(20));
    let report = reply.finished().await;
    assert!(report.barged_in);
    assert_eq!(report.sentences, ["Once upon a time there was a cloud."]);
    assert_eq!(*stopped.lock().unwrap(), 1, "the playing audio was stopped");
    assert_eq!(
        said.recv().await.unwrap(),
        "Once upon a time there was a cloud."
    );
    // The speaker is done: whatever it was asked to say is in the channel by now.
    assert!(said.try_recv().is_err(), "nothing after the barge-in");
    assert!(
        report.to_string().contains("stopped by barge-in"),
        "{report}"
    );
}

#[tokio::test]
async fn agent_speak_in_a_turn_is_spoken_after_the_text_before_it() {
    let mut voice = Voice::new(VoiceConfig::text_only());
    let mut reply = voice.start_reply(Instant::now());
    reply.text("Sure, I can help with", at(5));
    reply.speak("One moment please. I am looking.", at(9));
    reply.text("The answer is yes.", at(50));
    reply.end(Duration::from_millis(60));
    assert_eq!(
        reply.finished().await.sentences,
        [
            "Sure, I can help with",
            "One moment please.",
            "I am looking.",
            "The answer is yes."
        ]
    );
}

#[tokio::test]
async fn text_only_reports_the_first_sentence_and_no_audio() {
    let mut voice = Voice::new(VoiceConfig::text_only());
    let mut reply = voice.start_reply(Instant::now());
    reply.text("Let me check that for you.", at(5));
    reply.pause(at(7));
    reply.text("In Paris it is 18 degrees.", at(300));
    reply.end(Duration::from_millis(310));
    let report = reply.finished().await;
    assert_eq!(
        report.sentences,
        ["Let me check that for you.", "In Paris it is 18 degrees."]
    );
    assert_eq!(
        report.time_to_first_sentence,
        Some(Duration::from_millis(7))
    );
    assert_eq!(report.time_to_first_audio, None);
    let line = report.to_string();
    assert!(line.contains("first sentence 7.0 ms"), "{line}");
    assert!(line.contains("text only"), "{line}");
}
