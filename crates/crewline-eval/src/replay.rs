//! Replay: a recorded call (the playground's JSONL, one frame a line) turned into a
//! regression scenario: the caller's turns, the tool calls seen, a distinctive part of each
//! reply, the hand-offs.

use std::{
    collections::BTreeMap,
    io::Read,
    path::{Path, PathBuf},
};

use crewline::protocol::{EventBody, TranscriptRole, decode_str};
use crewline_testkit::platform::CrewFrame;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::scenario::{
    BargeIn, CallerTurn, ConversationKind, Expect, Format, Scenario, ToolExpect,
};

/// The largest recording read, in bytes (16 MiB: hours of text turns).
pub const MAX_RECORDING_BYTES: u64 = 16 * 1024 * 1024;

/// The crew a replayed scenario calls until it is given another: where `crewline chat` and
/// `crewline demo --serve` listen by default.
pub const DEFAULT_CREW_URL: &str = "ws://127.0.0.1:8080/ws";

/// The most caller turns a replayed scenario keeps (a scenario's limit).
pub const MAX_REPLAY_TURNS: usize = 64;

/// Why a recording could not be turned into a scenario.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The file could not be read.
    #[error("could not read the recording {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_RECORDING_BYTES`].
    #[error(
        "the recording {} is over {MAX_RECORDING_BYTES} bytes; cut it to the turns to replay",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A line is not a recorded frame.
    #[error("{}, line {line}: {message}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// The line, counted from 1.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// The scenario could not be written in the format asked for (TOML has no `null`:
    /// recorded arguments holding one need YAML).
    #[error("the scenario cannot be written as {format}: {message}")]
    Write {
        /// `TOML` or `YAML`.
        format: &'static str,
        /// The writer's message.
        message: String,
    },
    /// The recording holds no caller turn.
    #[error("the recording {} has no caller turn (no `system.llm.request` sent)", path.display())]
    NoTurns {
        /// The file.
        path: PathBuf,
    },
}

/// One line of a recording: `{"t": ms since connect, "dir": "in"|"out", "frame": {...}}`.
#[derive(Debug, Deserialize)]
struct Line {
    t: f64,
    dir: Direction,
    frame: Value,
}

#[derive(Debug, Deserialize, PartialEq, Eq, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Direction {
    /// From the crew.
    In,
    /// From the caller's side (the platform or the page).
    Out,
}

/// A recorded turn, as far as the scenario needs it.
#[derive(Debug, Default)]
struct RecordedTurn {
    say: String,
    reply: String,
    chunks: u32,
    barge_in_after: Option<u32>,
    /// Tool calls by call id, in the order they started: name, arguments, outcome.
    tools: Vec<(String, String, Value, Option<bool>)>,
    end_call: bool,
    transfer_to: Option<String>,
    error: bool,
}

/// Reads the recording at `path` (at most [`MAX_RECORDING_BYTES`]) and turns it into a
/// regression scenario ([`scenario_from_jsonl`]), named after the file.
pub fn scenario_from_recording(path: &Path) -> Result<Scenario, ReplayError> {
    let read = |source| ReplayError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    if file.metadata().map_err(read)?.len() > MAX_RECORDING_BYTES {
        return Err(ReplayError::TooLarge {
            path: path.to_owned(),
        });
    }
    // The size is checked again while reading: the file may grow after `metadata`.
    let mut text = String::new();
    file.take(MAX_RECORDING_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read)?;
    if text.len() as u64 > MAX_RECORDING_BYTES {
        return Err(ReplayError::TooLarge {
            path: path.to_owned(),
        });
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "a call".to_owned());
    scenario_from_jsonl(&text, &format!("replay of {stem}")).map_err(|e| match e {
        ReplayError::Line { line, message, .. } => ReplayError::Line {
            path: path.to_owned(),
            line,
            message,
        },
        ReplayError::NoTurns { .. } => ReplayError::NoTurns {
            path: path.to_owned(),
        },
        other => other,
    })
}

/// Turns a recorded call (JSONL, as the playground's "Download the call" writes it) into a
/// scenario named `name`: one turn per `system.llm.request` the caller's side sent, saying
/// what the caller said, and expecting what the crew did then:
///
/// - each tool call seen, by name, with the recorded arguments as `args_subset`, its
///   outcome (`succeeded`) and, when it ran more than once with them, its `count`;
/// - `reply.contains` of up to two distinctive words of the reply (a number, a name, else
///   the longest word), robust to a model rewording the rest;
/// - `end_call` / `transfer_to` when the crew handed the call off, `agent_error = false`
///   when it reported no error;
/// - a barge-in after as many chunks as the caller let through.
///
/// The scenario calls [`DEFAULT_CREW_URL`]: set its `crew`, or run it with
/// `crewline eval --url`.
pub fn scenario_from_jsonl(text: &str, name: &str) -> Result<Scenario, ReplayError> {
    let mut turns: Vec<RecordedTurn> = Vec::new();
    let mut said: Option<String> = None;
    let mut variables = Map::new();
    let mut conversation_type = None;
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let bad = |message: String| ReplayError::Line {
            path: PathBuf::new(),
            line: number,
            message,
        };
        if raw.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(raw).map_err(|e| {
            bad(format!(
                "not a recorded frame ({{\"t\": ms, \"dir\": \"in\"|\"out\", \"frame\": {{...}}}}): {e}"
            ))
        })?;
        if !line.t.is_finite() {
            return Err(bad("`t` is not a number of ms".to_owned()));
        }
        let event = decode_str(&line.frame.to_string())
            .map_err(|e| bad(format!("the frame is not a crewline event: {e}")))?;
        match line.dir {
            Direction::Out => match event.body {
                EventBody::SystemInit(init) => {
                    conversation_type =
                        ConversationKind::recorded(init.session_context.conversation_type);
                    variables = init.session_context.initial_variables;
                }
                EventBody::TranscriptUpdate(update) if update.role == TranscriptRole::User => {
                    said = Some(update.content);
                }
                EventBody::LlmRequest(request) => {
                    let say = said.take().or_else(|| {
                        // A platform that sends only the conversation: its last user message.
                        request
                            .messages
                            .as_ref()?
                            .values()
                            .ok()?
                            .iter()
                            .rev()
                            .find_map(|m| {
                                (m.get("role")?.as_str()? == "user")
                                    .then(|| m.get("content")?.as_str().map(str::to_owned))?
                            })
                    });
                    turns.push(RecordedTurn {
                        say: say.unwrap_or_default(),
                        ..RecordedTurn::default()
                    });
                }
                EventBody::Interrupt => {
                    if let Some(turn) = turns.last_mut()
                        && turn.barge_in_after.is_none()
                    {
                        turn.barge_in_after = Some(turn.chunks);
                    }
                }
                _ => {}
            },
            Direction::In => {
                let Some(turn) = turns.last_mut() else {
                    // The greeting, before the caller's first words: not part of a turn.
                    continue;
                };
                match CrewFrame::from_body(event.body) {
                    Some(CrewFrame::Chunk { text }) if turn.barge_in_after.is_none() => {
                        turn.reply.push_str(&text);
                        turn.chunks = turn.chunks.saturating_add(1);
                    }
                    Some(CrewFrame::ToolStart(log)) => {
                        turn.tools
                            .push((log.call_id, log.name, log.arguments, None));
                    }
                    Some(CrewFrame::ToolEnd(log)) => finish_tool(turn, log, true),
                    Some(CrewFrame::ToolError(log)) => finish_tool(turn, log, false),
                    Some(CrewFrame::EndCall) => turn.end_call = true,
                    Some(CrewFrame::Transfer(transfer)) => {
                        turn.transfer_to = Some(transfer.transfer_call_number);
                    }
                    Some(CrewFrame::Error(_)) => turn.error = true,
                    _ => {}
                }
            }
        }
    }
    if turns.is_empty() {
        return Err(ReplayError::NoTurns {
            path: PathBuf::new(),
        });
    }
    let recorded = turns.len();
    turns.truncate(MAX_REPLAY_TURNS);
    let description = format!(
        "Replayed from a recorded call ({recorded} turns{}): the caller's words, the tool calls \
         seen and a distinctive part of each reply. Edit freely.",
        if recorded > MAX_REPLAY_TURNS {
            format!(", the first {MAX_REPLAY_TURNS} kept")
        } else {
            String::new()
        }
    );
    Ok(Scenario {
        name: name.to_owned(),
        description: Some(description),
        crew: Some(crate::scenario::CrewSpec {
            url: Some(DEFAULT_CREW_URL.to_owned()),
            command: None,
            path: "/ws".to_owned(),
            ready_timeout_ms: 60_000,
            token_env: None,
            model: None,
        }),
        model: None,
        judge: None,
        runs: 1,
        pass_threshold: 1.0,
        variables,
        conversation_type,
        turn_timeout_ms: 30_000,
        turns: turns.into_iter().map(caller_turn).collect(),
        caller: None,
        expect: Expect::default(),
    })
}

/// Marks the recorded call `log` ends as succeeded (`ok`) or failed.
fn finish_tool(turn: &mut RecordedTurn, log: crewline_testkit::platform::ToolLog, ok: bool) {
    let known = turn
        .tools
        .iter_mut()
        .rev()
        .find(|(id, name, ..)| *id == log.call_id && *name == log.name);
    match known {
        Some(call) => call.3 = Some(ok),
        // An end without its start (the start was cut from the file).
        None => turn
            .tools
            .push((log.call_id, log.name, log.arguments, Some(ok))),
    }
}

/// `scenario` as a scenario file's text in `format`, with a header comment saying where it
/// came from.
pub fn scenario_text(
    scenario: &Scenario,
    format: Format,
    source: &str,
) -> Result<String, ReplayError> {
    let (name, body) = match format {
        Format::Yaml => (
            "YAML",
            serde_norway::to_string(scenario).map_err(|e| e.to_string()),
        ),
        _ => (
            "TOML",
            toml::to_string_pretty(scenario).map_err(|e| e.to_string()),
        ),
    };
    let body = body.map_err(|message| ReplayError::Write {
        format: name,
        message: if name == "TOML" {
            format!("{message} (write it as .yaml instead)")
        } else {
            message
        },
    })?;
    // The source is a file name given on the command line: one line of it, no newline.
    let source: String = source.chars().filter(|c| !c.is_control()).collect();
    Ok(format!(
        "# A regression scenario replayed from the recorded call {source}\n\
         # (`crewline eval --from-recording`). Point `crew` at the crew to check, or run it\n\
         # with `crewline eval --url`; loosen what a real model may word differently.\n\n\
         {body}"
    ))
}

/// A recorded turn as a scenario turn.
fn caller_turn(turn: RecordedTurn) -> CallerTurn {
    let mut expect = Expect::default();
    // Calls with the same name and arguments are one expectation with a count.
    let mut seen: BTreeMap<(String, String), (Value, Option<bool>, u32)> = BTreeMap::new();
    let mut order = Vec::new();
    for (_, name, arguments, ok) in turn.tools {
        let key = (name.clone(), arguments.to_string());
        match seen.get_mut(&key) {
            Some(entry) => {
                entry.2 += 1;
                // Mixed outcomes: any outcome will do.
                if entry.1 != ok {
                    entry.1 = None;
                }
            }
            None => {
                order.push(key.clone());
                seen.insert(key, (arguments, ok, 1));
            }
        }
    }
    for key in order {
        if let Some((arguments, succeeded, count)) = seen.remove(&key) {
            let args_subset = match &arguments {
                Value::Null => None,
                Value::Object(map) if map.is_empty() => None,
                _ => Some(arguments),
            };
            expect.tools.push(ToolExpect {
                name: key.0,
                args: BTreeMap::new(),
                args_subset,
                succeeded,
                count: Some(count),
                once: false,
                never: false,
            });
        }
    }
    // A barged-in reply is cut wherever the caller spoke: its words are not a regression
    // check, nor is whether the crew finished.
    if turn.barge_in_after.is_none() {
        expect.reply.contains = distinctive_words(&turn.reply);
    }
    if turn.end_call {
        expect.end_call = Some(true);
    }
    if let Some(number) = turn.transfer_to {
        expect.transfer_to = Some(number);
    }
    if !turn.error {
        expect.agent_error = Some(false);
    }
    CallerTurn {
        say: Some(turn.say),
        silence_ms: None,
        hang_up: false,
        barge_in: turn
            .barge_in_after
            .filter(|&chunks| chunks > 0)
            .map(|chunks| BargeIn {
                after_chunks: Some(chunks),
                after_ms: None,
                on_tool_start: false,
            }),
        fault: None,
        expect,
    }
}

/// Up to two words of `reply` a regression should find again: the longest word with a digit
/// (an amount, a temperature, a time), and the longest capitalised word that does not start
/// a sentence (a name); else the longest word of at least 4 letters.
fn distinctive_words(reply: &str) -> Vec<String> {
    let mut with_digit: Option<&str> = None;
    let mut name: Option<&str> = None;
    let mut longest: Option<&str> = None;
    let mut sentence_start = true;
    for raw in reply.split_whitespace() {
        let word = raw.trim_matches(|c: char| !c.is_alphanumeric());
        let starts = sentence_start;
        sentence_start = raw.ends_with(['.', '!', '?', ':']);
        if word.is_empty() {
            continue;
        }
        let longer =
            |best: Option<&str>| best.is_none_or(|b| word.chars().count() > b.chars().count());
        if word.chars().any(|c| c.is_ascii_digit()) {
            if longer(with_digit) {
                with_digit = Some(word);
            }
        } else if !starts
            && word.chars().next().is_some_and(char::is_uppercase)
            && word.chars().count() > 1
        {
            if longer(name) {
                name = Some(word);
            }
        } else if word.chars().count() >= 4 && longer(longest) {
            longest = Some(word);
        }
    }
    let picked: Vec<String> = [with_digit, name]
        .into_iter()
        .flatten()
        .map(str::to_owned)
        .collect();
    if picked.is_empty() {
        longest.map(str::to_owned).into_iter().collect()
    } else {
        picked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_and_a_name_are_the_distinctive_words() {
        assert_eq!(
            distinctive_words("It is 18°C and sunny in Paris today."),
            ["18°C", "Paris"]
        );
        // No number, no name: the longest word.
        assert_eq!(
            distinctive_words("Hello! How can I help you today?"),
            ["Hello"]
        );
        assert!(distinctive_words("").is_empty());
    }
}
