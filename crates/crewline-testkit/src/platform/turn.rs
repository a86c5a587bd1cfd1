//! One user turn: the request, the crew's frames for it, and what they add up to.

use std::time::Duration;

use crewline::protocol::AgentError;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::{
    Accepted, CrewFrame, Handoff, MAX_TURN_BYTES, PlatformClient, PlatformError, ReceivedFrame,
    ToolLog,
};

/// How long a request interrupted before its `start` may stay unanswered before the turn is
/// taken as dropped: a crew drops queued work on interrupt, so no `start` or `end` may come.
const UNANSWERED_AFTER_INTERRUPT: Duration = Duration::from_secs(2);

/// A crew frame of a turn, with the time since the turn's request was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnFrame {
    /// From sending `system.llm.request` to receiving this frame.
    pub elapsed: Duration,
    /// The frame.
    pub frame: CrewFrame,
}

/// What became of a tool call, as the crew logged it.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// Started, no end seen (yet).
    Running,
    /// Finished with this response.
    Ok(Value),
    /// Failed with this error.
    Failed(String),
}

/// One tool call of a turn, from its `agent.log` events.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolActivity {
    /// The model's id for the call.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The call's arguments.
    pub arguments: Value,
    /// From the request to `tool_call_start` (`None` when the crew skipped the start, e.g.
    /// for an unknown tool).
    pub started_after: Option<Duration>,
    /// From the request to `tool_call_end` or `tool_call_error`.
    pub finished_after: Option<Duration>,
    /// The crew's own measure of the call, in ms.
    pub latency_ms: Option<f64>,
    /// How it ended.
    pub outcome: ToolOutcome,
}

impl ToolActivity {
    /// The call's duration: the crew's measure, else the time between its two log events.
    pub fn duration(&self) -> Option<Duration> {
        match (self.latency_ms, self.started_after, self.finished_after) {
            (Some(ms), _, _) if ms.is_finite() && ms >= 0.0 => {
                Some(Duration::from_secs_f64(ms / 1e3))
            }
            (_, Some(start), Some(end)) => Some(end.saturating_sub(start)),
            _ => None,
        }
    }
}

/// What an interrupt (barge-in) did to a turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InterruptReport {
    /// From the turn's request to sending the interrupt.
    pub sent_after: Duration,
    /// The interrupt went out before the crew's `start`.
    pub before_start: bool,
    /// The turn had already ended: there was nothing to interrupt.
    pub after_end: bool,
    /// From the interrupt to the turn's `end`.
    pub time_to_end: Option<Duration>,
    /// From the interrupt to the last chunk received; `None` when no chunk came after it.
    pub time_to_last_chunk: Option<Duration>,
    /// Chunks received after the interrupt and before `end` (in flight when it was sent).
    pub chunks_after_interrupt: usize,
    /// Chunks received after the turn's `end`: the crew kept talking (should be empty).
    pub leaked_chunks: Vec<String>,
    /// From the interrupt to the crew's echo of it, if it echoes.
    pub time_to_echo: Option<Duration>,
}

impl InterruptReport {
    /// How long the caller could still hear the agent after barging in (zero when no chunk
    /// came after the interrupt).
    pub fn silence_after(&self) -> Duration {
        self.time_to_last_chunk.unwrap_or_default()
    }
}

/// Everything that happened in one turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TurnSummary {
    /// What the user said.
    pub user_text: String,
    /// The crew's id for the turn (from `start`).
    pub request_id: Option<String>,
    /// `start` was received.
    pub started: bool,
    /// `end` was received (or the interrupted request was dropped unanswered).
    pub ended: bool,
    /// The answer: the chunks, joined.
    pub text: String,
    /// How many chunks.
    pub chunks: usize,
    /// From the request to `start`.
    pub time_to_start: Option<Duration>,
    /// From the request to the first chunk.
    pub time_to_first_chunk: Option<Duration>,
    /// From the request to `end`.
    pub time_to_end: Option<Duration>,
    /// The tool calls, in the order they were logged.
    pub tools: Vec<ToolActivity>,
    /// `agent.error`s received during the turn.
    pub errors: Vec<AgentError>,
    /// `agent.speak` texts received during the turn.
    pub speeches: Vec<String>,
    /// Other `agent.log` entries.
    pub logs: Vec<(String, Map<String, Value>)>,
    /// The crew ended or transferred the call during the turn.
    pub handoff: Option<Handoff>,
    /// Every crew frame of the turn, in order.
    pub frames: Vec<TurnFrame>,
    /// Set when the turn was interrupted.
    pub interrupt: Option<InterruptReport>,
    /// Chunks of an earlier turn that arrived before this turn's `start`.
    pub stray_chunks_before_start: usize,
}

impl TurnSummary {
    /// The wire types of the turn's frames, in order (handy in tests).
    pub fn wire_types(&self) -> Vec<&'static str> {
        self.frames.iter().map(|f| f.frame.wire_type()).collect()
    }

    /// The names of the `agent.log` tool events, in order.
    pub fn tool_events(&self) -> Vec<&'static str> {
        self.frames
            .iter()
            .filter_map(|f| match f.frame {
                CrewFrame::ToolStart(_) => Some("tool_call_start"),
                CrewFrame::ToolEnd(_) => Some("tool_call_end"),
                CrewFrame::ToolError(_) => Some("tool_call_error"),
                _ => None,
            })
            .collect()
    }
}

/// A user turn in progress; borrows the client until it is finished or dropped.
#[derive(Debug)]
pub struct Turn<'c> {
    client: &'c mut PlatformClient,
    sent_at: Instant,
    deadline: Instant,
    summary: TurnSummary,
    interrupt_at: Option<Instant>,
    last_chunk_at: Option<Instant>,
    /// The wire bytes of the frames this turn took, kept under [`MAX_TURN_BYTES`].
    bytes: usize,
}

impl<'c> Turn<'c> {
    pub(super) fn new(client: &'c mut PlatformClient, user_text: String, sent_at: Instant) -> Self {
        let deadline = sent_at + client.timeouts.turn;
        Self {
            client,
            sent_at,
            deadline,
            summary: TurnSummary {
                user_text,
                ..TurnSummary::default()
            },
            interrupt_at: None,
            last_chunk_at: None,
            bytes: 0,
        }
    }

    /// The next crew frame of this turn, `Ok(None)` after its `end`.
    ///
    /// Echoes and chunks left over from an earlier turn are skipped. On `end`, the answer is
    /// added to the conversation and sent back as the assistant's transcript. Cancel-safe: a
    /// frame is never lost if the future is dropped, so it can race user input in `select!`.
    pub async fn next(&mut self) -> Result<Option<TurnFrame>, PlatformError> {
        if self.summary.ended {
            return Ok(None);
        }
        let timeouts = self.client.timeouts;
        loop {
            let waiting_for = if self.summary.started {
                "agent.llm.response.end"
            } else {
                "agent.llm.response.start"
            };
            let frame_deadline = Instant::now() + timeouts.frame;
            let (deadline, after) = if frame_deadline < self.deadline {
                (frame_deadline, timeouts.frame)
            } else {
                (self.deadline, timeouts.turn)
            };
            let unanswered_at = match self.interrupt_at {
                Some(at) if !self.summary.started => Some(at + UNANSWERED_AFTER_INTERRUPT),
                _ => None,
            };
            let wait_until = unanswered_at.map_or(deadline, |at| at.min(deadline));
            let Some(item) = self.client.recv_until(wait_until, waiting_for).await? else {
                if unanswered_at.is_some_and(|at| at <= deadline) {
                    // The crew dropped the interrupted request: no answer is coming.
                    self.summary.ended = true;
                    self.client.turn_open = false;
                    return Ok(None);
                }
                return Err(PlatformError::Timeout { waiting_for, after });
            };
            match self.client.accept(item)? {
                Accepted::Frame(received) => {
                    if let Some(frame) = self.record(received)? {
                        return Ok(Some(frame));
                    }
                }
                Accepted::Echo { interrupt } => {
                    if interrupt {
                        self.note_interrupt_echo();
                    }
                }
                Accepted::Skipped => {}
            }
        }
    }

    /// Sends `system.control.interrupt` (barge-in) and keeps the turn going: read on with
    /// [`Turn::next`] until its `end`, then [`Turn::finish`] for the report. A second call
    /// does nothing.
    pub fn send_interrupt(&mut self) -> Result<(), PlatformError> {
        if self.interrupt_at.is_some() {
            return Ok(());
        }
        self.client.send_interrupt()?;
        let now = Instant::now();
        self.interrupt_at = Some(now);
        self.summary.interrupt = Some(InterruptReport {
            sent_after: now.saturating_duration_since(self.sent_at),
            before_start: !self.summary.started,
            after_end: self.summary.ended,
            ..InterruptReport::default()
        });
        Ok(())
    }

    /// Interrupts the turn and waits for it to end; the summary's `interrupt` says how long
    /// the crew took to fall silent and whether any chunk leaked after its `end`.
    pub async fn interrupt(mut self) -> Result<TurnSummary, PlatformError> {
        self.send_interrupt()?;
        self.finish().await
    }

    /// Reads the turn to its `end` and returns what happened. After an interrupt it listens
    /// a little longer (`Timeouts::leak_window`) for chunks the crew should no longer send.
    pub async fn finish(mut self) -> Result<TurnSummary, PlatformError> {
        while self.next().await?.is_some() {}
        if self.interrupt_at.is_some() {
            self.collect_leaks().await;
        }
        Ok(self.summary)
    }

    /// The turn so far.
    pub fn summary(&self) -> &TurnSummary {
        &self.summary
    }

    /// Whether the turn's `end` has arrived.
    pub fn is_ended(&self) -> bool {
        self.summary.ended
    }

    /// Whether an interrupt was sent.
    pub fn is_interrupted(&self) -> bool {
        self.interrupt_at.is_some()
    }

    /// When the turn's `system.llm.request` was sent: the zero of every latency it reports.
    pub fn sent_at(&self) -> Instant {
        self.sent_at
    }

    /// Adds a received frame to the summary; `None` when it does not belong to this turn.
    fn record(&mut self, received: ReceivedFrame) -> Result<Option<TurnFrame>, PlatformError> {
        let ReceivedFrame { at, frame, bytes } = received;
        self.take_bytes(bytes)?;
        let elapsed = at.saturating_duration_since(self.sent_at);
        let summary = &mut self.summary;
        if !summary.started {
            match &frame {
                CrewFrame::Chunk { .. } => {
                    // Said after an earlier turn's end: a leak of that turn, not ours.
                    summary.stray_chunks_before_start += 1;
                    self.client.stats.stray_chunks += 1;
                    return Ok(None);
                }
                CrewFrame::End => {
                    tracing::debug!("an earlier turn's end arrived late, skipped");
                    return Ok(None);
                }
                _ => {}
            }
        }
        match &frame {
            CrewFrame::Start { request_id } => {
                summary.started = true;
                summary.request_id.clone_from(request_id);
                summary.time_to_start = Some(elapsed);
            }
            CrewFrame::Chunk { text } => {
                summary.text.push_str(text);
                summary.chunks += 1;
                summary.time_to_first_chunk.get_or_insert(elapsed);
                self.last_chunk_at = Some(at);
                if let (Some(report), Some(sent)) = (summary.interrupt.as_mut(), self.interrupt_at)
                    && at >= sent
                {
                    report.chunks_after_interrupt += 1;
                    report.time_to_last_chunk = Some(at.saturating_duration_since(sent));
                }
            }
            CrewFrame::End => {
                summary.ended = true;
                summary.time_to_end = Some(elapsed);
                if let (Some(report), Some(sent)) = (summary.interrupt.as_mut(), self.interrupt_at)
                {
                    report.time_to_end = Some(at.saturating_duration_since(sent));
                }
                let text = summary.text.clone();
                self.client.commit_assistant(&text)?;
            }
            CrewFrame::ToolStart(log) => summary.tools.push(ToolActivity {
                call_id: log.call_id.clone(),
                name: log.name.clone(),
                arguments: log.arguments.clone(),
                started_after: Some(elapsed),
                finished_after: None,
                latency_ms: None,
                outcome: ToolOutcome::Running,
            }),
            CrewFrame::ToolEnd(log) | CrewFrame::ToolError(log) => {
                let outcome = match (&frame, log) {
                    (CrewFrame::ToolError(_), ToolLog { error, .. }) => {
                        ToolOutcome::Failed(error.clone().unwrap_or_default())
                    }
                    (_, ToolLog { response, .. }) => {
                        ToolOutcome::Ok(response.clone().unwrap_or(Value::Null))
                    }
                };
                let index = summary
                    .tools
                    .iter()
                    .position(|t| t.call_id == log.call_id && t.outcome == ToolOutcome::Running);
                let activity = match index {
                    Some(index) => &mut summary.tools[index],
                    None => {
                        // Unknown tools and bad arguments get an error without a start.
                        summary.tools.push(ToolActivity {
                            call_id: log.call_id.clone(),
                            name: log.name.clone(),
                            arguments: log.arguments.clone(),
                            started_after: None,
                            finished_after: None,
                            latency_ms: None,
                            outcome: ToolOutcome::Running,
                        });
                        let last = summary.tools.len() - 1;
                        &mut summary.tools[last]
                    }
                };
                activity.finished_after = Some(elapsed);
                activity.latency_ms = log.latency_ms;
                activity.outcome = outcome;
            }
            CrewFrame::Error(error) => summary.errors.push(error.clone()),
            CrewFrame::Speak { text } => summary.speeches.push(text.clone()),
            CrewFrame::Log { name, payload } => summary.logs.push((name.clone(), payload.clone())),
            CrewFrame::EndCall | CrewFrame::Transfer(_) => {
                summary.handoff.clone_from(&self.client.handoff);
            }
            _ => {}
        }
        let frame = TurnFrame { elapsed, frame };
        self.summary.frames.push(frame.clone());
        Ok(Some(frame))
    }

    /// Counts a frame's bytes against the turn's cap.
    fn take_bytes(&mut self, bytes: usize) -> Result<(), PlatformError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > MAX_TURN_BYTES {
            return Err(PlatformError::TurnTooLarge {
                limit: MAX_TURN_BYTES,
            });
        }
        Ok(())
    }

    fn note_interrupt_echo(&mut self) {
        if let (Some(report), Some(sent)) = (self.summary.interrupt.as_mut(), self.interrupt_at) {
            report.time_to_echo.get_or_insert_with(|| sent.elapsed());
        }
    }

    /// Listens for `leak_window` after an interrupted turn's end: chunks now are leaks; any
    /// other crew frame is kept for [`PlatformClient::recv_idle`].
    async fn collect_leaks(&mut self) {
        let until = Instant::now() + self.client.timeouts.leak_window;
        // A socket that ends now ends the call, not this turn: the next call reports it.
        while let Ok(Some(item)) = self.client.recv_until(until, "leaked chunks").await {
            match self.client.accept(item) {
                Ok(Accepted::Frame(ReceivedFrame {
                    at,
                    frame: CrewFrame::Chunk { text },
                    bytes,
                })) => {
                    self.client.stats.stray_chunks += 1;
                    if self.take_bytes(bytes).is_err() {
                        // Counted, not kept: the crew is flooding after its end.
                        continue;
                    }
                    if let (Some(report), Some(sent)) =
                        (self.summary.interrupt.as_mut(), self.interrupt_at)
                    {
                        report.leaked_chunks.push(text);
                        report.time_to_last_chunk = Some(at.saturating_duration_since(sent));
                    }
                }
                Ok(Accepted::Frame(frame)) => self.client.keep_out_of_turn(frame),
                Ok(Accepted::Echo { interrupt: true }) => self.note_interrupt_echo(),
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
}
