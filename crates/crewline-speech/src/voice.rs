//! Speaks a crew's streamed replies the way a voice platform does: sentence, speech, ordered
//! playback, one WAV file per reply. `crewline chat --voice` runs it; a crew can run it
//! without the CLI.
//!
//! Each reply's chunks go through a [`SentenceAggregator`]; every sentence goes to the
//! text-to-speech engine the moment it is complete, while the reply still streams. Audio is
//! played in order as it is ready (and, with an output folder, written as one WAV file per
//! reply). Per reply it reports:
//! - **time to first sentence**: from sending the turn's request to the first complete
//!   sentence (the moment a platform could start synthesizing);
//! - **time to first audio**: from sending the request to the first sentence's audio being
//!   synthesized and handed to the player (the moment the caller could hear the agent).
//!
//! A barge-in drops the pending text and stops synthesis and playback at once: the child
//! processes are killed with their futures.
//!
//! Without a TTS engine (espeak-ng not installed) it still aggregates and reports the time to
//! first sentence, text only.
//!
//! ```
//! use std::time::Duration;
//!
//! use crewline_speech::{Voice, VoiceConfig};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let mut voice = Voice::new(VoiceConfig::text_only());
//! let mut reply = voice.start_reply(tokio::time::Instant::now());
//! reply.text("Hello there. How can", Duration::from_millis(40));
//! reply.text(" I help?", Duration::from_millis(60));
//! reply.end(Duration::from_millis(70));
//! let report = reply.finished().await;
//! assert_eq!(report.sentences, ["Hello there.", "How can I help?"]);
//! assert_eq!(report.time_to_first_sentence, Some(Duration::from_millis(40)));
//! # });
//! ```

use std::{
    fmt,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
    time::Instant,
};

use crate::{
    Aplay, Audio, AudioPlayer, EspeakNg, ReplyRecording, SentenceAggregator, SpeechError,
    TextToSpeech,
};

/// Past this many characters a sentence is cut at its next comma: about 12 s of speech, so
/// the first audio of a long run-on answer is not held back much longer than that.
pub const MAX_SENTENCE_CHARS: usize = 200;

/// How replies are spoken.
///
/// # Examples
///
/// Any engine and player plug in (espeak-ng and `aplay` are [`EspeakNg`] and [`Aplay`]); here
/// in-process ones, with one WAV file per reply:
///
/// ```
/// # use std::sync::{Arc, Mutex};
/// # use crewline_speech::{Audio, AudioFormat, AudioPlayer, SpeechError, TextToSpeech};
/// /// A stand-in engine: 10 ms of silence per character.
/// struct Beeper;
///
/// #[async_trait::async_trait]
/// impl TextToSpeech for Beeper {
///     async fn synthesize(&self, text: &str) -> Result<Audio, SpeechError> {
///         Ok(Audio::new(AudioFormat::mono(16_000), vec![0; 160 * text.len()]))
///     }
///     fn name(&self) -> String {
///         "beeper".into()
///     }
/// }
///
/// /// A player that notes how long each piece played.
/// #[derive(Default)]
/// struct Speaker(Mutex<Vec<std::time::Duration>>);
///
/// #[async_trait::async_trait]
/// impl AudioPlayer for Speaker {
///     async fn play(&self, audio: &Audio) -> Result<(), SpeechError> {
///         self.0.lock().unwrap().push(audio.duration());
///         Ok(())
///     }
/// }
///
/// use std::time::Duration;
///
/// use crewline_speech::{Voice, VoiceConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let speaker = Arc::new(Speaker::default());
/// let out_dir = std::env::temp_dir().join(format!("crewline-voice-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&out_dir)?;
/// let config = VoiceConfig {
///     tts: Some(Arc::new(Beeper)),
///     player: Some(speaker.clone()),
///     out_dir: Some(out_dir.clone()),
///     ..VoiceConfig::text_only()
/// };
///
/// let mut voice = Voice::new(config);
/// let mut reply = voice.start_reply(tokio::time::Instant::now());
/// reply.text("Your table is booked. ", Duration::from_millis(30));
/// reply.text("See you at eight!", Duration::from_millis(50));
/// let report = reply.finished().await;
///
/// assert_eq!(report.sentences, ["Your table is booked.", "See you at eight!"]);
/// assert_eq!(report.synthesized, 2);
/// assert_eq!(*speaker.0.lock().unwrap(), [Duration::from_millis(210), Duration::from_millis(170)]);
/// let wav = report.wav.as_ref().expect("a WAV per reply");
/// assert_eq!(Audio::from_wav(&std::fs::read(wav)?)?.duration(), report.audio);
/// # std::fs::remove_dir_all(&out_dir)?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct VoiceConfig {
    /// The engine; `None` runs text only (sentences and their timing, no audio).
    pub tts: Option<Arc<dyn TextToSpeech>>,
    /// Plays the audio; `None` does not play it.
    pub player: Option<Arc<dyn AudioPlayer>>,
    /// Where to write one WAV file per reply (`reply-001.wav`, ...); `None` writes none.
    pub out_dir: Option<PathBuf>,
    /// The shortest sentence sent to the engine on its own (shorter ones are merged).
    pub min_sentence_chars: usize,
    /// A sentence longer than this is cut at its next clause mark (`None`: never), so a long
    /// run-on sentence does not hold back the audio.
    pub max_sentence_chars: Option<usize>,
}

impl std::fmt::Debug for VoiceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VoiceConfig")
            .field("tts", &self.tts.as_ref().map(|tts| tts.name()))
            .field("player", &self.player.is_some())
            .field("out_dir", &self.out_dir)
            .field("min_sentence_chars", &self.min_sentence_chars)
            .field("max_sentence_chars", &self.max_sentence_chars)
            .finish()
    }
}

impl VoiceConfig {
    /// Text only: no engine, no player, no files.
    pub fn text_only() -> Self {
        Self {
            tts: None,
            player: None,
            out_dir: None,
            min_sentence_chars: crate::sentence::DEFAULT_MIN_CHARS,
            max_sentence_chars: Some(MAX_SENTENCE_CHARS),
        }
    }
}

/// What voice to set up (`crewline chat --voice --out DIR --mute --espeak-voice NAME`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VoiceRequest {
    /// Where to write one WAV file per reply.
    pub out_dir: Option<PathBuf>,
    /// Whether to play the audio.
    pub play: bool,
    /// The espeak-ng voice (`-v`), e.g. `en-us`.
    pub espeak_voice: Option<String>,
}

/// Why voice could not be set up for a chat.
#[derive(Debug, thiserror::Error)]
pub enum VoiceError {
    /// The folder for the replies' WAV files could not be created.
    #[error("could not create {}", path.display())]
    OutDir {
        /// The folder asked for.
        path: PathBuf,
        /// Why creating it failed.
        source: std::io::Error,
    },
}

/// What [`VoiceConfig::detect`] found, for the user.
#[derive(Debug)]
#[non_exhaustive]
pub enum VoiceNote {
    /// Replies are spoken with this engine (its name and version).
    Speaking(String),
    /// No engine could run: text only (sentences and their timing are still reported).
    NoEngine(SpeechError),
    /// The audio is not played (only written, if a folder was given).
    Muted,
    /// No player could run: the audio is not played.
    NoPlayer(SpeechError),
    /// One WAV file per reply goes to this folder.
    WritingTo(PathBuf),
}

impl fmt::Display for VoiceNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Speaking(engine) => write!(f, "voice: speaking with {engine}"),
            Self::NoEngine(error) => write!(
                f,
                "voice: {error}; continuing text only (install it with `apt-get install \
                 espeak-ng`); the time to first sentence is still reported"
            ),
            Self::Muted => write!(f, "voice: not playing the audio"),
            Self::NoPlayer(error) => {
                write!(f, "voice: cannot play audio: {error} (install alsa-utils)")
            }
            Self::WritingTo(dir) => write!(
                f,
                "voice: writing one WAV file per reply to {}",
                dir.display()
            ),
        }
    }
}

impl VoiceConfig {
    /// Sets up voice from what is installed: espeak-ng for speech, `aplay` for playback.
    /// Returns the configuration and what was found, for the user.
    ///
    /// A missing program is not an error: without espeak-ng the replies run text only,
    /// without `aplay` they are not played. An output folder that cannot be created is an
    /// error.
    pub async fn detect(request: VoiceRequest) -> Result<(Self, Vec<VoiceNote>), VoiceError> {
        let mut notes = Vec::new();
        let mut config = Self::text_only();
        if let Some(dir) = &request.out_dir {
            // tokio's version: this runs on the caller's runtime, which must not block.
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|source| VoiceError::OutDir {
                    path: dir.clone(),
                    source,
                })?;
            config.out_dir = Some(dir.clone());
        }
        let mut espeak = EspeakNg::new();
        if let Some(voice) = &request.espeak_voice {
            espeak = espeak.voice(voice);
        }
        match espeak.probe().await {
            Ok(version) => {
                // `eSpeak NG text-to-speech: 1.51  Data at: /usr/lib/...`: the name and version.
                let version = version.lines().next().unwrap_or("espeak-ng");
                let version = version.split("  ").next().unwrap_or(version);
                notes.push(VoiceNote::Speaking(version.to_owned()));
                config.tts = Some(Arc::new(espeak));
            }
            Err(error) => notes.push(VoiceNote::NoEngine(error)),
        }
        if config.tts.is_some() {
            if !request.play {
                notes.push(VoiceNote::Muted);
            } else {
                let aplay = Aplay::new();
                match aplay.probe().await {
                    Ok(_) => config.player = Some(Arc::new(aplay)),
                    Err(error) => notes.push(VoiceNote::NoPlayer(error)),
                }
            }
            if let Some(dir) = &config.out_dir {
                notes.push(VoiceNote::WritingTo(dir.clone()));
            }
        }
        Ok((config, notes))
    }
}

/// Speaks replies, one turn at a time, and keeps the reports.
#[derive(Debug)]
pub struct Voice {
    config: VoiceConfig,
    /// Set once playback failed (e.g. no sound card): later replies are not played.
    playback_failed: Arc<AtomicBool>,
    /// Replies started, for the WAV files' names.
    replies: usize,
    reports: Vec<VoiceReport>,
}

impl Voice {
    /// A voice speaking with `config`.
    pub fn new(config: VoiceConfig) -> Self {
        Self {
            config,
            playback_failed: Arc::new(AtomicBool::new(false)),
            replies: 0,
            reports: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &VoiceConfig {
        &self.config
    }

    /// The reports of the replies spoken so far, in order.
    pub fn reports(&self) -> &[VoiceReport] {
        &self.reports
    }

    /// Starts speaking a reply whose request was sent at `sent_at`.
    pub fn start_reply(&mut self, sent_at: Instant) -> SpokenReply {
        self.replies += 1;
        let reply = self.replies;
        let (sentences_tx, sentences_rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let player = self
            .config
            .player
            .clone()
            .filter(|_| !self.playback_failed.load(Ordering::Relaxed));
        let speaker = Speaker {
            tts: self.config.tts.clone(),
            player,
            playback_failed: Arc::clone(&self.playback_failed),
            wav: self
                .config
                .out_dir
                .as_ref()
                .map(|dir| dir.join(format!("reply-{reply:03}.wav"))),
            sent_at,
        };
        SpokenReply {
            aggregator: SentenceAggregator::with_min_chars(self.config.min_sentence_chars)
                .max_chars(self.config.max_sentence_chars),
            sentences_tx: Some(sentences_tx),
            stop: Some(stop_tx),
            task: Some(tokio::spawn(speaker.run(sentences_rx, stop_rx))),
            sent_at,
            report: VoiceReport {
                reply,
                text_only: self.config.tts.is_none(),
                ..VoiceReport::default()
            },
        }
    }

    /// Files a finished reply's report.
    pub fn record(&mut self, report: VoiceReport) {
        self.reports.push(report);
    }
}

/// What speaking one reply did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VoiceReport {
    /// The reply's number in the chat, from 1 (it names the WAV file).
    pub reply: usize,
    /// The sentences sent to the engine, in order.
    pub sentences: Vec<String>,
    /// From the request to the first complete sentence.
    pub time_to_first_sentence: Option<Duration>,
    /// From the request to the first sentence's audio being ready to play.
    pub time_to_first_audio: Option<Duration>,
    /// How many sentences were synthesized.
    pub synthesized: usize,
    /// How long the synthesized audio plays.
    pub audio: Duration,
    /// The WAV file written for the reply.
    pub wav: Option<PathBuf>,
    /// The caller barged in: the rest of the reply was dropped and the audio stopped.
    pub barged_in: bool,
    /// No engine: text only.
    pub text_only: bool,
    /// Synthesis, playback or file errors (the chat goes on).
    pub errors: Vec<String>,
}

/// One line for the user, e.g. `first sentence 41 ms, first audio 95 ms, 2 sentences, 3.1 s of
/// audio` (the errors are in [`VoiceReport::errors`]).
impl fmt::Display for VoiceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match self.time_to_first_sentence {
            Some(at) => parts.push(format!("first sentence {}", ms(at))),
            None => parts.push("no sentence".to_owned()),
        }
        if let Some(at) = self.time_to_first_audio {
            parts.push(format!("first audio {}", ms(at)));
        }
        let count = self.sentences.len();
        parts.push(format!(
            "{count} sentence{}",
            if count == 1 { "" } else { "s" }
        ));
        if self.text_only {
            parts.push("text only".to_owned());
        } else if self.synthesized > 0 {
            parts.push(format!("{:.1} s of audio", self.audio.as_secs_f64()));
        }
        if self.barged_in {
            parts.push(format!(
                "stopped by barge-in after {} of {count} synthesized",
                self.synthesized
            ));
        }
        if let Some(wav) = &self.wav {
            parts.push(format!("wrote {}", wav.display()));
        }
        f.write_str(&parts.join(", "))
    }
}

/// A duration as whole milliseconds (tenths below 10 ms, where they matter).
fn ms(duration: Duration) -> String {
    let millis = duration.as_secs_f64() * 1e3;
    if millis < 10.0 {
        format!("{millis:.1} ms")
    } else {
        format!("{millis:.0} ms")
    }
}

/// What the speaker task hands back.
#[derive(Debug, Default)]
struct Spoken {
    first_audio: Option<Duration>,
    synthesized: usize,
    audio: Duration,
    wav: Option<PathBuf>,
    stopped: bool,
    errors: Vec<String>,
}

/// One reply being spoken: feed it the reply's text as it streams; it sends each sentence on
/// as soon as it is complete.
///
/// # Examples
///
/// A barge-in drops what was not said yet:
///
/// ```
/// use std::time::Duration;
///
/// use crewline_speech::{Voice, VoiceConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut voice = Voice::new(VoiceConfig::text_only());
/// let mut reply = voice.start_reply(tokio::time::Instant::now());
/// reply.text("Let me check that. The flight leaves", Duration::from_millis(20));
/// assert!(reply.is_speaking());
/// reply.barge_in(); // the caller spoke
/// reply.text(" at nine.", Duration::from_millis(40)); // ignored
///
/// let report = reply.finished().await;
/// assert!(report.barged_in);
/// assert_eq!(report.sentences, ["Let me check that."]);
/// # }
/// ```
#[derive(Debug)]
pub struct SpokenReply {
    aggregator: SentenceAggregator,
    /// To the speaker task; `None` once the reply ended or was cut off.
    sentences_tx: Option<mpsc::UnboundedSender<String>>,
    /// Stops the speaker task at once; `None` once used.
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Spoken>>,
    sent_at: Instant,
    report: VoiceReport,
}

impl SpokenReply {
    /// A streamed piece of the reply's text, `elapsed` after the request: each sentence it
    /// completes goes to the engine at once.
    pub fn text(&mut self, chunk: &str, elapsed: Duration) {
        for sentence in self.aggregator.push(chunk) {
            self.send(sentence, elapsed);
        }
    }

    /// The reply's text paused (e.g. a tool call started): speaks what the model said before
    /// it ("Let me check that.") instead of holding it back until the next sentence ends.
    pub fn pause(&mut self, elapsed: Duration) {
        self.flush(elapsed);
    }

    /// Text to say as it is (`agent.speak`), after what was said before it.
    pub fn speak(&mut self, text: &str, elapsed: Duration) {
        self.flush(elapsed);
        // Same settings, and empty: it was just flushed.
        let mut speech = self.aggregator.clone();
        let mut sentences = speech.push(text);
        sentences.extend(speech.flush());
        for sentence in sentences {
            self.send(sentence, elapsed);
        }
    }

    /// The reply's text is complete: speaks what is left and lets the speaker finish.
    /// `elapsed` is the time since the request.
    pub fn end(&mut self, elapsed: Duration) {
        self.flush(elapsed);
        self.sentences_tx = None;
    }

    /// Speaks the text held back so far (the model paused, e.g. for a tool call).
    fn flush(&mut self, elapsed: Duration) {
        if let Some(rest) = self.aggregator.flush() {
            self.send(rest, elapsed);
        }
    }

    fn send(&mut self, sentence: String, elapsed: Duration) {
        let Some(tx) = &self.sentences_tx else {
            return;
        };
        self.report.time_to_first_sentence.get_or_insert(elapsed);
        tracing::debug!(%sentence, ?elapsed, "sentence complete");
        if tx.send(sentence.clone()).is_ok() {
            self.report.sentences.push(sentence);
        }
    }

    /// The caller barged in: drops the text not yet spoken and stops synthesis and playback
    /// now. Later text of the reply is ignored.
    pub fn barge_in(&mut self) {
        if self.report.barged_in || !self.is_speaking() {
            return;
        }
        self.report.barged_in = true;
        let dropped = self.aggregator.discard();
        tracing::debug!(dropped = dropped.len(), "barge-in: speech stopped");
        self.sentences_tx = None;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Whether speech is still going on (or may still come).
    pub fn is_speaking(&self) -> bool {
        self.task.as_ref().is_some_and(|task| !task.is_finished())
    }

    /// Waits until the reply has been spoken (or stopped) and returns its report. Ends the
    /// reply's text first if it had not ended (e.g. the crew dropped an interrupted request).
    ///
    /// Cancel-safe: it can race user input in `select!` and be called again.
    pub async fn finished(&mut self) -> VoiceReport {
        if self.sentences_tx.is_some() {
            self.end(self.sent_at.elapsed());
        }
        let spoken = match self.task.as_mut() {
            Some(task) => match task.await {
                Ok(spoken) => spoken,
                Err(error) => Spoken {
                    errors: vec![format!("the speaker task failed: {error}")],
                    ..Spoken::default()
                },
            },
            None => Spoken::default(),
        };
        self.task = None;
        let mut report = self.report.clone();
        report.time_to_first_audio = spoken.first_audio;
        report.synthesized = spoken.synthesized;
        report.audio = spoken.audio;
        report.wav = spoken.wav;
        report.barged_in |= spoken.stopped;
        report.errors.extend(spoken.errors);
        report
    }
}

impl Drop for SpokenReply {
    fn drop(&mut self) {
        // A reply dropped mid-speech (the chat failed) must not go on talking.
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The speaker task of one reply: synthesizes sentences in order, hands the audio to the
/// player task, and writes the reply's WAV at the end.
struct Speaker {
    tts: Option<Arc<dyn TextToSpeech>>,
    player: Option<Arc<dyn AudioPlayer>>,
    playback_failed: Arc<AtomicBool>,
    wav: Option<PathBuf>,
    sent_at: Instant,
}

impl Speaker {
    async fn run(
        self,
        mut sentences: mpsc::UnboundedReceiver<String>,
        mut stop: oneshot::Receiver<()>,
    ) -> Spoken {
        let mut spoken = Spoken::default();
        let mut recording = ReplyRecording::new();
        let (audio_tx, audio_rx) = mpsc::unbounded_channel();
        let mut playback = self.player.clone().map(|player| {
            tokio::spawn(play_in_order(
                player,
                audio_rx,
                Arc::clone(&self.playback_failed),
            ))
        });
        // `stop` resolves on a barge-in, and also if the reply was dropped.
        loop {
            let sentence = tokio::select! {
                biased;
                _ = &mut stop => {
                    spoken.stopped = true;
                    break;
                }
                sentence = sentences.recv() => match sentence {
                    Some(sentence) => sentence,
                    None => break,
                },
            };
            let Some(tts) = &self.tts else { continue };
            let audio = tokio::select! {
                biased;
                _ = &mut stop => {
                    spoken.stopped = true;
                    break;
                }
                audio = tts.synthesize(&sentence) => audio,
            };
            match audio {
                Ok(audio) => {
                    spoken
                        .first_audio
                        .get_or_insert_with(|| self.sent_at.elapsed());
                    spoken.synthesized += 1;
                    spoken.audio += audio.duration();
                    if let Err(error) = recording.append(&audio) {
                        spoken.errors.push(error.to_string());
                    }
                    // The player may have given up (its errors are reported below).
                    let _ = audio_tx.send(audio);
                }
                Err(error) => spoken
                    .errors
                    .push(format!("could not synthesize {sentence:?}: {error}")),
            }
        }
        drop(audio_tx);
        if let Some(task) = playback.as_mut() {
            if spoken.stopped {
                stop_playback(task).await;
            } else {
                tokio::select! {
                    biased;
                    _ = &mut stop => {
                        spoken.stopped = true;
                        stop_playback(task).await;
                    }
                    played = &mut *task => match played {
                        Ok(errors) => spoken.errors.extend(errors),
                        Err(error) => spoken.errors.push(format!("playback failed: {error}")),
                    },
                }
            }
        }
        if let Some(path) = self.wav {
            match recording.write(&path) {
                Ok(true) => spoken.wav = Some(path),
                Ok(false) => {}
                Err(error) => spoken.errors.push(error.to_string()),
            }
        }
        spoken
    }
}

/// Stops playback now: aborting the task drops the play future, which kills the player
/// process; waiting for the abort means the sound has stopped when this returns.
async fn stop_playback(task: &mut JoinHandle<Vec<String>>) {
    task.abort();
    let _ = task.await;
}

/// Plays each piece of audio as it comes, in order. After a failure (e.g. no sound device)
/// it plays nothing more, for this reply and the next.
async fn play_in_order(
    player: Arc<dyn AudioPlayer>,
    mut audio: mpsc::UnboundedReceiver<Audio>,
    failed: Arc<AtomicBool>,
) -> Vec<String> {
    let mut errors = Vec::new();
    while let Some(piece) = audio.recv().await {
        if failed.load(Ordering::Relaxed) {
            continue;
        }
        if let Err(error) = player.play(&piece).await {
            failed.store(true, Ordering::Relaxed);
            errors.push(format!(
                "could not play the audio, not playing any more: {error}"
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests;
