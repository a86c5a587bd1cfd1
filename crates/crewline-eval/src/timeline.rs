//! What happened in a turn and when, as the reports draw it.

use std::time::Duration;

use serde::Serialize;

/// The most events kept of one turn's timeline (the rest are counted, not kept).
pub const MAX_TIMELINE_EVENTS: usize = 200;

/// The most characters of one timeline event's text.
pub const MAX_EVENT_CHARS: usize = 200;

/// What a timeline event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A chunk of the reply.
    Chunk,
    /// A tool call started (`text`: its name and arguments).
    ToolStart,
    /// A tool call ended (`text`: its name).
    ToolEnd,
    /// A tool call failed (`text`: its name and why).
    ToolError,
    /// The caller barged in.
    BargeIn,
    /// `agent.speak`.
    Speak,
    /// `agent.end_call`.
    EndCall,
    /// `agent.transfer_call` (`text`: the number).
    Transfer,
    /// `agent.error`.
    Error,
    /// The turn's `end`.
    End,
}

/// One thing that happened in a turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEvent {
    /// From the turn's request, in ms.
    pub at_ms: f64,
    /// What it is.
    pub kind: EventKind,
    /// Its text, cut to [`MAX_EVENT_CHARS`] (peer-controlled: escape it when showing it).
    pub text: String,
}

impl TimelineEvent {
    /// The events of a finished turn, in time order.
    pub(crate) fn of_turn(summary: &crewline_testkit::platform::TurnSummary) -> Vec<Self> {
        use crewline_testkit::platform::CrewFrame;
        let mut events: Vec<Self> = summary
            .frames
            .iter()
            .filter_map(|frame| {
                let (kind, text) = match &frame.frame {
                    CrewFrame::Chunk { text } => (EventKind::Chunk, text.clone()),
                    CrewFrame::ToolStart(log) => (
                        EventKind::ToolStart,
                        format!("{} {}", log.name, log.arguments),
                    ),
                    CrewFrame::ToolEnd(log) => (EventKind::ToolEnd, log.name.clone()),
                    CrewFrame::ToolError(log) => (
                        EventKind::ToolError,
                        format!("{}: {}", log.name, log.error.as_deref().unwrap_or("failed")),
                    ),
                    CrewFrame::Speak { text } => (EventKind::Speak, text.clone()),
                    CrewFrame::EndCall => (EventKind::EndCall, String::new()),
                    CrewFrame::Transfer(t) => (EventKind::Transfer, t.transfer_call_number.clone()),
                    CrewFrame::Error(e) => (EventKind::Error, e.message.clone()),
                    CrewFrame::End => (EventKind::End, String::new()),
                    _ => return None,
                };
                Some(Self {
                    at_ms: ms(frame.elapsed),
                    kind,
                    text: cut(&text, MAX_EVENT_CHARS),
                })
            })
            .collect();
        if let Some(interrupt) = &summary.interrupt {
            events.push(Self {
                at_ms: ms(interrupt.sent_after),
                kind: EventKind::BargeIn,
                text: String::new(),
            });
            events.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
        }
        events.truncate(MAX_TIMELINE_EVENTS);
        events
    }
}

/// `text`, at most `chars` characters, with `…` where it was cut.
pub(crate) fn cut(text: &str, chars: usize) -> String {
    let mut kept: String = text.chars().take(chars).collect();
    if kept.len() < text.len() {
        kept.push('…');
    }
    kept
}

pub(crate) fn ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}
