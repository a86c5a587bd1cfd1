//! Why a call ends, and what the platform is told when its handshake fails.

use std::fmt;

use axum::extract::ws::close_code;

use super::SHUTDOWN_CLOSE;
use crate::{SetupError, metrics::HandshakeFailure};

/// Why a call ended.
pub(super) enum End {
    /// The handshake or the setup failed.
    Handshake(HandshakeFailure),
    /// The platform closed the socket.
    PeerClosed,
    /// The connection broke.
    SocketError,
    /// A frame over the limit arrived.
    TooBig,
    /// The drain deadline passed.
    ShuttingDown,
    /// No inbound frame, pongs included, within the idle timeout: a half-open connection.
    Idle,
    /// A socket write did not complete within the write timeout: the platform stopped reading.
    WriteTimeout,
    /// The platform sent pings or pongs past the per-second cap.
    ControlFlood,
    /// A read would have taken the server's budget of unfinished messages past its cap.
    MessageBudget,
    /// A newer connection for the same call took it over.
    Superseded,
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Handshake(reason) => write!(f, "handshake failed ({})", reason.as_str()),
            Self::PeerClosed => f.write_str("platform closed"),
            Self::SocketError => f.write_str("socket error"),
            Self::TooBig => f.write_str("frame too large"),
            Self::ShuttingDown => f.write_str("server shutting down"),
            Self::Idle => f.write_str("idle timeout (no pong)"),
            Self::WriteTimeout => f.write_str("write timeout (the platform stopped reading)"),
            Self::ControlFlood => f.write_str("control frame flood"),
            Self::MessageBudget => f.write_str("over the server's budget of unfinished messages"),
            Self::Superseded => f.write_str("superseded by a newer connection for this call"),
        }
    }
}

/// A failed handshake or setup: what the platform is told.
pub(super) struct Failure {
    pub(super) reason: HandshakeFailure,
    /// The `agent.error` message; `None` when the platform is already gone.
    pub(super) message: Option<String>,
    pub(super) code: u16,
    pub(super) close_reason: &'static str,
    /// Whether to read on until the platform answers the close frame (not for a flood: that
    /// would read the flood on).
    pub(super) await_close: bool,
}

impl Failure {
    pub(super) fn new(
        reason: HandshakeFailure,
        message: String,
        code: u16,
        close_reason: &'static str,
    ) -> Self {
        Self {
            reason,
            message: Some(message),
            code,
            close_reason,
            await_close: true,
        }
    }

    pub(super) fn closed() -> Self {
        Self {
            reason: HandshakeFailure::Closed,
            message: None,
            code: close_code::NORMAL,
            close_reason: "",
            await_close: true,
        }
    }

    pub(super) fn shutting_down() -> Self {
        Self::new(
            HandshakeFailure::ShuttingDown,
            "the server is shutting down".to_owned(),
            SHUTDOWN_CLOSE.0,
            SHUTDOWN_CLOSE.1,
        )
    }

    /// Past the cap of control frames per second.
    pub(super) fn control_flood(
        message: String,
        (code, close_reason): (u16, &'static str),
    ) -> Self {
        Self {
            await_close: false,
            ..Self::new(HandshakeFailure::BadFrame, message, code, close_reason)
        }
    }

    /// A read refused by the server's budget of unfinished messages: the socket is not read
    /// any more, so the platform's close is not awaited.
    pub(super) fn message_budget(
        message: String,
        (code, close_reason): (u16, &'static str),
    ) -> Self {
        Self {
            await_close: false,
            ..Self::new(HandshakeFailure::MessageBudget, message, code, close_reason)
        }
    }

    pub(super) fn too_big(size: usize, max: usize) -> Self {
        Self::new(
            HandshakeFailure::TooBig,
            too_big_message(size, max),
            close_code::SIZE,
            "frame too large",
        )
    }

    pub(super) fn setup(error: SetupError) -> Self {
        let (reason, close_reason) = match &error {
            SetupError::Failed(_) => (HandshakeFailure::SetupFailed, "crew setup failed"),
            SetupError::Panicked(_) => (HandshakeFailure::SetupPanicked, "crew setup failed"),
            SetupError::TimedOut(_) => (HandshakeFailure::SetupTimeout, "crew setup timed out"),
            SetupError::InvalidGraph(_) => (HandshakeFailure::InvalidGraph, "invalid crew"),
        };
        Self::new(
            reason,
            crewline::types::error_chain(&error),
            close_code::ERROR,
            close_reason,
        )
    }
}

pub(super) fn too_big_message(size: usize, max: usize) -> String {
    format!("a frame of {size} bytes is over this server's limit of {max} bytes")
}
