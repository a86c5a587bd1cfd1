//! `crewline chat --voice` against the real crew server: sentences go to the engine in order,
//! one WAV file per reply, barge-in silences the agent, and espeak-ng end to end.

use crate::common;

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{bounded, start};
use crewline_cli::chat::{ChatEnd, ChatOptions, run_voice_chat};
use crewline_speech::{Audio, AudioPlayer, SpeechError, TextToSpeech, Voice, VoiceConfig};
use crewline_testkit::platform::{PlatformClient, PlatformConfig};
use tokio::{sync::mpsc, time::Instant};

/// Samples of fake audio per character of a sentence (8 kHz: 10 ms per character).
const SAMPLES_PER_CHAR: usize = 80;

/// A fake engine: records each sentence and when it came, and answers with a short
/// synthetic WAV (a square wave, 10 ms per character).
#[derive(Clone, Default)]
struct FakeTts {
    said: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl FakeTts {
    fn sentences(&self) -> Vec<String> {
        let said = self.said.lock().expect("the fake's log");
        said.iter().map(|(text, _)| text.clone()).collect()
    }
}

#[async_trait::async_trait]
impl TextToSpeech for FakeTts {
    async fn synthesize(&self, text: &str) -> Result<Audio, SpeechError> {
        self.said
            .lock()
            .expect("the fake's log")
            .push((text.to_owned(), Instant::now()));
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut wav = std::io::Cursor::new(Vec::new());
        let mut writer = hound::WavWriter::new(&mut wav, spec).expect("a WAV header");
        for i in 0..text.chars().count() * SAMPLES_PER_CHAR {
            let sample: i16 = if i % 16 < 8 { 3000 } else { -3000 };
            writer.write_sample(sample).expect("a sample");
        }
        writer.finalize().expect("a whole WAV");
        Audio::from_wav(wav.get_ref())
    }

    fn name(&self) -> String {
        "fake".to_owned()
    }
}

/// A player that plays the first piece of audio until it is stopped (then counts the stop)
/// and every later piece at once.
#[derive(Clone)]
struct StuckPlayer {
    started: mpsc::UnboundedSender<()>,
    plays: Arc<Mutex<usize>>,
    stopped: Arc<Mutex<usize>>,
}

struct CountOnDrop(Arc<Mutex<usize>>);

impl Drop for CountOnDrop {
    fn drop(&mut self) {
        *self.0.lock().expect("the stop count") += 1;
    }
}

#[async_trait::async_trait]
impl AudioPlayer for StuckPlayer {
    async fn play(&self, _audio: &Audio) -> Result<(), SpeechError> {
        let first = {
            let mut plays = self.plays.lock().expect("the play count");
            *plays += 1;
            *plays == 1
        };
        if first {
            // Counted when the play is dropped: it never ends by itself.
            let _stopped = CountOnDrop(Arc::clone(&self.stopped));
            let _ = self.started.send(());
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("crewline-voice-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    dir
}

/// The duration of a WAV file, in samples per channel.
fn wav_samples(path: &Path) -> u32 {
    hound::WavReader::open(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .duration()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_reply_is_spoken_sentence_by_sentence_in_order_and_saved_as_one_wav() {
    bounded(async {
        let server = start(Duration::from_millis(5)).await;
        let mut client = PlatformClient::connect(PlatformConfig::new(&server.url))
            .await
            .unwrap();
        let tts = FakeTts::default();
        let dir = temp_dir("order");
        let mut voice = Voice::new(VoiceConfig {
            tts: Some(Arc::new(tts.clone())),
            player: None,
            out_dir: Some(dir.clone()),
            min_sentence_chars: 8,
            max_sentence_chars: Some(200),
        });
        let (tx, lines) = mpsc::channel(8);
        for line in ["Hi there!", "What's the weather in Paris?", "/quit"] {
            tx.send(line.to_owned()).await.unwrap();
        }
        let options = ChatOptions {
            barge_in: false,
            echo_input: true,
            prompt: false,
            ..ChatOptions::default()
        };
        let mut out = Vec::new();
        let outcome = run_voice_chat(&mut client, lines, &mut out, options, &mut voice)
            .await
            .unwrap();
        let out = String::from_utf8(out).unwrap();

        assert_eq!(outcome.end, ChatEnd::Quit);
        assert_eq!(outcome.turns, 2);
        let first_reply = [
            "Hi! I can tell you the weather in any big city.",
            "Which one?",
        ];
        // The model's words before the tool call are spoken when the tool starts.
        let second_reply = [
            "Let me check that for you.",
            "In Paris it is 18 degrees and cloudy.",
        ];
        assert_eq!(
            tts.sentences(),
            [first_reply.as_slice(), second_reply.as_slice()].concat()
        );
        let reports = voice.reports();
        assert_eq!(reports.len(), 2);
        assert_eq!(reports[0].sentences, first_reply);
        assert_eq!(reports[1].sentences, second_reply);
        for (report, sentences) in reports.iter().zip([first_reply, second_reply]) {
            let path = report.wav.clone().expect("a WAV file per reply");
            assert_eq!(path, dir.join(format!("reply-{:03}.wav", report.reply)));
            let chars: usize = sentences.iter().map(|s| s.chars().count()).sum();
            assert_eq!(wav_samples(&path) as usize, chars * SAMPLES_PER_CHAR);
            assert!(report.time_to_first_sentence.is_some());
            assert!(report.time_to_first_audio.is_some());
            assert!(report.errors.is_empty(), "{:?}", report.errors);
            assert!(!report.barged_in);
        }
        assert_eq!(out.matches("(voice: first sentence").count(), 2, "{out}");
        assert_eq!(out.matches("first audio").count(), 2, "{out}");
        assert!(out.contains("reply-002.wav"), "{out}");
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_while_the_agent_speaks_stops_the_audio_and_interrupts() {
    bounded(async {
        let server = start(Duration::from_millis(20)).await;
        let mut client = PlatformClient::connect(PlatformConfig::new(&server.url))
            .await
            .unwrap();
        let tts = FakeTts::default();
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let player = StuckPlayer {
            started: started_tx,
            plays: Arc::default(),
            stopped: Arc::default(),
        };
        let dir = temp_dir("barge-in");
        let mut voice = Voice::new(VoiceConfig {
            tts: Some(Arc::new(tts.clone())),
            player: Some(Arc::new(player.clone())),
            out_dir: Some(dir.clone()),
            min_sentence_chars: 8,
            max_sentence_chars: Some(200),
        });
        let (tx, lines) = mpsc::channel(8);
        let options = ChatOptions {
            barge_in: true,
            echo_input: false,
            prompt: false,
            ..ChatOptions::default()
        };
        let chat = tokio::spawn(async move {
            let mut out = Vec::new();
            let outcome = run_voice_chat(&mut client, lines, &mut out, options, &mut voice).await;
            (outcome, voice, String::from_utf8(out).unwrap())
        });

        tx.send("Tell me a long story.".into()).await.unwrap();
        // The story's first sentence is playing, and would play forever.
        started.recv().await.unwrap();
        tx.send("Sorry, never mind.".into()).await.unwrap();
        drop(tx);
        let (outcome, voice, out) = chat.await.unwrap();
        let outcome = outcome.unwrap();

        assert_eq!(outcome.end, ChatEnd::EndOfInput);
        assert_eq!(outcome.turns, 2);
        assert_eq!(
            *player.stopped.lock().unwrap(),
            1,
            "the story's audio was stopped"
        );
        let reports = voice.reports();
        assert_eq!(reports.len(), 2);
        assert!(reports[0].barged_in, "{reports:?}");
        assert!(reports[0].sentences[0].starts_with("Once upon a time"));
        assert!(
            !reports[0].sentences.iter().any(|s| s.contains("wispy")),
            "the end of the story was not spoken: {reports:?}"
        );
        assert_eq!(
            reports[1].sentences,
            [
                "No problem at all.",
                "Thanks for calling, and have a lovely day!"
            ]
        );
        assert!(!reports[1].barged_in);
        // The interrupted reply keeps the audio synthesized before the barge-in.
        assert!(reports[0].wav.is_some());
        assert!(out.contains("stopped by barge-in"), "{out}");
        let said = tts.sentences();
        assert_eq!(
            said.last().map(String::as_str),
            Some(reports[1].sentences[1].as_str())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

/// Runs the binary with `args` and `env`, feeding `stdin`; returns (success, stdout, stderr).
async fn run_crewline(args: &[&str], env: &[(&str, &str)], stdin: &str) -> (bool, String, String) {
    use tokio::io::AsyncWriteExt;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_crewline"));
    command
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("the crewline binary starts");
    let mut input = child.stdin.take().expect("a stdin pipe");
    input
        .write_all(stdin.as_bytes())
        .await
        .expect("stdin written");
    drop(input);
    let output = bounded(child.wait_with_output())
        .await
        .expect("the binary's output");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_espeak_the_binary_says_so_and_goes_on_text_only() {
    let server = start(Duration::from_millis(5)).await;
    // A PATH with nothing on it: no espeak-ng, no aplay.
    let empty = temp_dir("empty-path");
    let (ok, stdout, stderr) = run_crewline(
        &["chat", "--url", &server.url, "--voice"],
        &[("PATH", empty.to_str().unwrap())],
        "Hi there!\nWhat's the weather in Tokyo?\n",
    )
    .await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("`espeak-ng` is not installed") && stdout.contains("text only"),
        "{stdout}"
    );
    assert!(
        stdout.contains("In Tokyo it is 24 degrees and sunny."),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("(voice: first sentence").count(),
        2,
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("2 sentences, text only").count(),
        2,
        "{stdout}"
    );
    assert!(!stdout.contains("first audio"), "{stdout}");
    std::fs::remove_dir_all(&empty).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_espeak_the_binary_writes_a_spoken_wav_per_reply() {
    let installed = std::process::Command::new("espeak-ng")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !installed {
        let required = std::env::var("CREWLINE_REQUIRE_ESPEAK").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "CREWLINE_REQUIRE_ESPEAK=1 but espeak-ng is not installed"
        );
        // Past the test harness's capture, so that every run shows what it skipped.
        {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: espeak-ng is not installed; skipping"
            );
        }
        return;
    }
    let server = start(Duration::from_millis(5)).await;
    let dir = temp_dir("espeak");
    let (ok, stdout, stderr) = run_crewline(
        &[
            "chat",
            "--url",
            &server.url,
            "--voice",
            "--mute",
            "--out",
            dir.to_str().unwrap(),
        ],
        &[],
        "Hi there!\nWhat's the weather in Tokyo?\n",
    )
    .await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("voice: speaking with eSpeak NG"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("first audio").count(), 2, "{stdout}");
    assert!(!stdout.contains("[voice error]"), "{stdout}");
    for reply in ["reply-001.wav", "reply-002.wav"] {
        let path = dir.join(reply);
        assert!(
            stdout.contains(&format!("wrote {}", path.display())),
            "{stdout}"
        );
        let reader = hound::WavReader::open(&path).unwrap();
        let seconds = f64::from(reader.duration()) / f64::from(reader.spec().sample_rate);
        // Two sentences of speech each: seconds, not a click or a blank file.
        assert!(seconds > 1.5 && seconds < 20.0, "{reply}: {seconds} s");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
