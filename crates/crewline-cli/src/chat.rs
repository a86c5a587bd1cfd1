//! `crewline chat`: an interactive text client, like the reference's `agent-crew chat`.
//!
//! Each line typed is a user turn; the reply prints as it streams, with tool activity and
//! errors on lines of their own and the time to the first chunk after it. Input is read while
//! a reply streams, so the caller can barge in: `/interrupt` (or, with barge-in on, any line)
//! sends `system.control.interrupt`.

use std::{collections::VecDeque, io, io::BufRead, io::Write, time::Duration};

use tokio::sync::mpsc;

use crate::{
    platform::{PlatformClient, PlatformError},
    render::{TurnPrinter, ms},
    voice::Voice,
};

/// How long the idle loop waits for out-of-turn frames before looking at input again; only
/// bounds a wait, nothing is polled on this period.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

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
}

impl Default for ChatOptions {
    fn default() -> Self {
        Self {
            barge_in: true,
            echo_input: false,
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
    #[error("could not write the output: {0}")]
    Io(#[from] io::Error),
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
                tokio::select! {
                    line = lines.recv() => match line {
                        Some(line) => line,
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
        loop {
            tokio::select! {
                // Frames first: a reply that is already here is shown before reacting to input.
                biased;
                frame = turn.next() => match frame? {
                    Some(frame) => {
                        if let Some(speech) = speech.as_mut() {
                            speech.frame(&frame);
                        }
                        printer.frame(&frame)?;
                    }
                    None => break,
                },
                line = lines.recv(), if !input_ended && !turn.is_interrupted() => match line {
                    None => input_ended = true,
                    Some(line) => {
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
            printer.line(&report.line())?;
            voice.record(report);
        }
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
