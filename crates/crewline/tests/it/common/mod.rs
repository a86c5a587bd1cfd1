//! The line to a started [`Session`] that the session and router tests drive: events in,
//! frames out.
//!
//! Each test file is its own crate and may not use every method here.
#![allow(dead_code)]

use std::time::Duration;

use crewline::{
    Session,
    protocol::{Event, EventBody, LlmRequest, TranscriptRole, TranscriptUpdate},
};
use tokio::sync::mpsc;

/// How long any single wait may take before a test fails (never reached when it passes).
const WAIT: Duration = Duration::from_secs(10);

/// A running session and the frames it sends to the platform.
pub(crate) struct Line {
    /// The session under test.
    pub(crate) session: Session,
    /// What the session sends out, in order.
    pub(crate) frames: mpsc::Receiver<Box<Event>>,
}

impl Line {
    /// Dispatches one platform event to the session.
    pub(crate) fn send(&self, body: EventBody) {
        self.session.dispatch(Event::now(body)).expect("dispatched");
    }

    /// The user says `text` and the platform asks for the reply.
    pub(crate) fn user_turn(&self, text: &str) {
        self.send(EventBody::TranscriptUpdate(TranscriptUpdate {
            role: TranscriptRole::User,
            content: text.into(),
        }));
        self.send(EventBody::LlmRequest(LlmRequest::default()));
    }

    /// The next frame the session sends.
    pub(crate) async fn next(&mut self) -> Event {
        *tokio::time::timeout(WAIT, self.frames.recv())
            .await
            .expect("a frame within the wait")
            .expect("the session is open")
    }

    /// Frames up to and including the next one of type `kind`.
    pub(crate) async fn until(&mut self, kind: &str) -> Vec<Event> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next().await;
            let done = frame.body.type_name() == kind;
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }
}
