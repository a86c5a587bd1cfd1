//! PCM audio, WAV decoding and encoding (with `hound`), and the recording of a whole reply.

use std::{io::Cursor, path::Path, time::Duration};

use crate::SpeechError;

/// The format of PCM audio: 16-bit signed samples, interleaved by channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AudioFormat {
    /// Samples per second, per channel.
    pub sample_rate: u32,
    /// Channels (1 for mono).
    pub channels: u16,
}

impl AudioFormat {
    /// Mono audio at `sample_rate` Hz.
    pub fn mono(sample_rate: u32) -> Self {
        Self {
            sample_rate,
            channels: 1,
        }
    }

    fn wav_spec(self) -> hound::WavSpec {
        hound::WavSpec {
            channels: self.channels,
            sample_rate: self.sample_rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        }
    }
}

/// A piece of synthesized speech: 16-bit PCM samples and their format.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use crewline_speech::{Audio, AudioFormat};
///
/// let tone: Vec<i16> = (0..8_000).map(|i| if i % 20 < 10 { 8_000 } else { -8_000 }).collect();
/// let audio = Audio::new(AudioFormat::mono(16_000), tone);
/// assert_eq!(audio.duration(), Duration::from_millis(500));
///
/// let wav = audio.to_wav()?;
/// assert_eq!(&wav[..4], b"RIFF");
/// assert_eq!(Audio::from_wav(&wav)?, audio);
/// assert!(Audio::from_wav(b"not a wav").is_err());
/// # Ok::<(), crewline_speech::SpeechError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audio {
    /// The samples' format.
    pub format: AudioFormat,
    /// The samples, interleaved by channel.
    pub samples: Vec<i16>,
}

impl Audio {
    /// Audio of `samples` in `format`.
    pub fn new(format: AudioFormat, samples: Vec<i16>) -> Self {
        Self { format, samples }
    }

    /// How long the audio plays.
    pub fn duration(&self) -> Duration {
        let frames = self.samples.len() as f64 / f64::from(self.format.channels.max(1));
        Duration::from_secs_f64(frames / f64::from(self.format.sample_rate.max(1)))
    }

    /// Decodes a WAV file of 8- or 16-bit integer PCM.
    ///
    /// A WAV written to a pipe (as `espeak-ng --stdout` does) cannot go back to fill in its
    /// lengths, so its header claims about 2 GiB of data; the lengths are corrected to what
    /// the bytes hold before `hound` reads them.
    pub fn from_wav(bytes: &[u8]) -> Result<Self, SpeechError> {
        let bytes = with_true_lengths(bytes);
        let mut reader = hound::WavReader::new(Cursor::new(bytes.as_ref()))
            .map_err(|source| SpeechError::Wav { source })?;
        let spec = reader.spec();
        if spec.sample_format != hound::SampleFormat::Int || spec.bits_per_sample > 16 {
            return Err(SpeechError::UnsupportedFormat {
                detail: format!(
                    "{}-bit {:?} samples (expected 8- or 16-bit integer PCM)",
                    spec.bits_per_sample, spec.sample_format
                ),
            });
        }
        let samples = reader
            .samples::<i16>()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| SpeechError::Wav { source })?;
        Ok(Self {
            format: AudioFormat {
                sample_rate: spec.sample_rate,
                channels: spec.channels,
            },
            samples,
        })
    }

    /// Encodes the audio as a 16-bit PCM WAV file.
    pub fn to_wav(&self) -> Result<Vec<u8>, SpeechError> {
        let mut bytes = Cursor::new(Vec::new());
        let mut writer = hound::WavWriter::new(&mut bytes, self.format.wav_spec())
            .map_err(|source| SpeechError::Wav { source })?;
        write_samples(&mut writer, &self.samples)?;
        writer
            .finalize()
            .map_err(|source| SpeechError::Wav { source })?;
        Ok(bytes.into_inner())
    }
}

/// The most 16-bit samples one WAV file holds: two bytes each, and the RIFF length (a u32)
/// also counts the 36 bytes of header after it.
const MAX_WAV_SAMPLES: u32 = (u32::MAX - 36) / 2;

fn write_samples<W: std::io::Write + std::io::Seek>(
    writer: &mut hound::WavWriter<W>,
    samples: &[i16],
) -> Result<(), SpeechError> {
    // The RIFF header counts the file's bytes in a u32, and hound panics on a count it cannot
    // hold, so audio too long for one WAV file is refused rather than truncated.
    let count = u32::try_from(samples.len())
        .ok()
        .filter(|&count| count <= MAX_WAV_SAMPLES)
        .ok_or(SpeechError::TooLong {
            samples: samples.len(),
            max: MAX_WAV_SAMPLES,
        })?;
    let mut samples_writer = writer.get_i16_writer(count);
    for &sample in samples {
        samples_writer.write_sample(sample);
    }
    samples_writer
        .flush()
        .map_err(|source| SpeechError::Wav { source })
}

/// Returns `bytes` with the RIFF and `data` chunk lengths clamped to the bytes present.
///
/// Only lengths that claim more than there is are changed, so a well-formed file is read as
/// it is.
fn with_true_lengths(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let read_u32 = |at: usize| -> Option<u32> {
        let field: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(field))
    };
    if bytes.len() < 12 || &bytes[0..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return bytes.into();
    }
    let mut fixed: Option<Vec<u8>> = None;
    let total = bytes.len();
    if read_u32(4).is_some_and(|len| len as usize > total - 8) {
        fixed.get_or_insert_with(|| bytes.to_vec())[4..8]
            .copy_from_slice(&((total - 8) as u32).to_le_bytes());
    }
    // Walk the chunks to `data`; every chunk before it must be whole.
    let mut at = 12;
    while let (Some(id), Some(len)) = (bytes.get(at..at + 4), read_u32(at + 4)) {
        let body = at + 8;
        if id == b"data" {
            if len as usize > total - body {
                fixed.get_or_insert_with(|| bytes.to_vec())[at + 4..at + 8]
                    .copy_from_slice(&((total - body) as u32).to_le_bytes());
            }
            break;
        }
        // Chunks are padded to an even length.
        at = body + len as usize + (len as usize & 1);
    }
    match fixed {
        Some(bytes) => bytes.into(),
        None => bytes.into(),
    }
}

/// The audio of one reply: its sentences' audio, one after the other, written as one WAV file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyRecording {
    format: Option<AudioFormat>,
    samples: Vec<i16>,
    sentences: usize,
}

impl ReplyRecording {
    /// An empty recording.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one sentence's audio; every sentence must have the first one's format.
    pub fn append(&mut self, audio: &Audio) -> Result<(), SpeechError> {
        match self.format {
            None => self.format = Some(audio.format),
            Some(format) if format != audio.format => {
                return Err(SpeechError::FormatMismatch {
                    expected: format,
                    found: audio.format,
                });
            }
            Some(_) => {}
        }
        self.samples.extend_from_slice(&audio.samples);
        self.sentences += 1;
        Ok(())
    }

    /// Whether no audio was appended.
    pub fn is_empty(&self) -> bool {
        self.sentences == 0
    }

    /// How many sentences' audio it holds.
    pub fn sentences(&self) -> usize {
        self.sentences
    }

    /// The recording so far as one piece of audio (`None` when empty).
    pub fn audio(&self) -> Option<Audio> {
        self.format
            .map(|format| Audio::new(format, self.samples.clone()))
    }

    /// Writes the recording to `path` as a 16-bit PCM WAV file (an empty recording writes
    /// nothing and returns `Ok(false)`).
    pub fn write(&self, path: &Path) -> Result<bool, SpeechError> {
        let Some(format) = self.format else {
            return Ok(false);
        };
        let write_error = |source| SpeechError::WriteWav {
            path: path.to_path_buf(),
            source,
        };
        let mut writer = hound::WavWriter::create(path, format.wav_spec()).map_err(write_error)?;
        write_samples(&mut writer, &self.samples)?;
        writer.finalize().map_err(write_error)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(samples: usize) -> Audio {
        Audio::new(
            AudioFormat::mono(16_000),
            (0..samples).map(|i| ((i % 50) as i16 - 25) * 100).collect(),
        )
    }

    #[test]
    fn wav_round_trips() {
        let audio = tone(1600);
        let decoded = Audio::from_wav(&audio.to_wav().unwrap()).unwrap();
        assert_eq!(decoded, audio);
        assert_eq!(decoded.duration(), Duration::from_millis(100));
    }

    #[test]
    fn a_streamed_wav_header_with_placeholder_lengths_is_read_to_its_real_end() {
        let audio = tone(1000);
        let mut bytes = audio.to_wav().unwrap();
        // What espeak-ng --stdout writes: lengths it could not know.
        bytes[4..8].copy_from_slice(&0x7fff_f024u32.to_le_bytes());
        let data = bytes.windows(4).position(|w| w == b"data").unwrap();
        bytes[data + 4..data + 8].copy_from_slice(&0x7fff_f000u32.to_le_bytes());
        assert_eq!(Audio::from_wav(&bytes).unwrap(), audio);
    }

    #[test]
    fn garbage_and_float_wavs_are_clear_errors() {
        let error = Audio::from_wav(b"not a wav at all").unwrap_err();
        assert!(matches!(error, SpeechError::Wav { .. }), "{error}");

        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8000,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let mut bytes = Cursor::new(Vec::new());
        let mut writer = hound::WavWriter::new(&mut bytes, spec).unwrap();
        writer.write_sample(0.5f32).unwrap();
        writer.finalize().unwrap();
        let error = Audio::from_wav(bytes.get_ref()).unwrap_err();
        assert!(error.to_string().contains("32-bit"), "{error}");
    }

    #[test]
    fn a_recording_concatenates_sentences_and_rejects_a_format_change() {
        let mut recording = ReplyRecording::new();
        assert!(recording.is_empty());
        recording.append(&tone(100)).unwrap();
        recording.append(&tone(300)).unwrap();
        let error = recording
            .append(&Audio::new(AudioFormat::mono(22_050), vec![0; 10]))
            .unwrap_err();
        assert!(matches!(error, SpeechError::FormatMismatch { .. }));
        assert_eq!(recording.sentences(), 2);
        assert_eq!(recording.audio().unwrap().samples.len(), 400);
    }
}
