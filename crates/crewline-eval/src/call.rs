//! One run of a scenario: a call placed with the testkit's platform client, and what each
//! turn brought (chunks with their times, tool calls from `agent.log`, hand-offs).

use std::time::Duration;

use crewline_testkit::platform::{
    CrewFrame, PlatformClient, PlatformConfig, PlatformError, Timeouts, Turn,
};

use crate::{
    caller::{self, Next, SimulatedCaller},
    crew::RunningCrew,
    record::{
        BargeInRecord, CallRecord, MAX_LOGS_PER_TURN, ToolCallRecord, TurnRecord, log_record,
    },
    scenario::{BargeIn, Scenario},
};

/// How long the handshake (connect, `system.init`, `agent.ready`) may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Places one call to `crew` and plays the scenario's turns, or has `caller` play the caller.
pub(crate) async fn place(
    scenario: &Scenario,
    crew: &RunningCrew,
    caller: Option<&SimulatedCaller>,
) -> CallRecord {
    let mut config = PlatformConfig::new(crew.url.clone());
    config.token.clone_from(&crew.token);
    config.initial_variables.clone_from(&scenario.variables);
    if let Some(kind) = scenario.conversation_type {
        config.conversation_type = kind.into();
    }
    let turn_timeout = Duration::from_millis(scenario.turn_timeout_ms);
    config.timeouts = Timeouts {
        connect: HANDSHAKE_TIMEOUT,
        ready: HANDSHAKE_TIMEOUT,
        frame: turn_timeout,
        turn: turn_timeout,
        ..Timeouts::default()
    };
    let mut record = CallRecord::default();
    let mut client = match PlatformClient::connect(config).await {
        Ok(client) => client,
        Err(error) => {
            record.stopped = Some((None, error.to_string()));
            return record;
        }
    };
    if let (Some(caller), Some(spec)) = (caller, &scenario.caller) {
        simulate(&mut client, caller, spec, &mut record).await;
        if let Err(error) = client.close().await {
            tracing::debug!(%error, "closing the call");
        }
        return record;
    }
    let last = scenario.turns.len().saturating_sub(1);
    for (index, turn) in scenario.turns.iter().enumerate() {
        if let Some(ms) = turn.silence_ms {
            let (heard, closed) = listen(&mut client, Duration::from_millis(ms)).await;
            record.turns.push(heard);
            if let Some(error) = closed {
                // The crew closed the call during the silence (a hang-up after an idle
                // prompt, say): fine as the last turn, a stop before any other.
                if index < last {
                    record.stopped = Some((Some(index + 1), error.to_string()));
                }
                break;
            }
            continue;
        }
        let Some(say) = turn.say.as_deref() else {
            // A hang-up: the last turn (checked on load).
            break;
        };
        // A model fault travels in the caller's words: a crewline mock model fails every
        // request whose last user message holds its marker, so concurrent runs sharing one
        // crew and one model each fault their own turn, and nothing else.
        let said = match turn.fault.as_ref().and_then(|fault| fault.marker()) {
            Some(marker) => format!("{say} {marker}"),
            None => say.to_owned(),
        };
        match play(&mut client, &said, turn.barge_in.as_ref()).await {
            Ok(turn) => record.turns.push(turn),
            Err(error) => {
                record.stopped = Some((Some(index), error.to_string()));
                break;
            }
        }
    }
    // The crew may already have closed after a hand-off; either way the call is over.
    if let Err(error) = client.close().await {
        tracing::debug!(error = %crewline_core::ErrorChain(&error), "closing the call");
    }
    record
}

/// What the caller's model reads as its own line after a silence.
const SILENT_LINE: &str = "(You stayed silent.)";

/// Has `caller` play the caller until it is done, the crew hands the call off, or
/// `max_turns`.
async fn simulate(
    client: &mut PlatformClient,
    caller: &SimulatedCaller,
    spec: &crate::scenario::CallerSpec,
    record: &mut CallRecord,
) {
    let mut history: Vec<(String, String)> = Vec::new();
    for index in 0..spec.max_turns as usize {
        let next = match (&spec.opening, index) {
            (Some(opening), 0) => Ok(Next::Say(opening.clone())),
            _ => caller.next(&history).await,
        };
        let (say, done, barges_in) = match next {
            Ok(Next::Say(say)) => (say, false, false),
            Ok(Next::BargeIn(say)) => (say, false, true),
            Ok(Next::Silence) => {
                // The same silence as a scripted `silence_ms` turn.
                let (heard, closed) = listen(client, Duration::from_millis(spec.silence_ms)).await;
                let handed_off = heard.end_calls > 0 || !heard.transfers.is_empty();
                history.push((SILENT_LINE.to_owned(), heard.text.clone()));
                record.said.push(String::new());
                record.turns.push(heard);
                // The crew hung up or handed the call off meanwhile: the call is over.
                if closed.is_some() || handed_off {
                    return;
                }
                continue;
            }
            Ok(Next::End(say)) if say.is_empty() => return,
            Ok(Next::End(say)) => (say, true, false),
            Err(why) => {
                record.stopped = Some((Some(index), why));
                return;
            }
        };
        // The same barge-in as a scripted turn's `barge_in.after_chunks`.
        let barge_in = barges_in.then_some(BargeIn {
            after_chunks: Some(spec.barge_in_after_chunks),
            after_ms: None,
            on_tool_start: false,
        });
        match play(client, &say, barge_in.as_ref()).await {
            Ok(turn) => {
                let handed_off = turn.end_calls > 0 || !turn.transfers.is_empty();
                let mut heard = turn.text.clone();
                if turn.barge_in.is_some_and(|b| b.reached) {
                    heard = format!("{} {}", heard.trim_end(), caller::INTERRUPTED_NOTE);
                }
                history.push((say.clone(), heard));
                record.said.push(say);
                record.turns.push(turn);
                if done || handed_off {
                    return;
                }
            }
            Err(error) => {
                record.said.push(say);
                record.stopped = Some((Some(index), error.to_string()));
                return;
            }
        }
    }
}

/// Plays one caller turn: says it, barges in if the turn says so, reads it to its end.
async fn play(
    client: &mut PlatformClient,
    say: &str,
    barge_in: Option<&BargeIn>,
) -> Result<TurnRecord, PlatformError> {
    let mut live = client.user_turn(say)?;
    let barge_in = match barge_in {
        Some(barge_in) => Some(barge_in_on(&mut live, barge_in).await?),
        None => None,
    };
    let summary = live.finish().await?;
    Ok(TurnRecord::from_summary(summary, barge_in))
}

/// Listens for `silence` while the caller says nothing: what the crew says and does meanwhile
/// (stray chunks, `agent.speak`, tool calls, hand-offs, errors), and the error that ended the
/// call early, if one did.
async fn listen(
    client: &mut PlatformClient,
    silence: Duration,
) -> (TurnRecord, Option<PlatformError>) {
    let mut heard = TurnRecord {
        silence: true,
        ..TurnRecord::default()
    };
    let deadline = tokio::time::Instant::now() + silence;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return (heard, None);
        }
        let frame = match client.recv_idle(left).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return (heard, None),
            Err(error) => return (heard, Some(error)),
        };
        match frame.frame {
            CrewFrame::Chunk { text } | CrewFrame::Speak { text } => {
                if !heard.text.is_empty() && !text.starts_with(' ') {
                    heard.text.push(' ');
                }
                heard.text.push_str(&text);
            }
            CrewFrame::ToolStart(log) => heard.tools.push(ToolCallRecord {
                name: log.name,
                arguments: log.arguments,
                outcome: None,
            }),
            CrewFrame::ToolEnd(log) | CrewFrame::ToolError(log) => {
                let outcome = match log.error {
                    Some(error) => Err(error),
                    None => Ok(()),
                };
                match heard
                    .tools
                    .iter_mut()
                    .rev()
                    .find(|t| t.name == log.name && t.outcome.is_none())
                {
                    Some(call) => call.outcome = Some(outcome),
                    None => heard.tools.push(ToolCallRecord {
                        name: log.name,
                        arguments: log.arguments,
                        outcome: Some(outcome),
                    }),
                }
            }
            CrewFrame::Log { name, payload } if heard.logs.len() < MAX_LOGS_PER_TURN => {
                heard.logs.push(log_record(name, payload));
            }
            CrewFrame::EndCall => heard.end_calls += 1,
            CrewFrame::Transfer(transfer) => heard.transfers.push(transfer.transfer_call_number),
            CrewFrame::Error(error) => heard.errors.push(error.message),
            _ => {}
        }
    }
}

/// Reads the turn until the barge-in point and sends the interrupt there, unless the reply
/// ended first.
async fn barge_in_on(
    live: &mut Turn<'_>,
    barge_in: &BargeIn,
) -> Result<BargeInRecord, PlatformError> {
    let mut chunks = 0usize;
    let at = barge_in
        .after_ms
        .map(|ms| live.sent_at() + Duration::from_millis(ms));
    let after_chunks = barge_in.after_chunks.map(|n| n as usize);
    loop {
        if after_chunks.is_some_and(|n| chunks >= n) {
            break;
        }
        let frame = match at {
            Some(at) => tokio::select! {
                frame = live.next() => frame?,
                () = tokio::time::sleep_until(at) => break,
            },
            None => live.next().await?,
        };
        match frame {
            Some(frame) => match frame.frame {
                CrewFrame::Chunk { .. } => chunks += 1,
                CrewFrame::ToolStart(_) if barge_in.on_tool_start => break,
                _ => {}
            },
            None => {
                return Ok(BargeInRecord {
                    reached: false,
                    chunks_before: chunks,
                    chunks_after: 0,
                });
            }
        }
    }
    live.send_interrupt()?;
    Ok(BargeInRecord {
        reached: true,
        chunks_before: chunks,
        chunks_after: 0,
    })
}
