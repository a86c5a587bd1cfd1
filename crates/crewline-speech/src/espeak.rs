//! The espeak-ng engine: one `espeak-ng --stdout` process per sentence.

use std::{path::PathBuf, process::Stdio};

use tokio::process::Command;

use crate::{Audio, SpeechError, TextToSpeech, probe_program, run_with_input};

/// Text to speech with the `espeak-ng` program (Debian: `apt-get install espeak-ng`).
///
/// Each sentence runs `espeak-ng --stdout` with the text on stdin (so a sentence starting
/// with `-` is not read as an option) and decodes the WAV it writes. The process is killed
/// when the synthesis future is dropped.
///
/// # Examples
///
/// ```
/// use crewline_speech::{EspeakNg, SpeechError, TextToSpeech};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let engine = EspeakNg::new().voice("en-gb").words_per_minute(160);
/// match engine.probe().await {
///     Ok(version) => assert!(version.contains("eSpeak")), // installed: speak with it
///     Err(error) => assert!(matches!(error, SpeechError::NotInstalled { .. })), // text only
/// }
///
/// // A program that is not there is told apart from one that fails.
/// let missing = EspeakNg::with_program("/nonexistent/espeak-ng");
/// assert!(matches!(missing.synthesize("Hi.").await, Err(SpeechError::NotInstalled { .. })));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EspeakNg {
    program: PathBuf,
    voice: Option<String>,
    words_per_minute: Option<u32>,
}

impl Default for EspeakNg {
    fn default() -> Self {
        Self::new()
    }
}

impl EspeakNg {
    /// The `espeak-ng` found on `PATH`, with its default voice and speed.
    pub fn new() -> Self {
        Self::with_program("espeak-ng")
    }

    /// A given `espeak-ng` binary.
    pub fn with_program(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            voice: None,
            words_per_minute: None,
        }
    }

    /// Speaks with `voice` (espeak-ng's `-v`, e.g. `en-us`, `hi`, `cmn`).
    #[must_use]
    pub fn voice(mut self, voice: impl Into<String>) -> Self {
        self.voice = Some(voice.into());
        self
    }

    /// Speaks at `words_per_minute` (espeak-ng's `-s`; its default is 175).
    #[must_use]
    pub fn words_per_minute(mut self, words_per_minute: u32) -> Self {
        self.words_per_minute = Some(words_per_minute);
        self
    }

    /// Checks that the program runs; returns its version line.
    pub async fn probe(&self) -> Result<String, SpeechError> {
        probe_program(&self.program, &["--version"]).await
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        // -b 1: the text is UTF-8, whatever the locale says.
        command.args(["--stdout", "-b", "1"]);
        if let Some(voice) = &self.voice {
            command.args(["-v", voice]);
        }
        if let Some(wpm) = self.words_per_minute {
            command.args(["-s", &wpm.to_string()]);
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A barge-in drops the future: the voice must stop then, not at the sentence's end.
            .kill_on_drop(true);
        command
    }
}

#[async_trait::async_trait]
impl TextToSpeech for EspeakNg {
    async fn synthesize(&self, text: &str) -> Result<Audio, SpeechError> {
        let program = self.program.display().to_string();
        // The trailing newline ends espeak-ng's last line of text.
        let input = format!("{text}\n");
        let wav = run_with_input(self.command(), program, input.as_bytes()).await?;
        Audio::from_wav(&wav)
    }

    fn name(&self) -> String {
        match &self.voice {
            Some(voice) => format!("espeak-ng ({voice})"),
            None => "espeak-ng".to_owned(),
        }
    }
}
