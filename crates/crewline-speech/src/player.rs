//! Playback: an [`AudioPlayer`] trait and ALSA's `aplay`.

use std::{path::PathBuf, process::Stdio};

use tokio::process::Command;

use crate::{Audio, SpeechError, probe_program, run_with_input};

/// Plays audio to the speakers.
///
/// `play` returns when the audio has played; dropping its future must stop the sound at
/// once (a barge-in does).
#[async_trait::async_trait]
pub trait AudioPlayer: Send + Sync {
    /// Plays `audio` to the end.
    async fn play(&self, audio: &Audio) -> Result<(), SpeechError>;
}

/// Plays audio with ALSA's `aplay` (Debian: `apt-get install alsa-utils`), the WAV piped to
/// its stdin; the process is killed when the play future is dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aplay {
    program: PathBuf,
}

impl Default for Aplay {
    fn default() -> Self {
        Self::new()
    }
}

impl Aplay {
    /// The `aplay` found on `PATH`.
    pub fn new() -> Self {
        Self {
            program: PathBuf::from("aplay"),
        }
    }

    /// A given `aplay` binary (or any program that plays a WAV read from stdin with
    /// `-q -`).
    pub fn with_program(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
        }
    }

    /// Checks that the program runs; returns its version line.
    pub async fn probe(&self) -> Result<String, SpeechError> {
        probe_program(&self.program, &["--version"]).await
    }
}

#[async_trait::async_trait]
impl AudioPlayer for Aplay {
    async fn play(&self, audio: &Audio) -> Result<(), SpeechError> {
        let program = self.program.display().to_string();
        let wav = audio.to_wav()?;
        let mut command = Command::new(&self.program);
        command
            .args(["-q", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // A barge-in drops the future: the audio must stop then, not at its end.
            .kill_on_drop(true);
        run_with_input(command, program, &wav).await?;
        Ok(())
    }
}
