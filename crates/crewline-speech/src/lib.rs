//! Speech for local voice runs: what a voice platform does with a crew's streamed reply.
//!
//! - [`SentenceAggregator`]: streamed text chunks in, complete sentences out, as soon as each
//!   is complete (abbreviations, numbers, ellipses and non-Latin punctuation handled; the
//!   result does not depend on where the chunks were cut).
//! - [`TextToSpeech`]: one sentence in, audio out; [`EspeakNg`] runs the `espeak-ng` program.
//! - [`AudioPlayer`]: plays audio; [`Aplay`] pipes it to ALSA's `aplay`.
//! - [`Audio`] and [`ReplyRecording`]: PCM audio, WAV decoding, and one WAV file per reply.
//! - [`Voice`]: all of it for a streamed reply: sentences to the engine while the reply still
//!   streams, audio played in order, one WAV per reply, time to first sentence and to first
//!   audio, and a barge-in that stops it at once ([`voice`]; `crewline chat --voice` runs it).
//!
//! Synthesis and playback run child processes that are killed when their future is dropped,
//! so a caller who barges in silences the agent by dropping the future.
//!
//! ```
//! use crewline_speech::SentenceAggregator;
//!
//! let mut sentences = SentenceAggregator::new();
//! assert_eq!(sentences.push("Dr. Smith is in. He'll see"), ["Dr. Smith is in."]);
//! assert_eq!(sentences.push(" you now."), Vec::<String>::new());
//! // End of the turn: what is left.
//! assert_eq!(sentences.flush().as_deref(), Some("He'll see you now."));
//! ```

mod audio;
mod espeak;
mod player;
pub mod sentence;
pub mod voice;

use std::path::PathBuf;

pub use audio::{Audio, AudioFormat, ReplyRecording};
pub use espeak::EspeakNg;
pub use player::{Aplay, AudioPlayer};
pub use sentence::SentenceAggregator;
pub use voice::{SpokenReply, Voice, VoiceConfig, VoiceReport};

/// Turns one sentence into audio.
///
/// Dropping the returned future must stop the synthesis at once (a barge-in does).
#[async_trait::async_trait]
pub trait TextToSpeech: Send + Sync {
    /// Synthesizes `text` (one sentence).
    async fn synthesize(&self, text: &str) -> Result<Audio, SpeechError>;

    /// A short name for reports, e.g. `espeak-ng 1.51`.
    fn name(&self) -> String;
}

/// Why speech failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpeechError {
    /// The program is not installed (not found on `PATH`).
    #[error("`{program}` is not installed (not found on PATH)")]
    NotInstalled {
        /// The program.
        program: String,
    },
    /// The program could not be started or talked to.
    #[error("could not run `{program}`")]
    Io {
        /// The program.
        program: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The program ran and failed.
    #[error("`{program}` failed ({status}): {stderr}")]
    Failed {
        /// The program.
        program: String,
        /// How it exited.
        status: String,
        /// What it wrote to stderr (trimmed).
        stderr: String,
    },
    /// The audio is not a WAV file `hound` can read.
    #[error("invalid WAV audio")]
    Wav {
        /// The decoder's error.
        #[source]
        source: hound::Error,
    },
    /// The WAV file is valid but not 8- or 16-bit integer PCM.
    #[error("unsupported WAV format: {detail}")]
    UnsupportedFormat {
        /// What the format is.
        detail: String,
    },
    /// The audio has more samples than a WAV file's header can count.
    #[error("{samples} samples are more than a WAV file can hold ({max} at most)")]
    TooLong {
        /// How many samples the audio has.
        samples: usize,
        /// The most a WAV file holds.
        max: u32,
    },
    /// Sentences of one reply came in different formats, so they cannot be joined.
    #[error("audio format changed within a reply: {expected:?} then {found:?}")]
    FormatMismatch {
        /// The reply's format so far.
        expected: AudioFormat,
        /// The new sentence's format.
        found: AudioFormat,
    },
    /// Writing a WAV file failed.
    #[error("could not write {}", path.display())]
    WriteWav {
        /// The file.
        path: PathBuf,
        /// The encoder's error.
        #[source]
        source: hound::Error,
    },
}

/// Spawns `command` (its stdin piped), feeds it `input` and returns its stdout once it has
/// exited successfully; a failed exit is [`SpeechError::Failed`] with its stderr.
///
/// The input is written while the output is read, so neither pipe can fill up and stall;
/// closing stdin afterwards is the program's end of input. The command should be
/// `kill_on_drop`, so that dropping this future (a barge-in) stops the program at once.
async fn run_with_input(
    mut command: tokio::process::Command,
    program: String,
    input: &[u8],
) -> Result<Vec<u8>, SpeechError> {
    use tokio::io::AsyncWriteExt;

    let mut child = command
        .spawn()
        .map_err(|source| spawn_error(&program, source))?;
    let mut stdin = child.stdin.take();
    let write = async move {
        if let Some(stdin) = stdin.as_mut() {
            stdin.write_all(input).await?;
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
    written.map_err(io_error)?;
    Ok(output.stdout)
}

/// Runs `program` with `args` and returns its stdout, for version probes.
async fn probe_program(program: &std::path::Path, args: &[&str]) -> Result<String, SpeechError> {
    let name = program.display().to_string();
    let output = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| spawn_error(&name, source))?;
    if !output.status.success() {
        return Err(SpeechError::Failed {
            program: name,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// A spawn error, told apart: a missing program is not an I/O failure to a user.
fn spawn_error(program: &str, source: std::io::Error) -> SpeechError {
    if source.kind() == std::io::ErrorKind::NotFound {
        SpeechError::NotInstalled {
            program: program.to_owned(),
        }
    } else {
        SpeechError::Io {
            program: program.to_owned(),
            source,
        }
    }
}
