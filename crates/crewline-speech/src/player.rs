//! Playback: an [`AudioPlayer`] trait and ALSA's `aplay`.

use std::{path::PathBuf, process::Stdio};

use tokio::{io::AsyncWriteExt, process::Command};

use crate::{Audio, SpeechError, probe_program, spawn_error};

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
        let mut child = Command::new(&self.program)
            .args(["-q", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| spawn_error(&program, source))?;
        let mut stdin = child.stdin.take();
        let write = async move {
            if let Some(stdin) = stdin.as_mut() {
                stdin.write_all(&wav).await?;
            }
            drop(stdin);
            Ok::<(), std::io::Error>(())
        };
        let (written, output) = tokio::join!(write, child.wait_with_output());
        let io_error = |source| SpeechError::Io {
            program: program.clone(),
            source,
        };
        let output = output.map_err(io_error)?;
        if !output.status.success() {
            return Err(SpeechError::Failed {
                program,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        written.map_err(io_error)
    }
}
