//! Writes a turn as a person reads it: the reply as it streams, tool activity and errors on
//! lines of their own, then the timings. Shared by `chat` and `demo`.

use std::{io, io::Write, time::Duration};

use crewline::protocol::Severity;
use crewline_speech::{VoiceReport, voice::VoiceNote};
use serde_json::Value;

use crewline_testkit::platform::{CrewFrame, InterruptReport, ToolLog, TurnFrame, TurnSummary};

/// The longest tool response shown on a `[tool]` line; the rest is elided.
const MAX_SHOWN_RESPONSE: usize = 160;

/// Prints one turn's frames as they arrive, to any writer.
#[derive(Debug)]
pub struct TurnPrinter<W: Write> {
    out: W,
    /// The reply's text is mid-line (no newline written after the last chunk yet).
    mid_line: bool,
    /// A prompt is shown and not answered: other output starts on a line of its own.
    prompt_open: bool,
}

impl<W: Write> TurnPrinter<W> {
    /// A printer writing to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            mid_line: false,
            prompt_open: false,
        }
    }

    /// The writer, back.
    pub fn into_inner(self) -> W {
        self.out
    }

    /// The writer, for other output between turns.
    pub fn writer(&mut self) -> &mut W {
        &mut self.out
    }

    /// Writes a line of its own (ending the reply's line first).
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        self.break_line()?;
        writeln!(self.out, "{text}")?;
        self.out.flush()
    }

    /// Shows `prompt` (e.g. `you> `) with no newline, for the user to type after.
    pub fn prompt(&mut self, prompt: &str) -> io::Result<()> {
        self.break_line()?;
        write!(self.out, "{prompt}")?;
        self.prompt_open = true;
        self.out.flush()
    }

    /// The user answered the prompt: their Enter ended its line.
    pub fn prompt_answered(&mut self) {
        self.prompt_open = false;
    }

    fn break_line(&mut self) -> io::Result<()> {
        // Both at once cannot happen: a prompt is shown only after a line break.
        if std::mem::take(&mut self.mid_line) | std::mem::take(&mut self.prompt_open) {
            writeln!(self.out)?;
        }
        Ok(())
    }

    /// Writes one frame of a turn; chunks are written as they are, flushed at once.
    pub fn frame(&mut self, frame: &TurnFrame) -> io::Result<()> {
        self.crew_frame(&frame.frame)
    }

    /// Writes one crew frame (in a turn or out of one).
    pub fn crew_frame(&mut self, frame: &CrewFrame) -> io::Result<()> {
        match frame {
            CrewFrame::Chunk { text } => {
                if !self.mid_line {
                    self.break_line()?;
                    write!(self.out, "agent> ")?;
                    self.mid_line = true;
                }
                write!(self.out, "{text}")?;
                self.out.flush()
            }
            CrewFrame::End => self.break_line(),
            // Shown when they end, with their result and latency, on one line.
            CrewFrame::Start { .. } | CrewFrame::ToolStart(_) | CrewFrame::Ready => Ok(()),
            CrewFrame::ToolEnd(log) => {
                let response = log.response.as_ref().map_or_else(String::new, compact);
                self.line(&format!(
                    "[tool] {} {} → {}{}",
                    log.name,
                    compact(&log.arguments),
                    elide(&response, MAX_SHOWN_RESPONSE),
                    latency(log)
                ))
            }
            CrewFrame::ToolError(log) => self.line(&format!(
                "[tool] {} {} ✗ {}{}",
                log.name,
                compact(&log.arguments),
                log.error.as_deref().unwrap_or("failed"),
                latency(log)
            )),
            CrewFrame::Log { name, payload } => self.line(&format!(
                "[log] {name} {}",
                elide(
                    &compact(&Value::Object(payload.clone())),
                    MAX_SHOWN_RESPONSE
                )
            )),
            CrewFrame::Speak { text } => self.line(&format!("[speak] {text}")),
            CrewFrame::EndCall => self.line("[end_call] the agent hung up"),
            CrewFrame::Transfer(transfer) => self.line(&format!(
                "[transfer] to {} ({})",
                transfer.transfer_call_number,
                match transfer.transfer_options.kind {
                    crewline::protocol::TransferType::ColdTransfer => "cold",
                    crewline::protocol::TransferType::WarmTransfer => "warm",
                }
            )),
            CrewFrame::Error(error) => {
                let severity = match error.severity {
                    Severity::Fatal => "fatal",
                    Severity::Warning => "warning",
                };
                self.line(&format!("[error {severity}] {}", error.message))
            }
            CrewFrame::MuteUser => self.line("[control] mute user"),
            CrewFrame::UnmuteUser => self.line("[control] unmute user"),
            CrewFrame::AgentInterrupt => self.line("[control] the agent asks to stop speaking"),
            // `CrewFrame` (now in crewline-testkit) is non-exhaustive: a later kind of frame
            // is shown by its wire type.
            other => self.line(&format!("[{}]", other.wire_type())),
        }
    }

    /// Writes the turn's timings (and the barge-in report, if it was interrupted).
    pub fn summary(&mut self, summary: &TurnSummary) -> io::Result<()> {
        self.break_line()?;
        let mut parts = Vec::new();
        match summary.time_to_first_chunk {
            Some(ttfc) => parts.push(format!("first chunk {}", ms(ttfc))),
            None => parts.push("no text".to_owned()),
        }
        if let Some(end) = summary.time_to_end {
            parts.push(format!("end {}", ms(end)));
        }
        parts.push(plural(summary.chunks, "chunk"));
        if !summary.tools.is_empty() {
            parts.push(plural(summary.tools.len(), "tool call"));
        }
        writeln!(self.out, "       ({})", parts.join(", "))?;
        if let Some(report) = &summary.interrupt {
            writeln!(self.out, "       {}", interrupt_line(report))?;
        }
        self.out.flush()
    }
}

/// One line about a barge-in.
pub fn interrupt_line(report: &InterruptReport) -> String {
    if report.after_end {
        return "[barge-in] the reply had already ended; nothing to interrupt".to_owned();
    }
    let mut line = format!("[barge-in] interrupt at {}", ms(report.sent_after));
    match report.time_to_end {
        Some(end) => line.push_str(&format!(", end {} later", ms(end))),
        None => line.push_str(", the request was dropped before it started"),
    }
    match report.time_to_last_chunk {
        Some(last) => line.push_str(&format!(
            ", last chunk {} after it ({} in flight)",
            ms(last),
            report.chunks_after_interrupt + report.leaked_chunks.len()
        )),
        None => line.push_str(", no chunk after it"),
    }
    if report.leaked_chunks.is_empty() {
        line.push_str(", no leaked chunks");
    } else {
        line.push_str(&format!(
            ", {} LEAKED chunk(s) after end: {:?}",
            report.leaked_chunks.len(),
            report.leaked_chunks
        ));
    }
    line
}

/// The lines about a spoken reply: `       (voice: first sentence 41 ms, ...)`, then one
/// `[voice error]` line per error.
pub fn voice_report(report: &VoiceReport) -> String {
    let mut line = format!("       (voice: {report})");
    for error in &report.errors {
        line.push_str(&format!("\n[voice error] {error}"));
    }
    line
}

/// A line about the voice set-up, naming the `chat` flag that changes it where one does;
/// `writing_wavs` is whether `--out` was given.
pub fn voice_note(note: &VoiceNote, writing_wavs: bool) -> String {
    match note {
        VoiceNote::Muted => format!("{note} (--mute)"),
        VoiceNote::NoPlayer(_) if !writing_wavs => {
            format!("{note}; use --out DIR to keep the audio as WAV files")
        }
        other => other.to_string(),
    }
}

/// A duration as whole milliseconds (tenths below 10 ms, where they matter).
pub fn ms(duration: Duration) -> String {
    let millis = duration.as_secs_f64() * 1e3;
    if millis < 10.0 {
        format!("{millis:.1} ms")
    } else {
        format!("{millis:.0} ms")
    }
}

fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

fn latency(log: &ToolLog) -> String {
    match log.latency_ms {
        Some(ms) => format!(" {ms:.0} ms"),
        None => String::new(),
    }
}

fn compact(value: &Value) -> String {
    match value {
        Value::Null => "{}".to_owned(),
        other => other.to_string(),
    }
}

fn elide(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(max_chars).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frame(frame: CrewFrame) -> TurnFrame {
        TurnFrame {
            elapsed: Duration::ZERO,
            frame,
        }
    }

    #[test]
    fn tool_lines_interrupt_the_reply_and_it_resumes_with_its_prefix() {
        let mut printer = TurnPrinter::new(Vec::new());
        let end = ToolLog {
            name: "get_weather".into(),
            arguments: json!({"location": "Paris"}),
            response: Some(json!({"temperature": 18})),
            latency_ms: Some(301.2),
            ..ToolLog::default()
        };
        for f in [
            CrewFrame::Chunk {
                text: "Let me check.".into(),
            },
            CrewFrame::ToolEnd(end),
            CrewFrame::Chunk {
                text: "It is 18.".into(),
            },
            CrewFrame::End,
        ] {
            printer.frame(&frame(f)).unwrap();
        }
        let text = String::from_utf8(printer.into_inner()).unwrap();
        assert_eq!(
            text,
            "agent> Let me check.\n\
             [tool] get_weather {\"location\":\"Paris\"} → {\"temperature\":18} 301 ms\n\
             agent> It is 18.\n"
        );
    }

    #[test]
    fn output_while_a_prompt_waits_starts_on_a_line_of_its_own() {
        let mut printer = TurnPrinter::new(Vec::new());
        printer.prompt("you> ").unwrap();
        // The crew speaks between turns, before the user typed anything.
        printer
            .crew_frame(&CrewFrame::Chunk {
                text: "Still there?".into(),
            })
            .unwrap();
        printer.crew_frame(&CrewFrame::End).unwrap();
        printer.prompt("you> ").unwrap();
        // The user typed a line: the terminal's echo of Enter ended the prompt's line.
        printer.prompt_answered();
        printer.line("[tool] ...").unwrap();
        let text = String::from_utf8(printer.into_inner()).unwrap();
        assert_eq!(text, "you> \nagent> Still there?\nyou> [tool] ...\n");
    }

    #[test]
    fn voice_lines_name_the_chat_flags_and_list_the_errors() {
        assert_eq!(
            voice_note(&VoiceNote::Muted, false),
            "voice: not playing the audio (--mute)"
        );
        let no_player = || {
            VoiceNote::NoPlayer(crewline_speech::SpeechError::NotInstalled {
                program: "aplay".into(),
            })
        };
        assert!(
            voice_note(&no_player(), false)
                .ends_with("use --out DIR to keep the audio as WAV files")
        );
        assert!(!voice_note(&no_player(), true).contains("--out"));
        let report = VoiceReport {
            time_to_first_sentence: Some(Duration::from_millis(41)),
            sentences: vec!["Hi.".into()],
            text_only: true,
            errors: vec!["the disk is full".into()],
            ..VoiceReport::default()
        };
        assert_eq!(
            voice_report(&report),
            "       (voice: first sentence 41 ms, 1 sentence, text only)\n[voice error] the disk is full"
        );
    }

    #[test]
    fn long_responses_are_elided_and_short_durations_keep_a_decimal() {
        assert_eq!(elide("abcdef", 3), "abc…");
        assert_eq!(ms(Duration::from_micros(2500)), "2.5 ms");
        assert_eq!(ms(Duration::from_millis(301)), "301 ms");
    }
}
