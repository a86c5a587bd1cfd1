//! `crewline chat`: an interactive text client, like the reference's `agent-crew chat`.
//!
//! Each line typed is a user turn; the reply prints as it streams, with tool activity and
//! errors on lines of their own and the time to the first chunk after it. Input is read while
//! a reply streams, so the caller can barge in: `/interrupt` (or, with barge-in on, any line)
//! sends `system.control.interrupt`. With `--voice` each reply is also spoken, sentence by
//! sentence, by `crewline-speech`'s [`Voice`].
//!
//! [`ChatArgs`] is the command line and [`run_cli`] runs it; the loop itself is [`run_chat`]
//! and [`run_voice_chat`], which read lines from a channel and write to any writer.

use std::{
    collections::VecDeque,
    io,
    io::{BufRead, IsTerminal, Write},
    path::PathBuf,
    time::Duration,
};

use crewline::protocol::{Caller, ConversationType};
use crewline_speech::{
    SpokenReply, Voice, VoiceConfig,
    voice::{VoiceError, VoiceRequest},
};
use serde_json::Value;
use tokio::sync::mpsc;

use crewline_testkit::platform::{
    CrewFrame, FrameTap, PlatformClient, PlatformConfig, PlatformError, TapDirection, TurnFrame,
};

use crate::render::{TurnPrinter, ms, voice_note, voice_report};

/// How long the idle loop waits for out-of-turn frames before looking at input again; only
/// bounds a wait, nothing is polled on this period.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// The prompt shown while `chat` waits for a line typed at a terminal.
pub const PROMPT: &str = "you> ";

/// The help shown by `/help`.
pub const HELP: &str = "Type a message and press Enter. While a reply streams, /interrupt \
barges in (so does typing a new message when barge-in is on). /quit or end of input leaves.";

/// How the chat loop behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatOptions {
    /// A line typed while a reply streams interrupts it and becomes the next turn (a person
    /// at a terminal); otherwise such lines wait for the reply to end (a piped script), and
    /// only `/interrupt` interrupts.
    pub barge_in: bool,
    /// Write each input line back as `you> …` (useful when input is not a terminal).
    pub echo_input: bool,
    /// Show a `you> ` prompt while waiting for the next line (a person at a terminal).
    pub prompt: bool,
    /// Turn stdin's terminal echo off while a reply streams, and show a line typed then as
    /// `you> …` of its own once sent (not inside the agent's line); `crewline chat` at a
    /// terminal.
    pub hide_typing_during_reply: bool,
}

impl Default for ChatOptions {
    fn default() -> Self {
        Self {
            barge_in: true,
            echo_input: false,
            prompt: false,
            hide_typing_during_reply: false,
        }
    }
}

impl ChatOptions {
    /// The options for a person at a terminal (`interactive`: barge-in and a prompt) or for
    /// piped input (lines wait for the reply and are echoed); `barge_in` overrides the
    /// default when given.
    pub fn for_input(interactive: bool, barge_in: Option<bool>) -> Self {
        Self {
            barge_in: barge_in.unwrap_or(interactive),
            echo_input: !interactive,
            prompt: interactive,
            // Only `run_cli` touches the real terminal.
            hide_typing_during_reply: false,
        }
    }
}

/// Why the chat ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatEnd {
    /// `/quit`.
    Quit,
    /// The input ended.
    EndOfInput,
    /// The crew ended or transferred the call.
    HandedOff,
}

/// What a chat session did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatOutcome {
    /// Why it ended.
    pub end: ChatEnd,
    /// How many user turns ran.
    pub turns: usize,
    /// How many of them were interrupted.
    pub interrupted: usize,
}

/// Why the chat failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChatError {
    /// The call failed.
    #[error(transparent)]
    Platform(#[from] PlatformError),
    /// Writing the output failed.
    #[error("could not write the output")]
    Io(#[from] io::Error),
    /// `--voice` could not be set up.
    #[error(transparent)]
    Voice(#[from] VoiceError),
    /// The `--record` file could not be written.
    #[error("could not write the recording {}", path.display())]
    Record {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// The largest recording `--record` writes, in bytes: what `crewline eval --from-recording`
/// reads. Frames past it are not recorded (the chat says so at the end).
pub const MAX_RECORDING_BYTES: u64 = crewline_eval::replay::MAX_RECORDING_BYTES;

/// A call recorded as it goes (`crewline chat --record FILE.jsonl`), in the playground's
/// format: one frame a line, `{"t": ms since the recording started, "dir": "in"|"out",
/// "frame": {...}}`, so `crewline eval --from-recording` turns it into a scenario.
#[derive(Debug, Clone)]
pub struct Recording {
    path: PathBuf,
    state: std::sync::Arc<std::sync::Mutex<RecordingState>>,
}

#[derive(Debug)]
struct RecordingState {
    writer: io::BufWriter<std::fs::File>,
    started: std::time::Instant,
    bytes: u64,
    frames: u64,
    /// Frames left out because the file reached [`MAX_RECORDING_BYTES`].
    dropped: u64,
    /// The first write that failed.
    error: Option<io::Error>,
}

/// What a finished recording holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordingSummary {
    /// Frames written.
    pub frames: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Frames left out past [`MAX_RECORDING_BYTES`].
    pub dropped: u64,
}

impl Recording {
    /// Creates (or empties) the file at `path`; the clock of its `t` starts now.
    pub fn create(path: impl Into<PathBuf>) -> Result<Self, ChatError> {
        let path = path.into();
        let file = std::fs::File::create(&path).map_err(|source| ChatError::Record {
            path: path.clone(),
            source,
        })?;
        Ok(Self {
            path,
            state: std::sync::Arc::new(std::sync::Mutex::new(RecordingState {
                writer: io::BufWriter::new(file),
                started: std::time::Instant::now(),
                bytes: 0,
                frames: 0,
                dropped: 0,
                error: None,
            })),
        })
    }

    /// The file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The tap that writes each frame of a call to the file (see
    /// [`PlatformClient::connect_tapped`]).
    pub fn tap(&self) -> FrameTap {
        let state = std::sync::Arc::clone(&self.state);
        FrameTap::new(move |direction, bytes| {
            let Ok(mut state) = state.lock() else { return };
            state.write(direction, bytes);
        })
    }

    /// Flushes the file; what it holds, or the first write that failed.
    pub fn finish(self) -> Result<RecordingSummary, ChatError> {
        let fail = |source| ChatError::Record {
            path: self.path.clone(),
            source,
        };
        let mut state = self
            .state
            .lock()
            .map_err(|_| fail(io::Error::other("a writer of the recording panicked")))?;
        if let Some(error) = state.error.take() {
            return Err(fail(error));
        }
        state.writer.flush().map_err(fail)?;
        Ok(RecordingSummary {
            frames: state.frames,
            bytes: state.bytes,
            dropped: state.dropped,
        })
    }
}

impl RecordingState {
    fn write(&mut self, direction: TapDirection, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        // The protocol's frames are JSON; anything else is kept as its text.
        let frame: Value = serde_json::from_slice(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()));
        let t = self.started.elapsed().as_secs_f64() * 1000.0;
        let line = serde_json::json!({
            "t": (t * 10.0).round() / 10.0,
            "dir": match direction {
                TapDirection::In => "in",
                TapDirection::Out => "out",
            },
            "frame": frame,
        })
        .to_string();
        let len = line.len() as u64 + 1;
        if self.bytes + len > MAX_RECORDING_BYTES {
            self.dropped += 1;
            return;
        }
        match writeln!(self.writer, "{line}") {
            Ok(()) => {
                self.bytes += len;
                self.frames += 1;
            }
            Err(error) => self.error = Some(error),
        }
    }
}

/// Connects as `config` says; with `recording`, every frame of the call is recorded to it.
pub async fn connect(
    config: PlatformConfig,
    recording: Option<&Recording>,
) -> Result<PlatformClient, ChatError> {
    Ok(match recording {
        Some(recording) => PlatformClient::connect_tapped(config, recording.tap()).await?,
        None => PlatformClient::connect(config).await?,
    })
}

/// The line `chat` ends with when it recorded the call.
pub fn recorded_note(path: &std::path::Path, summary: &RecordingSummary) -> String {
    let mut note = format!(
        "recorded {} frames to {} (crewline eval --from-recording {} turns it into a scenario)",
        summary.frames,
        path.display(),
        path.display()
    );
    if summary.dropped > 0 {
        note.push_str(&format!(
            "; {} frames past the {} MiB limit were left out",
            summary.dropped,
            MAX_RECORDING_BYTES / (1024 * 1024)
        ));
    }
    note
}

/// Reads `input` line by line on a thread of its own and hands the lines over a channel; the
/// channel closes at end of input.
///
/// A plain thread, not Tokio's stdin: a blocking read of a terminal cannot be cancelled, and
/// on a runtime thread it would hold up shutdown until the user pressed Enter.
pub fn spawn_line_reader(input: impl BufRead + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        for line in input.lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// What to do with one input line.
enum Command {
    Say(String),
    Interrupt,
    Quit,
    Help,
    Nothing,
}

fn parse(line: &str) -> Command {
    match line.trim() {
        "" => Command::Nothing,
        "/quit" | "/exit" | "/q" => Command::Quit,
        "/interrupt" | "/i" => Command::Interrupt,
        "/help" | "/?" => Command::Help,
        text => Command::Say(text.to_owned()),
    }
}

/// Runs the chat until `/quit`, end of input, or a hand-off, writing everything to `out`.
pub async fn run_chat<W: Write>(
    client: &mut PlatformClient,
    lines: mpsc::Receiver<String>,
    out: W,
    options: ChatOptions,
) -> Result<ChatOutcome, ChatError> {
    chat_loop(client, lines, out, options, None).await
}

/// [`run_chat`], speaking each reply with `voice` as a voice platform would: sentence by
/// sentence while it streams, with the time to first sentence and to first audio after each
/// turn. Input while the agent speaks (with barge-in on, any line; else `/interrupt`) stops
/// the audio at once and sends an interrupt.
pub async fn run_voice_chat<W: Write>(
    client: &mut PlatformClient,
    lines: mpsc::Receiver<String>,
    out: W,
    options: ChatOptions,
    voice: &mut Voice,
) -> Result<ChatOutcome, ChatError> {
    chat_loop(client, lines, out, options, Some(voice)).await
}

/// What a line typed while the agent talks does.
enum WhileBusy {
    /// Nothing now (queued for later, or empty).
    Wait,
    /// Stop the agent (barge-in).
    Interrupt,
    /// Stop the agent and leave.
    InterruptAndQuit,
}

/// Sorts a line typed while a reply streams or is spoken; lines for later go to `queued`.
fn while_busy(line: String, options: ChatOptions, queued: &mut VecDeque<String>) -> WhileBusy {
    match parse(&line) {
        Command::Nothing => WhileBusy::Wait,
        Command::Help => {
            queued.push_back(line);
            WhileBusy::Wait
        }
        Command::Interrupt => WhileBusy::Interrupt,
        // A person leaving now; a script's /quit waits its turn.
        Command::Quit if options.barge_in => WhileBusy::InterruptAndQuit,
        Command::Quit => {
            queued.push_back(line);
            WhileBusy::Wait
        }
        Command::Say(text) => {
            queued.push_back(text);
            if options.barge_in {
                WhileBusy::Interrupt
            } else {
                WhileBusy::Wait
            }
        }
    }
}

async fn chat_loop<W: Write>(
    client: &mut PlatformClient,
    mut lines: mpsc::Receiver<String>,
    out: W,
    options: ChatOptions,
    mut voice: Option<&mut Voice>,
) -> Result<ChatOutcome, ChatError> {
    let mut printer = TurnPrinter::new(out);
    let mut queued: VecDeque<String> = VecDeque::new();
    let mut input_ended = false;
    let mut outcome = ChatOutcome {
        end: ChatEnd::EndOfInput,
        turns: 0,
        interrupted: 0,
    };
    loop {
        let line = match queued.pop_front() {
            Some(line) => line,
            None if input_ended => break,
            None => {
                if options.prompt {
                    printer.prompt(PROMPT)?;
                }
                tokio::select! {
                    line = lines.recv() => match line {
                        Some(line) => {
                            printer.prompt_answered();
                            line
                        }
                        None => {
                            input_ended = true;
                            continue;
                        }
                    },
                    // Speech or errors the crew sends between turns.
                    frame = client.recv_idle(IDLE_WAIT) => {
                        if let Some(frame) = frame? {
                            printer.crew_frame(&frame.frame)?;
                        }
                        if client.handoff().is_some() {
                            outcome.end = ChatEnd::HandedOff;
                            break;
                        }
                        continue;
                    }
                }
            }
        };
        let text = match parse(&line) {
            Command::Nothing => continue,
            Command::Quit => {
                outcome.end = ChatEnd::Quit;
                break;
            }
            Command::Help => {
                printer.line(HELP)?;
                continue;
            }
            Command::Interrupt => {
                client.send_interrupt()?;
                printer.line("(no reply is streaming; interrupt sent anyway)")?;
                continue;
            }
            Command::Say(text) => text,
        };
        if options.echo_input {
            printer.line(&format!("you> {text}"))?;
        }
        let mut turn = match client.user_turn(text) {
            Err(PlatformError::HandedOff) => {
                printer.line("(the agent has ended the call)")?;
                outcome.end = ChatEnd::HandedOff;
                break;
            }
            other => other?,
        };
        outcome.turns += 1;
        let mut speech = voice
            .as_deref_mut()
            .map(|voice| voice.start_reply(turn.sent_at()));
        let mut quit_after = false;
        // Dropped when the reply and its speech are over: echo is back for the prompt.
        let hidden = options
            .hide_typing_during_reply
            .then(|| crate::echo::EchoOff::new(std::io::stdin()))
            .filter(crate::echo::EchoOff::is_active);
        loop {
            tokio::select! {
                // Frames first: a reply that is already here is shown before reacting to input.
                biased;
                frame = turn.next() => match frame? {
                    Some(frame) => {
                        if let Some(speech) = speech.as_mut() {
                            speak_frame(speech, &frame);
                        }
                        printer.frame(&frame)?;
                    }
                    None => break,
                },
                line = lines.recv(), if !input_ended && !turn.is_interrupted() => match line {
                    None => input_ended = true,
                    Some(line) => {
                        if hidden.is_some() {
                            printer.line(&format!("you> {line}"))?;
                        }
                        let busy = while_busy(line, options, &mut queued);
                        if matches!(busy, WhileBusy::Interrupt | WhileBusy::InterruptAndQuit) {
                            turn.send_interrupt()?;
                            if let Some(speech) = speech.as_mut() {
                                speech.barge_in();
                            }
                        }
                        quit_after |= matches!(busy, WhileBusy::InterruptAndQuit);
                    }
                },
            }
        }
        let summary = turn.finish().await?;
        if summary.interrupt.is_some() {
            outcome.interrupted += 1;
        }
        printer.summary(&summary)?;
        if let (Some(mut speech), Some(voice)) = (speech, voice.as_deref_mut()) {
            // The audio lags the text: the agent may talk on after the reply's `end`, and
            // the caller may barge in on that too.
            let report = loop {
                tokio::select! {
                    biased;
                    report = speech.finished() => break report,
                    line = lines.recv(), if !input_ended => match line {
                        None => input_ended = true,
                        Some(line) => {
                            if hidden.is_some() {
                                printer.line(&format!("you> {line}"))?;
                            }
                            let busy = while_busy(line, options, &mut queued);
                            if matches!(busy, WhileBusy::Interrupt | WhileBusy::InterruptAndQuit)
                                && speech.is_speaking()
                            {
                                speech.barge_in();
                                client.send_interrupt()?;
                            }
                            quit_after |= matches!(busy, WhileBusy::InterruptAndQuit);
                        }
                    },
                }
            };
            printer.line(&voice_report(&report))?;
            voice.record(report);
        }
        drop(hidden);
        if client.handoff().is_some() {
            printer.line("(the agent has ended the call)")?;
            outcome.end = ChatEnd::HandedOff;
            break;
        }
        if quit_after {
            outcome.end = ChatEnd::Quit;
            break;
        }
    }
    Ok(outcome)
}

/// The banner shown when the chat starts.
pub fn banner(url: &str, connect_time: Duration) -> String {
    format!(
        "connected to {url} (ready after {}). {HELP}",
        ms(connect_time)
    )
}

/// Hands one frame of a turn to the reply being spoken: chunks are its text, a tool call
/// pauses it (what the model said before the call is spoken now), `agent.speak` is spoken as
/// it is, and `end` ends it.
fn speak_frame(speech: &mut SpokenReply, frame: &TurnFrame) {
    match &frame.frame {
        CrewFrame::Chunk { text } => speech.text(text, frame.elapsed),
        CrewFrame::ToolStart(_) => speech.pause(frame.elapsed),
        CrewFrame::Speak { text } => speech.speak(text, frame.elapsed),
        CrewFrame::End => speech.end(frame.elapsed),
        _ => {}
    }
}

/// `crewline chat`'s command line.
#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    /// The crew's WebSocket address.
    #[arg(long, default_value = "ws://127.0.0.1:8080/ws")]
    pub url: String,
    /// Shared secret, sent as `Authorization: Bearer <token>` (default: `CREWLINE_AUTH_TOKEN`,
    /// as the crew server and `demo` read it).
    #[arg(long, env = crewline_server::TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// The conversation type announced in `system.init`.
    #[arg(long = "type", default_value = "webcall", value_parser = parse_conversation_type)]
    pub conversation_type: ConversationType,
    /// A call variable, `key=value` (repeatable).
    #[arg(long = "var", value_parser = parse_var)]
    pub vars: Vec<(String, String)>,
    /// The caller's phone number (sent as `session_context.caller.user_number`).
    #[arg(long, value_name = "NUMBER")]
    pub caller: Option<String>,
    /// Tell the crew the agent may not be interrupted.
    #[arg(long)]
    pub not_interruptible: bool,
    /// Whether typing while a reply streams interrupts it (auto: when input is a terminal).
    #[arg(long, value_enum, default_value_t = BargeIn::Auto)]
    pub barge_in: BargeIn,
    /// The longest silence within a turn, in seconds.
    #[arg(long, default_value_t = 60)]
    pub frame_timeout_secs: u64,
    /// Speak the replies (espeak-ng) sentence by sentence as they stream, and report the time
    /// to first sentence and to first audio per turn.
    #[arg(long)]
    pub voice: bool,
    /// With --voice: write one WAV file per reply to this folder.
    #[arg(long, value_name = "DIR", requires = "voice")]
    pub out: Option<PathBuf>,
    /// With --voice: do not play the audio (only write it with --out).
    #[arg(long, requires = "voice")]
    pub mute: bool,
    /// With --voice: the espeak-ng voice, e.g. en-us, hi, cmn.
    #[arg(long, value_name = "NAME", requires = "voice")]
    pub espeak_voice: Option<String>,
    /// Record the call to this file, one frame a line (the playground's JSONL; at most
    /// 16 MiB): `crewline eval --from-recording FILE` turns it into a scenario.
    #[arg(long, value_name = "FILE.jsonl")]
    pub record: Option<PathBuf>,
}

/// Whether typing while a reply streams interrupts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BargeIn {
    /// When input is a terminal.
    Auto,
    /// Always.
    On,
    /// Never (only `/interrupt` interrupts).
    Off,
}

impl ChatArgs {
    /// The platform client's configuration the flags ask for.
    pub fn platform_config(&self) -> PlatformConfig {
        let mut config = PlatformConfig::new(self.url.clone());
        config.token = self.token.clone();
        config.conversation_type = self.conversation_type;
        config.interruptible = !self.not_interruptible;
        config.caller = self.caller.clone().map(|number| Caller {
            user_number: Some(number),
            agent_number: None,
            direction: Some(
                match self.conversation_type {
                    ConversationType::TelephonyOutbound => "outbound",
                    _ => "inbound",
                }
                .to_owned(),
            ),
            call_id: None,
            extra: serde_json::Map::new(),
        });
        config.timeouts.frame = Duration::from_secs(self.frame_timeout_secs.max(1));
        for (key, value) in &self.vars {
            config
                .initial_variables
                .insert(key.clone(), Value::String(value.clone()));
        }
        config
    }
}

fn parse_conversation_type(text: &str) -> Result<ConversationType, String> {
    serde_json::from_value(Value::String(text.to_owned())).map_err(|_| {
        "expected one of telephonyInbound, telephonyOutbound, chat, webcall, supervisor_agent"
            .to_owned()
    })
}

pub(crate) fn parse_var(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("expected key=value, got `{text}`")),
    }
}

/// Runs `crewline chat`: connects, then chats over stdin (a prompt and barge-in when it is a
/// terminal) until `/quit`, end of input or a hand-off, writing to `out`.
pub async fn run_cli(args: ChatArgs, mut out: impl Write) -> Result<ChatOutcome, ChatError> {
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        crate::echo::restore_on_ctrl_c();
    }
    let mut options = ChatOptions::for_input(
        interactive,
        match args.barge_in {
            BargeIn::Auto => None,
            BargeIn::On => Some(true),
            BargeIn::Off => Some(false),
        },
    );
    options.hide_typing_during_reply = interactive;
    let started = tokio::time::Instant::now();
    let recording = args.record.as_ref().map(Recording::create).transpose()?;
    let mut client = connect(args.platform_config(), recording.as_ref()).await?;
    writeln!(out, "{}", banner(&args.url, started.elapsed()))?;
    let lines = spawn_line_reader(std::io::BufReader::new(std::io::stdin()));
    let outcome = if args.voice {
        let request = VoiceRequest {
            out_dir: args.out,
            play: !args.mute,
            espeak_voice: args.espeak_voice,
        };
        let writing_wavs = request.out_dir.is_some();
        let (config, notes) = VoiceConfig::detect(request).await?;
        for note in notes {
            writeln!(out, "{}", voice_note(&note, writing_wavs))?;
        }
        let mut voice = Voice::new(config);
        run_voice_chat(&mut client, lines, &mut out, options, &mut voice).await?
    } else {
        run_chat(&mut client, lines, &mut out, options).await?
    };
    tracing::debug!(?outcome, stats = ?client.stats(), "chat ended");
    if let Err(error) = client.close().await {
        tracing::debug!(error = %crewline::types::ErrorChain(&error), "closing the call");
    }
    if let Some(recording) = recording {
        let path = recording.path().to_owned();
        let summary = recording.finish()?;
        writeln!(out, "{}", recorded_note(&path, &summary))?;
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_gets_a_prompt_and_barge_in_and_piped_input_is_echoed_instead() {
        let terminal = ChatOptions::for_input(true, None);
        assert!(terminal.prompt && terminal.barge_in && !terminal.echo_input);
        let piped = ChatOptions::for_input(false, None);
        assert!(!piped.prompt && !piped.barge_in && piped.echo_input);
        assert!(ChatOptions::for_input(false, Some(true)).barge_in);
    }
}
