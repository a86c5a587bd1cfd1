//! The label values of the server's metric families: why a frame was dropped, why a handshake
//! failed, what kind of error was counted.

use crewline::protocol::DecodeErrorKind;

/// Why an inbound frame was dropped (the decode error's kind, or its size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameDrop {
    /// The bytes are not UTF-8.
    NotUtf8,
    /// The text is not JSON.
    NotJson,
    /// The JSON is not an object.
    NotAnObject,
    /// The object has no string `type`.
    MissingType,
    /// The `type` is not a protocol event.
    UnknownType,
    /// A field is missing or has the wrong type.
    InvalidFields,
    /// The JSON is nested too deeply.
    TooDeep,
    /// The frame is over the connection's size limit (the connection is closed with 1009).
    TooBig,
}

impl From<DecodeErrorKind> for FrameDrop {
    fn from(kind: DecodeErrorKind) -> Self {
        match kind {
            DecodeErrorKind::NotUtf8 => Self::NotUtf8,
            DecodeErrorKind::NotJson => Self::NotJson,
            DecodeErrorKind::NotAnObject => Self::NotAnObject,
            DecodeErrorKind::MissingType => Self::MissingType,
            DecodeErrorKind::UnknownType => Self::UnknownType,
            DecodeErrorKind::InvalidFields => Self::InvalidFields,
            DecodeErrorKind::TooDeep => Self::TooDeep,
        }
    }
}

impl FrameDrop {
    pub(super) const ALL: [Self; 8] = [
        Self::NotUtf8,
        Self::NotJson,
        Self::NotAnObject,
        Self::MissingType,
        Self::UnknownType,
        Self::InvalidFields,
        Self::TooDeep,
        Self::TooBig,
    ];

    /// The label value, e.g. `not_json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotUtf8 => "not_utf8",
            Self::NotJson => "not_json",
            Self::NotAnObject => "not_an_object",
            Self::MissingType => "missing_type",
            Self::UnknownType => "unknown_type",
            Self::InvalidFields => "invalid_fields",
            Self::TooDeep => "too_deep",
            Self::TooBig => "too_big",
        }
    }
}

/// Why a call ended before its session started (no `agent.ready` was sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// `/ws` without a valid token (answered 401, not upgraded).
    Unauthorized,
    /// `/ws` while the server drains (answered 503, not upgraded).
    Draining,
    /// `/ws` while `max_sessions` calls are in progress (answered 503, not upgraded).
    Full,
    /// No first frame within the handshake timeout.
    Timeout,
    /// The first frame did not decode.
    BadFrame,
    /// The first frame was over the size limit.
    TooBig,
    /// The first frame was an event other than `system.init`.
    NotInit,
    /// The platform closed the socket before the handshake ended.
    Closed,
    /// The crew's setup code returned an error.
    SetupFailed,
    /// The crew's setup code panicked.
    SetupPanicked,
    /// The crew's setup code did not finish in time.
    SetupTimeout,
    /// The crew's graph is invalid.
    InvalidGraph,
    /// The server began shutting down during the handshake.
    ShuttingDown,
    /// `/ws` from a browser page of an origin not allowed (answered 403, not upgraded).
    Forbidden,
    /// The first message took the server's budget of unfinished messages past its cap
    /// (closed with 1013).
    MessageBudget,
}

impl HandshakeFailure {
    pub(super) const ALL: [Self; 15] = [
        Self::Unauthorized,
        Self::Draining,
        Self::Full,
        Self::Timeout,
        Self::BadFrame,
        Self::TooBig,
        Self::NotInit,
        Self::Closed,
        Self::SetupFailed,
        Self::SetupPanicked,
        Self::SetupTimeout,
        Self::InvalidGraph,
        Self::ShuttingDown,
        Self::Forbidden,
        Self::MessageBudget,
    ];

    /// The label value, e.g. `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::Draining => "draining",
            Self::Full => "full",
            Self::Timeout => "timeout",
            Self::BadFrame => "bad_frame",
            Self::TooBig => "too_big",
            Self::NotInit => "not_init",
            Self::Closed => "closed",
            Self::SetupFailed => "setup_failed",
            Self::SetupPanicked => "setup_panicked",
            Self::SetupTimeout => "setup_timeout",
            Self::InvalidGraph => "invalid_graph",
            Self::ShuttingDown => "shutting_down",
            Self::Forbidden => "forbidden",
            Self::MessageBudget => "message_budget",
        }
    }
}

/// A class of error, for `crewline_errors_total{kind}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A failed handshake or crew setup.
    Handshake,
    /// A WebSocket I/O or protocol error.
    Socket,
    /// An inbound frame that could not be used.
    BadFrame,
    /// Node code failed (`agent.error` sent).
    Node,
    /// A turn failed (`agent.error` fatal sent).
    Turn,
    /// A tool call failed.
    Tool,
    /// A call sent no frame and answered no ping within the idle timeout (closed).
    IdleTimeout,
    /// A socket write did not complete within the write timeout (the call was ended).
    WriteTimeout,
    /// The platform sent control frames (pings, pongs) past the per-second cap (closed 1008).
    ControlFlood,
    /// An unfinished message took the server's budget of unfinished messages past its cap
    /// (the call was closed with 1013).
    MessageBudget,
}

impl ErrorKind {
    pub(super) const ALL: [Self; 10] = [
        Self::Handshake,
        Self::Socket,
        Self::BadFrame,
        Self::Node,
        Self::Turn,
        Self::Tool,
        Self::IdleTimeout,
        Self::WriteTimeout,
        Self::ControlFlood,
        Self::MessageBudget,
    ];

    /// The label value, e.g. `socket`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Handshake => "handshake",
            Self::Socket => "socket",
            Self::BadFrame => "bad_frame",
            Self::Node => "node",
            Self::Turn => "turn",
            Self::Tool => "tool",
            Self::IdleTimeout => "idle_timeout",
            Self::WriteTimeout => "write_timeout",
            Self::ControlFlood => "control_flood",
            Self::MessageBudget => "message_budget",
        }
    }
}
